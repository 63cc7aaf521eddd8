/* bench_kernels.c - ev_matmul throughput: GEMV (n_tok = 1, decode) and GEMM (n_tok = 128, 512:
 * prefill, ViT) for the Qwen3-VL-2B projection shapes, every weight type, 1 and 2 threads.
 *
 *   make -C native bench && native/build/bench_kernels [--quick] [--threads N] [--types q8_0,f16]
 *
 * Shapes are written the GGUF way, n_in x n_out (ffn_gate is 2048 x 6144: 6144 rows of 2048).
 * Each figure is the median of >= 5 timed runs after a warm-up. GEMV cycles through enough
 * copies of the weights to exceed the last-level cache (decode streams the whole model from
 * DRAM); GB/s counts weight bytes only. A plain streaming-read loop gives the machine's
 * bandwidth ceiling for comparison.
 *
 *   native/build/bench_kernels --dots [--runs N]
 *
 * times single-row dot products instead (vec_dot, 4096 elements, rows in cache: the kernels'
 * compute speed) and the Q8_K activation quantiser, for the scalar set and every SIMD set the
 * CPU runs, side by side in one run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels.h"
#include "threadpool.h"
#include "types.h"

#define COLD_BYTES (160u << 20)        /* weight copies for GEMV span more than the L3 */
#define MAX_BENCH_SETS 6

static double clock_s(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double now(void) {
    return clock_s(CLOCK_MONOTONIC);
}

/* CPU seconds of the whole process: on a shared, oversubscribed machine wall time also counts
 * the time other programs held the cores; cpu / threads estimates the unshared wall time. */
static double cpu_now(void) {
    return clock_s(CLOCK_PROCESS_CPUTIME_ID);
}

/* CPU seconds of the calling thread (the dot benchmark runs on one thread) */
static double thread_cpu_now(void) {
    return clock_s(CLOCK_THREAD_CPUTIME_ID);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* rows of uniform random values in [-1, 1] in the weight type (its reference quantiser) */
static void fill_weights(int32_t type, uint8_t *w, int64_t rows, int64_t n) {
    float *tmp = malloc((size_t)n * sizeof(float));
    unsigned s = 1;
    int64_t rb = ev_row_bytes(type, n);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t i = 0; i < n; i++) tmp[i] = (float)(rand_r(&s) % 2001 - 1000) * 1e-3f;
        ev_type_get(type)->from_float(tmp, w + r * rb, n);
    }
    free(tmp);
}

/* ---- single-row dot products: the decode kernel without ev_matmul around it -------------- */

#define DOT_N 4096                    /* elements a row */
#define DOT_ROWS 64                   /* rows cycled through: < 300 KB, in L2 (compute-bound) */
#define DOT_REPS 200                  /* passes over the rows per timed run */

/* ns per DOT_N-element row dot (k's vec_dot, activations already in the type's vec_dot_type)
 * for one timed run, in thread CPU time (this machine's cores are shared: wall time would
 * count the neighbours' turns) */
static double time_dots(const ev_kernels *k, int32_t type, const uint8_t *w, const void *xa) {
    const int64_t rb = ev_row_bytes(type, DOT_N);
    volatile float sink = 0.0f;
    double t0 = thread_cpu_now();
    for (int rep = 0; rep < DOT_REPS; rep++)
        for (int r = 0; r < DOT_ROWS; r++) {
            float v;
            k->vec_dot[type](DOT_N, &v, w + r * rb, xa);
            sink += v;
        }
    (void)sink;
    return (thread_cpu_now() - t0) / (DOT_REPS * DOT_ROWS) * 1e9;
}

/* ns per DOT_N-element row quantised to Q8_K (k's quantize_q8_K) for one timed run */
static double time_q8_K(const ev_kernels *k, const float *x, ev_block_q8_K *q) {
    double t0 = thread_cpu_now();
    for (int rep = 0; rep < DOT_REPS * 8; rep++) k->quantize_q8_K(x, q, DOT_N);
    return (thread_cpu_now() - t0) / (DOT_REPS * 8) * 1e9;
}

/* Every set in sets[] side by side: each timed run measures every set once, in turn, and
 * the medians of `runs` runs are printed (ns per row, GB/s of weight bytes). */
static void bench_dots(const ev_kernels **sets, int n_sets, int runs) {
    const int32_t types[] = {EV_TYPE_Q4_K, EV_TYPE_Q6_K, EV_TYPE_Q5_K, EV_TYPE_Q3_K,
                             EV_TYPE_Q2_K, EV_TYPE_IQ4_XS, EV_TYPE_Q4_0, EV_TYPE_Q8_0};
    float *x = malloc(sizeof(float) * DOT_N);
    for (int i = 0; i < DOT_N; i++) x[i] = (float)((i * 7919) % 2001 - 1000) * 1e-3f;
    printf("row dot, %d elements, %d rows in cache, median of %d runs, thread CPU time (ns per "
           "row | GB/s of weights)\n%-8s", DOT_N, DOT_ROWS, runs, "type");
    for (int si = 0; si < n_sets; si++) printf(" %24s", sets[si]->name);
    printf("\n");
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const int32_t type = types[ti];
        const ev_type_traits *act = ev_act_type_get(ev_type_get(type)->vec_dot_type);
        const int64_t rb = ev_row_bytes(type, DOT_N);
        uint8_t *w = aligned_alloc(64, (size_t)(rb * DOT_ROWS + 63) / 64 * 64);
        void *xa = aligned_alloc(64, (size_t)(DOT_N / act->block_size * act->type_size + 63) / 64 * 64);
        fill_weights(type, w, DOT_ROWS, DOT_N);
        act->from_float(x, xa, DOT_N);
        double t[MAX_BENCH_SETS][32];
        for (int r = -1; r < runs; r++)
            for (int si = 0; si < n_sets; si++) {
                const double ns = time_dots(sets[si], type, w, xa);
                if (r >= 0) t[si][r] = ns;
            }
        printf("%-8s", ev_type_get(type)->name);
        for (int si = 0; si < n_sets; si++) {
            const double ns = median(t[si], runs);
            printf(" %11.1f ns %6.2f GB/s", ns, (double)rb / ns);
        }
        printf("\n");
        free(w);
        free(xa);
    }
    ev_block_q8_K *q = malloc(sizeof(ev_block_q8_K) * (DOT_N / EV_QK_K));
    double t[MAX_BENCH_SETS][32];
    for (int r = -1; r < runs; r++)
        for (int si = 0; si < n_sets; si++) {
            const double ns = time_q8_K(sets[si], x, q);
            if (r >= 0) t[si][r] = ns;
        }
    printf("%-8s", "->q8_K");
    for (int si = 0; si < n_sets; si++) {
        const double ns = median(t[si], runs);
        printf(" %11.1f ns %6.2f GB/s", ns, (double)DOT_N * sizeof(float) / ns);
    }
    printf("   (quantising one row of activations; GB/s of float input)\n");
    free(q);
    free(x);
}

/* ---- streaming-read ceiling ------------------------------------------------------------ */

typedef struct stream_ctx { const uint64_t *buf; uint64_t sums[64]; } stream_ctx;

/* reads 64-byte lines [start, end): a plain loop, vectorised by the compiler at -O3 */
static void stream_task(void *ctx, int64_t start, int64_t end, int tid) {
    stream_ctx *c = ctx;
    uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    for (int64_t i = start * 8; i < end * 8; i += 8) {
        a0 += c->buf[i] + c->buf[i + 4];
        a1 += c->buf[i + 1] + c->buf[i + 5];
        a2 += c->buf[i + 2] + c->buf[i + 6];
        a3 += c->buf[i + 3] + c->buf[i + 7];
    }
    c->sums[tid & 63] = a0 + a1 + a2 + a3;
}

static void bench_stream(ev_pool *pool) {
    const size_t bytes = 512u << 20;
    uint64_t *buf = aligned_alloc(64, bytes);
    memset(buf, 1, bytes);
    stream_ctx c = {buf, {0}};
    double t[7];
    for (int r = 0; r < 7; r++) {
        double t0 = now();
        ev_pool_for(pool, (int64_t)(bytes / 64), 1024, stream_task, &c);
        t[r] = now() - t0;
    }
    printf("stream read ceiling, %d thread(s): %.1f GB/s\n", ev_pool_n_threads(pool),
           (double)bytes / median(t, 7) / 1e9);
    free(buf);
}

/* ---- ev_matmul ------------------------------------------------------------------------- */

static void bench_one(ev_pool *pool, const ev_kernels *k, int32_t type, int64_t n_in,
                      int64_t n_out, int64_t n_tok, int runs) {
    const int64_t wbytes = ev_row_bytes(type, n_in) * n_out;
    int copies = n_tok == 1 ? (int)(COLD_BYTES / (size_t)wbytes) + 1 : 1;
    uint8_t **w = malloc(sizeof(uint8_t *) * (size_t)copies);
    w[0] = aligned_alloc(64, ((size_t)wbytes + 63) / 64 * 64);
    fill_weights(type, w[0], n_out, n_in);
    for (int c = 1; c < copies; c++) {
        w[c] = aligned_alloc(64, ((size_t)wbytes + 63) / 64 * 64);
        memcpy(w[c], w[0], (size_t)wbytes);
    }
    float *x = aligned_alloc(64, (size_t)(n_in * n_tok) * 4 + 64);
    float *y = aligned_alloc(64, (size_t)(n_out * n_tok) * 4 + 64);
    for (int64_t i = 0; i < n_in * n_tok; i++) x[i] = (float)((i * 7919) % 2001 - 1000) * 1e-3f;
    size_t sb = ev_matmul_scratch_bytes(type, n_in, n_tok, ev_pool_n_threads(pool));
    void *scratch = aligned_alloc(64, (sb + 64) / 64 * 64);
    /* GEMV: each timed run is one pass over all copies (one matmul each), time per matmul */
    int reps = n_tok == 1 ? copies : 1;
    double t[32], tc[32];
    const int nt = ev_pool_n_threads(pool);
    for (int r = -1; r < runs; r++) {
        double t0 = now(), c0 = cpu_now();
        for (int c = 0; c < reps; c++)
            ev_matmul(pool, k, type, w[c], NULL, n_out, n_in, x, n_tok, y, scratch);
        if (r >= 0) {
            t[r] = (now() - t0) / reps;
            tc[r] = (cpu_now() - c0) / reps / nt;
        }
    }
    double med = median(t, runs), medc = median(tc, runs);
    double flops = 2.0 * (double)n_in * (double)n_out * (double)n_tok;
    printf("%-5s %5lldx%-5lld n_tok=%-4lld threads=%d  %9.3f ms  %6.1f GB/s  %6.1f GFLOP/s"
           "   | cpu/thread %9.3f ms %6.1f GB/s %6.1f GFLOP/s\n",
           ev_type_get(type)->name, (long long)n_in, (long long)n_out, (long long)n_tok, nt,
           med * 1e3, (double)wbytes / med / 1e9, flops / med / 1e9, medc * 1e3,
           (double)wbytes / medc / 1e9, flops / medc / 1e9);
    fflush(stdout);
    for (int c = 0; c < copies; c++) free(w[c]);
    free(w);
    free(x);
    free(y);
    free(scratch);
}

/* name is one of the comma-separated names of list ("q4_0" is not "iq4_0"'s prefix match) */
static int type_listed(const char *list, const char *name) {
    const size_t len = strlen(name);
    for (const char *p = list; (p = strstr(p, name)) != NULL; p += len)
        if ((p == list || p[-1] == ',') && (p[len] == ',' || p[len] == '\0')) return 1;
    return 0;
}

int main(int argc, char **argv) {
    int dots = 0, no_stream = 0, quick = 0, only_threads = 0, runs = 7, only_tok = 0, only_shape = 0, vit = 0;
    const char *types_arg = "q8_0,q4_0,bf16,f16,f32", *set_arg = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) only_threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--types") && i + 1 < argc) types_arg = argv[++i];
        else if (!strcmp(argv[i], "--runs") && i + 1 < argc) runs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--tok") && i + 1 < argc) only_tok = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--shape") && i + 1 < argc) only_shape = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--no-stream")) no_stream = 1;
        else if (!strcmp(argv[i], "--vit")) vit = 1;
        else if (!strcmp(argv[i], "--dots")) dots = 1;
        else if (!strcmp(argv[i], "--kernels") && i + 1 < argc) set_arg = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--quick] [--threads N] [--types q8_0,...] [--runs N] "
                            "[--tok N] [--shape 1|2|3] [--vit] [--no-stream] [--kernels scalar|avx2|...] [--dots]\n"
                            "  --vit: the vision blocks' shapes at 784 patches (448x448)\n",
                    argv[0]);
            return 2;
        }
    }
    if (runs < 5) runs = 5;
    if (runs > 32) runs = 32;
    if (dots) {   /* the scalar set and every SIMD set this CPU runs */
        const ev_kernels *cand[] = {
            ev_kernels_scalar(),
#if defined(__x86_64__)
            ev_kernels_x86_avx2(), ev_kernels_x86_avx512(),
#elif defined(__aarch64__)
            ev_kernels_arm_neon_plain(), ev_kernels_arm_neon(),
#endif
        };
        const ev_kernels *sets[MAX_BENCH_SETS];
        int n = 0;
        for (size_t i = 0; i < sizeof cand / sizeof cand[0]; i++) {
            int seen = !cand[i];
            for (int j = 0; j < n; j++) seen |= sets[j] == cand[i];
            if (!seen) sets[n++] = cand[i];
        }
        bench_dots(sets, n, runs);
        return 0;
    }
    const ev_kernels *k = ev_kernels_best();
    if (set_arg) {   /* another set for A/B runs: the scalar one or one the CPU has */
        const ev_kernels *sets[] = {
            ev_kernels_scalar(),
#if defined(__x86_64__)
            ev_kernels_x86_avx2(), ev_kernels_x86_avx512(), ev_kernels_x86_avx512_fast(),
#elif defined(__aarch64__)
            ev_kernels_arm_neon(), ev_kernels_arm_neon_plain(),
#endif
        };
        k = NULL;
        for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++)
            if (sets[i] && !strcmp(sets[i]->name, set_arg)) k = sets[i];
        if (!k) {
            fprintf(stderr, "kernel set %s: unknown or not supported by this CPU\n", set_arg);
            return 2;
        }
    }
    printf("kernels: %s\n", k->name);
    const int32_t all_types[] = {EV_TYPE_Q8_0, EV_TYPE_Q4_0, EV_TYPE_BF16, EV_TYPE_F16, EV_TYPE_F32,
                                 EV_TYPE_Q4_K, EV_TYPE_Q6_K, EV_TYPE_Q5_K, EV_TYPE_Q3_K,
                                 EV_TYPE_Q2_K, EV_TYPE_IQ4_XS, EV_TYPE_IQ4_NL};
    const int n_types = (int)(sizeof all_types / sizeof all_types[0]);
    /* the decoder's projections (attention, ffn up/gate, ffn down) at 1, 128, 512 tokens, or
     * with --vit the vision blocks' (qkv, ffn up, ffn down, attention output) at 784 */
    const int64_t llm_shapes[4][2] = {{2048, 2048}, {2048, 6144}, {6144, 2048}, {0, 0}};
    const int64_t vit_shapes[4][2] = {{1024, 3072}, {1024, 4096}, {4096, 1024}, {1024, 1024}};
    const int64_t (*shapes)[2] = vit ? vit_shapes : llm_shapes;
    const int n_shapes = vit ? 4 : 3;
    const int64_t llm_toks[3] = {1, 128, 512}, vit_toks[3] = {784, 0, 0};
    const int64_t one_tok[3] = {only_tok, 0, 0};   /* --tok N: that count alone (e.g. 16) */
    const int64_t *toks = only_tok ? one_tok : vit ? vit_toks : llm_toks;
    for (int nt = 1; nt <= 2; nt++) {
        if (only_threads && nt != only_threads) continue;
        ev_pool *pool = ev_pool_new(nt);
        if (!pool) return 1;
        if (!no_stream) bench_stream(pool);
        for (int ti = 0; ti < n_types; ti++) {
            if (!type_listed(types_arg, ev_type_get(all_types[ti])->name)) continue;
            for (int ki = 0; ki < 3; ki++) {
                if (!toks[ki] || (quick && toks[ki] == 512) || (only_tok && toks[ki] != only_tok))
                    continue;
                for (int si = 0; si < n_shapes; si++)
                    if (!only_shape || only_shape == si + 1)
                    bench_one(pool, k, all_types[ti], shapes[si][0], shapes[si][1], toks[ki], runs);
            }
        }
        ev_pool_free(pool);
    }
    return 0;
}
