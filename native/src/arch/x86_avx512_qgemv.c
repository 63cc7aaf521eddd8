/*
 * x86_avx512_qgemv.c - decode (one token) against Q8_0 weights on 512-bit VNNI.
 *
 * The AVX2 rows (x86_avx2_gemm.c) take ~8-10 instructions a 32-weight block (sign, sign,
 * maddubs, madd, convert, FMA and a scalar scale); on a core that runs them slower than its
 * share of the memory stream (the Xeon bench host of 2026-12-04: 15 GB/s of Q8_0 rows from L2
 * and from DRAM alike, stream ceiling 26 GB/s) decode is compute-bound. Here one vpdpbusd
 * takes two Q8_0 blocks, and the scales of four blocks are converted and multiplied in one
 * 128-bit step: 15 -> 21-23 GB/s there. Same products as llama.cpp's vec_dot_q8_0_q8_0 (Q8_0
 * activations, int32 block sums, one float scale a block); only the order of the float sums
 * differs from the AVX2 rows. Each thread first copies the token's activation blocks into its
 * own stack buffer (n_in bytes and a float a block), 32 values contiguous, so that two blocks
 * are one 64-byte load.
 *
 * Q4_0 stays on the AVX2 row (x86_avx2_gemm.c, q4_gemv_row): the same scheme for four Q4_0
 * blocks a vector (nibbles split, 8 sum(x) subtracted per block) measured 8-14 GB/s against
 * its 12-19 on that host (bench_kernels --types q4_0 --tok 1).
 */
#if defined(__x86_64__)

#include "x86_avx512.h"

#define QGEMV_MAX_BLOCKS 1024   /* n_in <= 32768: 36 KiB of stack; longer rows: AVX2 */

/* ---- Q8_0 -------------------------------------------------------------------------------- */

typedef struct q8_gx {
    _Alignas(64) int8_t x[QGEMV_MAX_BLOCKS][EV_QK];   /* [block][32] the int8 activations */
    _Alignas(64) float dx[QGEMV_MAX_BLOCKS];          /* [block] their scales */
} q8_gx;

EV_AVX512_INLINE void q8_gx_prepare(const ev_gemm_args *a, int64_t nb, q8_gx *px) {
    const ev_block_q8_0 *xr = (const ev_block_q8_0 *)a->x;
    for (int64_t b = 0; b < nb; b++)
        _mm256_store_si256((__m256i *)px->x[b], _mm256_loadu_si256((const __m256i *)xr[b].qs));
    for (int64_t b = 0; b < nb; b++) px->dx[b] = a->x_scale[b];
}

/* int32 lanes of 4 products of signed weights w against signed activations x: |w| is the
 * unsigned operand of vpdpbusd, x takes w's sign (w = -128: |w| reads as 128, still exact) */
EV_AVX512_INLINE __m512i dot_s8(__m512i w, __m512i x) {
    const __m512i sx = _mm512_mask_sub_epi8(x, _mm512_movepi8_mask(w), _mm512_setzero_si512(), x);
    return _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_abs_epi8(w), sx);
}

/* d_w * d_x of blocks b..b+3 (weights at stride `stride` bytes from d0, fp16 first) */
EV_AVX512_INLINE __m128 scales4(const uint8_t *d0, int64_t stride, const float *dx) {
    const __m128i h = _mm_setr_epi16((short)*(const uint16_t *)d0,
                                     (short)*(const uint16_t *)(d0 + stride),
                                     (short)*(const uint16_t *)(d0 + 2 * stride),
                                     (short)*(const uint16_t *)(d0 + 3 * stride), 0, 0, 0, 0);
    return _mm_mul_ps(_mm_cvtph_ps(h), _mm_loadu_ps(dx));
}

/* on Intel (ev_x86_decode_prefetch) the row prefetches this far ahead: 1 KiB measured 2.5 %
 * faster than 2 KiB and 9 % faster than 4 KiB here (engine decode, Xeon) */
#define Q8_PREFETCH_AHEAD 1024

EV_AVX512_INLINE float q8_row(const ev_block_q8_0 *w, int64_t nb, const q8_gx *px) {
    /* lanes 0-7 take scale j0, 8-15 scale j1 */
    const __m512i lo_pair = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    const __m512i hi_pair = _mm512_setr_epi32(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const int prefetch = ev_x86_decode_prefetch;
    __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0;
    int64_t b = 0;
    for (; b + 4 <= nb; b += 4) {
        if (prefetch) decode_prefetch(w + b, 4 * (int64_t)sizeof(ev_block_q8_0), Q8_PREFETCH_AHEAD);
        const __m512i w01 = _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)w[b].qs)),
            _mm256_loadu_si256((const __m256i *)w[b + 1].qs), 1);
        const __m512i w23 = _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)w[b + 2].qs)),
            _mm256_loadu_si256((const __m256i *)w[b + 3].qs), 1);
        const __m512i p01 = dot_s8(w01, _mm512_load_si512((const __m512i *)px->x[b]));
        const __m512i p23 = dot_s8(w23, _mm512_load_si512((const __m512i *)px->x[b + 2]));
        const __m512 d4 = _mm512_castps128_ps512(
            scales4((const uint8_t *)&w[b].d, (int64_t)sizeof(ev_block_q8_0), px->dx + b));
        acc0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p01), _mm512_permutexvar_ps(lo_pair, d4), acc0);
        acc1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p23), _mm512_permutexvar_ps(hi_pair, d4), acc1);
    }
    float tail = 0.0f;
    for (; b < nb; b++) {   /* the last nb % 4 blocks */
        int32_t s = 0;
        for (int i = 0; i < EV_QK; i++) s += (int32_t)w[b].qs[i] * px->x[b][i];
        tail += (float)s * (_cvtsh_ss(w[b].d) * px->dx[b]);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1)) + tail;
}

EV_AVX512 void ev_avx512_gemm_q8_0(const ev_gemm_args *a, int64_t r0, int64_t r1) {
    const int64_t nb = a->n_in / EV_QK;
    if (a->n_tok != 1 || nb > QGEMV_MAX_BLOCKS) {
        ev_avx2_gemm_q8_0(a, r0, r1);
        return;
    }
    q8_gx px;   /* this thread's copy of the activations */
    q8_gx_prepare(a, nb, &px);
    for (int64_t r = r0; r < r1; r++) {
        const float v = q8_row((const ev_block_q8_0 *)(a->w + r * a->w_stride), nb, &px);
        a->y[r] = v + (a->bias ? a->bias[r] : 0.0f);
    }
}

#endif
