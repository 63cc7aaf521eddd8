/* test_kernels.c - the SIMD kernel set against the scalar reference, ev_matmul (both sets,
 * 1 and 3 threads, every weight type, with and without bias) against a double-precision
 * dequantise-then-multiply, and the row operations against their closed forms.
 *
 * Tolerances: float sums are reordered (8 lanes, several accumulators, horizontal adds), so a
 * result may differ by a few units of float rounding per term: we allow
 * (terms + 32) * 2^-23 * sum|w_i x_i|, a bound on the error of any summation order of the
 * (exactly computed or once-rounded) products. Integer block sums are exact in every set. */
#include <stdint.h>

#include "kernels.h"
#include "test_util.h"
#if defined(__x86_64__)
#include "arch/x86_avx512.h"
#endif

static unsigned long long seed = 12345;

/* every SIMD set this machine can run: the best one, and on aarch64 also plain NEON */
/* Every SIMD set this CPU runs (at most MAX_SIMD_SETS): the best, its "fast" variant, and the
 * older sets the best one builds on, so that an AVX-512 machine still tests the AVX2 set. */
#define MAX_SIMD_SETS 3
static int simd_sets(const ev_kernels *out[MAX_SIMD_SETS]) {
    int n = 0;
    out[n++] = ev_kernels_best();
    if (ev_kernels_fast() != out[0]) out[n++] = ev_kernels_fast();
#if defined(__aarch64__)
    if (ev_kernels_arm_neon_plain() != out[0]) out[n++] = ev_kernels_arm_neon_plain();
#elif defined(__x86_64__)
    if (ev_kernels_x86_avx2() && ev_kernels_x86_avx2() != out[0]) out[n++] = ev_kernels_x86_avx2();
#endif
    return n;
}

static void fill(float *x, int64_t n, float scale) {
    for (int64_t i = 0; i < n; i++) x[i] = tu_randf(&seed) * scale;
}

/* Random weight rows of any type: [rows][n] floats quantised/converted into w. */
static void make_weights(int32_t type, void *w, int64_t rows, int64_t n) {
    float *tmp = malloc((size_t)n * sizeof(float));
    uint8_t *p = w;
    const int64_t rb = ev_row_bytes(type, n);
    for (int64_t r = 0; r < rows; r++, p += rb) {
        fill(tmp, n, 1.0f + (float)(r % 7));
        ev_type_get(type)->from_float(tmp, p, n);
    }
    free(tmp);
}

/* the i-th type of the type table (types.c), i < ev_type_count() */
static int32_t type_at(int i) {
    return ev_type_at(i)->type;
}

/* exact value and error scale (sum |w x|) of one row dot, in double, from dequantised rows */
static void ref_dot(int32_t type, const void *w, const void *x, int64_t n, double *val, double *mag) {
    float *wf = malloc((size_t)n * sizeof(float)), *xf = malloc((size_t)n * sizeof(float));
    ev_row_to_f32(type, w, wf, n);
    ev_act_type_get(ev_type_get(type)->vec_dot_type)->to_float(x, xf, n);
    double v = 0, m = 0;
    for (int64_t i = 0; i < n; i++) {
        v += (double)wf[i] * xf[i];
        m += fabs((double)wf[i] * xf[i]);
    }
    *val = v;
    *mag = m;
    free(wf);
    free(xf);
}

static double tol_for(int64_t terms, double mag) {
    return ((double)terms + 32.0) * ldexp(1.0, -23) * mag + 1e-30;
}

static void vec_dot_simd_vs_scalar(const ev_kernels *k) {
    const ev_kernels *s = ev_kernels_scalar();
    printf("kernel set under test: %s\n", k->name);
    const int64_t sizes[] = {1, 3, 7, 8, 9, 15, 31, 32, 33, 64, 96, 100, 1000, 1024, 1027, 4096, 6144};
    for (int ti = 0; ti < ev_type_count(); ti++) {
        int32_t type = type_at(ti);
        const ev_type_traits *tr = ev_type_get(type);
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
            int64_t n = sizes[si];
            if (n % tr->block_size) continue;
            void *w = malloc((size_t)ev_row_bytes(type, n));
            float *xf = malloc((size_t)n * sizeof(float));
            const ev_type_traits *act = ev_act_type_get(tr->vec_dot_type);
            void *xq = malloc((size_t)(n / act->block_size + 1) * (size_t)act->type_size);
            int bad = 0;
            for (int rep = 0; rep < 20; rep++) {
                make_weights(type, w, 1, n);
                fill(xf, n, 3.0f);
                const void *x = xf;
                if (tr->vec_dot_type != EV_TYPE_F32) {
                    act->from_float(xf, xq, n);
                    x = xq;
                }
                float a, b;
                double val, mag;
                s->vec_dot[type](n, &a, w, x);
                k->vec_dot[type](n, &b, w, x);
                ref_dot(type, w, x, n, &val, &mag);
                if (fabs(a - val) > tol_for(n, mag) || fabs(b - val) > tol_for(n, mag)) bad++;
            }
            CHECK_MSG(bad == 0, "%s vec_dot %s n=%lld: %d of 20 off", k->name, tr->name,
                      (long long)n, bad);
            free(w);
            free(xf);
            free(xq);
        }
    }
}

static void vec_dot_detects_single_element(const ev_kernels *k) {
    /* every position of a SIMD row counts (a kernel skipping a lane or the tail fails) */
    int bad = 0;
    for (int64_t n = 1; n <= 40; n++) {
        for (int64_t pos = 0; pos < n; pos++) {
            float w[40] = {0}, x[40] = {0}, out;
            ev_fp16 wh[40] = {0};
            ev_bf16 wb[40] = {0};
            w[pos] = 3.0f;
            wh[pos] = ev_f32_to_fp16(3.0f);
            wb[pos] = ev_f32_to_bf16(3.0f);
            x[pos] = -2.0f;
            k->vec_dot[EV_TYPE_F32](n, &out, w, x);
            bad += out != -6.0f;
            k->vec_dot[EV_TYPE_F16](n, &out, wh, x);
            bad += out != -6.0f;
            k->vec_dot[EV_TYPE_BF16](n, &out, wb, x);
            bad += out != -6.0f;
            bad += k->dot_f32(n, w, x) != -6.0f || k->dot_f16_f32(n, wh, x) != -6.0f;
        }
    }
    CHECK_MSG(bad == 0, "%d single-element dots wrong", bad);
}

static void fp16_simd_conversion_exhaustive(const ev_kernels *k) {
    /* the SIMD F16 load (F16C / NEON) converts every finite half exactly */
    int bad = 0;
    float x[8] = {1, 0, 0, 0, 0, 0, 0, 0};
    for (uint32_t h = 0; h < 65536; h++) {
        if (((h >> 10) & 31) == 31) continue;
        ev_fp16 w[8] = {(ev_fp16)h, 0, 0, 0, 0, 0, 0, 0};
        float out;
        k->vec_dot[EV_TYPE_F16](8, &out, w, x);
        bad += out != ev_fp16_to_f32((ev_fp16)h);
    }
    CHECK_MSG(bad == 0, "%d halves converted wrongly by %s", bad, k->name);
}

static void axpy_and_attention_dots(const ev_kernels *k) {
    const ev_kernels *s = ev_kernels_scalar();
    int bad = 0;
    for (int64_t n = 1; n <= 300; n += 7) {
        float x[300], y0[300], y1[300], b[300];
        ev_fp16 xh[300];
        fill(x, n, 2.0f);
        fill(b, n, 2.0f);
        fill(y0, n, 1.0f);
        memcpy(y1, y0, sizeof y0);
        for (int64_t i = 0; i < n; i++) xh[i] = ev_f32_to_fp16(x[i]);
        s->axpy_f32(n, 0.37f, x, y0);
        k->axpy_f32(n, 0.37f, x, y1);
        s->axpy_f16_f32(n, -1.5f, xh, y0);
        k->axpy_f16_f32(n, -1.5f, xh, y1);
        for (int64_t i = 0; i < n; i++) bad += fabsf(y0[i] - y1[i]) > 4e-6f * (1 + fabsf(y0[i]));
        double mag = 0;
        for (int64_t i = 0; i < n; i++) mag += fabs((double)x[i] * b[i]);
        bad += fabs(s->dot_f32(n, x, b) - k->dot_f32(n, x, b)) > 2 * tol_for(n, mag);
        bad += fabs(s->dot_f16_f32(n, xh, b) - k->dot_f16_f32(n, xh, b)) > 2 * tol_for(n, mag * 1.01);
    }
    CHECK_MSG(bad == 0, "%s: %d axpy/dot results off", k->name, bad);
}

/* ---- the ViT's float kernels: sgemm, exp_sum, tanh-GELU --------------------------------- */

static int check_sgemm(const ev_kernels *k, int64_t m, int64_t n, int64_t kk, int64_t lda,
                       int64_t ldb, int64_t ldc) {
    float *a = malloc((size_t)(m * lda) * 4), *b = malloc((size_t)(kk * ldb) * 4);
    float *c = malloc((size_t)(m * ldc) * 4);
    fill(a, m * lda, 2.0f);
    fill(b, kk * ldb, 2.0f);
    for (int64_t i = 0; i < m * ldc; i++) c[i] = -7.0f;       /* sentinel past n */
    const float alpha = 0.37f;
    k->sgemm_f32(m, n, kk, alpha, a, lda, b, ldb, c, ldc);
    int bad = 0;
    for (int64_t i = 0; i < m; i++) {
        for (int64_t j = 0; j < ldc; j++) {
            if (j >= n) {
                bad += c[i * ldc + j] != -7.0f;                /* nothing written outside C */
                continue;
            }
            double v = 0, mag = 0;
            for (int64_t p = 0; p < kk; p++) {
                v += (double)a[i * lda + p] * b[p * ldb + j];
                mag += fabs((double)a[i * lda + p] * b[p * ldb + j]);
            }
            bad += fabs(c[i * ldc + j] - alpha * v) > alpha * tol_for(kk, mag) + 1e-30;
        }
    }
    free(a);
    free(b);
    free(c);
    return bad;
}

static void test_vit_kernels(const ev_kernels *k) {
    /* shapes: tile edges in every direction (6-, 4- and 1-row blocks, 16/8/masked columns),
     * strides */
    static const int64_t shapes[][6] = {
        {64, 784, 64, 3 * 64, 784, 784}, {64, 64, 784, 784, 64, 192}, {1, 1, 1, 1, 1, 1},
        {5, 23, 7, 9, 31, 25}, {7, 16, 3, 3, 16, 16}, {3, 8, 40, 40, 8, 11}, {9, 41, 17, 20, 41, 48},
        {6, 33, 12, 12, 40, 33}, {11, 24, 5, 7, 24, 30}, {10, 16, 64, 64, 16, 16},
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const int64_t *sh = shapes[i];
        bad += check_sgemm(k, sh[0], sh[1], sh[2], sh[3], sh[4], sh[5]);
    }
    CHECK_MSG(bad == 0, "%s: %d sgemm results off", k->name, bad);

    /* exp_sum against expf: softmax inputs (<= 0 after the max), the underflow edge, tails */
    const ev_kernels *s = ev_kernels_scalar();
    bad = 0;
    for (int64_t n = 1; n <= 70; n += 3) {
        float x0[70], x1[70];
        for (int64_t i = 0; i < n; i++) x0[i] = x1[i] = -fabsf(tu_randf(&seed)) * (i % 5 ? 12 : 95);
        x0[0] = x1[0] = 0.0f;
        float s0 = s->exp_sum_f32(x0, n, 0.5f), s1 = k->exp_sum_f32(x1, n, 0.5f);
        for (int64_t i = 0; i < n; i++) bad += fabsf(x0[i] - x1[i]) > 4e-7f * x0[i] + 1e-37f;
        bad += fabsf(s0 - s1) > 2e-6f * s0;
    }
    CHECK_MSG(bad == 0, "%s: %d exp_sum results off", k->name, bad);

    /* tanh-GELU against the libm form over [-12, 12] and a few far points */
    bad = 0;
    float g0[1003], g1[1003];
    for (int i = 0; i < 1000; i++) g0[i] = g1[i] = -12.0f + 24.0f * (float)i / 999.0f;
    g0[1000] = g1[1000] = -60.0f;
    g0[1001] = g1[1001] = 60.0f;
    g0[1002] = g1[1002] = 1e-6f;
    s->gelu_tanh_f32(g0, 1003);
    k->gelu_tanh_f32(g1, 1003);
    for (int i = 0; i < 1003; i++) bad += fabsf(g0[i] - g1[i]) > 1e-6f * (1.0f + fabsf(g0[i]));
    CHECK_MSG(bad == 0, "%s: %d gelu_tanh results off", k->name, bad);
}

static void test_simd_sets_against_scalar(void) {
    const ev_kernels *sets[MAX_SIMD_SETS];
    int n = simd_sets(sets);
    for (int i = 0; i < n; i++) {
        vec_dot_simd_vs_scalar(sets[i]);
        vec_dot_detects_single_element(sets[i]);
        fp16_simd_conversion_exhaustive(sets[i]);
        axpy_and_attention_dots(sets[i]);
        test_vit_kernels(sets[i]);
    }
    test_vit_kernels(ev_kernels_scalar());   /* the reference against double sums too */
}

/* ---- ev_matmul ------------------------------------------------------------------------- */

/* x as gemm_q16x sees it: each block of 32 rounded (to nearest even) to int16 steps of
 * amax / 32767 */
static void round_i16(const float *x, float *xf, int64_t n) {
    for (int64_t b = 0; b < n / 32; b++) {
        float amax = 0.0f;
        for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[b * 32 + i]));
        const float d = amax / 32767.0f, id = amax > 0.0f ? 32767.0f / amax : 0.0f;
        for (int i = 0; i < 32; i++) xf[b * 32 + i] = rintf(x[b * 32 + i] * id) * d;
    }
}

static int check_matmul(ev_pool *pool, const ev_kernels *k, int32_t type, int64_t n_out,
                        int64_t n_in, int64_t n_tok, int with_bias) {
    const int64_t rb = ev_row_bytes(type, n_in);
    uint8_t *w = malloc((size_t)(rb * n_out));
    float *x = malloc((size_t)(n_in * n_tok) * 4), *y = malloc((size_t)(n_out * n_tok) * 4);
    float *bias = malloc((size_t)n_out * 4), *wf = malloc((size_t)n_in * 4);
    float *xf = malloc((size_t)n_in * 4);
    const ev_type_traits *act = ev_act_type_get(ev_type_get(type)->vec_dot_type);
    const ev_type_traits *q8_0 = ev_act_type_get(EV_TYPE_Q8_0);   /* gemm_q8x's activations */
    void *xq = malloc((size_t)(n_in / act->block_size + 1) * (size_t)act->type_size +
                      (size_t)(n_in / EV_QK + 1) * sizeof(ev_block_q8_0));
    size_t sb = ev_matmul_scratch_bytes(type, n_in, n_tok, pool ? ev_pool_n_threads(pool) : 1);
    void *scratch = sb ? aligned_alloc(64, (sb + 63) / 64 * 64) : NULL;
    make_weights(type, w, n_out, n_in);
    fill(x, n_in * n_tok, 2.0f);
    fill(bias, n_out, 1.0f);
    for (int64_t i = 0; i < n_out * n_tok; i++) y[i] = NAN;     /* every output is written */
    ev_matmul(pool, k, type, w, with_bias ? bias : NULL, n_out, n_in, x, n_tok, y, scratch);
    int bad = 0;
    /* decode-sized products with quantised weights quantise the activations to the type's
     * vec_dot_type (Q8_0, Q8_K), and many-token ones in a kernel set with gemm_q8x to Q8_0
     * (the K-quants' too) */
    const int quantized = act->type != EV_TYPE_F32;
    const int int_path = n_tok >= (act->type == EV_TYPE_Q8_0 ? EV_MATMUL_INT_MIN_TOK
                                                            : EV_MATMUL_INT_MIN_TOK_K);
    const int q8x = quantized && int_path && k->gemm_q8x[type] != NULL;
    const int q16x = quantized && int_path && !q8x && k->gemm_q16x[type] != NULL;
    const int quant = quantized && (q8x || (!q16x && n_tok < EV_MATMUL_FLOAT_MIN_TOK));
    const int bf16x = n_tok >= EV_MATMUL_FLOAT_MIN_TOK && k->gemm_bf16x[type] != NULL;
    const int x16 = n_tok == 1 && k->gemv_x16[type] != NULL;   /* weight's own 16-bit type */
    for (int64_t t = 0; t < n_tok; t++) {
        /* the reference multiplies what the kernel multiplies: for quantised weights the
         * activations after Q8_0 quantisation (a separate loose check below covers that),
         * from EV_MATMUL_FLOAT_MIN_TOK tokens on the float activations themselves, unless
         * gemm_q8x, gemm_q16x or gemm_bf16x runs */
        if (quant) {
            const ev_type_traits *qa = q8x ? q8_0 : act;
            qa->from_float(x + t * n_in, xq, n_in);
            qa->to_float(xq, xf, n_in);
        } else if (q16x) {    /* gemm_q16x: int16 blocks of 32, d = amax / 32767 */
            round_i16(x + t * n_in, xf, n_in);
        } else if (bf16x) {   /* gemm_bf16x rounds the activations to bf16 */
            for (int64_t i = 0; i < n_in; i++) xf[i] = ev_bf16_to_f32(ev_f32_to_bf16(x[t * n_in + i]));
        } else if (x16) {     /* gemv_x16 rounds them to f16 (F16) or bf16 (BF16) */
            const ev_type_traits *wt = ev_type_get(type);
            uint16_t h[1];
            for (int64_t i = 0; i < n_in; i++) {
                wt->from_float(x + t * n_in + i, h, 1);
                wt->to_float(h, xf + i, 1);
            }
        } else {
            memcpy(xf, x + t * n_in, (size_t)n_in * 4);
        }
        for (int64_t r = 0; r < n_out; r++) {
            ev_row_to_f32(type, w + r * rb, wf, n_in);
            double v = with_bias ? bias[r] : 0.0, mag = fabs(v), raw = v;
            for (int64_t i = 0; i < n_in; i++) {
                v += (double)wf[i] * xf[i];
                raw += (double)wf[i] * x[t * n_in + i];
                mag += fabs((double)wf[i] * xf[i]);
            }
            double got = y[t * n_out + r];
            if (!(fabs(got - v) <= tol_for(n_in, mag))) {
                if (bad++ < 3)
                    fprintf(stderr, "  y[%lld][%lld] = %.9g, want %.9g\n", (long long)t,
                            (long long)r, got, v);
            }
            /* activation quantisation error: at most d/2 = amax/254 per element */
            if (quant && !(fabs(got - raw) <= mag / 100.0 + 1e-3)) bad++;
        }
    }
    free(w); free(x); free(y); free(bias); free(wf); free(xf); free(xq); free(scratch);
    return bad;
}

/* The types whose products the whole token sweep checks: those with integer or few-token
 * paths of their own (Q8_0, Q4_0) and the float ones. The other block types (the K-quants,
 * IQ4, Q4_1/Q5_0/Q5_1) have one decode dot per set and one panel dequantiser, and share
 * the token blocking with every type, so 1 and 17 tokens cover them (test_kquants_simd.c
 * checks their kernels in depth); the full sweep over 15 types took test_kernels from 23 s
 * to 90 s, and several times that under qemu. */
static int swept_in_full(int32_t type) {
    return type == EV_TYPE_Q8_0 || type == EV_TYPE_Q4_0 ||
           ev_type_get(type)->vec_dot_type == EV_TYPE_F32;
}

static void test_matmul_against_double_reference(void) {
    const ev_kernels *sets[1 + MAX_SIMD_SETS] = {ev_kernels_scalar()};
    const int n_sets = 1 + simd_sets(sets + 1);
    ev_pool *pools[2] = {ev_pool_new(1), ev_pool_new(3)};
    CHECK(pools[0] && pools[1]);
    /* 5: the integer products' few-token range; 250 = 41 x EV_GEMM_MR + 4: a micro-tile tail */
    const int64_t toks[] = {1, 3, 5, 17, 64, 101, 250};
    const struct { int64_t n_out, n_in, max_tok; } shapes[] = {
        {1, 32, 250}, {5, 64, 250}, {37, 96, 250}, {64, 256, 250},
        {130, 2112, 101},   /* 8 K chunks of 256 and a tail of 64 (250 tokens: the others) */
        {20, 6144, 250},
        {100, 288, 250},    /* row chunks of EV_GEMM_NC_ONE_BLOCK and a tail, a K tail of 32
                               (more rows than EV_GEMM_NC, past EV_GEMM_ONE_BLOCK tokens:
                               the token-block check below) */
        {40, 768, 250},     /* 256-element blocks: three K chunks of one super-block each */
        {1030, 512, 17},    /* and more rows than EV_GEMM_NC (one token block is enough:
                               250 tokens here were most of this test's time) */
        {9, 45, 17},        /* float weights: the decode rows' 8-column and scalar tails */
        {6, 104, 17},       /* and their 8-column tail after whole steps of 32 */
        {11, 3105, 17},     /* F16/BF16 decode rows past 3072 columns: 4 side by side, a
                               3-row tail and a 1-column tail (x86_avx512_gemv.c) */
        {3, 16400, 1}};     /* longer than gemv_x16 rounds (16384): the exact rows */
    for (int si = 0; si < n_sets; si++) {
        for (int pi = 0; pi < 2; pi++) {
            for (int ti = 0; ti < ev_type_count(); ti++) {
                for (size_t hi = 0; hi < sizeof shapes / sizeof shapes[0]; hi++) {
                    if (shapes[hi].n_in % ev_type_at(ti)->block_size) continue;
                    for (size_t ki = 0; ki < sizeof toks / sizeof toks[0]; ki++) {
                        int64_t n_tok = toks[ki];
                        if (n_tok > shapes[hi].max_tok) continue;
                        if (shapes[hi].n_in * shapes[hi].n_out * n_tok > 4000000 && si == 0)
                            continue;   /* the scalar set is slow; big shapes run once below */
                        if (!swept_in_full(type_at(ti)) && !(ki == 0 || ki == 3) &&
                            !(ki == 4 && sets[si]->gemm_q16x[type_at(ti)]))
                            continue;   /* 1 and 17 tokens: the decode dot, the panels; 64
                                           where the set has integer products (Q4_K) */
                        int bias = (int)((hi + ki) & 1);
                        int bad = check_matmul(pools[pi], sets[si], type_at(ti), shapes[hi].n_out,
                                               shapes[hi].n_in, n_tok, bias);
                        CHECK_MSG(bad == 0, "matmul %s %s threads=%d %lldx%lld n_tok=%lld bias=%d: %d off",
                                  sets[si]->name, ev_type_get(type_at(ti))->name,
                                  ev_pool_n_threads(pools[pi]), (long long)shapes[hi].n_out,
                                  (long long)shapes[hi].n_in, (long long)n_tok, bias, bad);
                    }
                }
            }
        }
    }
    /* float weights with n_in not a multiple of the SIMD width */
    for (int ti = 0; ti < ev_type_count(); ti++) {
        if (ev_type_at(ti)->vec_dot_type != EV_TYPE_F32) continue;
        int bad = check_matmul(pools[1], sets[1], type_at(ti), 23, 37, 17, 1) +
                  check_matmul(pools[1], sets[1], type_at(ti), 9, 1001, 5, 0) +
                  check_matmul(pools[0], sets[0], type_at(ti), 9, 1001, 5, 0);
        CHECK_MSG(bad == 0, "matmul %s odd n_in: %d off", ev_type_get(type_at(ti))->name, bad);
    }
    CHECK(check_matmul(pools[1], sets[0], EV_TYPE_Q4_0, 20, 6144, 17, 1) == 0);
    /* gemm_dq's two loop orders: up to EV_GEMM_ONE_BLOCK tokens packed once per K chunk
     * (above), more in blocks of EV_GEMM_MC tokens repacked per EV_GEMM_NC rows (here: two
     * row chunks on one thread, a last token block of 2 and a K tail). The SIMD sets only
     * (the scalar set's gemm_dq has one loop order), each gemm_dq once (NEON and NEON+dot
     * share theirs): ~0.45 G multiply-adds a check, minutes under qemu */
    const int32_t float_types[] = {EV_TYPE_F32, EV_TYPE_F16, EV_TYPE_BF16};
    for (int si = 1; si < n_sets; si++)
        for (size_t fi = 0; fi < sizeof float_types / sizeof float_types[0]; fi++) {
            const int32_t t = float_types[fi];
            int seen = 0;
            for (int sj = 1; sj < si; sj++) seen |= sets[sj]->gemm_dq[t] == sets[si]->gemm_dq[t];
            if (seen) continue;
            const int64_t n_tok = EV_GEMM_ONE_BLOCK + EV_GEMM_MC + 2;
            CHECK_MSG(check_matmul(pools[0], sets[si], t, EV_GEMM_NC + 40, 288, n_tok, 1) == 0,
                      "matmul %s %s %dx288 n_tok=%lld: token blocks", sets[si]->name,
                      ev_type_get(t)->name, EV_GEMM_NC + 40, (long long)n_tok);
        }
    /* the integer products' y blocks and K chunks together: one thread, 250 tokens, 500 rows
     * (two y blocks), 17 blocks of K (chunks of 16 and 1; super-block types: 40 blocks,
     * chunks of 16, 16, 8), with bias for the latter */
    for (int si = 1; si < n_sets; si++)
        for (int ti = 0; ti < ev_type_count(); ti++)
            if (sets[si]->gemm_q16x[type_at(ti)] || sets[si]->gemm_q8x[type_at(ti)]) {
                const int k_type = ev_type_at(ti)->block_size == EV_QK_K;
                const int64_t n_in = k_type ? 1280 : 544;
                CHECK_MSG(check_matmul(pools[0], sets[si], type_at(ti), 500, n_in, 250, k_type) == 0,
                          "matmul %s %s 500x%lld n_tok=250: y blocks x K chunks", sets[si]->name,
                          ev_type_get(type_at(ti))->name, (long long)n_in);
            }
    ev_pool_free(pools[0]);
    ev_pool_free(pools[1]);
}

/* The AVX-512 sets take x86_avx512_gemv.c's F16/BF16 decode rows (exact: gemm; fast: F16's
 * gemv_x16) on AMD only (x86_avx512.c). On any other AVX-512 host, copies of the two sets with
 * those rows in place check them on the decode shapes of the sweep above. */
static void test_amd_float_decode_rows_everywhere(void) {
#if defined(__x86_64__)
    const ev_kernels *best = ev_kernels_x86_avx512(), *fast = ev_kernels_x86_avx512_fast();
    if (!best || best->gemm[EV_TYPE_F16] == ev_avx512_gemm_f16) return;   /* AMD: swept */
    static ev_kernels exact_rows, fast_rows;
    exact_rows = *best;
    exact_rows.gemm[EV_TYPE_F16] = ev_avx512_gemm_f16;
    exact_rows.gemm[EV_TYPE_BF16] = ev_avx512_gemm_bf16;
    fast_rows = *fast;
    fast_rows.gemm[EV_TYPE_F16] = ev_avx512_gemm_f16;
    fast_rows.gemm[EV_TYPE_BF16] = ev_avx512_gemm_bf16;
    fast_rows.gemv_x16[EV_TYPE_F16] = ev_avx512_gemv_x16_f16;
    const ev_kernels *sets[] = {&exact_rows, &fast_rows};
    const int32_t types[] = {EV_TYPE_F16, EV_TYPE_BF16};
    const struct { int64_t n_out, n_in; } shapes[] = {
        {1, 32}, {37, 96}, {130, 2112}, {20, 6144}, {9, 45}, {6, 104}, {11, 3105}, {3, 16400}};
    ev_pool *pools[2] = {ev_pool_new(1), ev_pool_new(3)};
    int runs = 0;
    for (int si = 0; si < 2; si++)
        for (int pi = 0; pi < 2; pi++)
            for (int ti = 0; ti < 2; ti++)
                for (size_t hi = 0; hi < sizeof shapes / sizeof shapes[0]; hi++) {
                    const int bias = (int)(hi & 1);
                    const int bad = check_matmul(pools[pi], sets[si], types[ti], shapes[hi].n_out,
                                                 shapes[hi].n_in, 1, bias);
                    CHECK_MSG(bad == 0, "AMD decode rows (%s set) %s threads=%d %lldx%lld: %d off",
                              si ? "fast" : "exact", ev_type_get(types[ti])->name,
                              ev_pool_n_threads(pools[pi]), (long long)shapes[hi].n_out,
                              (long long)shapes[hi].n_in, bad);
                    runs++;
                }
    fprintf(stderr, "AMD's F16/BF16 decode rows on this CPU: %d products checked\n", runs);
    ev_pool_free(pools[0]);
    ev_pool_free(pools[1]);
#endif
}

/* A kernel set's gemm_q16x (q8x = 0) or gemm_q8x (q8x = 1) of Q4_0 and Q8_0 weights called
 * directly on ragged shapes: rows not a multiple of the panels (AVX2: 16 rows, tiles of 2
 * groups of 8; NEON: 4 rows) and a thread's sub-range [r0, r1) starting inside a panel, 1..40
 * tokens (every tile width and remainder), K of 1..33 blocks (chunk tails), with and without
 * bias; random weights and, for one shape, the extremes (Q4_0 nibbles 0 / Q8_0 -128 and +127
 * against activations at +-amax, so the products and int32 block sums are at their
 * largest). The reference: double sums of the dequantised weights times the integer
 * activations x d (q16x: k's quantize_i16, checked against round_i16 bit for bit; q8x: the
 * Q8_0 blocks of k's quantize_q8_0, with their sums in x_sum). Returns the runs. */
static int int_gemm_ragged(const char *label, const ev_kernels *k, int q8x) {
    CHECK(q8x ? k->quantize_q8_0 != NULL : k->quantize_i16 != NULL);
    const int32_t types[] = {EV_TYPE_Q4_0, EV_TYPE_Q8_0};
    const int64_t rows_list[] = {1, 7, 8, 9, 15, 16, 17, 23, 33, 41};
    const int64_t nb_list[] = {1, 15, 16, 17, 33};
    enum { MAX_TOK = 40, MAX_ROWS = 41, MAX_NB = 33 };
    float *pack = aligned_alloc(64, sizeof(float) * EV_GEMM_PACK_FLOATS);
    float *x = malloc(sizeof(float) * MAX_TOK * MAX_NB * 32), *xf = malloc(sizeof(float) * MAX_NB * 32);
    int16_t *x16 = malloc(sizeof(int16_t) * MAX_TOK * MAX_NB * 32);   /* [tok][n_in] q16x */
    ev_block_q8_0 *x8 = malloc(sizeof(ev_block_q8_0) * MAX_TOK * MAX_NB);  /* [tok][nb] q8x */
    float *xd = malloc(sizeof(float) * MAX_TOK * MAX_NB), *wf = malloc(sizeof(float) * MAX_NB * 32);
    int32_t *xs = malloc(sizeof(int32_t) * MAX_TOK * MAX_NB);   /* q8x: each block's sum */
    float *y = malloc(sizeof(float) * MAX_TOK * MAX_ROWS), *bias = malloc(sizeof(float) * MAX_ROWS);
    uint8_t *w = malloc((size_t)ev_row_bytes(EV_TYPE_Q8_0, MAX_NB * 32) * MAX_ROWS);
    double *ref = malloc(sizeof(double) * MAX_TOK * MAX_ROWS), *mag = malloc(sizeof(double) * MAX_TOK * MAX_ROWS);
    int runs = 0;
    for (int ti = 0; ti < 2; ti++) {
        const int32_t type = types[ti];
        const ev_gemm_fn gemm = q8x ? k->gemm_q8x[type] : k->gemm_q16x[type];
        CHECK(gemm != NULL);
        if (!gemm) continue;
        for (size_t ri = 0; ri < sizeof rows_list / sizeof rows_list[0]; ri++) {
            for (size_t bi = 0; bi < sizeof nb_list / sizeof nb_list[0]; bi++) {
                const int64_t n_out = rows_list[ri], nb = nb_list[bi], n_in = nb * 32;
                const int64_t rb = ev_row_bytes(type, n_in);
                const int extremes = ri == 8 && bi == 4;   /* 33 rows x 33 blocks */
                make_weights(type, w, n_out, n_in);
                if (extremes) {
                    for (int64_t r = 0; r < n_out; r++)
                        for (int64_t b = 0; b < nb; b++) {
                            uint8_t *blk = w + r * rb + b * (type == EV_TYPE_Q4_0 ? 18 : 34);
                            memset(blk + 2, type == EV_TYPE_Q4_0 ? ((r + b) & 1 ? 0xff : 0x00)
                                                                 : ((r + b) & 1 ? 0x7f : 0x80),
                                   type == EV_TYPE_Q4_0 ? 16 : 32);
                        }
                }
                fill(bias, n_out, 1.0f);
                for (int64_t n_tok = 1; n_tok <= MAX_TOK; n_tok += (n_tok < 14 || extremes) ? 1 : 3) {
                    fill(x, n_tok * n_in, 3.0f);
                    if (extremes)
                        for (int64_t i = 0; i < n_tok * n_in; i++) x[i] = (i / 32 + i) & 1 ? 2.5f : -2.5f;
                    for (int64_t t = 0; t < n_tok && !q8x; t++) {
                        k->quantize_i16(x + t * n_in, x16 + t * n_in, xd + t * nb, n_in);
                        round_i16(x + t * n_in, xf, n_in);
                        for (int64_t i = 0; i < n_in; i++) {
                            const float got = (float)x16[t * n_in + i] * xd[t * nb + i / 32];
                            if (got != xf[i]) {
                                CHECK_MSG(0, "%s quantize_i16 x[%lld][%lld]: %.9g, want %.9g",
                                          label, (long long)t, (long long)i, got, xf[i]);
                                break;
                            }
                        }
                    }
                    for (int64_t t = 0; t < n_tok && q8x; t++) {
                        k->quantize_q8_0(x + t * n_in, x8 + t * nb, n_in);
                        for (int64_t b = 0; b < nb; b++) {
                            int32_t s = 0;
                            for (int i = 0; i < 32; i++) s += x8[t * nb + b].qs[i];
                            xs[t * nb + b] = s;
                            xd[t * nb + b] = ev_fp16_to_f32(x8[t * nb + b].d);
                        }
                    }
                    for (int64_t r = 0; r < n_out; r++) {
                        ev_row_to_f32(type, w + r * rb, wf, n_in);
                        for (int64_t t = 0; t < n_tok; t++) {
                            double v = 0.0, m = 0.0;
                            for (int64_t i = 0; i < n_in; i++) {
                                const double q = q8x ? x8[t * nb + i / 32].qs[i % 32] : x16[t * n_in + i];
                                const double p = (double)wf[i] * q * xd[t * nb + i / 32];
                                v += p;
                                m += fabs(p);
                            }
                            ref[t * n_out + r] = v;
                            mag[t * n_out + r] = m;
                        }
                    }
                    const int with_bias = (int)((n_tok + ri) & 1);
                    /* a thread's rows [r0, r1): from inside the first panel when there are
                     * enough rows, the rest [0, r0) as another call */
                    const int64_t r0 = n_out > 9 ? 5 : 0;
                    for (int64_t i = 0; i < n_tok * n_out; i++) y[i] = NAN;
                    ev_gemm_args a = {.w = w, .w_stride = rb, .x_scale = xd,
                                      .bias = with_bias ? bias : NULL, .y = y, .n_out = n_out,
                                      .n_in = n_in, .n_tok = n_tok, .w_type = type, .pack = pack};
                    if (q8x) {
                        a.x = (const uint8_t *)x8;
                        a.x_stride = nb * (int64_t)sizeof(ev_block_q8_0);
                        a.x_sum = xs;
                    } else {
                        a.x = (const uint8_t *)x16;
                        a.x_stride = n_in * 2;
                    }
                    gemm(&a, r0, n_out);
                    if (r0 > 0) gemm(&a, 0, r0);
                    int bad = 0;
                    for (int64_t t = 0; t < n_tok; t++)
                        for (int64_t r = 0; r < n_out; r++) {
                            const double want = ref[t * n_out + r] + (with_bias ? bias[r] : 0.0);
                            const double got = y[t * n_out + r];
                            const double tol = tol_for(n_in, mag[t * n_out + r] + (with_bias ? fabs(bias[r]) : 0.0));
                            if (!(fabs(got - want) <= tol) && bad++ < 3)
                                fprintf(stderr, "  y[%lld][%lld] = %.9g, want %.9g\n", (long long)t,
                                        (long long)r, got, want);
                        }
                    CHECK_MSG(bad == 0, "%s %s %s %lldx%lld n_tok=%lld bias=%d%s: %d off", label,
                              q8x ? "gemm_q8x" : "gemm_q16x", ev_type_get(type)->name,
                              (long long)n_out, (long long)n_in, (long long)n_tok, with_bias,
                              extremes ? " (extremes)" : "", bad);
                    runs++;
                }
            }
        }
    }
    free(pack); free(x); free(xf); free(x16); free(x8); free(xd); free(wf); free(xs); free(y);
    free(bias); free(w); free(ref); free(mag);
    return runs;
}

/* The AVX2 set's gemm_q16x (x86_avx2_qgemm.c: panels of 16 rows, K chunks of 16 blocks, tiles
 * of 2 row groups x 6 tokens) on ragged shapes (int_gemm_ragged); its quantize_i16 against
 * the AVX-512 one, where that runs, bit for bit. */
static void test_avx2_q16x_ragged(void) {
#if defined(__x86_64__)
    const ev_kernels *k = ev_kernels_x86_avx2();
    if (!k) return;
    CHECK(int_gemm_ragged("avx2", k, 0) > 1000);
    /* the AVX-512 set's quantize_i16, where it runs, rounds alike */
    const ev_kernels *best = ev_kernels_best();
    if (best->quantize_i16 && best->quantize_i16 != k->quantize_i16) {
        enum { N = 40 * 33 * 32 };
        float *x = malloc(sizeof(float) * N), *xd = malloc(sizeof(float) * N / 32);
        float *d2 = malloc(sizeof(float) * N / 32);
        int16_t *x16 = malloc(sizeof(int16_t) * N), *q2 = malloc(sizeof(int16_t) * N);
        fill(x, N, 4.0f);
        k->quantize_i16(x, x16, xd, N);
        best->quantize_i16(x, q2, d2, N);
        CHECK(memcmp(x16, q2, sizeof(int16_t) * N) == 0);
        CHECK(memcmp(xd, d2, sizeof(float) * N / 32) == 0);
        free(x); free(xd); free(d2); free(x16); free(q2);
    }
#endif
}

/* The NEON dotprod set's SDOT products (arm_neon_qgemm.c: panels of 4 rows, K chunks of 16
 * blocks, tiles of 4 rows x 1..4 tokens): gemm_q16x (the byte split of the int16
 * activations) in the default set, gemm_q8x in the fast set, on ragged shapes
 * (int_gemm_ragged); and which sets have them. */
static void test_neon_int_ragged(void) {
#if defined(__aarch64__)
    const ev_kernels *k = ev_kernels_arm_neon(), *fast = ev_kernels_arm_neon_fast();
    if (!fast) {   /* no dotprod: no integer products */
        CHECK(k->gemm_q16x[EV_TYPE_Q8_0] == NULL && k->gemm_q8x[EV_TYPE_Q8_0] == NULL);
        return;
    }
    CHECK(ev_kernels_fast() == fast && ev_kernels_best() == k);
    CHECK(k->gemm_q8x[EV_TYPE_Q8_0] == NULL && k->gemm_q8x[EV_TYPE_Q4_0] == NULL);
    CHECK(ev_kernels_arm_neon_plain()->gemm_q16x[EV_TYPE_Q8_0] == NULL);
    CHECK(int_gemm_ragged("neon-dotprod", k, 0) > 1000);
    CHECK(int_gemm_ragged("neon-dotprod-fast", fast, 1) > 1000);
#endif
}

/* Q4_0 against Q8_0 activations at the ends of both ranges: nibbles all 15 or all 0 (values
 * +7, -8) against x = +-1 (quantised to +-127): per block |sum q x| and |8 sum x| are at
 * their largest, so int16 partial sums that overflowed would show. Exact: y = n_in (q - 8) x. */
static void test_q4_decode_extremes(void) {
    const ev_kernels *sets[1 + MAX_SIMD_SETS] = {ev_kernels_scalar()};
    const int n_sets = 1 + simd_sets(sets + 1);
    const int64_t n_ins[] = {256, 288, 2112, 6144};   /* whole groups of 8 blocks, and tails */
    for (size_t ni = 0; ni < sizeof n_ins / sizeof n_ins[0]; ni++) {
        const int64_t n_in = n_ins[ni], nb = n_in / EV_QK, n_out = 4;
        ev_block_q4_0 *w = malloc((size_t)(nb * n_out) * sizeof(ev_block_q4_0));
        float *x = malloc((size_t)n_in * 4), y[4];
        const size_t sb = ev_matmul_scratch_bytes(EV_TYPE_Q4_0, n_in, 1, 1);
        void *scratch = aligned_alloc(64, (sb + 63) / 64 * 64);
        for (int64_t r = 0; r < n_out; r++)
            for (int64_t b = 0; b < nb; b++) {
                w[r * nb + b].d = ev_f32_to_fp16(1.0f);
                memset(w[r * nb + b].qs, (r & 1) ? 0x00 : 0xff, sizeof w[0].qs);
            }
        for (int sign = -1; sign <= 1; sign += 2) {
            for (int64_t i = 0; i < n_in; i++) x[i] = (float)sign;
            for (int si = 0; si < n_sets; si++) {
                ev_matmul(NULL, sets[si], EV_TYPE_Q4_0, w, NULL, n_out, n_in, x, 1, y, scratch);
                for (int64_t r = 0; r < n_out; r++) {
                    const double want = (double)n_in * ((r & 1) ? -8.0 : 7.0) * sign;
                    CHECK_MSG(fabs(y[r] - want) <= 1e-3 * fabs(want),
                              "q4 extremes %s n_in=%lld row %lld x=%d: %g, want %g",
                              sets[si]->name, (long long)n_in, (long long)r, sign, y[r], want);
                }
            }
        }
        free(w);
        free(x);
        free(scratch);
    }
}

static void test_matmul_sets_agree_and_null_pool(void) {
    /* scalar and SIMD on the same data agree; a NULL pool runs on the caller */
    const ev_kernels *sets[MAX_SIMD_SETS];
    const int n_sets = simd_sets(sets);
    for (int si = 0; si < n_sets; si++) {
        const ev_kernels *k = sets[si];
        for (int ti = 0; ti < ev_type_count(); ti++) {
            int32_t type = type_at(ti);
            const int64_t n_out = 48, n_in = 512, n_tok = 19;      /* the many-token path */
            uint8_t *w = malloc((size_t)(ev_row_bytes(type, n_in) * n_out));
            float x[512 * 19], y0[48 * 19], y1[48 * 19];
            make_weights(type, w, n_out, n_in);
            fill(x, n_in * n_tok, 1.0f);
            size_t sb = ev_matmul_scratch_bytes(type, n_in, n_tok, 1);
            void *scratch = sb ? aligned_alloc(64, (sb + 63) / 64 * 64) : NULL;
            ev_matmul(NULL, ev_kernels_scalar(), type, w, NULL, n_out, n_in, x, n_tok, y0, scratch);
            ev_matmul(NULL, k, type, w, NULL, n_out, n_in, x, n_tok, y1, scratch);
            /* gemm_q8x / q16x / bf16x round the activations (exactness: the double reference
             * above); here their outputs stay within that rounding of the scalar set's */
            float ymax = 0.0f;
            for (int i = 0; i < n_out * n_tok; i++) ymax = fmaxf(ymax, fabsf(y0[i]));
            const float tol = k->gemm_q8x[type] || k->gemm_bf16x[type] ? 0.01f * ymax
                              : k->gemm_q16x[type]                   ? 1e-4f * ymax
                                                                     : 1e-3f;
            int bad = 0;
            for (int i = 0; i < n_out * n_tok; i++) bad += fabsf(y0[i] - y1[i]) > tol;
            CHECK_MSG(bad == 0, "%s: scalar and %s differ in %d outputs",
                      ev_type_get(type)->name, k->name, bad);
            free(w);
            free(scratch);
        }
    }
    const size_t pack = sizeof(float) * EV_GEMM_PACK_FLOATS;
    CHECK(ev_matmul_scratch_bytes(EV_TYPE_F32, 4096, 1, 4) == 0);
    CHECK(ev_matmul_scratch_bytes(EV_TYPE_F32, 4096, 512, 3) == 3 * pack);
    CHECK(ev_matmul_scratch_bytes(EV_TYPE_Q8_0, 4096, 15, 1) >= 128 * 15 * 38);
    CHECK(ev_matmul_scratch_bytes(EV_TYPE_Q8_0, 4096, 512, 2) >= 2 * pack);
    CHECK(ev_matmul_scratch_bytes(EV_TYPE_Q8_0, 4096, 512, 2) >= 128 * 15 * 38);
    /* the many-token integer products' activations (int16 blocks + scales) after the packs */
    CHECK(ev_matmul_scratch_bytes(EV_TYPE_Q8_0, 4096, 512, 2) >= 2 * pack + 128 * 512 * 68);
    /* Q8_K-dot types: decode-sized products hold n_tok rows of n_in/256 Q8_K blocks; Q3_K
     * has no integer products, so no packs below EV_MATMUL_FLOAT_MIN_TOK and no activations
     * beside them; Q4_K/Q5_K/IQ4_XS/Q6_K may (gemm_q16x): packs + int16 blocks, scales and
     * sums from EV_MATMUL_INT_MIN_TOK_K tokens on */
    CHECK(ev_matmul_scratch_bytes(EV_TYPE_Q4_K, 4096, EV_MATMUL_INT_MIN_TOK_K - 1, 2) >=
              16 * (EV_MATMUL_INT_MIN_TOK_K - 1) * 292 &&
          ev_matmul_scratch_bytes(EV_TYPE_Q4_K, 4096, EV_MATMUL_INT_MIN_TOK_K - 1, 2) < pack);
    CHECK(ev_matmul_scratch_bytes(EV_TYPE_Q3_K, 4096, 15, 2) >= 16 * 15 * 292 &&
          ev_matmul_scratch_bytes(EV_TYPE_Q3_K, 4096, 15, 2) < pack);
    CHECK(ev_matmul_scratch_bytes(EV_TYPE_Q4_K, 4096, EV_MATMUL_INT_MIN_TOK_K, 2) >=
          2 * pack + 128 * EV_MATMUL_INT_MIN_TOK_K * 72);
    CHECK(ev_matmul_scratch_bytes(EV_TYPE_Q5_K, 4096, 512, 2) >= 2 * pack + 128 * 512 * 72);
    CHECK(ev_matmul_scratch_bytes(EV_TYPE_IQ4_XS, 4096, EV_MATMUL_INT_MIN_TOK_K, 2) >=
          2 * pack + 128 * EV_MATMUL_INT_MIN_TOK_K * 68);
    CHECK(ev_matmul_scratch_bytes(EV_TYPE_Q6_K, 4096, EV_MATMUL_INT_MIN_TOK_K - 1, 2) < pack);
    CHECK(ev_matmul_scratch_bytes(EV_TYPE_Q6_K, 4096, 512, 2) >= 2 * pack + 128 * 512 * 68);
    CHECK(ev_matmul_scratch_bytes(EV_TYPE_Q3_K, 4096, 16, 2) == 2 * pack);
    CHECK(ev_matmul_scratch_bytes(EV_TYPE_Q4_K, 4000, 1, 1) == SIZE_MAX);   /* not whole blocks */
    CHECK(ev_matmul_scratch_bytes(EV_TYPE_Q4_0, 33, 1, 1) == SIZE_MAX);
    CHECK(ev_matmul_scratch_bytes(EV_TYPE_F32, 64, 512, 0) == SIZE_MAX);
    CHECK(ev_matmul_scratch_bytes(EV_TYPE_Q8_0, INT64_MAX / 64 * 32, 1 << 30, 1) == SIZE_MAX);
}

/* ---- row operations -------------------------------------------------------------------- */

static void test_rmsnorm_closed_form(void) {
    float x[4] = {3, 4, -1, 0}, w[4] = {1, 2, 0.5f, 1}, out[4];
    ev_rmsnorm(out, x, w, 1, 4, 1e-6f);
    double inv = 1.0 / sqrt((9 + 16 + 1) / 4.0 + 1e-6);
    for (int i = 0; i < 4; i++) CHECK_NEAR(out[i], x[i] * inv * w[i], 1e-6);
    float rows[6] = {1, 1, 1, 2, 2, 2}, w3[3] = {1, 1, 1};
    ev_rmsnorm(rows, rows, w3, 2, 3, 0.0f);                   /* in place, two rows */
    for (int i = 0; i < 6; i++) CHECK_NEAR(rows[i], 1.0, 1e-6);
    float z[3] = {0, 0, 0};
    ev_rmsnorm(z, z, w3, 1, 3, 1e-6f);                        /* eps keeps zeros finite */
    CHECK(z[0] == 0.0f && z[2] == 0.0f);
}

static void test_layernorm_closed_form(void) {
    float x[4] = {1, 2, 3, 4}, w[4] = {1, 1, 2, 1}, b[4] = {0, 0, 0, 10}, out[4];
    ev_layernorm(out, x, w, b, 1, 4, 1e-5f);
    double inv = 1.0 / sqrt(1.25 + 1e-5);                      /* mean 2.5, biased var 1.25 */
    CHECK_NEAR(out[0], -1.5 * inv, 1e-6);
    CHECK_NEAR(out[2], 2 * 0.5 * inv, 1e-6);
    CHECK_NEAR(out[3], 1.5 * inv + 10, 1e-5);
    float big[3] = {1e4f + 1, 1e4f + 2, 1e4f + 3}, w3[3] = {1, 1, 1}, b3[3] = {0, 0, 0};
    ev_layernorm(big, big, w3, b3, 1, 3, 0.0f);               /* large mean, in place */
    CHECK_NEAR(big[0], -sqrt(1.5), 1e-4);
    CHECK_NEAR(big[2], sqrt(1.5), 1e-4);
}

static void test_softmax_closed_form(void) {
    float x[3] = {1000, 1001, 1002};                          /* no overflow: max-subtracted */
    ev_softmax(x, 3);
    double e = exp(1.0), s = 1 + e + e * e;
    CHECK_NEAR(x[0], 1 / s, 1e-7);
    CHECK_NEAR(x[2], e * e / s, 1e-7);
    float y[5] = {-INFINITY, 0, 0, 0, 0};                     /* masked entry gets 0 */
    ev_softmax(y, 5);
    CHECK(y[0] == 0.0f);
    CHECK_NEAR(y[1], 0.25, 1e-7);
}

/* rows of 1..40 (the 8-lane body of the double sums and their tail) against plain double
 * loops, values offset by 100 so the mean matters */
static void test_norms_against_double_loops(void) {
    float x[40], w[40], b[40], out[40];
    for (int64_t n = 1; n <= 40; n++) {
        for (int64_t i = 0; i < n; i++) {
            x[i] = 100.0f + (float)((i * 37) % 23) * 0.25f - (float)(i % 3);
            w[i] = 0.5f + (float)(i % 5) * 0.125f;
            b[i] = (float)(i % 4) - 1.5f;
        }
        double sum = 0.0, ss = 0.0, var = 0.0;
        for (int64_t i = 0; i < n; i++) sum += x[i], ss += (double)x[i] * x[i];
        const double mean = sum / (double)n;
        for (int64_t i = 0; i < n; i++) var += (x[i] - mean) * (x[i] - mean);
        const double inv_ln = 1.0 / sqrt(var / (double)n + 1e-5), inv_rms = 1.0 / sqrt(ss / (double)n + 1e-5);
        ev_layernorm(out, x, w, b, 1, n, 1e-5f);
        for (int64_t i = 0; i < n; i++)
            CHECK_MSG(fabs(out[i] - ((x[i] - mean) * inv_ln * w[i] + b[i])) < 2e-4,
                      "layernorm n=%lld i=%lld", (long long)n, (long long)i);
        ev_rmsnorm(out, x, w, 1, n, 1e-5f);
        for (int64_t i = 0; i < n; i++)
            CHECK_MSG(fabs(out[i] - x[i] * inv_rms * w[i]) < 1e-5, "rmsnorm n=%lld i=%lld",
                      (long long)n, (long long)i);
    }
}

/* the max at every position of rows of 1..70 (vector body and tail), all values negative */
static void test_row_max_every_position(void) {
    float x[70];
    for (int64_t n = 1; n <= 70; n++) {
        for (int64_t at = 0; at < n; at++) {
            for (int64_t i = 0; i < n; i++) x[i] = -100.0f - (float)((i * 37) % 11);
            x[at] = -1.5f;
            CHECK_MSG(ev_row_max(x, n) == -1.5f, "ev_row_max n=%lld max at %lld",
                      (long long)n, (long long)at);
        }
    }
}

static void test_activations_closed_form(void) {
    const float pts[] = {-10, -3, -1, -0.5f, 0, 0.1f, 0.5f, 1, 2, 3, 10};
    const int n = (int)(sizeof pts / sizeof pts[0]);
    float a[11], b[11], g[11], up[11];
    memcpy(a, pts, sizeof pts);
    memcpy(b, pts, sizeof pts);
    memcpy(g, pts, sizeof pts);
    for (int i = 0; i < n; i++) up[i] = 0.5f + i;
    ev_gelu_tanh(a, n);
    ev_gelu_erf(b, n);
    ev_silu_mul(g, up, n);
    for (int i = 0; i < n; i++) {
        double v = pts[i];
        double gt = 0.5 * v * (1 + tanh(sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
        double ge = 0.5 * v * (1 + erf(v / sqrt(2.0)));
        double sm = v / (1 + exp(-v)) * up[i];
        CHECK_NEAR(a[i], gt, 2e-6 * (1 + fabs(gt)));
        CHECK_NEAR(b[i], ge, 2e-6 * (1 + fabs(ge)));
        CHECK_NEAR(g[i], sm, 2e-6 * (1 + fabs(sm)));
    }
    CHECK_NEAR(a[8] - b[8], 0.5 * 2 * (tanh(sqrt(2 / M_PI) * (2 + 0.044715 * 8)) - erf(sqrt(2.0))), 1e-6);
    float y[5] = {1, 2, 3, 4, 5}, x[5] = {5, 4, 3, 2, 1};
    ev_add(y, x, 5);
    for (int i = 0; i < 5; i++) CHECK(y[i] == 6.0f);
}

int main(void) {
    test_simd_sets_against_scalar();
    test_matmul_against_double_reference();
    test_amd_float_decode_rows_everywhere();
    test_q4_decode_extremes();
    test_avx2_q16x_ragged();
    test_neon_int_ragged();
    test_matmul_sets_agree_and_null_pool();
    test_rmsnorm_closed_form();
    test_layernorm_closed_form();
    test_softmax_closed_form();
    test_norms_against_double_loops();
    test_row_max_every_position();
    test_activations_closed_form();
    return tu_report("test_kernels");
}
