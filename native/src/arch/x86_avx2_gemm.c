/*
 * x86_avx2_gemm.c - register-blocked matrix products Y[t][r] = X[t] . W[r] (+ bias[r]) for one
 * thread's rows [r0, r1). Reference: ev_matmul's scalar path (vec_dot per pair).
 *
 * Loop nest (Goto-style): K in chunks; tokens in blocks whose activation chunk fits in L2;
 * rows in tiles; tokens in pairs; a register-blocked micro-kernel over the K chunk that adds
 * into y after the first chunk. Weights are thus streamed once per token block (once in all
 * when the chunk of every token fits in L2), activations come from L2, the tile from L1.
 *
 * Float weights (F32/F16/BF16): 6 rows x 2 tokens = 12 accumulators; per 8 columns the 2
 * activation vectors are loaded once and each weight vector is converted once (F16C, or a
 * shift for BF16) and feeds 2 FMAs. Decode (1 token) streams rows in 4 x 1 tiles that
 * prefetch the next four rows (float_gemv4).
 *
 * Q8_0/Q4_0 weights against Q8_0 activations (ggml's integer dot: |w| x sign(x, w) through
 * maddubs, int32 per block, then one FMA with d_w * d_x):
 *  - fewer than PANEL_MIN_TOK tokens: direct tiles of 4 rows x n_tok tokens read straight from
 *    the weights (decode: pure streaming, 34 or 18 bytes per block and row).
 *  - otherwise the 4 rows of a tile are decoded once per K chunk into a stack panel (signed
 *    int8, |w| and float scales) and a 4 x 2 micro-kernel runs on it for every token pair:
 *    per block and pair only sign, maddubs, madd, cvt, mul and FMA remain. (ev_matmul sends
 *    4 tokens and more to the set's gemm_q16x instead, x86_avx2_qgemm.c: int16 activations,
 *    the exact precision; this panel path serves sets without it.)
 */
#if defined(__x86_64__)

#include "x86_avx2.h"

#define FR 6                     /* float weights: rows x tokens per tile */
#define FC 2
#define F_KC 2048                 /* float K chunk (columns), a multiple of 8 */
#define TILE_R 4                 /* quantised: rows per tile */
#define PANEL_MIN_TOK 4          /* fewer tokens than this: no panel */
#define KC_BLOCKS 64             /* quantised K chunk: 64 blocks = 2048 columns */
#define L2_BUDGET (256 * 1024)   /* activation chunk of one token block: half of a 512 KiB L2 */

static inline int64_t min64(int64_t a, int64_t b) {
    return a < b ? a : b;
}

/* tokens per block: the activation chunk of a block fits in L2; a multiple of 2 */
static inline int64_t token_block(int64_t chunk_bytes) {
    int64_t tb = L2_BUDGET / (chunk_bytes > 0 ? chunk_bytes : 1);
    return tb < 2 ? 2 : tb / 2 * 2;
}

static inline void store_y(const ev_gemm_args *a, int64_t r, int64_t t, float s, int accumulate) {
    float *yp = &a->y[t * a->n_out + r];
    if (accumulate) {
        *yp += s;
    } else {
        *yp = s + (a->bias ? a->bias[r] : 0.0f);
    }
}

/* ---- float weights --------------------------------------------------------------------- */

#define LOAD_W(TYPE, p, k)                                                                  \
    ((TYPE) == EV_TYPE_F32   ? _mm256_loadu_ps((const float *)(p) + (k))                   \
     : (TYPE) == EV_TYPE_F16 ? avx2_load8_f16((const ev_fp16 *)(p) + (k))                  \
                             : avx2_load8_bf16((const ev_bf16 *)(p) + (k)))

static inline float w_scalar(int type, const uint8_t *p, int64_t k) {
    if (type == EV_TYPE_F32) return ((const float *)p)[k];
    if (type == EV_TYPE_F16) return ev_fp16_to_f32(((const ev_fp16 *)p)[k]);
    return ev_bf16_to_f32(((const ev_bf16 *)p)[k]);
}

/* R rows from r x C tokens from t over columns [k0, k1) (k0 % 8 == 0; the columns past the
 * last multiple of 8 only in the final chunk); R <= FR, C <= FC, compile-time after inlining. */
EV_AVX2_INLINE void float_tile(const ev_gemm_args *a, int64_t r, int64_t t, const int R,
                               const int C, const int type, int64_t k0, int64_t k1) {
    const uint8_t *wr[FR];
    const float *xr[FC];
    __m256 acc[FR][FC];
#pragma GCC unroll 8
    for (int i = 0; i < R; i++) wr[i] = a->w + (r + i) * a->w_stride;
#pragma GCC unroll 4
    for (int j = 0; j < C; j++) xr[j] = (const float *)(a->x + (t + j) * a->x_stride);
#pragma GCC unroll 8
    for (int i = 0; i < R; i++)
#pragma GCC unroll 4
        for (int j = 0; j < C; j++) acc[i][j] = _mm256_setzero_ps();
    const int64_t k8 = k0 + ((k1 - k0) & ~(int64_t)7);
    for (int64_t k = k0; k < k8; k += 8) {
        __m256 xv[FC];
#pragma GCC unroll 4
        for (int j = 0; j < C; j++) xv[j] = _mm256_loadu_ps(xr[j] + k);
#pragma GCC unroll 8
        for (int i = 0; i < R; i++) {
            const __m256 wv = LOAD_W(type, wr[i], k);
#pragma GCC unroll 4
            for (int j = 0; j < C; j++) acc[i][j] = _mm256_fmadd_ps(wv, xv[j], acc[i][j]);
        }
    }
    /* reduce every accumulator before the scalar tail, so none stays live across it */
    float sum[FR][FC];
#pragma GCC unroll 8
    for (int i = 0; i < R; i++)
#pragma GCC unroll 4
        for (int j = 0; j < C; j++) sum[i][j] = avx2_hsum(acc[i][j]);
    for (int i = 0; i < R; i++) {
        for (int j = 0; j < C; j++) {
            float s = sum[i][j];
            for (int64_t k = k8; k < k1; k++) s += w_scalar(type, wr[i], k) * xr[j][k];
            store_y(a, r + i, t + j, s, k0 > 0);
        }
    }
}

/* Decode: rows r..r+3 against the one token, each row's whole length. The 2B model's widest
 * matrices (gate, up, the LM head) have rows of 2048 F16/BF16 weights: 4 KiB, one page, and
 * the hardware prefetcher starts again at every page, so four rows streamed side by side ran
 * at 20-21 GB/s against 33 for rows of 12 KiB (bench_kernels --tok 1). Each step of 32
 * columns therefore also prefetches the same columns of the next four rows (past r1 or the
 * matrix a prefetch is only a hint). Two accumulators a row: 8 FMA chains. */
EV_AVX2_INLINE void float_gemv4(const ev_gemm_args *a, int64_t r, const int type) {
    const int64_t es = type == EV_TYPE_F32 ? 4 : 2;   /* bytes a weight */
    const float *x = (const float *)a->x;
    const uint8_t *wr[4];
    __m256 acc[4][2];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        wr[i] = a->w + (r + i) * a->w_stride;
        acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    }
    const int64_t ahead = 4 * a->w_stride;
    const int64_t n = a->n_in, k32 = n & ~(int64_t)31;
    for (int64_t k = 0; k < k32; k += 32) {
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++)
            for (int64_t o = 0; o < 32 * es; o += 64)
                _mm_prefetch((const char *)(wr[i] + ahead + k * es + o), _MM_HINT_T0);
#pragma GCC unroll 4
        for (int s = 0; s < 4; s++) {
            const __m256 xv = _mm256_loadu_ps(x + k + 8 * s);
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++)
                acc[i][s & 1] = _mm256_fmadd_ps(LOAD_W(type, wr[i], k + 8 * s), xv, acc[i][s & 1]);
        }
    }
    int64_t k = k32;
    for (; k + 8 <= n; k += 8) {
        const __m256 xv = _mm256_loadu_ps(x + k);
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) acc[i][0] = _mm256_fmadd_ps(LOAD_W(type, wr[i], k), xv, acc[i][0]);
    }
    for (int i = 0; i < 4; i++) {
        float s = avx2_hsum(_mm256_add_ps(acc[i][0], acc[i][1]));
        for (int64_t j = k; j < n; j++) s += w_scalar(type, wr[i], j) * x[j];
        store_y(a, r + i, 0, s, 0);
    }
}

/* The tile shapes in use, each its own function: inlined into the loop nest below, GCC's
 * register allocation spills the accumulators. */
#define FLOAT_TILES(SUFFIX, TYPE)                                                           \
    EV_AVX2 __attribute__((noinline)) static void tile_##SUFFIX##_full(                     \
        const ev_gemm_args *a, int64_t r, int64_t t, int64_t k0, int64_t k1) {              \
        float_tile(a, r, t, FR, FC, TYPE, k0, k1);                                          \
    }                                                                                       \
    EV_AVX2 __attribute__((noinline)) static void tile_##SUFFIX##_col(                      \
        const ev_gemm_args *a, int64_t r, int64_t t, int64_t k0, int64_t k1) {              \
        float_tile(a, r, t, FR, 1, TYPE, k0, k1);                                           \
    }                                                                                       \
    EV_AVX2 __attribute__((noinline)) static void tile_##SUFFIX##_gemv(                     \
        const ev_gemm_args *a, int64_t r, int64_t t, int64_t k0, int64_t k1) {              \
        (void)t, (void)k0, (void)k1;                                                        \
        float_gemv4(a, r, TYPE);                                                            \
    }                                                                                       \
    EV_AVX2 __attribute__((noinline)) static void tile_##SUFFIX##_one(                      \
        const ev_gemm_args *a, int64_t r, int64_t t, int64_t k0, int64_t k1) {              \
        float_tile(a, r, t, 1, 1, TYPE, k0, k1);                                            \
    }

FLOAT_TILES(f32, EV_TYPE_F32)
FLOAT_TILES(f16, EV_TYPE_F16)
FLOAT_TILES(bf16, EV_TYPE_BF16)

typedef void (*float_tile_fn)(const ev_gemm_args *a, int64_t r, int64_t t, int64_t k0, int64_t k1);
typedef struct float_tiles { float_tile_fn full, col, gemv, one; } float_tiles;

static void float_gemm(const ev_gemm_args *a, int64_t r0, int64_t r1, const float_tiles *f) {
    if (a->n_tok == 1) {                       /* decode: stream every row once, 4 at a time */
        int64_t r = r0;
        for (; r + 4 <= r1; r += 4) f->gemv(a, r, 0, 0, a->n_in);
        for (; r < r1; r++) f->one(a, r, 0, 0, a->n_in);
        return;
    }
    const int64_t tb = token_block(F_KC * (int64_t)sizeof(float));
    for (int64_t k0 = 0; k0 < a->n_in; k0 += F_KC) {
        const int64_t k1 = k0 + F_KC >= a->n_in ? a->n_in : k0 + F_KC;
        for (int64_t t0 = 0; t0 < a->n_tok; t0 += tb) {
            const int64_t t1 = min64(t0 + tb, a->n_tok);
            int64_t r = r0;
            for (; r + FR <= r1; r += FR) {
                int64_t t = t0;
                for (; t + FC <= t1; t += FC) f->full(a, r, t, k0, k1);
                for (; t < t1; t++) f->col(a, r, t, k0, k1);
            }
            for (; r < r1; r++)
                for (int64_t t = t0; t < t1; t++) f->one(a, r, t, k0, k1);
        }
    }
}

void ev_avx2_gemm_f32(const ev_gemm_args *a, int64_t r0, int64_t r1) {
    static const float_tiles f = {tile_f32_full, tile_f32_col, tile_f32_gemv, tile_f32_one};
    float_gemm(a, r0, r1, &f);
}

void ev_avx2_gemm_f16(const ev_gemm_args *a, int64_t r0, int64_t r1) {
    static const float_tiles f = {tile_f16_full, tile_f16_col, tile_f16_gemv, tile_f16_one};
    float_gemm(a, r0, r1, &f);
}

void ev_avx2_gemm_bf16(const ev_gemm_args *a, int64_t r0, int64_t r1) {
    static const float_tiles f = {tile_bf16_full, tile_bf16_col, tile_bf16_gemv, tile_bf16_one};
    float_gemm(a, r0, r1, &f);
}

/* ---- quantised weights: direct tiles (few tokens) -------------------------------------- */

EV_AVX2_INLINE __m256i load_wq(const uint8_t *row, int64_t b, const int q4) {
    if (q4) return avx2_unpack_q4_0(((const ev_block_q4_0 *)row)[b].qs);
    return _mm256_loadu_si256((const __m256i *)((const ev_block_q8_0 *)row)[b].qs);
}

EV_AVX2_INLINE float load_dw(const uint8_t *row, int64_t b, const int q4) {
    if (q4) return avx2_fp16(((const ev_block_q4_0 *)row)[b].d);
    return avx2_fp16(((const ev_block_q8_0 *)row)[b].d);
}

/* R rows x C tokens over all blocks, weights decoded in the loop; R <= 4, C <= 3. */
EV_AVX2_INLINE void q_direct_tile(const ev_gemm_args *a, int64_t r, int64_t t, const int R,
                                  const int C, const int q4) {
    const int64_t nb = a->n_in / EV_QK;
    const uint8_t *wr[TILE_R];
    const ev_block_q8_0 *xr[3];
    const float *dx[3];
    __m256 acc[TILE_R][3];
#pragma GCC unroll 4
    for (int i = 0; i < R; i++) wr[i] = a->w + (r + i) * a->w_stride;
#pragma GCC unroll 4
    for (int j = 0; j < C; j++) {
        xr[j] = (const ev_block_q8_0 *)(a->x + (t + j) * a->x_stride);
        dx[j] = a->x_scale + (t + j) * nb;
    }
#pragma GCC unroll 4
    for (int i = 0; i < R; i++)
#pragma GCC unroll 4
        for (int j = 0; j < C; j++) acc[i][j] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
#pragma GCC unroll 4
        for (int i = 0; i < R; i++) {
            __m256i wv = load_wq(wr[i], b, q4);
            __m256i wa = _mm256_sign_epi8(wv, wv);
            __m256 dw = _mm256_set1_ps(load_dw(wr[i], b, q4));
#pragma GCC unroll 4
            for (int j = 0; j < C; j++) {
                __m256i xv = _mm256_loadu_si256((const __m256i *)xr[j][b].qs);
                __m256i p = avx2_dot32(wa, wv, xv);
                __m256 d = _mm256_mul_ps(dw, _mm256_broadcast_ss(dx[j] + b));
                acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), d, acc[i][j]);
            }
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < R; i++)
#pragma GCC unroll 4
        for (int j = 0; j < C; j++) store_y(a, r + i, t + j, avx2_hsum(acc[i][j]), 0);
}

/* Decode: one row against one token, blocks in pairs on two accumulators. One row at a time
 * keeps each thread on a single sequential stream through the weights, which the hardware
 * prefetcher follows; interleaving several rows' streams measured 40-50 % slower from DRAM.
 * On Intel the rows also prefetch DECODE_PREFETCH_AHEAD bytes ahead (x86_avx2.h). */
#define DECODE_PREFETCH_AHEAD 2048
EV_AVX2_INLINE void q_gemv_row(const ev_gemm_args *a, int64_t r, const int q4) {
    const int64_t nb = a->n_in / EV_QK;
    const uint8_t *wr = a->w + r * a->w_stride;
    const ev_block_q8_0 *xr = (const ev_block_q8_0 *)a->x;
    const float *dx = a->x_scale;
    const int64_t block = q4 ? (int64_t)sizeof(ev_block_q4_0) : (int64_t)sizeof(ev_block_q8_0);
    const int prefetch = ev_x86_decode_prefetch;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
        if (prefetch) decode_prefetch(wr + b * block, 2 * block, DECODE_PREFETCH_AHEAD);
        __m256i w0 = load_wq(wr, b, q4), w1 = load_wq(wr, b + 1, q4);
        __m256i p0 = avx2_dot32(_mm256_sign_epi8(w0, w0), w0,
                                _mm256_loadu_si256((const __m256i *)xr[b].qs));
        __m256i p1 = avx2_dot32(_mm256_sign_epi8(w1, w1), w1,
                                _mm256_loadu_si256((const __m256i *)xr[b + 1].qs));
        __m256 d0 = _mm256_set1_ps(load_dw(wr, b, q4) * dx[b]);
        __m256 d1 = _mm256_set1_ps(load_dw(wr, b + 1, q4) * dx[b + 1]);
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), d0, acc0);
        acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p1), d1, acc1);
    }
    if (b < nb) {
        __m256i w0 = load_wq(wr, b, q4);
        __m256i p0 = avx2_dot32(_mm256_sign_epi8(w0, w0), w0,
                                _mm256_loadu_si256((const __m256i *)xr[b].qs));
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0),
                               _mm256_set1_ps(load_dw(wr, b, q4) * dx[b]), acc0);
    }
    store_y(a, r, 0, avx2_hsum(_mm256_add_ps(acc0, acc1)), 0);
}

/* Q4_0 decode, 8 blocks at a time. The nibbles stay unsigned: maddubs(q, x) with q in
 * [0, 15] gives sum(q x), and sum((q - 8) x) = sum(q x) - 8 sum(x). Each thread rearranges the
 * activations once per call (q4_gemv_x; n_in bytes, next to nothing) so that two weight blocks
 * share one register: v = [qs(b) | qs(b+1)], whose low nibbles meet lo = [x(b)[0..15] |
 * x(b+1)[0..15]] and high nibbles hi = [x(b)[16..31] | x(b+1)[16..31]]. Per pair of blocks:
 * 2 loads, and + shift + and, 2 maddubs, 1 add (int16 lanes of 4 products). Per 8 blocks, 3
 * hadd_epi16 (lanes of 16 products: |sum| <= 16 * 15 * 127 = 30480, no overflow) and one madd
 * into int32 leave one lane per block, in the order [b0 b2 b4 b6 | b1 b3 b5 b7]; 8 sum(x) and
 * d_x are stored in that order, the 8 fp16 d_w are gathered in it, and one FMA applies the
 * scales. About 8 instructions per block where a block-by-block dot product takes ~12: the
 * decode of Q4_0 was compute-bound below the stream bandwidth. */
#define Q4_GEMV_MAX_BLOCKS 1024   /* n_in <= 32768; longer rows take q_gemv_row */

typedef struct q4_gemv_x {
    _Alignas(32) int8_t pair[Q4_GEMV_MAX_BLOCKS / 2][2][32];   /* [pair][lo, hi][32] */
    _Alignas(32) int32_t x8sum[Q4_GEMV_MAX_BLOCKS];   /* 8 sum(x(b)), permuted per 8 blocks */
    _Alignas(32) float dx[Q4_GEMV_MAX_BLOCKS];        /* d_x(b), permuted alike */
} q4_gemv_x;

EV_AVX2_INLINE __m256i q4_unsigned(const uint8_t *qs) {   /* 32 nibbles in element order */
    const __m128i t = _mm_loadu_si128((const __m128i *)qs);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), _mm256_set1_epi8(0x0f));
}

EV_AVX2_INLINE int32_t q4_hsum_i32(__m256i v) {   /* the sum of the 8 int32 lanes */
    __m128i h = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4e));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xb1));
    return _mm_cvtsi128_si32(h);
}

/* slot of block b in its group of 8: [b0 b2 b4 b6 b1 b3 b5 b7]; blocks past the last full
 * group keep their place (the tail loop reads them one by one) */
static inline int64_t q4_slot(int64_t b, int64_t nb8) {
    return b < nb8 ? (b & ~(int64_t)7) + ((b & 1) ? 4 : 0) + ((b & 7) >> 1) : b;
}

EV_AVX2_INLINE void q4_gemv_prepare(const ev_gemm_args *a, q4_gemv_x *px, int64_t nb) {
    const ev_block_q8_0 *xr = (const ev_block_q8_0 *)a->x;
    const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
    const int64_t nb8 = nb / 8 * 8;
    for (int64_t b = 0; b < nb; b++) {
        const __m256i x = _mm256_loadu_si256((const __m256i *)xr[b].qs);
        const __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, x), ones16);
        px->x8sum[q4_slot(b, nb8)] = 8 * q4_hsum_i32(s);
        px->dx[q4_slot(b, nb8)] = a->x_scale[b];
        if (b < nb8) {   /* x[0..15] into lo, x[16..31] into hi, block b's half of its pair */
            int8_t *lo = px->pair[b / 2][0] + (b & 1) * 16, *hi = px->pair[b / 2][1] + (b & 1) * 16;
            _mm_store_si128((__m128i *)lo, _mm256_castsi256_si128(x));
            _mm_store_si128((__m128i *)hi, _mm256_extracti128_si256(x, 1));
        }
    }
}

/* the int16 lanes (4 products each) of weight blocks b, b+1 against their activations */
EV_AVX2_INLINE __m256i q4_pair_dot(const ev_block_q4_0 *w, const q4_gemv_x *px, int64_t b) {
    const __m256i v = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)w[b].qs)),
        _mm_loadu_si128((const __m128i *)w[b + 1].qs), 1);
    const __m256i m = _mm256_set1_epi8(0x0f);
    const __m256i lo = _mm256_and_si256(v, m), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m);
    return _mm256_add_epi16(
        _mm256_maddubs_epi16(lo, _mm256_load_si256((const __m256i *)px->pair[b / 2][0])),
        _mm256_maddubs_epi16(hi, _mm256_load_si256((const __m256i *)px->pair[b / 2][1])));
}

EV_AVX2_INLINE void q4_gemv_row(const ev_gemm_args *a, int64_t r, const q4_gemv_x *px) {
    const int64_t nb = a->n_in / EV_QK;
    const ev_block_q4_0 *w = (const ev_block_q4_0 *)(a->w + r * a->w_stride);
    const __m256i ones16 = _mm256_set1_epi16(1);
    const int prefetch = ev_x86_decode_prefetch;
    __m256 acc = _mm256_setzero_ps();
    int64_t b = 0;
    for (; b + 8 <= nb; b += 8) {
        if (prefetch) decode_prefetch(w + b, 8 * (int64_t)sizeof(ev_block_q4_0), DECODE_PREFETCH_AHEAD);
        const __m256i g = _mm256_hadd_epi16(
            _mm256_hadd_epi16(q4_pair_dot(w, px, b), q4_pair_dot(w, px, b + 2)),
            _mm256_hadd_epi16(q4_pair_dot(w, px, b + 4), q4_pair_dot(w, px, b + 6)));
        const __m256i dot = _mm256_sub_epi32(_mm256_madd_epi16(g, ones16),
                                             _mm256_load_si256((const __m256i *)(px->x8sum + b)));
        const __m128i d16 = _mm_setr_epi16((short)w[b].d, (short)w[b + 2].d, (short)w[b + 4].d,
                                           (short)w[b + 6].d, (short)w[b + 1].d, (short)w[b + 3].d,
                                           (short)w[b + 5].d, (short)w[b + 7].d);
        const __m256 d = _mm256_mul_ps(_mm256_cvtph_ps(d16), _mm256_load_ps(px->dx + b));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), d, acc);
    }
    const ev_block_q8_0 *xr = (const ev_block_q8_0 *)a->x;
    float tail = 0.0f;
    for (; b < nb; b++) {   /* the last nb % 8 blocks, unpermuted */
        const __m256i x = _mm256_loadu_si256((const __m256i *)xr[b].qs);
        const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(q4_unsigned(w[b].qs), x), ones16);
        tail += (float)(q4_hsum_i32(p) - px->x8sum[b]) * (avx2_fp16(w[b].d) * px->dx[b]);
    }
    store_y(a, r, 0, avx2_hsum(acc) + tail, 0);
}

EV_AVX2_INLINE void q_direct(const ev_gemm_args *a, int64_t r0, int64_t r1, const int q4) {
    int64_t r = r0;
    const int64_t nb = a->n_in / EV_QK;
    if (q4 && a->n_tok == 1 && nb <= Q4_GEMV_MAX_BLOCKS) {
        q4_gemv_x px;   /* this thread's rearranged activations (40 KiB of stack) */
        q4_gemv_prepare(a, &px, nb);
        for (; r < r1; r++) q4_gemv_row(a, r, &px);
        return;
    }
    switch (a->n_tok) {
    case 1: for (; r < r1; r++) q_gemv_row(a, r, q4); break;
    case 2: for (; r + TILE_R <= r1; r += TILE_R) q_direct_tile(a, r, 0, TILE_R, 2, q4); break;
    case 3: for (; r + TILE_R <= r1; r += TILE_R) q_direct_tile(a, r, 0, TILE_R, 3, q4); break;
    default: break;
    }
    for (; r < r1; r++)
        for (int64_t t = 0; t < a->n_tok; t++) q_direct_tile(a, r, t, 1, 1, q4);
}

/* ---- quantised weights: panel of 4 decoded rows x 2-token micro-kernel ------------------ */

typedef struct q_panel {
    _Alignas(32) int8_t ws[TILE_R][KC_BLOCKS * EV_QK];   /* signed weights [row][k] */
    _Alignas(32) uint8_t wa[TILE_R][KC_BLOCKS * EV_QK];  /* |weights| */
    _Alignas(32) float dw[KC_BLOCKS][2 * TILE_R];        /* block scales, the 4 rows twice */
} q_panel;

/* Decodes blocks [kb, kb + n) of rows r..r+R-1 into the panel; missing rows are zeros. */
EV_AVX2_INLINE void panel_fill(q_panel *p, const ev_gemm_args *a, int64_t r, int R, int64_t kb,
                               int n, const int q4) {
    for (int i = 0; i < TILE_R; i++) {
        const uint8_t *row = a->w + (r + (i < R ? i : 0)) * a->w_stride;
        for (int b = 0; b < n; b++) {
            __m256i wv = i < R ? load_wq(row, kb + b, q4) : _mm256_setzero_si256();
            _mm256_store_si256((__m256i *)&p->ws[i][b * EV_QK], wv);
            _mm256_store_si256((__m256i *)&p->wa[i][b * EV_QK], _mm256_sign_epi8(wv, wv));
            p->dw[b][i] = p->dw[b][i + TILE_R] = i < R ? load_dw(row, kb + b, q4) : 0.0f;
        }
    }
}

/* 4 panel rows x C (1 or 2) tokens over n blocks from kb; adds into y after the first chunk. */
EV_AVX2_INLINE void panel_kernel(const q_panel *p, const ev_gemm_args *a, int64_t r, int R,
                                 int64_t t, const int C, int64_t kb, int n) {
    const int64_t nb = a->n_in / EV_QK;
    const ev_block_q8_0 *xr[2];
    const float *dx[2];
    __m256 acc[TILE_R][2];
#pragma GCC unroll 2
    for (int j = 0; j < C; j++) {
        xr[j] = (const ev_block_q8_0 *)(a->x + (t + j) * a->x_stride) + kb;
        dx[j] = a->x_scale + (t + j) * nb + kb;
    }
#pragma GCC unroll 4
    for (int i = 0; i < TILE_R; i++)
#pragma GCC unroll 2
        for (int j = 0; j < C; j++) acc[i][j] = _mm256_setzero_ps();
    _Alignas(32) float sc[2 * TILE_R];   /* d_w[i] * d_x[j] of the block at sc[j * 4 + i] */
    for (int b = 0; b < n; b++) {
        __m256i xv[2];
        /* all 8 scale products of the block in one multiply, read back by broadcast loads */
        __m256 dx8 = _mm256_set_m128(_mm_broadcast_ss(dx[C - 1] + b), _mm_broadcast_ss(dx[0] + b));
        _mm256_store_ps(sc, _mm256_mul_ps(_mm256_load_ps(p->dw[b]), dx8));
#pragma GCC unroll 2
        for (int j = 0; j < C; j++) xv[j] = _mm256_loadu_si256((const __m256i *)xr[j][b].qs);
#pragma GCC unroll 4
        for (int i = 0; i < TILE_R; i++) {
            __m256i wa = _mm256_load_si256((const __m256i *)&p->wa[i][b * EV_QK]);
            __m256i ws = _mm256_load_si256((const __m256i *)&p->ws[i][b * EV_QK]);
#pragma GCC unroll 2
            for (int j = 0; j < C; j++) {
                __m256i q = avx2_dot32(wa, ws, xv[j]);
                acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(q),
                                            _mm256_broadcast_ss(&sc[j * TILE_R + i]), acc[i][j]);
            }
        }
    }
    /* fully unrolled, so that acc[][] lives in registers only */
#pragma GCC unroll 4
    for (int i = 0; i < TILE_R; i++)
#pragma GCC unroll 2
        for (int j = 0; j < C; j++)
            if (i < R) store_y(a, r + i, t + j, avx2_hsum(acc[i][j]), kb > 0);
}

EV_AVX2_INLINE void q_gemm(const ev_gemm_args *a, int64_t r0, int64_t r1, const int q4) {
    if (a->n_tok < PANEL_MIN_TOK) {
        q_direct(a, r0, r1, q4);
        return;
    }
    const int64_t nb = a->n_in / EV_QK;
    const int64_t tb = token_block(KC_BLOCKS * (int64_t)sizeof(ev_block_q8_0));
    q_panel panel;
    for (int64_t kb = 0; kb < nb; kb += KC_BLOCKS) {
        const int n = (int)min64(KC_BLOCKS, nb - kb);
        for (int64_t t0 = 0; t0 < a->n_tok; t0 += tb) {
            const int64_t t1 = min64(t0 + tb, a->n_tok);
            for (int64_t r = r0; r < r1; r += TILE_R) {
                const int R = (int)min64(TILE_R, r1 - r);
                panel_fill(&panel, a, r, R, kb, n, q4);
                int64_t t = t0;
                for (; t + 2 <= t1; t += 2) panel_kernel(&panel, a, r, R, t, 2, kb, n);
                if (t < t1) panel_kernel(&panel, a, r, R, t, 1, kb, n);
            }
        }
    }
}

EV_AVX2 void ev_avx2_gemm_q8_0(const ev_gemm_args *a, int64_t r0, int64_t r1) {
    q_gemm(a, r0, r1, 0);
}

EV_AVX2 void ev_avx2_gemm_q4_0(const ev_gemm_args *a, int64_t r0, int64_t r1) {
    q_gemm(a, r0, r1, 1);
}

#endif
