/*
 * x86_avx512_qgemm.c - the many-token products of Q8_0/Q4_0/Q4_K/Q5_K/IQ4_XS/Q6_K weights with AVX-512 VNNI integer dot products. Y[t][r] = X[t] . W[r]
 * (+ bias[r]) for one thread's rows [r0, r1). Two activation widths, one loop nest:
 *  - q16x (int16 activations, vpdpwssd: 32 int16 x int16 products a instruction, twice a
 *    float FMA's): each activation block of 32 rounded to int16 with its own scale
 *    (amax / 32767, a relative error of 2^-16, below float32's sum-order noise at these
 *    lengths); the weights sign-extended. The arithmetic of gemm_dq to ~1e-5, faster.
 *  - q8x (Q8_0 activations, vpdpbusd: 64 unsigned x signed byte products a instruction):
 *    ggml's arithmetic (every block's int32 dot times d_w * d_x, as decode does), the fastest
 *    and the least exact: the "fast" precision. vpdpbusd multiplies unsigned bytes by signed
 *    ones, so the weights are made unsigned, u = q + 128 (Q8_0) or the raw nibble (Q4_0,
 *    value u - 8); sum(u x) = sum(q x) + o sum(x) with o = 128 or 8, so each block's int32
 *    accumulator starts at -o sum(x) (x_sum, from the quantisation).
 *  - Q4_K/Q5_K: a block of 32 columns is one sub-block j of a super-block, value
 *    d sc_j q - dmin m_j with q in 0..15 (0..31). The panel holds q as int16, and per block
 *    and row dw = d sc_j and mw = -dmin m_j; the block's term is
 *    dw dx sum(q x) + mw dx sum(x), sum(x) the exact int32 sum of the block's int16
 *    activations (x_sum, from the quantisation): one more FMA per block and (row group,
 *    token), beside 16 dot instructions. Q8_0/Q4_0 compile without it (the tile's kofs).
 *    int32 bounds: |q| <= 31, |x| <= 32767, 32 products: |sum q x| <= 32.5e6 < 2^31 (vpdpwssd
 *    adds pairs, 2 x 31 x 32767, into the accumulator: no intermediate saturation), and
 *    |sum x| <= 32 x 32767 ~ 2^20, exact in float32 too. K chunks of 16 blocks start on
 *    super-blocks (8 blocks), so a chunk's block b lies in its super-block b / 8 at j = b % 8.
 *  - IQ4_XS: sub-block j's value d (ls_j - 32) kvalues[nibble]; the panel holds
 *    kvalues[nibble] as int16 (a vpshufb of the nibbles; |.| <= 127: |sum q x| <= 133e6 <
 *    2^31), dw = d (ls_j - 32), no mins term (Q8_0's epilogue).
 *  - q8x of Q4_K/Q5_K/IQ4_XS/Q6_K (the fast sets): the same scales, the weights as unsigned bytes:
 *    Q4_K/Q5_K q itself (no offset; the mins term as above, x_sum now the int8 block's sum:
 *    |sum q x| <= 31 x 127 x 32), IQ4_XS kvalues[nibble] + 128 (offset 128, as Q8_0). K
 *    chunks of 32 blocks: 4 super-blocks. Q6_K: q in 0..63 (offset 32) and a scale per 16
 *    columns, so a sum per half block: x_sum holds both as int16 (low: columns 0..15), each
 *    half 4 steps with its own start -32 sum and epilogue (|sum| <= 63 x 127 x 16).
 *  - Q6_K: a scale per 16 values, value d sc_i (q - 32) with q in 0..63. The
 *    panel holds q - 32 (|.| <= 32), and per block and row dw = d sc_2j for columns 0..15 and
 *    dw_hi = d sc_2j+1 for 16..31: the tile applies the epilogue after each half's 8 steps
 *    (cvt, multiply, FMA, then the int accumulators start again): 2 epilogues beside 16 dot
 *    instructions, a compile-time variant of its own (the other types' loops unchanged).
 * Reference: the scalar set's products on the same rounded activations (test_kernels.c,
 * test_kquants_simd.c).
 *
 * Layout. Lane i of a 16-int32 accumulator is weight row i of a group of 16; a block's 32
 * columns are walked in steps of 4 bytes (4 int8 or 2 int16 activations: 8 or 16 steps),
 * each step one dot instruction with the token's 4 bytes broadcast to every lane ({1to16}).
 * Each thread repacks 48 rows at a time, per K chunk, into a panel [block][step][group]
 * [16][4 bytes] (16 x 8 dword transposes) with the block scales [block][48]; a micro-kernel
 * of 3 row groups x 4 tokens (12 int32 + 12 float accumulators) sweeps every token over it.
 * Per block and (row group, token): 8 or 16 dot instructions, then cvt, one multiply of the
 * 16 d_w by the broadcast d_x, one FMA. 3 x 4 rather than 2 x 6: 7 loads a step instead of
 * 8 for the same 12 dots, +8-10 % at the ViT's shapes (a bare loop with this block epilogue:
 * 3.25 against 2.9-3.0 dot instructions a ns on Zen 4, whose peak is 3.6). The tile
 * prefetches the y it will add to: the y load at its end, from L2, was 7 % of its samples.
 *
 * Loop nest: rows in y blocks of Y_BLOCK_BYTES (enough rows that their y over every token
 * fits half of L2); K in chunks of 48 KiB of panel (16 int16 / 32 int8 blocks: more than
 * L1, but half the tile calls and y updates of a 24 KiB chunk, +3-8 %); the block's rows in
 * panels of 48; every token (the chunk's activations stay in L2). The first chunk writes y
 * (with the bias), later ones add. Without the y blocks every K chunk swept all of y through
 * L3: up to 20 % slower at the ViT's 784 x 4096 outputs, ~10 % at 512-token prefill
 * (bench_kernels --vit). While a panel's tiles run, the last PF_TILES of them prefetch the
 * next panel's weight rows: packing had waited on DRAM (8 % of a 256x256 encode's samples,
 * 4.8 % after; prefill +10-17 %).
 */
#if defined(__x86_64__)

#include <stddef.h>

#include "x86_avx512.h"

#define RGM 3                   /* row groups of 16 lanes per panel */
#define PR (16 * RGM)           /* rows per panel */
#define MT 4                    /* tokens per micro-tile */
#define MAX_KCB 32              /* blocks per K chunk: 32 (int8) or 16 (int16) */
#define PANEL_BYTES (16 * PR * 64) /* weights of a panel's K chunk: 16 int16 blocks, 48 KiB */
#define Y_BLOCK_BYTES (512 * 1024) /* y of one row block: half of a 1 MiB L2 */
#define PF_TILES 16             /* tiles over which the next panel's weights are prefetched */

/* The weight layouts the panel packer reads (compile-time constants of the loop nest). */
enum { W_Q8_0, W_Q4_0, W_Q4_K, W_Q5_K, W_IQ4_XS, W_Q6_K };
#define IS_K(wt) ((wt) >= W_Q4_K)                           /* 256-element super-blocks */
#define HAS_MINS(wt) ((wt) == W_Q4_K || (wt) == W_Q5_K)     /* the mw x_sum term */
#define HALF_SCALES(wt) ((wt) == W_Q6_K)                    /* a scale per 16 columns */
/* bytes of a weight block of 32, or of a K super-block of 8 such blocks */
#define W_BLOCK_BYTES(wt) ((wt) == W_Q8_0     ? sizeof(ev_block_q8_0)                       \
                           : (wt) == W_Q4_0   ? sizeof(ev_block_q4_0)                       \
                           : (wt) == W_Q4_K   ? sizeof(ev_block_q4_K)                       \
                           : (wt) == W_Q5_K   ? sizeof(ev_block_q5_K)                       \
                           : (wt) == W_IQ4_XS ? sizeof(ev_block_iq4_xs) : sizeof(ev_block_q6_K))
/* where block kb of a weight row starts (K: its super-block; K chunks start on super-blocks,
 * so kb is then a multiple of 8) */
#define W_OFFSET(wt, kb) ((size_t)(IS_K(wt) ? (kb) / 8 : (kb)) * W_BLOCK_BYTES(wt))
_Static_assert(EV_QK_K == 8 * EV_QK, "8 sub-blocks of 32 a super-block");

typedef struct q_panel {
    _Alignas(64) uint8_t wq[PANEL_BYTES];   /* [block][step][group][16 rows][4 bytes] */
    _Alignas(64) float dw[MAX_KCB][PR];     /* d_w of the block for rows 0..PR-1 (K: d sc_j;
                                               Q6_K: of its columns 0..15) */
    union {
        _Alignas(64) float mw[MAX_KCB][PR];     /* Q4_K/Q5_K: -dmin m_j, the weight of sum(x) */
        _Alignas(64) float dw_hi[MAX_KCB][PR];  /* Q6_K: d_w of columns 16..31 */
    };
} q_panel;
_Static_assert(sizeof(q_panel) <= sizeof(float) * EV_GEMM_PACK_FLOATS, "q_panel fits a->pack");

/* bytes of a block's panel: PR rows x 32 columns x the activation width */
#define BLOCK_BYTES(x16) ((x16) ? PR * 64 : PR * 32)
#define STEP_BYTES (RGM * 64)  /* one step: every group's 16 rows x 4 bytes */

/* 16 bytes of two rows' 32 weights as one vector per half [a | b], int8 weights: for q8x
 * the unsigned 32 (u = q + 128 or the nibble), for q16x each half h of 16 columns as 16
 * signed int16 (the value). */
EV_AVX512_INLINE __m512i q8x_pair(const uint8_t *a, const uint8_t *b, const int q4) {
    if (q4) {   /* ev_block_q4_0.qs: element j in the low nibble of byte j, j + 16 in the high */
        const __m256i v = _mm256_inserti128_si256(
            _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)a)),
            _mm_loadu_si128((const __m128i *)b), 1);
        const __m256i m = _mm256_set1_epi8(0x0f);
        const __m256i lo = _mm256_and_si256(v, m);                        /* [a 0..15 | b 0..15] */
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m); /* [a 16..31 | b ..] */
        const __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
        return _mm512_shuffle_i32x4(z, z, 0xd8);   /* 128-bit lanes 0, 2, 1, 3 */
    }
    const __m512i v = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)a)),
        _mm256_loadu_si256((const __m256i *)b), 1);
    return _mm512_xor_si512(v, _mm512_set1_epi8((char)0x80));
}

EV_AVX512_INLINE __m512i q16x_half(const uint8_t *a, const uint8_t *b, int h, const int q4) {
    __m256i v;
    if (q4) {
        const __m256i raw = _mm256_inserti128_si256(
            _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)a)),
            _mm_loadu_si128((const __m128i *)b), 1);
        const __m256i nib = h ? _mm256_srli_epi16(raw, 4) : raw;
        v = _mm256_sub_epi8(_mm256_and_si256(nib, _mm256_set1_epi8(0x0f)), _mm256_set1_epi8(8));
    } else {
        v = _mm256_inserti128_si256(
            _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(a + 16 * h))),
            _mm_loadu_si128((const __m128i *)(b + 16 * h)), 1);
    }
    return _mm512_cvtepi8_epi16(v);
}

/* 16 bytes at a + o and b + o as [a | b] */
EV_AVX512_INLINE __m256i load_pair16(const uint8_t *a, const uint8_t *b, size_t o) {
    const __m128i lo = _mm_loadu_si128((const __m128i *)(a + o));
    return _mm256_inserti128_si256(_mm256_castsi128_si256(lo), _mm_loadu_si128((const __m128i *)(b + o)), 1);
}

/* Columns 16h..16h+15 of sub-block j of two rows' super-blocks a, b as [a | b] int16:
 *  - Q4_K/Q5_K q: the low (j even) or high nibbles of qs[32 (j / 2) + 16 h ..], plus 16
 *    where qh (Q5_K) has bit j of qh[16 h ..];
 *  - IQ4_XS kvalues[nibble]: the low (h = 0) or high nibbles of qs[16 j ..];
 *  - Q6_K q - 32: sub-block j = 4 c + i (c: which 128 of the super-block) has its low 4 bits
 *    in the low (i < 2) or high nibbles of ql[64 c + 32 (i % 2) + 16 h ..], its high 2 at bits
 *    2i..2i+1 of qh[32 c + 16 h ..]. */
EV_AVX512_INLINE __m256i k_bytes(const uint8_t *a, const uint8_t *b, int j, int h, const int wt) {
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    if (wt == W_IQ4_XS) {
        const __m256i raw = load_pair16(a, b, offsetof(ev_block_iq4_xs, qs) + 16 * (size_t)j);
        const __m256i nib = _mm256_and_si256(h ? _mm256_srli_epi16(raw, 4) : raw, m4);
        const __m256i lut =
            _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)ev_iq4nl_values));
        return _mm256_shuffle_epi8(lut, nib);
    }
    if (wt == W_Q6_K) {
        const int c = j / 4, i = j % 4;
        const __m256i ql = load_pair16(a, b, offsetof(ev_block_q6_K, ql) + 64 * (size_t)c +
                                                 32 * (size_t)(i % 2) + 16 * (size_t)h);
        const __m256i qh =
            load_pair16(a, b, offsetof(ev_block_q6_K, qh) + 32 * (size_t)c + 16 * (size_t)h);
        const __m256i lo = _mm256_and_si256(i >= 2 ? _mm256_srli_epi16(ql, 4) : ql, m4);
        const __m256i hi = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * i)),
                                            _mm256_set1_epi8(3));
        const __m256i q = _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));   /* 0..63 a byte */
        return _mm256_sub_epi8(q, _mm256_set1_epi8(32));
    }
    const size_t qs = wt == W_Q4_K ? offsetof(ev_block_q4_K, qs) : offsetof(ev_block_q5_K, qs);
    const size_t o = qs + 32 * (size_t)(j / 2) + 16 * (size_t)h;
    const __m256i raw = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(a + o))),
        _mm_loadu_si128((const __m128i *)(b + o)), 1);
    const __m256i nib = (j & 1) ? _mm256_srli_epi16(raw, 4) : raw;
    __m256i v = _mm256_and_si256(nib, _mm256_set1_epi8(0x0f));
    if (wt == W_Q5_K) {
        const size_t oh = offsetof(ev_block_q5_K, qh) + 16 * (size_t)h;
        const __m256i qh = _mm256_inserti128_si256(
            _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(a + oh))),
            _mm_loadu_si128((const __m128i *)(b + oh)), 1);
        const __m256i bit = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(j)),
                                             _mm256_set1_epi8(1));
        v = _mm256_or_si256(v, _mm256_slli_epi16(bit, 4));   /* bit 0 of each byte -> 16 */
    }
    return v;
}

/* q16x: the 16 columns as int16 */
EV_AVX512_INLINE __m512i k_half(const uint8_t *a, const uint8_t *b, int j, int h, const int wt) {
    return _mm512_cvtepi8_epi16(k_bytes(a, b, j, h, wt));
}

/* q8x: sub-block j's 32 columns of rows a, b as unsigned bytes [a 0..31 | b 0..31] (like
 * q8x_pair): Q4_K/Q5_K q itself (no offset), IQ4_XS kvalues[nibble] + 128 (offset 128),
 * Q6_K q in 0..63 (offset 32). */
EV_AVX512_INLINE __m512i k_pair(const uint8_t *a, const uint8_t *b, int j, const int wt) {
    const __m256i lo = k_bytes(a, b, j, 0, wt), hi = k_bytes(a, b, j, 1, wt);
    __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
    z = _mm512_shuffle_i32x4(z, z, 0xd8);   /* [a lo | b lo | a hi | b hi] -> [a | b] */
    return wt == W_IQ4_XS ? _mm512_xor_si512(z, _mm512_set1_epi8((char)0x80))
           : wt == W_Q6_K ? _mm512_add_epi8(z, _mm512_set1_epi8(32))
                          : z;
}

/* Sub-block j's scales in the super-block at s: Q4_K/Q5_K dw = d sc_j and mw = -dmin m_j;
 * IQ4_XS dw = d (ls_j - 32); Q6_K dw = d sc_2j (columns 0..15), mw = d sc_2j+1 (16..31). */
EV_AVX512_INLINE void k_scales(const uint8_t *s, int j, float *dw, float *mw, const int wt) {
    if (wt == W_IQ4_XS) {
        const ev_block_iq4_xs *x = (const ev_block_iq4_xs *)(const void *)s;
        const int ls = ((x->scales_l[j / 2] >> (4 * (j % 2))) & 0x0f) |
                       (((x->scales_h >> (2 * j)) & 3) << 4);   /* 6 bits */
        *dw = avx2_fp16(x->d) * (float)(ls - 32);
        return;
    }
    if (wt == W_Q6_K) {
        const ev_block_q6_K *x = (const ev_block_q6_K *)(const void *)s;
        const float d = avx2_fp16(x->d);
        *dw = d * (float)x->scales[2 * j];
        *mw = d * (float)x->scales[2 * j + 1];
        return;
    }
    const ev_block_q4_K *b4 = (const ev_block_q4_K *)(const void *)s;
    const ev_block_q5_K *b5 = (const ev_block_q5_K *)(const void *)s;
    uint8_t sc, m;
    ev_k4_scale_min(j, wt == W_Q4_K ? b4->scales : b5->scales, &sc, &m);
    *dw = avx2_fp16(wt == W_Q4_K ? b4->d : b5->d) * (float)sc;
    *mw = -(avx2_fp16(wt == W_Q4_K ? b4->dmin : b5->dmin) * (float)m);
}

/* Rows r..r+R-1 (R <= PR; the rest zero weights, zero scales), blocks [kb, kb + n). */
EV_AVX512_INLINE void panel_pack(q_panel *p, const ev_gemm_args *a, int64_t r, int R,
                                 int64_t kb, int n, const int wt, const int x16) {
    static const _Alignas(64) uint8_t zero_block[sizeof(ev_block_q6_K)];   /* the largest */
    const int q4 = wt == W_Q4_0;
    const uint8_t *row[PR];
    for (int i = 0; i < PR; i++)
        row[i] = i < R ? a->w + (r + i) * a->w_stride + W_OFFSET(wt, kb) : NULL;
    for (int b = 0; b < n; b++) {
        /* K: block b is sub-block j of the super-block at W_OFFSET(b) */
        const int j = b & 7;
        const size_t off = W_OFFSET(wt, b) + (IS_K(wt) ? 0 : 2);
        uint8_t *blk = p->wq + (size_t)b * BLOCK_BYTES(x16);
        for (int g = 0; g < RGM; g++) {
            for (int h = 0; h < (x16 ? 2 : 1); h++) {   /* int16: columns 16h..16h+15 */
                __m512i z[8];
                for (int k = 0; k < 8; k++) {
                    const int ia = 16 * g + (k < 4 ? k : k + 4), ib = ia + 4;
                    const uint8_t *qa = row[ia] ? row[ia] + off : zero_block;
                    const uint8_t *qb = row[ib] ? row[ib] + off : zero_block;
                    z[k] = IS_K(wt) ? (x16 ? k_half(qa, qb, j, h, wt) : k_pair(qa, qb, j, wt))
                           : x16    ? q16x_half(qa, qb, h, q4)
                                    : q8x_pair(qa, qb, q4);
                }
                /* steps 8h..8h+7, group g's 64 bytes of each */
                avx512_transpose_16x8(z, blk + h * 8 * STEP_BYTES + g * 64, STEP_BYTES);
            }
        }
        if (IS_K(wt)) {
            for (int i = 0; i < PR; i++) {
                p->dw[b][i] = p->mw[b][i] = 0.0f;
                if (row[i]) k_scales(row[i] + off, j, &p->dw[b][i], &p->mw[b][i], wt);
            }
        } else {
            for (int i = 0; i < PR; i++)
                p->dw[b][i] = row[i] ? avx2_fp16(*(const ev_fp16 *)(row[i] + W_OFFSET(wt, b))) : 0.0f;
        }
    }
}

/* Steps s0..s0+ns-1 of one block: per step the RG weight vectors, and per token its 4
 * activation bytes broadcast into one dot instruction per row group. */
EV_AVX512_INLINE void q_steps(__m512i iacc[RGM][MT], const uint8_t *wb, const uint8_t *const *xq,
                              int64_t xoff, int s0, const int ns, const int RG, const int T,
                              const int x16) {
#pragma GCC unroll 8
    for (int s = s0; s < s0 + ns; s++) {
        __m512i w[RGM];
#pragma GCC unroll 4
        for (int g = 0; g < RG; g++) w[g] = _mm512_load_si512((const __m512i *)(wb + s * STEP_BYTES + g * 64));
#pragma GCC unroll 4
        for (int j = 0; j < T; j++) {
            int32_t x4;
            __builtin_memcpy(&x4, xq[j] + xoff + 4 * s, 4);
            const __m512i xv = _mm512_set1_epi32(x4);
#pragma GCC unroll 4
            for (int g = 0; g < RG; g++)
                iacc[g][j] = x16 ? _mm512_dpwssd_epi32(iacc[g][j], w[g], xv)
                                 : _mm512_dpbusd_epi32(iacc[g][j], w[g], xv);
        }
    }
}

/* facc += iacc (as float) x dw (the RG row groups' 16 at dw) x dx[j] (token j's block
 * scale): the block epilogue. */
EV_AVX512_INLINE void q_scale_add(__m512 facc[RGM][MT], const __m512i iacc[RGM][MT],
                                  const float *dw, const float *const *dx, int b, const int RG,
                                  const int T) {
#pragma GCC unroll 4
    for (int g = 0; g < RG; g++) {
        const __m512 d = _mm512_load_ps(dw + 16 * g);
#pragma GCC unroll 4
        for (int j = 0; j < T; j++)
            facc[g][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(iacc[g][j]),
                                         _mm512_mul_ps(d, _mm512_set1_ps(dx[j][b])), facc[g][j]);
    }
}

/* RG row groups (1..3) x T tokens (1..4) from token t over the panel's n blocks; kofs (K
 * weights with mins): each block also adds mw dx x_sum; halves (Q6_K): each half block of
 * 16 columns its own scale (dw, then dw_hi); q8x: its own offset sum too, the two int16 half
 * sums in x_sum (low, high). */
EV_AVX512_INLINE void q_tile(const q_panel *p, const ev_gemm_args *a, int64_t r, int R,
                             int64_t t, int64_t kb, int n, const int RG, const int T,
                             const int x16, const int kofs, const int halves, const int ofs) {
    const int64_t nb = a->n_in / EV_QK;
    /* activation blocks: int16 [32] (64 bytes), or ev_block_q8_0 (34 bytes, qs at 2) */
    const int64_t xbs = x16 ? 64 : (int64_t)sizeof(ev_block_q8_0);
    const uint8_t *xq[MT];
    const float *dx[MT];
    const int32_t *xs[MT];
#pragma GCC unroll 4
    for (int j = 0; j < T; j++) {
        xq[j] = a->x + (t + j) * a->x_stride + kb * xbs + (x16 ? 0 : offsetof(ev_block_q8_0, qs));
        dx[j] = a->x_scale + (t + j) * nb + kb;
        xs[j] = x16 && !kofs ? NULL : a->x_sum + (t + j) * nb + kb;
    }
    if (kb > 0)   /* the y this tile adds to, from L2 while the blocks run */
#pragma GCC unroll 4
        for (int j = 0; j < T; j++)
#pragma GCC unroll 4
            for (int g = 0; g < RG; g++)
                _mm_prefetch((const char *)(a->y + (t + j) * a->n_out + r + 16 * g), _MM_HINT_T0);
    __m512 facc[RGM][MT];
#pragma GCC unroll 4
    for (int g = 0; g < RG; g++)
#pragma GCC unroll 4
        for (int j = 0; j < T; j++) facc[g][j] = _mm512_setzero_ps();
    for (int b = 0; b < n; b++) {
        __m512i iacc[RGM][MT];
#pragma GCC unroll 4
        for (int j = 0; j < T; j++) {
            const __m512i c =
                x16 ? _mm512_setzero_si512()
                    : _mm512_set1_epi32(-(halves ? (int16_t)(xs[j][b] & 0xffff) : xs[j][b]) * ofs);
#pragma GCC unroll 4
            for (int g = 0; g < RG; g++) iacc[g][j] = c;
        }
        const uint8_t *wb = p->wq + (size_t)b * BLOCK_BYTES(x16);
        /* 8 steps (int8; halves: 2 x 4) or 2 x 8 (int16) as fixed-count loops that unroll
         * completely: a rolled loop made GCC copy all 12 accumulators every step */
        const int ns = x16 || !halves ? 8 : 4;   /* the steps of the first half, or all */
        q_steps(iacc, wb, xq, b * xbs, 0, ns, RG, T, x16);
        if (halves) {   /* columns 0..15 at dw, then the accumulators start again */
            q_scale_add(facc, iacc, p->dw[b], dx, b, RG, T);
#pragma GCC unroll 4
            for (int j = 0; j < T; j++) {
                const __m512i c = x16 ? _mm512_setzero_si512()
                                      : _mm512_set1_epi32(-(xs[j][b] >> 16) * ofs);
#pragma GCC unroll 4
                for (int g = 0; g < RG; g++) iacc[g][j] = c;
            }
        }
        if (x16 || halves) q_steps(iacc, wb, xq, b * xbs, ns, ns, RG, T, x16);
        q_scale_add(facc, iacc, halves ? p->dw_hi[b] : p->dw[b], dx, b, RG, T);
        if (kofs) {
#pragma GCC unroll 4
            for (int g = 0; g < RG; g++) {
                const __m512 mw = _mm512_load_ps(p->mw[b] + 16 * g);
#pragma GCC unroll 4
                for (int j = 0; j < T; j++)
                    facc[g][j] = _mm512_fmadd_ps(mw, _mm512_set1_ps(dx[j][b] * (float)xs[j][b]),
                                                 facc[g][j]);
            }
        }
    }
#pragma GCC unroll 4
    for (int g = 0; g < RG; g++) {
        const __mmask16 m = avx512_mask16(R - 16 * g);
        const float *bias = a->bias ? a->bias + r + 16 * g : NULL;
#pragma GCC unroll 4
        for (int j = 0; j < T; j++)
            avx512_store_y(a->y + (t + j) * a->n_out + r + 16 * g, m, facc[g][j], bias, kb == 0);
    }
}

/* The tile shapes, each its own function (inlined into one loop, the accumulators spill);
 * MODE 0: q8x, 1: q16x, 2: q16x with the K mins term, 3: q16x with a scale per half block,
 * 4: q8x with the K mins term, 5: q8x with a scale (and offset sum) per half block. */
#define Q_TILE(MODE, RG, T)                                                                  \
    EV_AVX512 __attribute__((noinline)) static void tile##MODE##_##RG##x##T(                 \
        const q_panel *p, const ev_gemm_args *a, int64_t r, int R, int64_t t, int64_t kb,     \
        int n, int ofs) {                                                                    \
        q_tile(p, a, r, R, t, kb, n, RG, T, (MODE) >= 1 && (MODE) <= 3,                      \
               (MODE) == 2 || (MODE) == 4, (MODE) == 3 || (MODE) == 5, ofs);                 \
    }
#define Q_TILES_RG(X16, RG)                                                                  \
    Q_TILE(X16, RG, 1) Q_TILE(X16, RG, 2) Q_TILE(X16, RG, 3) Q_TILE(X16, RG, 4)
#define Q_ROW(X16, RG)                                                                       \
    {NULL, tile##X16##_##RG##x1, tile##X16##_##RG##x2, tile##X16##_##RG##x3,                \
     tile##X16##_##RG##x4}
Q_TILES_RG(0, 1) Q_TILES_RG(0, 2) Q_TILES_RG(0, 3)
Q_TILES_RG(1, 1) Q_TILES_RG(1, 2) Q_TILES_RG(1, 3)
Q_TILES_RG(2, 1) Q_TILES_RG(2, 2) Q_TILES_RG(2, 3)
Q_TILES_RG(3, 1) Q_TILES_RG(3, 2) Q_TILES_RG(3, 3)
Q_TILES_RG(4, 1) Q_TILES_RG(4, 2) Q_TILES_RG(4, 3)
Q_TILES_RG(5, 1) Q_TILES_RG(5, 2) Q_TILES_RG(5, 3)

typedef void (*q_tile_fn)(const q_panel *p, const ev_gemm_args *a, int64_t r, int R,
                          int64_t t, int64_t kb, int n, int ofs);
static const q_tile_fn TILES[6][RGM + 1][MT + 1] = {
    {{NULL}, Q_ROW(0, 1), Q_ROW(0, 2), Q_ROW(0, 3)},
    {{NULL}, Q_ROW(1, 1), Q_ROW(1, 2), Q_ROW(1, 3)},
    {{NULL}, Q_ROW(2, 1), Q_ROW(2, 2), Q_ROW(2, 3)},
    {{NULL}, Q_ROW(3, 1), Q_ROW(3, 2), Q_ROW(3, 3)},
    {{NULL}, Q_ROW(4, 1), Q_ROW(4, 2), Q_ROW(4, 3)},
    {{NULL}, Q_ROW(5, 1), Q_ROW(5, 2), Q_ROW(5, 3)},
};

/* Tile i of a panel's n_tiles: from tile n_tiles - PF_TILES on, each tile prefetches its
 * share of the next panel's rows (rows of bytes each, stride apart, from w). */
EV_AVX512_INLINE void prefetch_share(const uint8_t *w, int64_t stride, int64_t rows,
                                     int64_t bytes, int64_t i, int64_t n_tiles) {
    const int64_t first = n_tiles > PF_TILES ? n_tiles - PF_TILES : 0;
    if (i < first) return;
    const int64_t k = i - first, m = n_tiles - first;
    for (int64_t r = k * rows / m; r < (k + 1) * rows / m; r++)
        for (int64_t o = 0; o < bytes; o += 64) _mm_prefetch((const char *)(w + r * stride + o), _MM_HINT_T0);
}

EV_AVX512_INLINE void q_gemm(const ev_gemm_args *a, int64_t r0, int64_t r1, const int wt,
                             const int x16) {
    const int64_t nb = a->n_in / EV_QK;
    const int kcb = PANEL_BYTES / BLOCK_BYTES(x16);   /* K: 2 (int16) or 4 super-blocks */
    /* q8x: the unsigned weights' offset o (Q4_K/Q5_K: none, their mins term instead) */
    const int ofs = wt == W_Q4_0 ? 8 : wt == W_Q8_0 || wt == W_IQ4_XS ? 128 : wt == W_Q6_K ? 32 : 0;
    q_panel *p = (q_panel *)(void *)a->pack;   /* 64-byte aligned, 1.2 MiB (uses 60 KiB) */
    /* rows per y block: its y (rows x n_tok floats) stays in L2 across the K chunks */
    int64_t rows_per_yb = (int64_t)Y_BLOCK_BYTES / (4 * (a->n_tok > 0 ? a->n_tok : 1)) / PR * PR;
    if (rows_per_yb < PR) rows_per_yb = PR;
    const int mode = !x16 ? (HAS_MINS(wt) ? 4 : HALF_SCALES(wt) ? 5 : 0)   /* TILES[mode] */
                     : HAS_MINS(wt) ? 2 : HALF_SCALES(wt) ? 3 : 1;
    const int64_t n_tiles = (a->n_tok + MT - 1) / MT;
    for (int64_t rb = r0; rb < r1; rb += rows_per_yb) {
        const int64_t re = r1 - rb < rows_per_yb ? r1 : rb + rows_per_yb;
        for (int64_t kb = 0; kb < nb; kb += kcb) {
            const int n = (int)(nb - kb < kcb ? nb - kb : kcb);
            for (int64_t r = rb; r < re; r += PR) {
                const int R = (int)(re - r < PR ? re - r : PR);
                panel_pack(p, a, r, R, kb, n, wt, x16);
                /* the next panel: its rows are prefetched over the last PF_TILES tiles */
                int64_t rn = r + PR, kbn = kb;
                if (rn >= re) { rn = rb; kbn = kb + kcb; }
                if (kbn >= nb) { rn = re; kbn = 0; }
                const int64_t rows_next = rn < r1 ? (r1 - rn < PR ? r1 - rn : PR) : 0;
                const int64_t bytes_next = (int64_t)W_OFFSET(wt, nb - kbn < kcb ? nb - kbn : kcb);
                const uint8_t *w_next = a->w + rn * a->w_stride + W_OFFSET(wt, kbn);
                const q_tile_fn *tiles = TILES[mode][(R + 15) / 16];
                for (int64_t i = 0; i < n_tiles; i++) {
                    prefetch_share(w_next, a->w_stride, rows_next, bytes_next, i, n_tiles);
                    const int64_t t = i * MT;
                    tiles[a->n_tok - t < MT ? a->n_tok - t : MT](p, a, r, R, t, kb, n, ofs);
                }
            }
        }
    }
}

EV_AVX512 void ev_avx512_gemm_q8x_q8_0(const ev_gemm_args *a, int64_t r0, int64_t r1) {
    q_gemm(a, r0, r1, W_Q8_0, 0);
}

EV_AVX512 void ev_avx512_gemm_q8x_q4_0(const ev_gemm_args *a, int64_t r0, int64_t r1) {
    q_gemm(a, r0, r1, W_Q4_0, 0);
}

EV_AVX512 void ev_avx512_gemm_q16x_q8_0(const ev_gemm_args *a, int64_t r0, int64_t r1) {
    q_gemm(a, r0, r1, W_Q8_0, 1);
}

EV_AVX512 void ev_avx512_gemm_q16x_q4_0(const ev_gemm_args *a, int64_t r0, int64_t r1) {
    q_gemm(a, r0, r1, W_Q4_0, 1);
}

/* Q8_0 activations with each block's sum (the mins, IQ4_XS's offset 128) */
EV_AVX512 void ev_avx512_gemm_q8x_q4_K(const ev_gemm_args *a, int64_t r0, int64_t r1) {
    q_gemm(a, r0, r1, W_Q4_K, 0);
}

EV_AVX512 void ev_avx512_gemm_q8x_q5_K(const ev_gemm_args *a, int64_t r0, int64_t r1) {
    q_gemm(a, r0, r1, W_Q5_K, 0);
}

EV_AVX512 void ev_avx512_gemm_q8x_iq4_xs(const ev_gemm_args *a, int64_t r0, int64_t r1) {
    q_gemm(a, r0, r1, W_IQ4_XS, 0);
}

/* x_sum: each block's two half sums as int16, columns 0..15 low, 16..31 high */
EV_AVX512 void ev_avx512_gemm_q8x_q6_K(const ev_gemm_args *a, int64_t r0, int64_t r1) {
    q_gemm(a, r0, r1, W_Q6_K, 0);
}

/* a->x_sum: each int16 activation block's exact sum */
EV_AVX512 void ev_avx512_gemm_q16x_q4_K(const ev_gemm_args *a, int64_t r0, int64_t r1) {
    q_gemm(a, r0, r1, W_Q4_K, 1);
}

EV_AVX512 void ev_avx512_gemm_q16x_q5_K(const ev_gemm_args *a, int64_t r0, int64_t r1) {
    q_gemm(a, r0, r1, W_Q5_K, 1);
}

EV_AVX512 void ev_avx512_gemm_q16x_iq4_xs(const ev_gemm_args *a, int64_t r0, int64_t r1) {
    q_gemm(a, r0, r1, W_IQ4_XS, 1);
}

EV_AVX512 void ev_avx512_gemm_q16x_q6_K(const ev_gemm_args *a, int64_t r0, int64_t r1) {
    q_gemm(a, r0, r1, W_Q6_K, 1);
}

/* Each block of 32 of x[n] as int16 q[32] with d = amax / 32767 (d[n / 32]; x = d q). */
EV_AVX512 void ev_avx512_quantize_i16(const float *x, int16_t *q, float *d, int64_t n) {
    for (int64_t b = 0; b < n / EV_QK; b++) {
        const __m512 v0 = _mm512_loadu_ps(x + b * EV_QK), v1 = _mm512_loadu_ps(x + b * EV_QK + 16);
        const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
        const float db = amax / 32767.0f, id = amax > 0.0f ? 32767.0f / amax : 0.0f;
        d[b] = db;
        const __m512 s = _mm512_set1_ps(id);
        /* round to nearest even; |x id| <= 32767 */
        const __m512i i0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, s));
        const __m512i i1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, s));
        _mm256_storeu_si256((__m256i *)(q + b * EV_QK), _mm512_cvtsepi32_epi16(i0));
        _mm256_storeu_si256((__m256i *)(q + b * EV_QK + 16), _mm512_cvtsepi32_epi16(i1));
    }
}

#endif
