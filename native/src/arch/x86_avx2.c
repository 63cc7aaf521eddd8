/*
 * x86_avx2.c - the AVX2/FMA/F16C kernel set: single-row dot products, attention helpers and
 * the activation quantiser (the tiled matrix products are in x86_avx2_gemm.c, the K-quant
 * kernels in x86_avx2_kquants.c).
 *
 * Compiles to nothing off x86-64. Each function carries its own target attribute, so a
 * baseline build still contains them; ev_kernels_x86_avx2() checks the CPU at run time.
 * Reference: kernels_scalar.c (float sums here are reordered: 8 lanes, several accumulators).
 */
#if defined(__x86_64__)

#include "x86_avx2.h"

#include <cpuid.h>
#include <pthread.h>

/* ---- float weights against float32 activations ----------------------------------------- */

#define FLOAT_VEC_DOT(NAME, WTYPE, LOAD8, TO_F32)                                        \
    EV_AVX2 static void NAME(int64_t n, float *out, const void *w_row, const void *x_row) { \
        const WTYPE *w = w_row;                                                            \
        const float *x = x_row;                                                            \
        __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;                        \
        int64_t i = 0;                                                                     \
        for (; i + 32 <= n; i += 32) {                                                     \
            s0 = _mm256_fmadd_ps(LOAD8(w + i), _mm256_loadu_ps(x + i), s0);                \
            s1 = _mm256_fmadd_ps(LOAD8(w + i + 8), _mm256_loadu_ps(x + i + 8), s1);        \
            s2 = _mm256_fmadd_ps(LOAD8(w + i + 16), _mm256_loadu_ps(x + i + 16), s2);      \
            s3 = _mm256_fmadd_ps(LOAD8(w + i + 24), _mm256_loadu_ps(x + i + 24), s3);      \
        }                                                                                  \
        for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(LOAD8(w + i), _mm256_loadu_ps(x + i), s0); \
        float sum = avx2_hsum(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3))); \
        for (; i < n; i++) sum += TO_F32(w[i]) * x[i];                                     \
        *out = sum;                                                                        \
    }

#define LOAD8_F32(p) _mm256_loadu_ps(p)
#define F32_ID(v) (v)
FLOAT_VEC_DOT(vec_dot_f32, float, LOAD8_F32, F32_ID)
FLOAT_VEC_DOT(vec_dot_f16, ev_fp16, avx2_load8_f16, ev_fp16_to_f32)
FLOAT_VEC_DOT(vec_dot_bf16, ev_bf16, avx2_load8_bf16, ev_bf16_to_f32)

/* ---- quantised weights against Q8_0 activations ---------------------------------------- */

EV_AVX2 static void vec_dot_q8_0(int64_t n, float *out, const void *w_row, const void *x_row) {
    const ev_block_q8_0 *w = w_row, *x = x_row;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / EV_QK; b++) {
        __m256i wv = _mm256_loadu_si256((const __m256i *)w[b].qs);
        __m256i xv = _mm256_loadu_si256((const __m256i *)x[b].qs);
        __m256i p = avx2_dot32(_mm256_sign_epi8(wv, wv), wv, xv);
        __m256 d = _mm256_set1_ps(avx2_fp16(w[b].d) * avx2_fp16(x[b].d));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), d, acc);
    }
    *out = avx2_hsum(acc);
}

EV_AVX2 static void vec_dot_q4_0(int64_t n, float *out, const void *w_row, const void *x_row) {
    const ev_block_q4_0 *w = w_row;
    const ev_block_q8_0 *x = x_row;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / EV_QK; b++) {
        __m256i wv = avx2_unpack_q4_0(w[b].qs);
        __m256i xv = _mm256_loadu_si256((const __m256i *)x[b].qs);
        __m256i p = avx2_dot32(_mm256_sign_epi8(wv, wv), wv, xv);
        __m256 d = _mm256_set1_ps(avx2_fp16(w[b].d) * avx2_fp16(x[b].d));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), d, acc);
    }
    *out = avx2_hsum(acc);
}

/* ---- attention helpers ----------------------------------------------------------------- */

EV_AVX2 static float dot_f32(int64_t n, const float *a, const float *b) {
    float out;
    vec_dot_f32(n, &out, a, b);
    return out;
}

EV_AVX2 static float dot_f16_f32(int64_t n, const ev_fp16 *a, const float *b) {
    float out;
    vec_dot_f16(n, &out, a, b);
    return out;
}

EV_AVX2 static void axpy_f32(int64_t n, float a, const float *x, float *y) {
    __m256 av = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += a * x[i];
}

EV_AVX2 static void axpy_f16_f32(int64_t n, float a, const ev_fp16 *x, float *y) {
    __m256 av = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, avx2_load8_f16(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += a * ev_fp16_to_f32(x[i]);
}

/* ---- activation quantiser -------------------------------------------------------------- */

/* roundf (halves away from zero) of integral-range floats, exactly: trunc, then step one away
 * from zero when the dropped fraction is at least one half. */
EV_AVX2_INLINE __m256 round_half_away(__m256 v) {
    const __m256 sign_mask = _mm256_set1_ps(-0.0f);
    __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    __m256 frac = _mm256_andnot_ps(sign_mask, _mm256_sub_ps(v, t));
    __m256 up = _mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ);
    __m256 one = _mm256_or_ps(_mm256_set1_ps(1.0f), _mm256_and_ps(v, sign_mask));
    return _mm256_add_ps(t, _mm256_and_ps(up, one));
}

/* Bit-identical to ev_quantize_row_q8_0: same amax, d = amax/127, id = 1/d, roundf(x*id). */
EV_AVX2 static void quantize_q8_0(const float *x, ev_block_q8_0 *y, int64_t n) {
    const __m256 sign_mask = _mm256_set1_ps(-0.0f);
    for (int64_t i = 0; i < n / EV_QK; i++) {
        const float *xb = x + i * EV_QK;
        __m256 v0 = _mm256_loadu_ps(xb), v1 = _mm256_loadu_ps(xb + 8);
        __m256 v2 = _mm256_loadu_ps(xb + 16), v3 = _mm256_loadu_ps(xb + 24);
        __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign_mask, v0),
                                               _mm256_andnot_ps(sign_mask, v1)),
                                 _mm256_max_ps(_mm256_andnot_ps(sign_mask, v2),
                                               _mm256_andnot_ps(sign_mask, v3)));
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        const float d = _mm_cvtss_f32(m4) / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = (ev_fp16)_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
        const __m256 idv = _mm256_set1_ps(id);
        __m256i i0 = _mm256_cvtps_epi32(round_half_away(_mm256_mul_ps(v0, idv)));
        __m256i i1 = _mm256_cvtps_epi32(round_half_away(_mm256_mul_ps(v1, idv)));
        __m256i i2 = _mm256_cvtps_epi32(round_half_away(_mm256_mul_ps(v2, idv)));
        __m256i i3 = _mm256_cvtps_epi32(round_half_away(_mm256_mul_ps(v3, idv)));
        i0 = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
        i0 = _mm256_permutevar8x32_epi32(i0, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((__m256i *)y[i].qs, i0);
    }
}

/* ---- the set --------------------------------------------------------------------------- */

/* what this set implements; the rest is the scalar set's (ev_kernels_derive) */
static const ev_kernels AVX2_OWN = {
    .name = "avx2",
    .vec_dot = {
        [EV_TYPE_F32] = vec_dot_f32,
        [EV_TYPE_F16] = vec_dot_f16,
        [EV_TYPE_BF16] = vec_dot_bf16,
        [EV_TYPE_Q8_0] = vec_dot_q8_0,
        [EV_TYPE_Q4_0] = vec_dot_q4_0,
        [EV_TYPE_Q4_K] = ev_avx2_vec_dot_q4_K_q8_K,
        [EV_TYPE_Q6_K] = ev_avx2_vec_dot_q6_K_q8_K,
        [EV_TYPE_Q2_K] = ev_avx2_vec_dot_q2_K_q8_K,
        [EV_TYPE_Q3_K] = ev_avx2_vec_dot_q3_K_q8_K,
        [EV_TYPE_Q5_K] = ev_avx2_vec_dot_q5_K_q8_K,
        [EV_TYPE_IQ4_XS] = ev_avx2_vec_dot_iq4_xs_q8_K,
    },
    .dot_f32 = dot_f32,
    .axpy_f32 = axpy_f32,
    .dot_f16_f32 = dot_f16_f32,
    .axpy_f16_f32 = axpy_f16_f32,
    .sgemm_f32 = ev_avx2_sgemm_f32,
    .exp_sum_f32 = ev_avx2_exp_sum_f32,
    .gelu_tanh_f32 = ev_avx2_gelu_tanh_f32,
    .quantize_q8_0 = quantize_q8_0,
    .quantize_q8_K = ev_avx2_quantize_q8_K,
    .gemm = {
        [EV_TYPE_F32] = ev_avx2_gemm_f32,
        [EV_TYPE_F16] = ev_avx2_gemm_f16,
        [EV_TYPE_BF16] = ev_avx2_gemm_bf16,
        [EV_TYPE_Q8_0] = ev_avx2_gemm_q8_0,
        [EV_TYPE_Q4_0] = ev_avx2_gemm_q4_0,
    },
    .gemm_dq = {
        [EV_TYPE_F32] = ev_avx2_gemm_dq_f32,
        [EV_TYPE_F16] = ev_avx2_gemm_dq_f16,
        [EV_TYPE_BF16] = ev_avx2_gemm_dq_bf16,
        [EV_TYPE_Q8_0] = ev_avx2_gemm_dq_q8_0,
        [EV_TYPE_Q4_0] = ev_avx2_gemm_dq_q4_0,
        [EV_TYPE_Q4_K] = ev_avx2_gemm_dq_q4_K,
        [EV_TYPE_Q6_K] = ev_avx2_gemm_dq_q6_K,
        [EV_TYPE_Q2_K] = ev_avx2_gemm_dq_q2_K,
        [EV_TYPE_Q3_K] = ev_avx2_gemm_dq_q3_K,
        [EV_TYPE_Q5_K] = ev_avx2_gemm_dq_q5_K,
        [EV_TYPE_IQ4_XS] = ev_avx2_gemm_dq_iq4_xs,
    },
    /* int16 activations x int16-widened weights (vpmaddwd), x86_avx2_qgemm.c: the exact
     * precision's many-token Q8_0/Q4_0 products from EV_MATMUL_INT_MIN_TOK tokens on */
    .gemm_q16x = {
        [EV_TYPE_Q8_0] = ev_avx2_gemm_q16x_q8_0,
        [EV_TYPE_Q4_0] = ev_avx2_gemm_q16x_q4_0,
    },
    .quantize_i16 = ev_avx2_quantize_i16,
};

/* F16C from CPUID leaf 1 (ECX bit 29): clang before 15 has no __builtin_cpu_supports("f16c"),
 * and the libFuzzer harness of the C API (tests/fuzz/fuzz_api.c) is built with clang. */
static int has_f16c(void) {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}

ev_x86_vendor ev_x86_cpu_vendor(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return EV_X86_OTHER;
    if (b == 0x756e6547u && d == 0x49656e69u && c == 0x6c65746eu) return EV_X86_INTEL;  /* GenuineIntel */
    if (b == 0x68747541u && d == 0x69746e65u && c == 0x444d4163u) return EV_X86_AMD;    /* AuthenticAMD */
    return EV_X86_OTHER;
}

int ev_x86_decode_prefetch;   /* set once by build(), before any set is handed out */

static ev_kernels AVX2;
static pthread_once_t built = PTHREAD_ONCE_INIT;

/* the set's own kernels, and for the types it has no panel dequantiser of (IQ4_NL) the
 * many-token product dequantising through the type table into its panels */
static void build(void) {
    ev_x86_decode_prefetch = ev_x86_cpu_vendor() == EV_X86_INTEL;
    ev_kernels_derive(&AVX2, ev_kernels_scalar(), &AVX2_OWN);
    for (int i = 0; i < ev_type_count(); i++) {
        const int32_t t = ev_type_at(i)->type;
        if (!AVX2_OWN.gemm_dq[t]) AVX2.gemm_dq[t] = ev_avx2_gemm_dq_by_table;
    }
}

const ev_kernels *ev_kernels_x86_avx2(void) {
    __builtin_cpu_init();
    if (!(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c()))
        return NULL;
    pthread_once(&built, build);
    return &AVX2;
}

#endif
