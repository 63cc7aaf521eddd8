/* test_kquants_simd.c - every SIMD kernel set this CPU runs against the scalar set for the
 * K-quants and IQ4_XS: the Q8_K activation quantiser bit for bit (random, tie, subnormal, NaN
 * and infinite inputs), the vec_dot kernels (and the sets' decode row kernels, gemm, where they
 * have them) on random and extreme blocks of 1..8 super-blocks,
 * the panel dequantisers of gemm_dq bit for bit against to_float, ev_matmul at 1, 3, 15
 * (Q8_K activations) and 20 tokens (gemm_dq on float activations; sets with gemm_q16x for
 * the type: int16 activations from EV_MATMUL_INT_MIN_TOK_K tokens on; with gemm_q8x: Q8_0
 * ones), and gemm_q16x / gemm_q8x (the fast sets) of Q4_K/Q5_K/IQ4_XS/Q6_K on adversarial blocks against a double-precision reference.
 *
 * The SIMD dots' tolerance: (terms + 32) * 2^-23 * (sum|d-part products| + |dmin-part
 * products|) (terms = 16-element groups for a dot, n_in for ev_matmul): the integer block
 * sums are exact in both, only the float sums of per-block results are ordered differently
 * (ggml's SIMD kernels do the same), and the split magnitude keeps Q4_K's mins from
 * cancelling the bound away. */
#include <stdint.h>

#include "kernels.h"
#include "kquant_fixture_table.h"
#include "kernel_sets.h"
#include "test_util.h"
#include "types.h"
#if defined(__x86_64__)
#include "arch/x86_avx2.h"
#elif defined(__aarch64__)
#include "arch/arm_neon_kquants.h"
#endif

static unsigned long long seed = 31415;


/* every SIMD set this CPU runs (the scalar set left out) */
static int simd_sets(const ev_kernels *out[MAX_SETS]) {
    return tu_add_simd_sets(out, 0);
}


/* n values that stress the Q8_K quantiser, pattern p: random at a random scale; exact ties
 * of the rounding (max -127: x.5 values); the largest magnitude twice with both signs (the
 * first wins); subnormals; all zero; NaNs; an infinity */
static void q8_K_input(float *x, int n, int p) {
    const float scale = ldexpf(1.0f, (int)(tu_rand_u64(&seed) % 60) - 30);
    for (int i = 0; i < n; i++) x[i] = tu_randf(&seed) * scale;
    switch (p % 7) {
    case 1:
        for (int i = 0; i < n; i++) x[i] = (float)((int)(tu_rand_u64(&seed) % 253) - 126) + 0.5f;
        for (int i = 0; i < n; i += 256) x[i + 7] = -127.0f;
        break;
    case 2:
        for (int i = 0; i < n; i += 256) {
            x[i + 40] = 3.0f * scale;
            x[i + 200] = -3.0f * scale;
            x[i + 3] = -3.0f * scale * (p % 2 ? 1.0f : -1.0f);
        }
        break;
    case 3:
        for (int i = 0; i < n; i++) x[i] = tu_randf(&seed) * 1e-40f;
        break;
    case 4: memset(x, 0, sizeof(float) * (size_t)n); break;
    case 5:   /* a NaN in the vector lane (4 or 8 wide) of each block's largest value, and
                 a block of zeros and a NaN */
        for (int i = 0; i < n; i += 256) {
            x[i + 5] = x[i + 21] = NAN;   /* before and after it */
            x[i + 13] = (p % 2 ? 4.0f : -4.0f) * scale;
        }
        memset(x + 256, 0, 256 * sizeof(float));
        x[256 + 77] = NAN;
        break;
    case 6: x[n / 3] = (p % 2) ? INFINITY : -INFINITY; break;
    default: break;
    }
}

static void test_simd_q8_K_bit_identical(void) {
    const ev_kernels *sets[MAX_SETS];
    const int n_sets = simd_sets(sets);
    enum { N = 4 * 256 };
    float x[N];
    ev_block_q8_K want[N / 256], got[N / 256];
    for (int si = 0; si < n_sets; si++) {
        int bad = 0, runs = 0;
        for (int p = 0; p < 70; p++, runs++) {
            q8_K_input(x, N, p);
            memset(want, 0x55, sizeof want);
            memset(got, 0xaa, sizeof got);
            ev_quantize_row_q8_K(x, want, N);
            sets[si]->quantize_q8_K(x, got, N);
            if (memcmp(want, got, sizeof want) != 0 && bad++ < 2)
                fprintf(stderr, "  %s: pattern %d: Q8_K blocks differ (d %.9g vs %.9g)\n",
                        sets[si]->name, p % 7, want[0].d, got[0].d);
        }
        CHECK_MSG(bad == 0, "%s quantize_q8_K: %d of %d rows differ from the scalar one",
                  sets[si]->name, bad, runs);
    }
}

/* Q8_K activations straight from random codes (|q| <= 127, as the quantiser makes them),
 * or with extreme = +1 / -1 every code +127 / -127 */
static void q8_K_random(ev_block_q8_K *x, int nb, int extreme) {
    for (int b = 0; b < nb; b++) {
        x[b].d = ldexpf(tu_randf(&seed) + 1.5f, -(int)(tu_rand_u64(&seed) % 8));
        for (int i = 0; i < 256; i++)
            x[b].qs[i] = (int8_t)(extreme ? 127 * extreme : (int)(tu_rand_u64(&seed) % 255) - 127);
        for (int j = 0; j < 16; j++) {
            int s = 0;
            for (int i = 0; i < 16; i++) s += x[b].qs[16 * j + i];
            x[b].bsums[j] = (int16_t)s;
        }
    }
}

/* nb blocks of type t: every byte random (kind 0) or 0xff / 0x00 / 0x0f (kinds 1..3), the
 * float16 scales then set to finite values of either sign */
static void blocks_random(const ev_type_traits *t, uint8_t *w, int nb, int kind) {
    const uint8_t fill[] = {0, 0xff, 0x00, 0x0f};
    for (int64_t i = 0; i < (int64_t)nb * t->type_size; i++)
        w[i] = kind ? fill[kind] : (uint8_t)tu_rand_u64(&seed);
    for (int b = 0; b < nb; b++)
        for (int s = 0; s < 2 && t->scale_at[s] >= 0; s++) {
            const float v = ldexpf(tu_randf(&seed), -(int)(tu_rand_u64(&seed) % 12));
            const ev_fp16 h = ev_f32_to_fp16(kind ? fabsf(v) + 0.01f : v);
            memcpy(w + (size_t)b * t->type_size + t->scale_at[s], &h, 2);
        }
}

/* sum over the n elements of |d-part of w| * |x| + |dmin-part of w| * |x| (w dequantised
 * with dmin, then d, set to 0; types without dmin: |w| * |x|) */
static double dot_magnitude(const ev_type_traits *t, const uint8_t *w, const float *x, int64_t n) {
    const int64_t nb = n / t->block_size;
    uint8_t *part = malloc((size_t)(nb * t->type_size));
    float *wf = malloc(sizeof(float) * (size_t)n);
    double mag = 0.0;
    const ev_fp16 zero = ev_f32_to_fp16(0.0f);
    for (int s = 0; s < (t->scale_at[1] >= 0 ? 2 : 1); s++) {
        memcpy(part, w, (size_t)(nb * t->type_size));
        if (t->scale_at[1] >= 0)   /* keep scale s, zero the other */
            for (int64_t b = 0; b < nb; b++) memcpy(part + b * t->type_size + t->scale_at[1 - s], &zero, 2);
        t->to_float(part, wf, n);
        for (int64_t i = 0; i < n; i++) mag += fabs((double)wf[i] * x[i]);
    }
    free(part);
    free(wf);
    return mag;
}

/* each SIMD set's vec_dot of every Q8_K-dot type against the scalar one, 1..8 super-blocks,
 * random and extreme blocks (the types a set has no kernel of compare trivially) */
static void test_simd_k_dots_match_scalar(void) {
    const ev_kernels *sets[MAX_SETS];
    const int n_sets = simd_sets(sets);
    const ev_kernels *s = ev_kernels_scalar();
    uint8_t w[8 * 256];
    ev_block_q8_K x[8];
    float xf[8 * 256];
    for (int si = 0; si < n_sets; si++) {
        for (int ti = 0; ti < ev_type_count(); ti++) {
            const ev_type_traits *t = ev_type_at(ti);
            if (t->vec_dot_type != EV_TYPE_Q8_K) continue;
            int bad = 0, runs = 0;
            for (int nb = 1; nb <= 8; nb++) {
                const int64_t n = 256 * (int64_t)nb;
                for (int kind = 0; kind < 10; kind++, runs++) {
                    const int wkind = kind < 4 ? 0 : (kind - 4) % 3 + 1;
                    blocks_random(t, w, nb, wkind);
                    q8_K_random(x, nb, kind < 4 ? 0 : (kind < 7 ? 1 : -1));
                    ev_dequantize_row_q8_K(x, xf, n);
                    float want, got;
                    s->vec_dot[t->type](n, &want, w, x);
                    sets[si]->vec_dot[t->type](n, &got, w, x);
                    const double tol = ((double)n / 16 + 32) * ldexp(1.0, -23) *
                                       dot_magnitude(t, w, xf, n) + 1e-30;
                    if (!(fabs((double)got - want) <= tol) && bad++ < 2)
                        fprintf(stderr, "  %s %s, %d blocks, kind %d: %.9g, scalar %.9g (tol %.3g)\n",
                                sets[si]->name, t->name, nb, kind, got, want, tol);
                    if (sets[si]->gemm[t->type]) {   /* the decode row kernels (one row) */
                        ev_gemm_args a;
                        memset(&a, 0, sizeof a);
                        a.w = w;
                        a.w_stride = ev_row_bytes(t->type, n);
                        a.x = (const uint8_t *)x;
                        a.x_stride = nb * (int64_t)sizeof(ev_block_q8_K);
                        a.y = &got;
                        a.n_out = 1, a.n_in = n, a.n_tok = 1, a.w_type = t->type;
                        sets[si]->gemm[t->type](&a, 0, 1);
                        if (!(fabs((double)got - want) <= tol) && bad++ < 2)
                            fprintf(stderr, "  %s %s gemm, %d blocks, kind %d: %.9g, scalar %.9g (tol %.3g)\n",
                                    sets[si]->name, t->name, nb, kind, got, want, tol);
                    }
                }
            }
            CHECK_MSG(bad == 0, "%s vec_dot %s: %d of %d off the scalar one", sets[si]->name,
                      t->name, bad, runs);
        }
    }
}

/* the SIMD panel dequantisers (gemm_dq's pack_w: x86_avx2_sgemm.c, arm_neon_sgemm.c) bit
 * for bit against the type table's to_float: on the fixture blocks (random and extreme,
 * kquant_fixtures.h) and on rows of 1..8 super-blocks of random bytes */
typedef struct simd_dequantiser {
    int32_t type;
    void (*dq)(const void *src, float *dst, int64_t n);
} simd_dequantiser;

static void test_simd_dequantisers_bit_identical(void) {
#if defined(__x86_64__)
    if (!ev_kernels_x86_avx2()) return;   /* no AVX2 on this CPU */
    const simd_dequantiser dqs[] = {
        {EV_TYPE_Q2_K, ev_avx2_dequantize_q2_K}, {EV_TYPE_Q3_K, ev_avx2_dequantize_q3_K},
        {EV_TYPE_Q4_K, ev_avx2_dequantize_q4_K}, {EV_TYPE_Q5_K, ev_avx2_dequantize_q5_K},
        {EV_TYPE_Q6_K, ev_avx2_dequantize_q6_K}, {EV_TYPE_IQ4_XS, ev_avx2_dequantize_iq4_xs}};
#elif defined(__aarch64__)
    const simd_dequantiser dqs[] = {{EV_TYPE_Q4_K, ev_neon_dequantize_q4_K},
                                    {EV_TYPE_Q6_K, ev_neon_dequantize_q6_K}};
#else
    const simd_dequantiser dqs[] = {{EV_TYPE_Q4_K, NULL}};   /* no SIMD set here */
#endif
    static uint8_t w[8 * 256];
    static float want[8 * 256], got[8 * 256];
    for (size_t di = 0; di < sizeof dqs / sizeof dqs[0]; di++) {
        const ev_type_traits *t = ev_type_get(dqs[di].type);
        if (!dqs[di].dq) continue;
        int bad = 0, runs = 0;
        for (int f = 0; f < N_FIXTURES; f++) {
            if (FIXTURES[f].type != t->type) continue;
            for (int b = 0; b < FIXTURES[f].n_blocks; b++, runs++) {
                const uint8_t *blk = FIXTURES[f].blocks + (size_t)b * t->type_size;
                t->to_float(blk, want, 256);
                dqs[di].dq(blk, got, 256);
                bad += memcmp(want, got, 256 * sizeof(float)) != 0;
            }
        }
        for (int nb = 1; nb <= 8; nb++, runs++) {
            blocks_random(t, w, nb, 0);
            t->to_float(w, want, 256 * nb);
            dqs[di].dq(w, got, 256 * nb);
            bad += memcmp(want, got, 256 * sizeof(float) * (size_t)nb) != 0;
        }
        CHECK_MSG(bad == 0, "SIMD dequantiser of %s: %d of %d rows differ from to_float", t->name,
                  bad, runs);
    }
}

/* x as gemm_q16x sees it: each block of 32 rounded (to nearest even) to int16 steps of
 * amax / 32767 */
static void round_i16(const float *x, float *xr, int64_t n) {
    for (int64_t b = 0; b < n / 32; b++) {
        float amax = 0.0f;
        for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[b * 32 + i]));
        const float d = amax / 32767.0f, id = amax > 0.0f ? 32767.0f / amax : 0.0f;
        for (int i = 0; i < 32; i++) xr[b * 32 + i] = rintf(x[b * 32 + i] * id) * d;
    }
}

/* x as gemm_q8x sees it: Q8_0 blocks of 32 (ggml's rounding, d in fp16) dequantised */
static void round_q8_0(const float *x, float *xr, int64_t n) {
    ev_block_q8_0 *q = malloc(sizeof(ev_block_q8_0) * (size_t)(n / 32));
    ev_quantize_row_q8_0(x, q, n);
    ev_row_to_f32(EV_TYPE_Q8_0, q, xr, n);
    free(q);
}

/* ev_matmul of each SIMD set against the scalar set's for the Q8_K-dot types: 1, 3, 15
 * tokens (Q8_K activations, vec_dot) and 20 (float activations, gemm_dq with its panels),
 * 37 rows (a partial 16-row panel), 768 columns (3 super-blocks, 3 K chunks), 2 threads.
 * Where a set has gemm_q8x (or else gemm_q16x) for the type, from EV_MATMUL_INT_MIN_TOK_K
 * tokens on the reference is the scalar set's gemm_dq on the Q8_0- (int16-) rounded
 * activations. */
static void test_simd_matmul_matches_scalar(void) {
    const ev_kernels *sets[MAX_SETS];
    const int n_sets = simd_sets(sets);
    enum { N_OUT = 37, N_IN = 768, MAX_TOK = 20 };
    const int64_t toks[] = {1, 3, 15, 20};
    ev_pool *pool = ev_pool_new(2);
    float *wf = malloc(sizeof(float) * N_OUT * N_IN), *x = malloc(sizeof(float) * MAX_TOK * N_IN);
    float *y = malloc(sizeof(float) * N_OUT * MAX_TOK), *y_ref = malloc(sizeof(float) * N_OUT * MAX_TOK);
    float *bias = malloc(sizeof(float) * N_OUT), *xr = malloc(sizeof(float) * MAX_TOK * N_IN);
    float *y_ref16 = malloc(sizeof(float) * N_OUT * MAX_TOK), *y_ref8 = malloc(sizeof(float) * N_OUT * MAX_TOK);
    float *xr8 = malloc(sizeof(float) * MAX_TOK * N_IN);
    for (int i = 0; i < N_OUT; i++) bias[i] = tu_randf(&seed);
    for (int i = 0; i < MAX_TOK * N_IN; i++) x[i] = tu_gaussian(&seed);
    round_i16(x, xr, MAX_TOK * N_IN);
    round_q8_0(x, xr8, MAX_TOK * N_IN);
    for (int ti = 0; ti < ev_type_count(); ti++) {
        const ev_type_traits *t = ev_type_at(ti);
        if (t->vec_dot_type != EV_TYPE_Q8_K) continue;
        const int64_t rb = ev_row_bytes(t->type, N_IN);
        uint8_t *w = malloc((size_t)(rb * N_OUT));
        for (int r = 0; r < N_OUT; r++) {
            for (int i = 0; i < N_IN; i++) wf[r * N_IN + i] = tu_gaussian(&seed) + (r % 3 == 0 ? 0.5f : 0.0f);
            t->from_float(wf + r * N_IN, w + r * rb, N_IN);
        }
        double mag[MAX_TOK][N_OUT];   /* per output, with Q8_K's rounding of x (< 1 %) */
        for (int tk = 0; tk < MAX_TOK; tk++)
            for (int r = 0; r < N_OUT; r++)
                mag[tk][r] = 1.01 * dot_magnitude(t, w + r * rb, x + tk * N_IN, N_IN) + fabsf(bias[r]);
        {   /* every token of the rounded x through the scalar gemm_dq (MAX_TOK >= 16) */
            const size_t sb = ev_matmul_scratch_bytes(t->type, N_IN, MAX_TOK, 2);
            void *scratch = aligned_alloc(64, (sb + 63) / 64 * 64);
            CHECK(ev_matmul(pool, ev_kernels_scalar(), t->type, w, bias, N_OUT, N_IN, xr, MAX_TOK,
                            y_ref16, scratch) == 0);
            CHECK(ev_matmul(pool, ev_kernels_scalar(), t->type, w, bias, N_OUT, N_IN, xr8, MAX_TOK,
                            y_ref8, scratch) == 0);
            free(scratch);
        }
        for (int si = 0; si < n_sets; si++) {
            for (size_t ki = 0; ki < sizeof toks / sizeof toks[0]; ki++) {
                const int64_t nt = toks[ki];
                const size_t sb = ev_matmul_scratch_bytes(t->type, N_IN, nt, 2);
                void *scratch = aligned_alloc(64, (sb + 63) / 64 * 64);
                int st = ev_matmul(pool, ev_kernels_scalar(), t->type, w, bias, N_OUT, N_IN, x,
                                   nt, y_ref, scratch);
                st |= ev_matmul(pool, sets[si], t->type, w, bias, N_OUT, N_IN, x, nt, y, scratch);
                const int q8x = sets[si]->gemm_q8x[t->type] && nt >= EV_MATMUL_INT_MIN_TOK_K;
                const int q16x = sets[si]->gemm_q16x[t->type] && nt >= EV_MATMUL_INT_MIN_TOK_K;
                const float *want = q8x ? y_ref8 : q16x ? y_ref16 : y_ref;
                int bad = 0;
                for (int64_t tk = 0; tk < nt; tk++)
                    for (int r = 0; r < N_OUT; r++) {
                        const double tol = (N_IN + 32) * ldexp(1.0, -23) * mag[tk][r];
                        bad += !(fabs((double)y[tk * N_OUT + r] - want[tk * N_OUT + r]) <= tol);
                    }
                CHECK_MSG(st == 0 && bad == 0, "%s ev_matmul %s, %lld tokens: status %d, %d outputs off",
                          sets[si]->name, t->name, (long long)nt, st, bad);
                free(scratch);
            }
        }
        free(w);
    }
    free(wf);
    free(x);
    free(y);
    free(y_ref);
    free(y_ref16);
    free(y_ref8);
    free(xr8);
    free(xr);
    free(bias);
    ev_pool_free(pool);
}

/* Q6_K / IQ4_XS super-block b with extreme sub-block scales: Q6_K's 16 int8 scales
 * alternately -128 and 127 (the two halves of each block of 32 of opposite sign), IQ4_XS's
 * 6-bit scales 0 (ls - 32 = -32); with zero_q every quant byte 0 too (Q6_K q - 32 = -32,
 * IQ4_XS kvalues[0] = -127: the largest int32 sums of these scales). */
static void extreme_scales(int32_t type, uint8_t *blk, int zero_q) {
    if (type == EV_TYPE_Q6_K) {
        ev_block_q6_K *b = (ev_block_q6_K *)(void *)blk;
        for (int i = 0; i < 16; i++) b->scales[i] = (int8_t)(i % 2 ? 127 : -128);
        if (zero_q) {
            memset(b->ql, 0, sizeof b->ql);
            memset(b->qh, 0, sizeof b->qh);
        }
    } else {
        ev_block_iq4_xs *b = (ev_block_iq4_xs *)(void *)blk;
        b->scales_h = 0;
        memset(b->scales_l, 0, sizeof b->scales_l);
        if (zero_q) memset(b->qs, 0, sizeof b->qs);
    }
}

/* gemm_q16x of Q4_K/Q5_K/IQ4_XS/Q6_K in every set that has it, and gemm_q8x where a set
 * has that (ev_matmul prefers it), against a double dot of the
 * dequantised weights and the int16- (gemm_q8x: Q8_0-) rounded activations, plus the bias: 53 rows (a full and
 * a partial 48-row panel), 1280 columns (40 blocks: K chunks of 16, 16, 8), 8, 16 and 21
 * tokens (the few-token start of the integer products, EV_MATMUL_FLOAT_MIN_TOK, a 1-token
 * tail tile), 1 and 2 threads. Super-blocks: random bytes, d = 0, every byte 0xff (Q4_K/
 * Q5_K scales and mins 63, q = 15 or 31: the largest int32 sums; Q6_K q = 63 at scale -1,
 * IQ4_XS kvalues[15] at ls = 63), 0x00 and 0x0f; Q4_K/Q5_K dmin = 0 and both 0, Q6_K/IQ4_XS
 * extreme scales (extreme_scales) on random and on zero quants. Activation blocks random,
 * and all +-amax (every int16 +-32767, int8 +-127: |sum x| at its largest). Tolerance: (scale groups +
 * 32) x 2^-23 of the split magnitude (|d-part x| + |dmin-part x|): the int32 sums of a group
 * (32 columns, Q6_K 16) are exact, only per-group float products and sums round (~1e-5 of
 * it here). */
static void test_k_q16x_q8x_adversarial_blocks(void) {
    const ev_kernels *sets[MAX_SETS];
    const int n_sets = simd_sets(sets);
    enum { N_OUT = 53, N_IN = 1280, MAX_TOK = 21, NSB = N_IN / 256 };
    const int64_t toks[] = {EV_MATMUL_INT_MIN_TOK_K, EV_MATMUL_FLOAT_MIN_TOK, MAX_TOK};
    const int32_t types[] = {EV_TYPE_Q4_K, EV_TYPE_Q5_K, EV_TYPE_IQ4_XS, EV_TYPE_Q6_K};
    int tested[4] = {0}, tested8[4] = {0};
    ev_pool *pools[2] = {NULL, ev_pool_new(2)};
    float *x = malloc(sizeof(float) * MAX_TOK * N_IN), *xr = malloc(sizeof(float) * MAX_TOK * N_IN);
    float *y = malloc(sizeof(float) * N_OUT * MAX_TOK), *bias = malloc(sizeof(float) * N_OUT);
    float *wf = malloc(sizeof(float) * N_IN), *xr8 = malloc(sizeof(float) * MAX_TOK * N_IN);
    for (int i = 0; i < N_OUT; i++) bias[i] = tu_randf(&seed);
    for (int tk = 0; tk < MAX_TOK; tk++)
        for (int b = 0; b < N_IN / 32; b++) {
            const int kind = (tk + b) % 5;   /* 0, 1: +-amax everywhere; else random */
            for (int i = 0; i < 32; i++)
                x[(tk * N_IN) + 32 * b + i] = kind == 0 ? 2.5f : kind == 1 ? -0.75f
                                                                  : tu_gaussian(&seed);
        }
    round_i16(x, xr, MAX_TOK * N_IN);
    round_q8_0(x, xr8, MAX_TOK * N_IN);
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const ev_type_traits *t = ev_type_get(types[ti]);
        const int64_t rb = ev_row_bytes(t->type, N_IN);
        uint8_t *w = malloc((size_t)(rb * N_OUT));
        for (int r = 0; r < N_OUT; r++)
            for (int s = 0; s < NSB; s++) {
                uint8_t *blk = w + r * rb + (int64_t)s * t->type_size;
                const int kind = (r + 3 * s) % 7;
                blocks_random(t, blk, 1, kind < 4 ? kind : 0);   /* bytes, then d, dmin */
                const ev_fp16 zero = ev_f32_to_fp16(0.0f);
                if (t->scale_at[1] < 0) {   /* no dmin: d = 0, or extreme sub-block scales */
                    if (kind == 4) memcpy(blk + t->scale_at[0], &zero, 2);
                    if (kind >= 5) extreme_scales(t->type, blk, kind == 6);
                    continue;
                }
                if (kind == 4 || kind == 6) memcpy(blk + t->scale_at[0], &zero, 2);  /* d */
                if (kind == 5 || kind == 6) memcpy(blk + t->scale_at[1], &zero, 2);  /* dmin */
            }
        const int groups = N_IN / (t->type == EV_TYPE_Q6_K ? 16 : 32);   /* scale groups */
        /* [0]: on the int16-rounded activations (gemm_q16x), [1]: Q8_0-rounded (gemm_q8x) */
        static double want[2][MAX_TOK][N_OUT], tol[2][MAX_TOK][N_OUT];
        for (int r = 0; r < N_OUT; r++) {
            ev_row_to_f32(t->type, w + r * rb, wf, N_IN);
            for (int q = 0; q < 2; q++)
                for (int tk = 0; tk < MAX_TOK; tk++) {
                    const float *xa = (q ? xr8 : xr) + tk * N_IN;
                    double v = bias[r];
                    for (int i = 0; i < N_IN; i++) v += (double)wf[i] * xa[i];
                    want[q][tk][r] = v;
                    tol[q][tk][r] = (groups + 32) * ldexp(1.0, -23) *
                                        (dot_magnitude(t, w + r * rb, xa, N_IN) + fabsf(bias[r])) + 1e-30;
                }
        }
        for (int si = 0; si < n_sets; si++) {
            const int q8x = sets[si]->gemm_q8x[t->type] != NULL;
            if (!sets[si]->gemm_q16x[t->type] && !q8x) continue;
            for (int pi = 0; pi < 2; pi++)
                for (size_t ki = 0; ki < sizeof toks / sizeof toks[0]; ki++) {
                    const int64_t nt = toks[ki];
                    const size_t sb = ev_matmul_scratch_bytes(t->type, N_IN, nt, pools[pi] ? 2 : 1);
                    void *scratch = aligned_alloc(64, (sb + 63) / 64 * 64);
                    for (int i = 0; i < N_OUT * nt; i++) y[i] = NAN;
                    const int st = ev_matmul(pools[pi], sets[si], t->type, w, bias, N_OUT, N_IN, x,
                                             nt, y, scratch);
                    int bad = 0;
                    for (int tk = 0; tk < nt; tk++)
                        for (int r = 0; r < N_OUT; r++) {
                            const double got = y[tk * N_OUT + r];
                            if (!(fabs(got - want[q8x][tk][r]) <= tol[q8x][tk][r]) && bad++ < 3)
                                fprintf(stderr, "  %s %s y[%d][%d] = %.9g, want %.9g (tol %.3g)\n",
                                        sets[si]->name, t->name, tk, r, got, want[q8x][tk][r],
                                        tol[q8x][tk][r]);
                        }
                    CHECK_MSG(st == 0 && bad == 0, "%s gemm_%s %s, %lld tokens, %s: status %d, %d off",
                              sets[si]->name, q8x ? "q8x" : "q16x", t->name, (long long)nt,
                              pools[pi] ? "2 threads" : "1 thread", st, bad);
                    ++*(q8x ? &tested8[ti] : &tested[ti]);
                    free(scratch);
                }
        }
        free(w);
    }
#if defined(__x86_64__)
    /* an AVX-512 VNNI host must have run every type's (this machine's issue 26) */
    if (ev_kernels_x86_avx512())
        for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
            CHECK_MSG(tested[ti] > 0, "gemm_q16x %s did not run on an AVX-512 VNNI host",
                      ev_type_get(types[ti])->name);
    /* and the fast set's gemm_q8x of every type */
    if (ev_kernels_x86_avx512_fast())
        for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
            CHECK_MSG(tested8[ti] > 0, "gemm_q8x %s did not run on an AVX-512 VNNI host",
                      ev_type_get(types[ti])->name);
#endif
    free(x); free(xr); free(xr8); free(y); free(bias); free(wf);
    ev_pool_free(pools[1]);
}

int main(void) {
    test_simd_q8_K_bit_identical();
    test_simd_k_dots_match_scalar();
    test_simd_dequantisers_bit_identical();
    test_simd_matmul_matches_scalar();
    test_k_q16x_q8x_adversarial_blocks();
    return tu_report("test_kquants_simd");
}
