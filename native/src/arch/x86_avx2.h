/*
 * x86_avx2.h - helpers shared by the AVX2/FMA/F16C kernels (x86_avx2.c, x86_avx2_gemm.c).
 *
 * Every function is compiled with a target attribute, so these files build with baseline
 * flags too; ev_kernels_x86_avx2() hands them out only when the CPU has the extensions.
 */
#ifndef EDGEVLM_X86_AVX2_H
#define EDGEVLM_X86_AVX2_H
#if defined(__x86_64__)

#include <immintrin.h>

#include "../kernels.h"

#define EV_AVX2 __attribute__((target("avx2,fma,f16c")))
#define EV_AVX2_INLINE static inline __attribute__((always_inline, target("avx2,fma,f16c")))

/* The CPU's vendor (CPUID leaf 0), for the few choices that were measured to differ. */
typedef enum ev_x86_vendor { EV_X86_OTHER = 0, EV_X86_INTEL, EV_X86_AMD } ev_x86_vendor;
ev_x86_vendor ev_x86_cpu_vendor(void);

/* Decode rows stream a thread's weight rows once, front to back. On Intel (the Xeon of
 * bench/README-kernels.md, "Decode rows prefetch ahead on Intel") the hardware prefetcher
 * stays too close to such a stream: the AVX2 Q8_0 row read 14 GB/s of a 31 GB/s ceiling and
 * the loads waited; a software prefetch 1-4 KiB ahead read 18-22 GB/s. On Zen 4 a prefetch
 * ahead of a one-row stream cost 15-25 % (F16 rows), so it is Intel's only: 1 when the AVX2
 * set was built on an Intel CPU. */
extern int ev_x86_decode_prefetch;

/* the cache lines of [p + ahead, p + ahead + bytes): one step of a decode row, `ahead` on */
EV_AVX2_INLINE void decode_prefetch(const void *p, const int64_t bytes, const int64_t ahead) {
#pragma GCC unroll 4
    for (int64_t o = 0; o < bytes; o += 64)
        _mm_prefetch((const char *)p + ahead + o, _MM_HINT_T0);
}

EV_AVX2_INLINE float avx2_hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

EV_AVX2_INLINE float avx2_fp16(ev_fp16 h) {
    return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}

/* 8 consecutive weights of a float-type row as float32. */
EV_AVX2_INLINE __m256 avx2_load8_f16(const ev_fp16 *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

EV_AVX2_INLINE __m256 avx2_load8_bf16(const ev_bf16 *p) {
    __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
}

/* The 32 signed 4-bit weights of a Q4_0 block as int8 in [-8, 7], in element order. */
EV_AVX2_INLINE __m256i avx2_unpack_q4_0(const uint8_t *qs) {
    __m128i t = _mm_loadu_si128((const __m128i *)qs);
    __m256i v = _mm256_set_m128i(_mm_srli_epi16(t, 4), t);
    v = _mm256_and_si256(v, _mm256_set1_epi8(0x0f));
    return _mm256_sub_epi8(v, _mm256_set1_epi8(8));
}

/* sum of w[i]*x[i] over 32 int8 pairs as 8 int32 lanes; wabs = |w| (as u8), x in [-127, 127].
 * maddubs' int16 pair sums stay below 2*128*127 = 32512, so nothing saturates. */
EV_AVX2_INLINE __m256i avx2_dot32(__m256i wabs, __m256i w, __m256i x) {
    __m256i sx = _mm256_sign_epi8(x, w);
    return _mm256_madd_epi16(_mm256_maddubs_epi16(wabs, sx), _mm256_set1_epi16(1));
}

/* the tiled matrix products of x86_avx2_gemm.c */
void ev_avx2_gemm_f32(const ev_gemm_args *a, int64_t r0, int64_t r1);
void ev_avx2_gemm_f16(const ev_gemm_args *a, int64_t r0, int64_t r1);
void ev_avx2_gemm_bf16(const ev_gemm_args *a, int64_t r0, int64_t r1);
void ev_avx2_gemm_q8_0(const ev_gemm_args *a, int64_t r0, int64_t r1);
void ev_avx2_gemm_q4_0(const ev_gemm_args *a, int64_t r0, int64_t r1);

/* the many-token products on int16 activations of x86_avx2_qgemm.c (gemm_q16x) and their
 * activation rounding (bit-identical to ev_avx512_quantize_i16) */
void ev_avx2_gemm_q16x_q8_0(const ev_gemm_args *a, int64_t r0, int64_t r1);
void ev_avx2_gemm_q16x_q4_0(const ev_gemm_args *a, int64_t r0, int64_t r1);
void ev_avx2_quantize_i16(const float *x, int16_t *q, float *d, int64_t n);


/* the K-quant kernels of x86_avx2_kquants.c: Q8_K activations (bit-identical to
 * ev_quantize_row_q8_K), dots against them, and row dequantisers bit-identical to the type
 * table's to_float (the many-token panels) */
void ev_avx2_quantize_q8_K(const float *x, ev_block_q8_K *y, int64_t n);
void ev_avx2_vec_dot_q4_K_q8_K(int64_t n, float *out, const void *w_row, const void *x_row);
void ev_avx2_vec_dot_q6_K_q8_K(int64_t n, float *out, const void *w_row, const void *x_row);
void ev_avx2_vec_dot_q2_K_q8_K(int64_t n, float *out, const void *w_row, const void *x_row);
void ev_avx2_vec_dot_q3_K_q8_K(int64_t n, float *out, const void *w_row, const void *x_row);
void ev_avx2_vec_dot_q5_K_q8_K(int64_t n, float *out, const void *w_row, const void *x_row);
void ev_avx2_vec_dot_iq4_xs_q8_K(int64_t n, float *out, const void *w_row, const void *x_row);
void ev_avx2_dequantize_q4_K(const void *src, float *dst, int64_t n);
void ev_avx2_dequantize_q6_K(const void *src, float *dst, int64_t n);
void ev_avx2_dequantize_q2_K(const void *src, float *dst, int64_t n);
void ev_avx2_dequantize_q3_K(const void *src, float *dst, int64_t n);
void ev_avx2_dequantize_q5_K(const void *src, float *dst, int64_t n);
void ev_avx2_dequantize_iq4_xs(const void *src, float *dst, int64_t n);

/* the many-token products on float activations of x86_avx2_sgemm.c */
void ev_avx2_gemm_dq_f32(const ev_gemm_args *a, int64_t r0, int64_t r1);
void ev_avx2_gemm_dq_f16(const ev_gemm_args *a, int64_t r0, int64_t r1);
void ev_avx2_gemm_dq_bf16(const ev_gemm_args *a, int64_t r0, int64_t r1);
void ev_avx2_gemm_dq_q8_0(const ev_gemm_args *a, int64_t r0, int64_t r1);
void ev_avx2_gemm_dq_q4_0(const ev_gemm_args *a, int64_t r0, int64_t r1);
void ev_avx2_gemm_dq_q4_K(const ev_gemm_args *a, int64_t r0, int64_t r1);
void ev_avx2_gemm_dq_q6_K(const ev_gemm_args *a, int64_t r0, int64_t r1);
void ev_avx2_gemm_dq_q2_K(const ev_gemm_args *a, int64_t r0, int64_t r1);
void ev_avx2_gemm_dq_q3_K(const ev_gemm_args *a, int64_t r0, int64_t r1);
void ev_avx2_gemm_dq_q5_K(const ev_gemm_args *a, int64_t r0, int64_t r1);
void ev_avx2_gemm_dq_iq4_xs(const ev_gemm_args *a, int64_t r0, int64_t r1);
/* any other type of the table (IQ4_NL): its scalar to_float into the same panels */
void ev_avx2_gemm_dq_by_table(const ev_gemm_args *a, int64_t r0, int64_t r1);

/* the ViT's float kernels of x86_avx2_vit.c */
void ev_avx2_sgemm_f32(int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                       int64_t lda, const float *b, int64_t ldb, float *c, int64_t ldc);
float ev_avx2_exp_sum_f32(float *x, int64_t n, float max);
void ev_avx2_gelu_tanh_f32(float *x, int64_t n);

#endif
#endif
