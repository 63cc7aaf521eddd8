/*
 * x86_avx512.h - the AVX-512 kernel set's target attribute and its kernels (x86_avx512*.c).
 *
 * Like the AVX2 files, every function carries its own target attribute, so a baseline build
 * contains them; ev_kernels_x86_avx512() hands them out only when the CPU has AVX-512 F, BW,
 * VL and VNNI. The set is the AVX2 set plus the kernels declared here.
 */
#ifndef EDGEVLM_X86_AVX512_H
#define EDGEVLM_X86_AVX512_H
#if defined(__x86_64__)

#include "x86_avx2.h"

#define EV_AVX512_TARGET "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni"
#define EV_AVX512 __attribute__((target(EV_AVX512_TARGET)))
#define EV_AVX512_INLINE static inline __attribute__((always_inline, target(EV_AVX512_TARGET)))

/* The first min(n, 16) lanes (n >= 0). */
static inline __mmask16 avx512_mask16(int64_t n) {
    return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1u);
}

/* The micro-kernels' epilogue: 16 outputs of one token (lanes in m) become acc plus, in the
 * first K chunk, the bias (or nothing), after it what y already holds. */
EV_AVX512_INLINE void avx512_store_y(float *y, __mmask16 m, __m512 acc, const float *bias,
                                     int first) {
    const __m512 base = !first ? _mm512_maskz_loadu_ps(m, y)
                        : bias ? _mm512_maskz_loadu_ps(m, bias) : _mm512_setzero_ps();
    _mm512_mask_storeu_ps(y, m, _mm512_add_ps(base, acc));
}

/* A 16 x 8 matrix of dwords (16 weight rows, 8 dwords of columns each) transposed into 8
 * vectors of 16 lanes, lane i = row i, stored at dst, dst + stride, ... (64-byte aligned).
 * z[k] holds rows (k < 4 ? k : k + 4) and that + 4 in its low and high 256-bit halves; the
 * classic 8 x 8 dword transpose within each half (unpack 32, unpack 64), then one 128-bit
 * shuffle per output, leaves rows 0..15 in lane order. 24 shuffles. */
EV_AVX512_INLINE void avx512_transpose_16x8(const __m512i z[8], uint8_t *dst, int64_t stride) {
    __m512i t[8], u[8];
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        t[2 * j] = _mm512_unpacklo_epi32(z[2 * j], z[2 * j + 1]);
        t[2 * j + 1] = _mm512_unpackhi_epi32(z[2 * j], z[2 * j + 1]);
    }
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {   /* rows a0..a3 (h = 0) and a4..a7 (h = 1) of each half */
        const __m512i *s = t + 4 * h;
        u[4 * h + 0] = _mm512_unpacklo_epi64(s[0], s[2]);   /* dwords 0 | 4 */
        u[4 * h + 1] = _mm512_unpackhi_epi64(s[0], s[2]);   /* dwords 1 | 5 */
        u[4 * h + 2] = _mm512_unpacklo_epi64(s[1], s[3]);   /* dwords 2 | 6 */
        u[4 * h + 3] = _mm512_unpackhi_epi64(s[1], s[3]);   /* dwords 3 | 7 */
    }
#pragma GCC unroll 4
    for (int m = 0; m < 4; m++) {
        _mm512_store_si512((__m512i *)(dst + m * stride), _mm512_shuffle_i32x4(u[m], u[4 + m], 0x88));
        _mm512_store_si512((__m512i *)(dst + (m + 4) * stride),
                           _mm512_shuffle_i32x4(u[m], u[4 + m], 0xdd));
    }
}

/* the many-token products on integer activations of x86_avx512_qgemm.c */
void ev_avx512_gemm_q16x_q8_0(const ev_gemm_args *a, int64_t r0, int64_t r1);
void ev_avx512_gemm_q16x_q4_0(const ev_gemm_args *a, int64_t r0, int64_t r1);
/* Q4_K/Q5_K: int16 activations with each block's exact sum in x_sum */
void ev_avx512_gemm_q16x_q4_K(const ev_gemm_args *a, int64_t r0, int64_t r1);
void ev_avx512_gemm_q16x_q5_K(const ev_gemm_args *a, int64_t r0, int64_t r1);
/* IQ4_XS/Q6_K: int16 activations, no sums */
void ev_avx512_gemm_q16x_iq4_xs(const ev_gemm_args *a, int64_t r0, int64_t r1);
void ev_avx512_gemm_q16x_q6_K(const ev_gemm_args *a, int64_t r0, int64_t r1);
void ev_avx512_gemm_q8x_q8_0(const ev_gemm_args *a, int64_t r0, int64_t r1);
void ev_avx512_gemm_q8x_q4_0(const ev_gemm_args *a, int64_t r0, int64_t r1);
/* Q4_K/Q5_K/IQ4_XS: Q8_0 activations with each block's sum in x_sum (the mins; the offset) */
void ev_avx512_gemm_q8x_q4_K(const ev_gemm_args *a, int64_t r0, int64_t r1);
void ev_avx512_gemm_q8x_q5_K(const ev_gemm_args *a, int64_t r0, int64_t r1);
void ev_avx512_gemm_q8x_iq4_xs(const ev_gemm_args *a, int64_t r0, int64_t r1);
/* Q6_K: x_sum the two half blocks' sums as int16 (low: columns 0..15) */
void ev_avx512_gemm_q8x_q6_K(const ev_gemm_args *a, int64_t r0, int64_t r1);
void ev_avx512_quantize_i16(const float *x, int16_t *q, float *d, int64_t n);

/* decode against Q8_0 weights (one token, vpdpbusd; more tokens: the AVX2 set's) of
 * x86_avx512_qgemv.c */
void ev_avx512_gemm_q8_0(const ev_gemm_args *a, int64_t r0, int64_t r1);

/* decode against F16/BF16 weights (one token; more: the AVX2 tiles) of x86_avx512_gemv.c */
void ev_avx512_gemm_f16(const ev_gemm_args *a, int64_t r0, int64_t r1);
void ev_avx512_gemm_bf16(const ev_gemm_args *a, int64_t r0, int64_t r1);
/* the fast sets' one-token rows on f16- / bf16-rounded activations (gemv_x16; the BF16 one
 * needs AVX-512 BF16 on top of the set's extensions) */
void ev_avx512_gemv_x16_f16(const ev_gemm_args *a, int64_t r0, int64_t r1);
void ev_avx512_gemv_x16_bf16(const ev_gemm_args *a, int64_t r0, int64_t r1);

/* decode against Q4_K, Q6_K and IQ4_XS weights (one token of Q8_K activations, prepared once per
 * call; more tokens: the AVX2 vec_dot per pair) of x86_avx512_kgemv.c */
void ev_avx512_gemm_q4_K(const ev_gemm_args *a, int64_t r0, int64_t r1);
void ev_avx512_gemm_q6_K(const ev_gemm_args *a, int64_t r0, int64_t r1);
void ev_avx512_gemm_iq4_xs(const ev_gemm_args *a, int64_t r0, int64_t r1);

/* gemm_dq on 512-bit tiles (x86_avx512_sgemm.c) over the AVX2 set's panels: one per weight
 * type the AVX2 set dequantises with SIMD (x86_avx2_sgemm.c), and by_table for the rest */
extern const ev_gemm_dq_tile_fn ev_avx512_dq_tiles[EV_GEMM_MR + 1];
extern const ev_gemm_dq_tile_fn ev_avx512_dq_pair_tiles[EV_GEMM_MR + 1];   /* 32 rows */
void ev_avx512_gemm_dq_f32(const ev_gemm_args *a, int64_t r0, int64_t r1);
void ev_avx512_gemm_dq_f16(const ev_gemm_args *a, int64_t r0, int64_t r1);
void ev_avx512_gemm_dq_bf16(const ev_gemm_args *a, int64_t r0, int64_t r1);
void ev_avx512_gemm_dq_q8_0(const ev_gemm_args *a, int64_t r0, int64_t r1);
void ev_avx512_gemm_dq_q4_0(const ev_gemm_args *a, int64_t r0, int64_t r1);
void ev_avx512_gemm_dq_q4_K(const ev_gemm_args *a, int64_t r0, int64_t r1);
void ev_avx512_gemm_dq_q6_K(const ev_gemm_args *a, int64_t r0, int64_t r1);
void ev_avx512_gemm_dq_q2_K(const ev_gemm_args *a, int64_t r0, int64_t r1);
void ev_avx512_gemm_dq_q3_K(const ev_gemm_args *a, int64_t r0, int64_t r1);
void ev_avx512_gemm_dq_q5_K(const ev_gemm_args *a, int64_t r0, int64_t r1);
void ev_avx512_gemm_dq_iq4_xs(const ev_gemm_args *a, int64_t r0, int64_t r1);
void ev_avx512_gemm_dq_by_table(const ev_gemm_args *a, int64_t r0, int64_t r1);

/* the many-token product of BF16 weights on bf16-rounded activations of x86_avx512_bf16.c
 * (needs AVX-512 BF16 on top of the set's extensions) */
void ev_avx512_gemm_bf16x(const ev_gemm_args *a, int64_t r0, int64_t r1);

#endif
#endif
