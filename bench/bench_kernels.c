/* bench_kernels.c - ev_matmul throughput: GEMV (n_tok = 1, decode) and GEMM (n_tok = 128, 512:
 * prefill, ViT) for the Qwen3-VL-2B projection shapes, every weight type, 1 and 2 threads.
 *
 *   make -C native bench && native/build/bench_kernels [--quick] [--threads N] [--types q8_0,f16]
 *
 * Shapes are written the GGUF way, n_in x n_out (ffn_gate is 2048 x 6144: 6144 rows of 2048).
 * Each figure is the median of >= 5 timed runs after a warm-up. GEMV cycles through enough
 * copies of the weights to exceed the last-level cache (decode streams the whole model from
 * DRAM); GB/s counts weight bytes only. A plain streaming-read loop gives the machine's
 * bandwidth ceiling for comparison. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels.h"
#include "threadpool.h"
#include "types.h"

#define COLD_BYTES (160u << 20)        /* weight copies for GEMV span more than the L3 */

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

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void fill_weights(int32_t type, uint8_t *w, int64_t rows, int64_t n) {
    float *tmp = malloc((size_t)n * sizeof(float));
    unsigned s = 1;
    int64_t rb = ev_row_bytes(type, n);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t i = 0; i < n; i++) tmp[i] = (float)(rand_r(&s) % 2001 - 1000) * 1e-3f;
        uint8_t *p = w + r * rb;
        switch (type) {
        case EV_TYPE_F32: memcpy(p, tmp, (size_t)n * 4); break;
        case EV_TYPE_F16: for (int64_t i = 0; i < n; i++) ((ev_fp16 *)p)[i] = ev_f32_to_fp16(tmp[i]); break;
        case EV_TYPE_BF16: for (int64_t i = 0; i < n; i++) ((ev_bf16 *)p)[i] = ev_f32_to_bf16(tmp[i]); break;
        case EV_TYPE_Q8_0: ev_quantize_row_q8_0(tmp, (ev_block_q8_0 *)p, n); break;
        default: ev_quantize_row_q4_0(tmp, (ev_block_q4_0 *)p, n); break;
        }
    }
    free(tmp);
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

int main(int argc, char **argv) {
    int no_stream = 0, quick = 0, only_threads = 0, runs = 7, only_tok = 0, only_shape = 0, vit = 0;
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
        else if (!strcmp(argv[i], "--kernels") && i + 1 < argc) set_arg = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--quick] [--threads N] [--types q8_0,...] [--runs N] "
                            "[--tok 1|128|512] [--shape 1|2|3] [--vit] [--no-stream] [--kernels scalar|avx2|...]\n"
                            "  --vit: the vision blocks' shapes at 784 patches (448x448)\n",
                    argv[0]);
            return 2;
        }
    }
    if (runs < 5) runs = 5;
    if (runs > 32) runs = 32;
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
    const int32_t all_types[5] = {EV_TYPE_Q8_0, EV_TYPE_Q4_0, EV_TYPE_BF16, EV_TYPE_F16, EV_TYPE_F32};
    /* the decoder's projections (attention, ffn up/gate, ffn down) at 1, 128, 512 tokens, or
     * with --vit the vision blocks' (qkv, ffn up, ffn down, attention output) at 784 */
    const int64_t llm_shapes[4][2] = {{2048, 2048}, {2048, 6144}, {6144, 2048}, {0, 0}};
    const int64_t vit_shapes[4][2] = {{1024, 3072}, {1024, 4096}, {4096, 1024}, {1024, 1024}};
    const int64_t (*shapes)[2] = vit ? vit_shapes : llm_shapes;
    const int n_shapes = vit ? 4 : 3;
    const int64_t llm_toks[3] = {1, 128, 512}, vit_toks[3] = {784, 0, 0};
    const int64_t *toks = vit ? vit_toks : llm_toks;
    for (int nt = 1; nt <= 2; nt++) {
        if (only_threads && nt != only_threads) continue;
        ev_pool *pool = ev_pool_new(nt);
        if (!pool) return 1;
        if (!no_stream) bench_stream(pool);
        for (int ti = 0; ti < 5; ti++) {
            if (!strstr(types_arg, ev_type_get(all_types[ti])->name)) continue;
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
