/*
 * x86_avx2_sgemm.c - the many-token matrix product (prefill chunks, the ViT) on float32
 * activations: Y[t][r] = X[t] . W[r] (+ bias[r]) for one thread's rows [r0, r1), weights of any
 * type dequantised exactly into panels. Reference: the scalar set's gemm_dq (kernels_scalar.c).
 *
 * Why float: on AVX2 without VNNI an int8 block dot costs sign + maddubs + madd + cvt + FMA
 * per 32 products and block; two FMAs do 16 products. Dequantising a panel once and reusing it
 * for every token is faster, and exact (no rounding of the activations to Q8_0).
 *
 * The loop nest (BLIS: K chunks of 256 columns, up to 256 rows dequantised into panels of
 * 16 rows [k][16], token blocks of 240 packed into micro-tiles [k][6]) is ev_gemm_dq_run in
 * kernels.c; this file supplies the panel packer (SIMD dequantisation per type) and a 6
 * tokens x 16 rows micro-kernel (12 accumulators: per column 2 panel loads, 6 broadcasts, 12
 * FMAs) that adds into y after the first chunk.
 */
#if defined(__x86_64__)

#include <string.h>

#include "x86_avx2.h"
#include "x86_avx512.h"   /* its gemm_dq: these panels, its tiles */

#define PK_NR EV_GEMM_NR         /* weight rows per panel: two vectors of outputs */
#define PK_MR EV_GEMM_MR         /* tokens per micro-tile */
#define PK_KC EV_GEMM_KC         /* columns per chunk, a multiple of the block size 32 */

/* Columns [k0, k0 + kc) of one weight row as float32 into dst[kc]; k0 and kc are whole
 * blocks (EV_GEMM_KC chunks, kernels.h). The K-quants and IQ4_XS: the AVX2 dequantisers of
 * x86_avx2_kquants.c; IQ4_NL goes through the type table's scalar to_float. */
EV_AVX2_INLINE void dq_row(const int type, const uint8_t *row, int64_t k0, int kc, float *dst) {
    int k = 0;
    switch (type) {
    case EV_TYPE_F32:
        memcpy(dst, (const float *)row + k0, sizeof(float) * (size_t)kc);
        return;
    /* F16/BF16: pk_pack_half, without this float round trip */
    case EV_TYPE_Q8_0: {
        const ev_block_q8_0 *b = (const ev_block_q8_0 *)row + k0 / EV_QK;
        for (; k < kc; k += EV_QK, b++) {
            const __m256 d = _mm256_set1_ps(avx2_fp16(b->d));
            for (int g = 0; g < EV_QK; g += 8) {
                __m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(b->qs + g)));
                _mm256_storeu_ps(dst + k + g, _mm256_mul_ps(_mm256_cvtepi32_ps(q), d));
            }
        }
        return;
    }
    case EV_TYPE_Q4_0: {
        const ev_block_q4_0 *b = (const ev_block_q4_0 *)row + k0 / EV_QK;
        for (; k < kc; k += EV_QK, b++) {
            const __m256 d = _mm256_set1_ps(avx2_fp16(b->d));
            const __m256i v = avx2_unpack_q4_0(b->qs);      /* 32 int8 in element order */
            const __m128i lo = _mm256_castsi256_si128(v), hi = _mm256_extracti128_si256(v, 1);
            const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
            for (int g = 0; g < 4; g++) {
                __m256i q = _mm256_cvtepi8_epi32(parts[g]);
                _mm256_storeu_ps(dst + k + 8 * g, _mm256_mul_ps(_mm256_cvtepi32_ps(q), d));
            }
        }
        return;
    }
    case EV_TYPE_Q2_K:   /* the K-quants and IQ4_XS: whole super-blocks (k0, kc % 256 == 0) */
        ev_avx2_dequantize_q2_K((const ev_block_q2_K *)row + k0 / EV_QK_K, dst, (int64_t)kc);
        return;
    case EV_TYPE_Q3_K:
        ev_avx2_dequantize_q3_K((const ev_block_q3_K *)row + k0 / EV_QK_K, dst, (int64_t)kc);
        return;
    case EV_TYPE_Q4_K:
        ev_avx2_dequantize_q4_K((const ev_block_q4_K *)row + k0 / EV_QK_K, dst, (int64_t)kc);
        return;
    case EV_TYPE_Q5_K:
        ev_avx2_dequantize_q5_K((const ev_block_q5_K *)row + k0 / EV_QK_K, dst, (int64_t)kc);
        return;
    case EV_TYPE_Q6_K:
        ev_avx2_dequantize_q6_K((const ev_block_q6_K *)row + k0 / EV_QK_K, dst, (int64_t)kc);
        return;
    case EV_TYPE_IQ4_XS:
        ev_avx2_dequantize_iq4_xs((const ev_block_iq4_xs *)row + k0 / EV_QK_K, dst, (int64_t)kc);
        return;
    default: {
        const ev_type_traits *t = ev_type_get(type);
        t->to_float(row + k0 / t->block_size * t->type_size, dst, (int64_t)kc);
        return;
    }
    }
}

/* In-register transpose of 8 x 8 floats: r[j] becomes column j (r[0][j], ..., r[7][j]). */
EV_AVX2_INLINE void pk_transpose8(__m256 r[8]) {
    const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    const __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    const __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    const __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    const __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    r[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
    r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
    r[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
    r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
    r[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
    r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
    r[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
    r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

/* Rows r..r+R-1 (R <= 16; the rest zeros), columns [k0, k0 + kc) into one panel [k][16].
 * Each half of the panel (8 rows) is dequantised row by row into tmp [8][kc], then written
 * 8 columns at a time through an 8 x 8 transpose: 8 vector stores of 8 rows' values instead
 * of 64 scalar stores 64 bytes apart (the scalar scatter was ~16 % of a prefill). */
/* F16/BF16 rows r..r+R-1 (R <= 16; the rest zeros), columns [k0, k0 + kc) into one panel
 * [k][16] without the float round trip: per 8 rows and 8 columns, the 16-bit values go
 * through an 8 x 8 transpose of words (24 xmm unpacks) and each column is converted once,
 * 8 rows at a time. The dq_row + float transpose path stored and reloaded every value
 * (tmp) and transposed twice the bytes. */
EV_AVX2_INLINE void pk_pack_half(float *panel, const ev_gemm_args *a, const int bf16, int64_t r,
                                 int R, int64_t k0, int kc) {
    for (int h = 0; h < PK_NR; h += 8) {
        const uint16_t *rows[8];
        for (int i = 0; i < 8; i++)
            rows[i] = h + i < R ? (const uint16_t *)(a->w + (r + h + i) * a->w_stride) + k0 : NULL;
        int k = 0;
        for (; k + 8 <= kc; k += 8) {
            __m128i v[8];
            for (int i = 0; i < 8; i++)
                v[i] = rows[i] ? _mm_loadu_si128((const __m128i *)(rows[i] + k)) : _mm_setzero_si128();
            __m128i t[8], u[8];
            for (int i = 0; i < 4; i++) {   /* pairs of rows, words interleaved */
                t[2 * i] = _mm_unpacklo_epi16(v[2 * i], v[2 * i + 1]);
                t[2 * i + 1] = _mm_unpackhi_epi16(v[2 * i], v[2 * i + 1]);
            }
            for (int i = 0; i < 2; i++) {   /* quads of rows: u[4i + c] holds columns 2c, 2c+1 */
                u[4 * i + 0] = _mm_unpacklo_epi32(t[4 * i + 0], t[4 * i + 2]);
                u[4 * i + 1] = _mm_unpackhi_epi32(t[4 * i + 0], t[4 * i + 2]);
                u[4 * i + 2] = _mm_unpacklo_epi32(t[4 * i + 1], t[4 * i + 3]);
                u[4 * i + 3] = _mm_unpackhi_epi32(t[4 * i + 1], t[4 * i + 3]);
            }
            for (int c = 0; c < 4; c++) {   /* columns 2c and 2c+1: rows 0..3 then 4..7 */
                const __m128i col[2] = {_mm_unpacklo_epi64(u[c], u[4 + c]),
                                        _mm_unpackhi_epi64(u[c], u[4 + c])};
                for (int j = 0; j < 2; j++) {
                    const __m256 f = bf16 ? _mm256_castsi256_ps(_mm256_slli_epi32(
                                                _mm256_cvtepu16_epi32(col[j]), 16))
                                          : _mm256_cvtph_ps(col[j]);
                    _mm256_storeu_ps(panel + (k + 2 * c + j) * PK_NR + h, f);
                }
            }
        }
        for (; k < kc; k++)
            for (int i = 0; i < 8; i++)
                panel[k * PK_NR + h + i] = !rows[i] ? 0.0f
                                           : bf16 ? ev_bf16_to_f32(rows[i][k])
                                                  : ev_fp16_to_f32(rows[i][k]);
    }
}

EV_AVX2_INLINE void pk_pack(float *panel, const ev_gemm_args *a, const int type, int64_t r, int R,
                            int64_t k0, int kc) {
    if (type == EV_TYPE_F16 || type == EV_TYPE_BF16) {
        pk_pack_half(panel, a, type == EV_TYPE_BF16, r, R, k0, kc);
        return;
    }
    _Alignas(32) float tmp[8][PK_KC];   /* 8 KiB */
    for (int h = 0; h < PK_NR; h += 8) {
        for (int i = 0; i < 8; i++) {
            if (h + i < R) dq_row(type, a->w + (r + h + i) * a->w_stride, k0, kc, tmp[i]);
            else memset(tmp[i], 0, sizeof(float) * (size_t)kc);
        }
        int k = 0;
        for (; k + 8 <= kc; k += 8) {
            __m256 v[8];
            for (int i = 0; i < 8; i++) v[i] = _mm256_load_ps(tmp[i] + k);
            pk_transpose8(v);
            for (int j = 0; j < 8; j++) _mm256_storeu_ps(panel + (k + j) * PK_NR + h, v[j]);
        }
        for (; k < kc; k++)
            for (int i = 0; i < 8; i++) panel[k * PK_NR + h + i] = tmp[i][k];
    }
}

EV_AVX2_INLINE __m256i pk_mask(int n) {   /* lanes [0, n) */
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* Tokens [t0, t1) x columns [k0, k0 + kc) as micro-tiles [tile][k][6] (the last zero-padded):
 * per 8 columns, the 6 token rows (and 2 zero rows) go through the 8 x 8 transpose and each
 * column's 6 values are written with one 8-wide store, the next store overwriting the 2 extra
 * lanes; the tile's last column is stored masked so nothing past the tile is touched. */
EV_AVX2 static void pk_pack_x(float *xp, const ev_gemm_args *a, int64_t t0, int64_t t1,
                              int64_t k0, int kc) {
    _Static_assert(PK_MR == 6, "the transpose below fills lanes 6 and 7 with zeros");
    const __m256i six = pk_mask(PK_MR);
    for (int64_t t = t0; t < t1; t += PK_MR) {
        float *tile = xp + (t - t0) / PK_MR * (int64_t)kc * PK_MR;
        const float *rows[PK_MR];
        const int M = (int)(t1 - t < PK_MR ? t1 - t : PK_MR);
        for (int m = 0; m < PK_MR; m++)
            rows[m] = m < M ? (const float *)(a->x + (t + m) * a->x_stride) + k0 : NULL;
        int k = 0;
        for (; k + 8 <= kc; k += 8) {
            __m256 v[8];
            for (int m = 0; m < PK_MR; m++)
                v[m] = m < M ? _mm256_loadu_ps(rows[m] + k) : _mm256_setzero_ps();
            v[6] = v[7] = _mm256_setzero_ps();
            pk_transpose8(v);
            for (int j = 0; j < 7; j++) _mm256_storeu_ps(tile + (k + j) * PK_MR, v[j]);
            _mm256_maskstore_ps(tile + (k + 7) * PK_MR, six, v[7]);
        }
        for (; k < kc; k++)
            for (int m = 0; m < PK_MR; m++) tile[k * PK_MR + m] = m < M ? rows[m][k] : 0.0f;
    }
}

/* M tokens (<= 6) x the panel's 16 rows over kc columns; R valid rows; `first`: the first K
 * chunk (y = bias + sum), otherwise y += sum. */
EV_AVX2_INLINE void pk_tile(const int M, const float *x, const float *pw, int kc, float *y,
                            int64_t ldy, int R, int first, const float *bias) {
    __m256 acc[PK_MR][2];
    /* y is [n_tok][n_out] (megabytes, not in cache): ask for the tile's lines now so that
     * the read-modify-write after the K loop does not stall on M misses in a row */
#pragma GCC unroll 6
    for (int m = 0; m < M; m++) {
        __builtin_prefetch(y + m * ldy, 1, 3);
        __builtin_prefetch(y + m * ldy + R - 1, 1, 3);
        acc[m][0] = acc[m][1] = _mm256_setzero_ps();
    }
    /* unrolled: the loop's index arithmetic otherwise competes with the 12 FMAs for issue
     * slots (6x16 in L1: 75 -> 89 GFLOP/s on one Zen 3 core) */
#pragma GCC unroll 4
    for (int k = 0; k < kc; k++) {
        const __m256 w0 = _mm256_load_ps(pw + k * PK_NR), w1 = _mm256_load_ps(pw + k * PK_NR + 8);
#pragma GCC unroll 6
        for (int m = 0; m < M; m++) {
            const __m256 xb = _mm256_broadcast_ss(x + k * PK_MR + m);
            acc[m][0] = _mm256_fmadd_ps(xb, w0, acc[m][0]);
            acc[m][1] = _mm256_fmadd_ps(xb, w1, acc[m][1]);
        }
    }
    if (R == PK_NR) {
        __m256 b0 = _mm256_setzero_ps(), b1 = b0;
        if (first && bias) {
            b0 = _mm256_loadu_ps(bias);
            b1 = _mm256_loadu_ps(bias + 8);
        }
#pragma GCC unroll 6
        for (int m = 0; m < M; m++) {
            float *yr = y + m * ldy;
            __m256 v0 = _mm256_add_ps(acc[m][0], first ? b0 : _mm256_loadu_ps(yr));
            __m256 v1 = _mm256_add_ps(acc[m][1], first ? b1 : _mm256_loadu_ps(yr + 8));
            _mm256_storeu_ps(yr, v0);
            _mm256_storeu_ps(yr + 8, v1);
        }
        return;
    }
    const __m256i m0 = pk_mask(R < 8 ? R : 8), m1 = pk_mask(R > 8 ? R - 8 : 0);
    __m256 b0 = _mm256_setzero_ps(), b1 = b0;
    if (first && bias) {
        b0 = _mm256_maskload_ps(bias, m0);
        b1 = _mm256_maskload_ps(bias + 8, m1);
    }
#pragma GCC unroll 6
    for (int m = 0; m < M; m++) {
        float *yr = y + m * ldy;
        __m256 v0 = _mm256_add_ps(acc[m][0], first ? b0 : _mm256_maskload_ps(yr, m0));
        __m256 v1 = _mm256_add_ps(acc[m][1], first ? b1 : _mm256_maskload_ps(yr + 8, m1));
        _mm256_maskstore_ps(yr, m0, v0);
        _mm256_maskstore_ps(yr + 8, m1, v1);
    }
}

EV_GEMM_DQ_TILES(EV_AVX2, pk_tile, pk_tile)

static const ev_gemm_dq_tile_fn AVX2_TILES[EV_GEMM_MR + 1] = {
    NULL, pk_tile_1, pk_tile_2, pk_tile_3, pk_tile_4, pk_tile_5, pk_tile_6};

/* one panel packer per weight type, the type a compile-time constant of dq_row; gemm_dq with
 * this file's 256-bit tiles, and with the AVX-512 set's (x86_avx512_sgemm.c) on the same
 * panels */
#define PK_PACK(SUFFIX, TYPE)                                                                \
    EV_AVX2 static void pk_pack_##SUFFIX(float *panel, const ev_gemm_args *a, int64_t r,    \
                                         int R, int64_t k0, int kc) {                       \
        pk_pack(panel, a, TYPE, r, R, k0, kc);                                              \
    }                                                                                       \
    EV_AVX2 void ev_avx2_gemm_dq_##SUFFIX(const ev_gemm_args *a, int64_t r0, int64_t r1) {  \
        static const ev_gemm_dq_ops ops = {pk_pack_##SUFFIX, AVX2_TILES, pk_pack_x, NULL};  \
        ev_gemm_dq_run(a, r0, r1, &ops);                                                    \
    }                                                                                       \
    void ev_avx512_gemm_dq_##SUFFIX(const ev_gemm_args *a, int64_t r0, int64_t r1) {        \
        static const ev_gemm_dq_ops ops = {pk_pack_##SUFFIX, ev_avx512_dq_tiles, pk_pack_x,     \
                                            ev_avx512_dq_pair_tiles};                       \
        ev_gemm_dq_run(a, r0, r1, &ops);                                                    \
    }
PK_PACK(f32, EV_TYPE_F32)
PK_PACK(f16, EV_TYPE_F16)
PK_PACK(bf16, EV_TYPE_BF16)
PK_PACK(q8_0, EV_TYPE_Q8_0)
PK_PACK(q4_0, EV_TYPE_Q4_0)
PK_PACK(q4_K, EV_TYPE_Q4_K)
PK_PACK(q6_K, EV_TYPE_Q6_K)
PK_PACK(q2_K, EV_TYPE_Q2_K)
PK_PACK(q3_K, EV_TYPE_Q3_K)
PK_PACK(q5_K, EV_TYPE_Q5_K)
PK_PACK(iq4_xs, EV_TYPE_IQ4_XS)
#undef PK_PACK

/* the panel packer of any other type: dq_row's table path, the type read from the arguments */
EV_AVX2 static void pk_pack_by_table(float *panel, const ev_gemm_args *a, int64_t r, int R,
                                     int64_t k0, int kc) {
    pk_pack(panel, a, a->w_type, r, R, k0, kc);
}

EV_AVX2 void ev_avx2_gemm_dq_by_table(const ev_gemm_args *a, int64_t r0, int64_t r1) {
    static const ev_gemm_dq_ops ops = {pk_pack_by_table, AVX2_TILES, pk_pack_x, NULL};
    ev_gemm_dq_run(a, r0, r1, &ops);
}
void ev_avx512_gemm_dq_by_table(const ev_gemm_args *a, int64_t r0, int64_t r1) {
    static const ev_gemm_dq_ops ops = {pk_pack_by_table, ev_avx512_dq_tiles, pk_pack_x,
                                        ev_avx512_dq_pair_tiles};
    ev_gemm_dq_run(a, r0, r1, &ops);
}

#endif
