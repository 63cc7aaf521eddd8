/*
 * kernels.c - kernel-set selection, the threaded matrix product and the row operations.
 *
 * ev_matmul: Y[n_tok][n_out] = X[n_tok][n_in] . W[n_out][n_in]^T (+ bias).
 *  1. For quantised weights and fewer than EV_MATMUL_FLOAT_MIN_TOK tokens (or
 *     EV_MATMUL_INT_MIN_TOK, Q4_K/Q5_K/IQ4_XS/Q6_K: EV_MATMUL_INT_MIN_TOK_K, where the set
 *     has integer products) the activations are quantised once, into scratch (tokens split
 *     across the pool when there are several), to the weight type's vec_dot_type (types.h):
 *     Q8_0 blocks with their scales also as float32 (Q8_0/Q4_0/IQ4_NL), or Q8_K super-blocks
 *     (the K-quants, IQ4_XS). From that many tokens on, every weight type runs the kernel
 *     set's gemm_dq on the float32 activations, except where the set has integer products
 *     for Q8_0/Q4_0 weights (gemm_q8x: activations quantised as for decode, with each block's
 *     sum; else gemm_q16x: activations as int16 blocks), for Q4_K/Q5_K (gemm_q8x, Q8_0 blocks
 *     of 32 with their sums, in the fast sets; else gemm_q16x, int16 blocks with each block's
 *     sum for the mins), IQ4_XS (likewise, gemm_q16x without sums) or Q6_K (gemm_q16x), or
 *     a bf16 product for BF16 weights (gemm_bf16x).
 *     The sets with integer products: AVX2 (gemm_q16x of Q8_0/Q4_0, vpmaddwd), AVX-512
 *     (gemm_q16x of Q8_0/Q4_0/Q4_K/Q5_K/IQ4_XS/Q6_K, VNNI) and its fast variant (+ gemm_q8x,
 *     gemm_bf16x), neon-dotprod (gemm_q16x of Q8_0/Q4_0, SDOT on the int16 activations'
 *     two byte planes, arm_neon_qgemm.c) and neon-dotprod-fast (+ gemm_q8x of Q8_0/Q4_0);
 *     scalar and plain neon have none (gemm_dq from EV_MATMUL_FLOAT_MIN_TOK tokens on).
 *  2. The pool splits the output rows into one contiguous chunk per thread, in multiples of
 *     16 rows (64 bytes of every output row: no two threads write one cache line when n_out is
 *     a multiple of 16). Each thread streams its weight rows once per token block.
 *  3. Within a chunk the kernel set's register-blocked gemm runs (several tokens per decoded
 *     weight block; for Q4_K/Q6_K in the AVX-512 sets a decode row kernel, x86_avx512_kgemv.c),
 *     or, where the set has none for the type, vec_dot over every (token, row) pair. At one
 *     token a fast set's gemv_x16 replaces gemm for F16/BF16 weights (activations rounded to
 *     the weight's 16-bit type, as llama.cpp's decode).
 */
#include "kernels.h"

#include <math.h>
#include <string.h>

/* ---- the matrix product ---------------------------------------------------------------- */

#define ROW_GRAIN 16                     /* rows per chunk unit: 64 bytes of floats */
#define SMALL_MATMUL_MACS (1 << 16)      /* below this, one thread does the whole product */

typedef struct matmul_job {
    ev_gemm_args a;
    const ev_kernels *k;
    int32_t wtype;
    ev_vec_dot_fn vec_dot;               /* k's for wtype, else the scalar set's */
    ev_gemm_fn gemm_dq;                  /* k's for wtype, else the scalar set's */
    void (*quantize_q8_0)(const float *x, ev_block_q8_0 *y, int64_t n);   /* likewise */
    void (*quantize_q8_K)(const float *x, ev_block_q8_K *y, int64_t n);   /* likewise */
    const float *x;                      /* float32 [n_tok][n_in] (quantisation source) */
    ev_block_q8_0 *xq;                   /* [n_tok][n_in/32] */
    ev_block_q8_K *xq_k;                 /* [n_tok][n_in/256] (Q8_K activations) or NULL */
    float *xq_scale;                     /* [n_tok][n_in/32] */
    int32_t *xq_sum;                     /* [n_tok][n_in/32] (gemm_q8x, gemm_q16x of
                                            Q4_K/Q5_K) or NULL */
    int half_sums;                       /* xq_sum: two int16 sums of 16 (gemm_q8x, Q6_K) */
    int16_t *xq16;                       /* [n_tok][n_in/32][32] (gemm_q16x) or NULL */
    int many;                            /* the many-token products (gemm_dq, q16x, ...) */
    ev_gemm_fn int_gemm;                 /* many: k's gemm_q8x or gemm_q16x, or NULL */
} matmul_job;

static void quantize_tokens(void *ctx, int64_t t0, int64_t t1, int tid) {
    (void)tid;
    const matmul_job *j = ctx;
    const int64_t nb = j->a.n_in / EV_QK;
    if (j->xq_k) {
        for (int64_t t = t0; t < t1; t++)
            j->quantize_q8_K(j->x + t * j->a.n_in, j->xq_k + t * (j->a.n_in / EV_QK_K), j->a.n_in);
        return;
    }
    if (j->xq16) {
        for (int64_t t = t0; t < t1; t++)
            j->k->quantize_i16(j->x + t * j->a.n_in, j->xq16 + t * nb * EV_QK,
                               j->xq_scale + t * nb, j->a.n_in);
        if (!j->xq_sum) return;
        for (int64_t t = t0; t < t1; t++)
            for (int64_t b = 0; b < nb; b++) {
                const int16_t *q = j->xq16 + (t * nb + b) * EV_QK;
                int32_t s = 0;   /* |s| <= 32 x 32767 */
                for (int i = 0; i < EV_QK; i++) s += q[i];
                j->xq_sum[t * nb + b] = s;
            }
        return;
    }
    for (int64_t t = t0; t < t1; t++) {
        ev_block_q8_0 *q = j->xq + t * nb;
        j->quantize_q8_0(j->x + t * j->a.n_in, q, j->a.n_in);
        for (int64_t b = 0; b < nb; b++) j->xq_scale[t * nb + b] = ev_fp16_to_f32(q[b].d);
        if (!j->xq_sum) continue;
        for (int64_t b = 0; b < nb; b++) {
            int32_t s[2] = {0, 0};   /* columns 0..15, 16..31: |s| <= 16 x 127 */
            for (int i = 0; i < EV_QK / 2; i++) s[0] += q[b].qs[i];   /* two loops that */
            for (int i = EV_QK / 2; i < EV_QK; i++) s[1] += q[b].qs[i];  /* vectorise */
            j->xq_sum[t * nb + b] = j->half_sums ? (int32_t)((uint32_t)(uint16_t)s[0] |
                                                             ((uint32_t)(uint16_t)s[1] << 16))
                                                 : s[0] + s[1];
        }
    }
}

/* The reference path: one vec_dot per (token, row), rows in groups of 16 for some reuse. */
static void generic_rows(const matmul_job *j, int64_t r0, int64_t r1) {
    const ev_gemm_args *a = &j->a;
    const ev_vec_dot_fn dot = j->vec_dot;
    for (int64_t rb = r0; rb < r1; rb += ROW_GRAIN) {
        int64_t re = rb + ROW_GRAIN < r1 ? rb + ROW_GRAIN : r1;
        for (int64_t t = 0; t < a->n_tok; t++) {
            for (int64_t r = rb; r < re; r++) {
                float v;
                dot(a->n_in, &v, a->w + r * a->w_stride, a->x + t * a->x_stride);
                a->y[t * a->n_out + r] = v + (a->bias ? a->bias[r] : 0.0f);
            }
        }
    }
}

static void matmul_rows(void *ctx, int64_t r0, int64_t r1, int tid) {
    const matmul_job *j = ctx;
    if (j->many) {
        ev_gemm_args a = j->a;
        a.pack = j->a.pack + (int64_t)tid * EV_GEMM_PACK_FLOATS;
        if (j->int_gemm) j->int_gemm(&a, r0, r1);
        else if (j->k->gemm_bf16x[j->wtype]) j->k->gemm_bf16x[j->wtype](&a, r0, r1);
        else j->gemm_dq(&a, r0, r1);
        return;
    }
    ev_gemm_fn gemm = j->a.n_tok == 1 && j->k->gemv_x16[j->wtype] ? j->k->gemv_x16[j->wtype]
                                                                   : j->k->gemm[j->wtype];
    if (gemm) {
        gemm(&j->a, r0, r1);
    } else {
        generic_rows(j, r0, r1);
    }
}

static size_t align64(size_t n) {
    return (n + 63) & ~(size_t)63;
}

/* Q8_K activations of n_tok tokens: n_in/256 super-blocks (292 bytes) each; SIZE_MAX when
 * that does not fit in size_t. */
static size_t q8_K_bytes(int64_t n_in, int64_t n_tok) {
    uint64_t blocks = (uint64_t)(n_in / EV_QK_K);
    if (n_tok != 0 && blocks > (uint64_t)(SIZE_MAX / 512) / (uint64_t)n_tok) return SIZE_MAX;
    return align64((size_t)(blocks * (uint64_t)n_tok) * sizeof(ev_block_q8_K));
}

/* Quantised activations of n_tok tokens: Q8_0 blocks (34 bytes), or int16 blocks (64 bytes,
 * wide), then the float scales, then the int32 sums (Q8_0 for gemm_q8x). */
static size_t quant_bytes(int64_t n_in, int64_t n_tok, int wide) {
    uint64_t blocks = (uint64_t)(n_in / EV_QK);
    if (n_tok != 0 && blocks > (uint64_t)(SIZE_MAX / 128) / (uint64_t)n_tok) return SIZE_MAX;
    blocks *= (uint64_t)n_tok;             /* (64 + 4 + 4) bytes each plus padding, no overflow */
    const size_t qs = wide ? 64 : sizeof(ev_block_q8_0);
    return align64((size_t)blocks * qs) + 2 * align64((size_t)blocks * 4);
}

/* From how many tokens on a kernel set may multiply weights of type t on integer
 * activations (0: never): those whose vec_dot_type is Q8_0 (gemm_q8x, gemm_q16x) from
 * EV_MATMUL_INT_MIN_TOK, Q4_K/Q5_K/IQ4_XS/Q6_K (gemm_q16x, gemm_q8x) from
 * EV_MATMUL_INT_MIN_TOK_K. Their scratch holds the activations too (int16 blocks, or the
 * smaller Q8_0 ones, scales and sums). */
static int64_t int_min_tok(const ev_type_traits *t) {
    if (t->vec_dot_type == EV_TYPE_Q8_0) return EV_MATMUL_INT_MIN_TOK;
    if (t->type == EV_TYPE_Q4_K || t->type == EV_TYPE_Q5_K || t->type == EV_TYPE_IQ4_XS ||
        t->type == EV_TYPE_Q6_K)
        return EV_MATMUL_INT_MIN_TOK_K;
    return 0;
}

size_t ev_matmul_scratch_bytes(int32_t wtype, int64_t n_in, int64_t n_tok, int n_threads) {
    const ev_type_traits *t = ev_type_get(wtype);
    if (!t || n_in < 0 || n_tok < 0 || n_threads < 1 || n_in % t->block_size != 0) return SIZE_MAX;
    /* the packing buffers of the many-token path (integer products: from fewer tokens) */
    const int64_t int_from = int_min_tok(t);
    const int int_act = int_from > 0;
    if (n_tok >= EV_MATMUL_FLOAT_MIN_TOK || (int_act && n_tok >= int_from)) {
        const size_t pack = sizeof(float) * (size_t)EV_GEMM_PACK_FLOATS;
        if ((size_t)n_threads > SIZE_MAX / pack) return SIZE_MAX;
        size_t many = pack * (size_t)n_threads;
        if (!int_act) return many;
        size_t quant = quant_bytes(n_in, n_tok, 1);  /* gemm_q16x's / q8x's after the packs */
        if (quant == SIZE_MAX || quant > SIZE_MAX - many) return SIZE_MAX;
        return many + quant;   /* covers the Q8_0 activations of sets without them, too */
    }
    if (t->vec_dot_type == EV_TYPE_Q8_K) return q8_K_bytes(n_in, n_tok);
    if (t->vec_dot_type != EV_TYPE_Q8_0) return 0;
    return quant_bytes(n_in, n_tok, 0);
}

/* The activations ev_matmul quantises for the integer products. */
typedef enum quant_kind {
    QUANT_Q8_0,          /* Q8_0 blocks + float scales (decode-sized products) */
    QUANT_Q8_0_SUMS,     /* + each block's int32 sum (gemm_q8x, also of Q4_K/Q5_K/IQ4_XS) */
    QUANT_Q8_0_HALF_SUMS, /* + each block's two int16 sums of 16 (gemm_q8x of Q6_K) */
    QUANT_I16,           /* int16 blocks of 32 + float scales (gemm_q16x) */
    QUANT_I16_SUMS,      /* + each block's int32 sum (gemm_q16x of Q4_K/Q5_K: the mins) */
    QUANT_Q8_K           /* Q8_K super-blocks (decode-sized products of Q8_K-dot weights) */
} quant_kind;

static void run_quantize(matmul_job *j, ev_pool *p) {
    if (j->a.n_tok > 1) {
        ev_pool_for(p, j->a.n_tok, 1, quantize_tokens, j);
    } else {
        quantize_tokens(j, 0, 1, 0);
    }
}

/* Points j's quantised activations into scratch ([n_tok][nb] Q8_0 or int16 blocks, then
 * scales, then sums; or [n_tok][n_in/256] Q8_K blocks) and quantises the tokens, split across
 * the pool when there are several. */
static void quantize_into(matmul_job *j, ev_pool *p, uint8_t *scratch, quant_kind kind) {
    if (kind == QUANT_Q8_K) {
        j->xq_k = (ev_block_q8_K *)scratch;
        j->a.x = scratch;
        j->a.x_stride = j->a.n_in / EV_QK_K * (int64_t)sizeof(ev_block_q8_K);
        run_quantize(j, p);
        return;
    }
    const int64_t nb = j->a.n_in / EV_QK, n_tok = j->a.n_tok;
    const int i16 = kind == QUANT_I16 || kind == QUANT_I16_SUMS;
    const size_t qs = i16 ? 64 : sizeof(ev_block_q8_0);
    const size_t blocks = align64((size_t)(nb * n_tok) * qs);
    const size_t floats = align64((size_t)(nb * n_tok) * 4);
    j->xq = i16 ? NULL : (ev_block_q8_0 *)scratch;
    j->xq16 = i16 ? (int16_t *)scratch : NULL;
    j->xq_scale = (float *)(scratch + blocks);
    j->half_sums = kind == QUANT_Q8_0_HALF_SUMS;
    j->xq_sum = kind == QUANT_Q8_0_SUMS || kind == QUANT_Q8_0_HALF_SUMS || kind == QUANT_I16_SUMS
                    ? (int32_t *)(scratch + blocks + floats) : NULL;
    j->a.x = scratch;
    j->a.x_stride = nb * (int64_t)qs;
    j->a.x_scale = j->xq_scale;
    j->a.x_sum = j->xq_sum;
    run_quantize(j, p);
}

int ev_matmul(ev_pool *pool, const ev_kernels *k, int32_t wtype, const void *w,
              const float *bias, int64_t n_out, int64_t n_in, const float *x, int64_t n_tok,
              float *y, void *scratch) {
    const ev_type_traits *t = ev_type_get(wtype);
    const ev_kernels *ref = ev_kernels_scalar();
    if (!t || !w || !x || !y || n_out <= 0 || n_in <= 0 || n_tok <= 0 ||
        n_in % t->block_size != 0 || !k) {
        if (y && n_out > 0 && n_tok > 0 && n_out <= INT64_MAX / n_tok)
            for (int64_t i = 0; i < n_out * n_tok; i++) y[i] = NAN;
        return -1;                         /* the callers validate shapes at load time */
    }
    matmul_job j;
    memset(&j, 0, sizeof j);
    j.k = k;
    j.wtype = wtype;
    j.vec_dot = k->vec_dot[wtype] ? k->vec_dot[wtype] : ref->vec_dot[wtype];
    j.gemm_dq = k->gemm_dq[wtype] ? k->gemm_dq[wtype] : ref->gemm_dq[wtype];
    j.quantize_q8_0 = k->quantize_q8_0 ? k->quantize_q8_0 : ref->quantize_q8_0;
    j.quantize_q8_K = k->quantize_q8_K ? k->quantize_q8_K : ref->quantize_q8_K;
    j.x = x;
    j.a.w = w;
    j.a.w_stride = ev_row_bytes(wtype, n_in);
    j.a.bias = bias;
    j.a.y = y;
    j.a.n_out = n_out;
    j.a.n_in = n_in;
    j.a.n_tok = n_tok;
    j.a.w_type = wtype;
    const int64_t macs = n_out * n_in * n_tok;
    ev_pool *p = macs < SMALL_MATMUL_MACS ? NULL : pool;
    /* integer products only for the types the scratch has room for (int_min_tok): gemm_q8x
     * (Q8_0 activations with sums; the K-quants too, Q6_K's per half block), else gemm_q16x */
    const int mins = t->type == EV_TYPE_Q4_K || t->type == EV_TYPE_Q5_K;   /* gemm_q16x: x_sum */
    const int64_t int_from = int_min_tok(t);
    const int q8x = int_from > 0 && k->gemm_q8x[wtype];
    if (q8x) j.int_gemm = k->gemm_q8x[wtype];
    else if (int_from > 0 && k->gemm_q16x[wtype] && k->quantize_i16)
        j.int_gemm = k->gemm_q16x[wtype];
    j.many = n_tok >= EV_MATMUL_FLOAT_MIN_TOK || (j.int_gemm && n_tok >= int_from);
    if (!j.many) j.int_gemm = NULL;
    if (j.int_gemm) {
        const quant_kind kind = q8x ? (t->type == EV_TYPE_Q6_K ? QUANT_Q8_0_HALF_SUMS
                                                               : QUANT_Q8_0_SUMS)
                                : mins ? QUANT_I16_SUMS
                                       : QUANT_I16;
        j.a.pack = scratch;                    /* threads pack; the activations follow */
        quantize_into(&j, p, (uint8_t *)scratch + sizeof(float) * (size_t)EV_GEMM_PACK_FLOATS *
                                                      (size_t)ev_pool_n_threads(pool),
                      kind);
    } else if (j.many) {
        j.a.x = (const uint8_t *)x;            /* float rows; threads pack from scratch */
        j.a.x_stride = n_in * (int64_t)sizeof(float);
        j.a.pack = scratch;
    } else if (t->vec_dot_type == EV_TYPE_Q8_0) {
        quantize_into(&j, p, scratch, QUANT_Q8_0);
    } else if (t->vec_dot_type == EV_TYPE_Q8_K) {
        quantize_into(&j, p, scratch, QUANT_Q8_K);
    } else {
        j.a.x = (const uint8_t *)x;
        j.a.x_stride = n_in * (int64_t)sizeof(float);
    }
    /* decode-sized products balanced (threadpool.c: the halves' times differ); the many-token
     * kernels pack their activations per call, so they keep one chunk a thread */
    if (j.many) ev_pool_for(p, n_out, ROW_GRAIN, matmul_rows, &j);
    else ev_pool_for_balanced(p, n_out, ROW_GRAIN, matmul_rows, &j);
    return 0;
}

/* ---- gemm_dq's loop nest, shared by the kernel sets ------------------------------------- */

/* tokens [t0, t1) x columns [k0, k0 + kc) as micro-tiles [tile][k][6], the last zero-padded */
static void pack_tokens(float *xp, const ev_gemm_args *a, int64_t t0, int64_t t1, int64_t k0,
                        int kc) {
    for (int64_t t = t0; t < t1; t += EV_GEMM_MR) {
        float *tile = xp + (t - t0) / EV_GEMM_MR * (int64_t)kc * EV_GEMM_MR;
        for (int m = 0; m < EV_GEMM_MR; m++) {
            if (t + m < t1) {
                const float *xr = (const float *)(a->x + (t + m) * a->x_stride) + k0;
                for (int k = 0; k < kc; k++) tile[k * EV_GEMM_MR + m] = xr[k];
            } else {
                for (int k = 0; k < kc; k++) tile[k * EV_GEMM_MR + m] = 0.0f;
            }
        }
    }
}

/* The weights the next pack will read, handed to the cache a few lines per micro-tile while
 * this chunk's tiles run: a chunk's pack reads up to NC row segments of KC columns (512 bytes
 * each for F16), too many short streams for the hardware prefetcher, and waited on DRAM
 * (the F16 pack was 7.3 % of an AVX2 prefill's samples). */
typedef struct next_chunk {
    const uint8_t *w;      /* column k0 of the chunk's first row */
    int64_t stride, rows;  /* row stride in bytes, rows in the chunk */
    int64_t lines;         /* cache lines of one row's segment */
    int64_t row, line;     /* the next line to prefetch: row, line within the row */
    int64_t per;           /* lines per micro-tile */
} next_chunk;

static void next_chunk_plan(next_chunk *nx, const ev_gemm_args *a, int64_t k0, int64_t jc,
                            int64_t nc, int64_t r0, int64_t r1, int64_t tiles) {
    enum { KC = EV_GEMM_KC };
    int64_t jn = jc + nc, kn = k0;
    if (jn >= r1) { jn = r0; kn = k0 + KC; }   /* the loop nest's order: rows, then K */
    memset(nx, 0, sizeof *nx);
    if (kn >= a->n_in) return;
    const int64_t kcn = a->n_in - kn < KC ? a->n_in - kn : KC;
    nx->w = a->w + jn * a->w_stride + ev_row_bytes(a->w_type, kn);
    nx->stride = a->w_stride;
    nx->rows = (r1 - jn < nc ? r1 - jn : nc);
    nx->lines = (ev_row_bytes(a->w_type, kcn) + 63) / 64;
    nx->per = (nx->rows * nx->lines + tiles - 1) / (tiles > 0 ? tiles : 1);
}

/* no division here: it runs once per micro-tile */
static inline void next_chunk_step(next_chunk *nx) {
    for (int64_t i = 0; i < nx->per && nx->row < nx->rows; i++) {
        __builtin_prefetch(nx->w + nx->row * nx->stride + nx->line * 64, 0, 3);
        if (++nx->line == nx->lines) { nx->line = 0; nx->row++; }
    }
}

/* The thread's pack buffer (a->pack, EV_GEMM_PACK_FLOATS) holds packed tokens, then
 * dequantised panels of rows. Each weight is dequantised once per call.
 * - Up to EV_GEMM_ONE_BLOCK tokens (prompts, a 448x448 image's 784 patches): all tokens are
 *   packed once per K chunk, and the rows go in chunks of EV_GEMM_NC_ONE_BLOCK (4 panels,
 *   64 KiB), each panel used while it is in L1/L2 and the next chunk's weights, prefetched
 *   into L2, still there when they are packed. The micro-tiles stream the tokens from L2/L3
 *   (6 KiB a tile against ~1500 cycles of FMAs). Until 2026-12-03 the tokens went in blocks of
 *   MC repacked for every 1024 rows, whose 1 MiB of panels filled the L2 and evicted the
 *   prefetched weights: at 128 tokens the F16 pack waited on DRAM, 13.6 % of a prefill.
 * - More tokens: blocks of MC tokens (240 KiB, L2), repacked once per K chunk and NC rows, so
 *   NC is large (1024 rows, the panels 1 MiB) to repack them seldom. */
/* tokens [t0, t1) into micro-tiles: the set's packer, or the portable loop */
static void pack_block(float *xp, const ev_gemm_args *a, int64_t t0, int64_t t1, int64_t k0,
                       int kc, const ev_gemm_dq_ops *ops) {
    if (ops->pack_x) ops->pack_x(xp, a, t0, t1, k0, kc);
    else pack_tokens(xp, a, t0, t1, k0, kc);
}

void ev_gemm_dq_run(const ev_gemm_args *a, int64_t r0, int64_t r1, const ev_gemm_dq_ops *ops) {
    enum { KC = EV_GEMM_KC, NR = EV_GEMM_NR, MR = EV_GEMM_MR,
           MC = EV_GEMM_MC / EV_GEMM_MR * EV_GEMM_MR };
    const int one_block = a->n_tok <= EV_GEMM_ONE_BLOCK;
    const int64_t mc = one_block ? a->n_tok : MC;                   /* tokens a block */
    const int64_t nc = one_block ? EV_GEMM_NC_ONE_BLOCK : EV_GEMM_NC;   /* rows a chunk */
    float *xp = a->pack, *wp = a->pack + (mc + MR - 1) / MR * MR * KC;
    next_chunk nx;
    for (int64_t k0 = 0; k0 < a->n_in; k0 += KC) {
        const int kc = (int)(a->n_in - k0 < KC ? a->n_in - k0 : KC);
        if (one_block) pack_block(xp, a, 0, a->n_tok, k0, kc, ops);
        for (int64_t jc = r0; jc < r1; jc += nc) {
            const int64_t jc1 = jc + nc < r1 ? jc + nc : r1;
            for (int64_t r = jc; r < jc1; r += NR)
                ops->pack_w(wp + (r - jc) * kc, a, r, (int)(jc1 - r < NR ? jc1 - r : NR), k0, kc);
            next_chunk_plan(&nx, a, k0, jc, nc, r0, r1,
                            (jc1 - jc + NR - 1) / NR * ((a->n_tok + MR - 1) / MR));
            for (int64_t t0 = 0; t0 < a->n_tok; t0 += mc) {
                const int64_t t1 = t0 + mc < a->n_tok ? t0 + mc : a->n_tok;
                if (!one_block) pack_block(xp, a, t0, t1, k0, kc, ops);
                for (int64_t r = jc; r < jc1;) {
                    /* two panels at a time where the set has a pair tile and 17+ rows are left */
                    const int pair = ops->pair && jc1 - r > NR;
                    const int64_t step = pair ? 2 * NR : NR;
                    const int R = (int)(jc1 - r < step ? jc1 - r : step);
                    const ev_gemm_dq_tile_fn *tiles = pair ? ops->pair : ops->tile;
                    const float *bias = a->bias ? a->bias + r : NULL;
                    for (int64_t t = t0; t < t1; t += MR) {
                        const int M = (int)(t1 - t < MR ? t1 - t : MR);
                        tiles[M](xp + (t - t0) * kc, wp + (r - jc) * kc, kc,
                                 a->y + t * a->n_out + r, a->n_out, R, k0 == 0, bias);
                        next_chunk_step(&nx);
                        if (pair) next_chunk_step(&nx);   /* the plan counts 16-row tiles */
                    }
                    r += step;
                }
            }
        }
    }
}

/* ---- row operations -------------------------------------------------------------------- */

/* sum(x[i] - c), or with square sum((x[i] - c)^2), in double over 8 interleaved partial
 * sums added in a fixed order: 8 independent add chains (one chain of n dependent adds was
 * latency-bound, 4 cycles an element: LayerNorm was 1.8 % of a 448x448 encode), and the same
 * result whatever the compiler vectorises. Inlined, so each use is specialised on square. */
static inline double row_sum(const float *x, int64_t n, double c, const int square) {
    double part[8] = {0.0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) {
            const double v = (double)x[i + j] - c;
            part[j] += square ? v * v : v;
        }
    for (; i < n; i++) {
        const double v = (double)x[i] - c;
        part[i & 7] += square ? v * v : v;
    }
    return ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
}

void ev_rmsnorm(float *out, const float *x, const float *w, int64_t n_rows, int64_t n,
                float eps) {
    for (int64_t r = 0; r < n_rows; r++) {
        const float *xr = x + r * n;
        float *o = out + r * n;
        const double ss = row_sum(xr, n, 0.0, 1);
        const float inv = 1.0f / sqrtf((float)(ss / (double)n) + eps);
        for (int64_t i = 0; i < n; i++) o[i] = w[i] * (xr[i] * inv);
    }
}

void ev_layernorm(float *out, const float *x, const float *w, const float *b, int64_t n_rows,
                  int64_t n, float eps) {
    for (int64_t r = 0; r < n_rows; r++) {
        const float *xr = x + r * n;
        float *o = out + r * n;
        const double mean = row_sum(xr, n, 0.0, 0) / (double)n;
        const double var = row_sum(xr, n, mean, 1);
        const float inv = 1.0f / sqrtf((float)(var / (double)n) + eps);
        const float m = (float)mean;
        for (int64_t i = 0; i < n; i++) {
            float v = (xr[i] - m) * inv;
            o[i] = v * (w ? w[i] : 1.0f) + (b ? b[i] : 0.0f);
        }
    }
}

/* The attention rows' max (ViT and prefill). Finite-math for this function only lets GCC
 * vectorise the reduction (vmaxps): as strict float code it was a serial chain of vmaxss, 3 %
 * of a 448x448 encode. Callers pass scores, which are finite (masked keys are left out of n,
 * and a NaN would make the softmax NaN either way); ev_softmax, which may see -inf logits,
 * keeps its strict loop. */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("finite-math-only", "no-signed-zeros")))
#endif
float ev_row_max(const float *x, int64_t n) {
    float mx = x[0];
    for (int64_t i = 1; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    return mx;
}

void ev_softmax(float *x, int64_t n) {
    if (n <= 0) return;
    float max = x[0];
    for (int64_t i = 1; i < n; i++) max = x[i] > max ? x[i] : max;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += x[i];
    }
    const float inv = (float)(1.0 / sum);
    for (int64_t i = 0; i < n; i++) x[i] *= inv;
}

void ev_gelu_tanh(float *x, int64_t n) {
    const float c = 0.7978845608028654f;   /* sqrt(2/pi) */
    for (int64_t i = 0; i < n; i++) {
        const float v = x[i];
        x[i] = 0.5f * v * (1.0f + tanhf(c * (v + 0.044715f * v * v * v)));
    }
}

void ev_gelu_erf(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678118654752f));
}

void ev_silu_mul(float *gate, const float *up, int64_t n) {
    for (int64_t i = 0; i < n; i++) gate[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}

void ev_add(float *y, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] += x[i];
}

void ev_row_to_f32(int32_t type, const void *src, float *dst, int64_t n) {
    const ev_type_traits *t = ev_type_get(type);
    if (!t || n <= 0 || n % t->block_size != 0) return;
    t->to_float(src, dst, n);
}

void ev_rope_rotate_half(float *x, int n_heads, int hd, const float *c, const float *s) {
    const int half = hd / 2;
    for (int h = 0; h < n_heads; h++) {
        float *v = x + (int64_t)h * hd;
        for (int j = 0; j < half; j++) {
            float a = v[j], b = v[j + half];
            v[j] = a * c[j] - b * s[j];
            v[j + half] = b * c[j] + a * s[j];
        }
    }
}
