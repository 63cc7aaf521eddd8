/*
 * kernels.h - the compute kernels of the core: matrix products over quantised or float
 * weights, and the row operations of the transformer.
 *
 * Kernel sets: the scalar reference (always compiled, plain C) and the SIMD sets (AVX2/FMA/F16C
 * and AVX-512 VNNI on x86-64, NEON + dotprod on aarch64, each with a "fast" variant where it
 * has one: avx512-*-fast, neon-dotprod-fast); the best the CPU runs is chosen at run time.
 * Tests run both and compare. Weight matrices are ggml rows: W[n_out][n_in] in the weight's
 * type, exactly as they lie in the GGUF map.
 */
#ifndef EDGEVLM_KERNELS_H
#define EDGEVLM_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "threadpool.h"
#include "types.h"

/* One weight row (n elements, type-specific layout) times one activation row in the weight
 * type's vec_dot_type (types.h): float32 for F32/F16/BF16 weights, Q8_0 blocks for
 * Q8_0/Q4_0/IQ4_NL, Q8_K blocks for the K-quants and IQ4_XS. */
typedef void (*ev_vec_dot_fn)(int64_t n, float *out, const void *w_row, const void *x_row);

/* One matrix product as a register-blocked kernel sees it (ev_matmul builds it). */
typedef struct ev_gemm_args {
    const uint8_t *w;      /* weight rows [n_out][w_stride bytes], the weight's own layout */
    int64_t w_stride;      /* bytes per weight row */
    const uint8_t *x;      /* activations [n_tok][x_stride bytes]: float32 rows (F32/F16/BF16
                              weights, and gemm_dq for every type), else blocks of the weight
                              type's vec_dot_type (Q8_0, Q8_K) */
    int64_t x_stride;      /* bytes per activation row */
    const float *x_scale;  /* [n_tok][n_in/32] the Q8_0 activation scales as float32, or NULL
                              (float activations, and Q8_K ones, whose d is a float already) */
    const int32_t *x_sum;  /* [n_tok][n_in/32] the exact sum of each activation block's 32
                              int8 values (gemm_q8x; Q4_K/Q5_K: the weight of the mins; Q6_K:
                              the sums of its halves as two int16, low: columns 0..15) or
                              int16 ones (gemm_q16x of Q4_K/Q5_K), or NULL */
    const float *bias;     /* [n_out] or NULL */
    float *y;              /* [n_tok][n_out] */
    int64_t n_out, n_in, n_tok;
    int32_t w_type;        /* the weight's type */
    float *pack;           /* gemm_dq: this thread's EV_GEMM_PACK_FLOATS packing buffer */
} ev_gemm_args;

/* gemm_dq's blocking (BLIS-style), shared by every kernel set (ev_gemm_dq_run): K in chunks
 * of EV_GEMM_KC columns; each weight dequantised once into panels of 16 rows [k][16].
 *  - up to EV_GEMM_ONE_BLOCK tokens: all tokens packed into micro-tiles once per K chunk, the
 *    rows in chunks of EV_GEMM_NC_ONE_BLOCK (64 KiB of panels, in L1/L2 while used);
 *  - more: blocks of EV_GEMM_MC tokens (240 KiB, L2) repacked per K chunk and EV_GEMM_NC
 *    rows (1 MiB of panels); NC is large so that the repacking is rare (at NC = 256 it took
 *    16 % of a 512-token prefill). */
#define EV_GEMM_KC 256
#define EV_GEMM_NC 1024
#define EV_GEMM_NC_ONE_BLOCK 64
/* the most tokens packed as one block: they and EV_GEMM_NC_ONE_BLOCK rows of panels fill the
 * pack buffer (1200) */
#define EV_GEMM_ONE_BLOCK ((EV_GEMM_MC + EV_GEMM_NC - EV_GEMM_NC_ONE_BLOCK) / EV_GEMM_MR * EV_GEMM_MR)
#define EV_GEMM_MC 240
#define EV_GEMM_PACK_FLOATS ((EV_GEMM_MC + EV_GEMM_NC) * EV_GEMM_KC)   /* 1.23 MiB a thread */
#define EV_GEMM_NR 16          /* weight rows per panel */
/* A K chunk starts and ends on block boundaries for every block size (32, 256): a panel
 * packer dequantises whole blocks of a row, from column k0 = a multiple of EV_GEMM_KC, and
 * a row of a 256-block type has n_in % 256 == 0, so its last chunk holds whole blocks too. */
_Static_assert(EV_GEMM_KC % EV_QK_K == 0 && EV_GEMM_KC % EV_QK == 0,
               "K chunks hold whole blocks of every type");
#define EV_GEMM_MR 6           /* tokens per micro-tile (EV_GEMM_MC is a multiple) */
_Static_assert(EV_GEMM_ONE_BLOCK >= 1024, "a 448x448 image's 784 patches and 512-token prompts are one block");

/* What an architecture supplies to ev_gemm_dq_run, the loop nest shared by every set:
 *  pack_w: rows r..r+R-1 (R <= 16, the rest zeros), columns [k0, k0 + kc) of a->w as one
 *          panel laid out [k][16] (32-byte aligned);
 *  tile[M]: M tokens (1..6, micro-tile laid out [k][6]) x the panel's 16 rows over kc
 *          columns into y (rows ldy apart, R valid columns); first: y = bias + sum, else +=;
 *  pack_x: optional (NULL: the portable loop): tokens [t0, t1), columns [k0, k0 + kc) of the
 *          float activations as micro-tiles [tile][k][6], the last tile zero-padded. */
/* A micro-kernel of gemm_dq: M tokens of the packed tile x [kc][6] times a panel [kc][16]
 * (R valid rows) into y (ldy floats between tokens); `first`: y = bias + sum, else y += sum. */
typedef void (*ev_gemm_dq_tile_fn)(const float *x, const float *panel, int kc, float *y,
                                   int64_t ldy, int R, int first, const float *bias);

typedef struct ev_gemm_dq_ops {
    void (*pack_w)(float *panel, const ev_gemm_args *a, int64_t r, int R, int64_t k0, int kc);
    const ev_gemm_dq_tile_fn *tile;   /* [EV_GEMM_MR + 1]: by token count M, [0] unused */
    void (*pack_x)(float *xp, const ev_gemm_args *a, int64_t t0, int64_t t1, int64_t k0, int kc);
    /* optional (NULL: tile only): [EV_GEMM_MR + 1], M tokens x two adjacent panels (32 rows,
     * the second kc * 16 floats after the first; R valid rows, 17..32), as tile otherwise */
    const ev_gemm_dq_tile_fn *pair;
} ev_gemm_dq_ops;

/* A set's tiles: one noinline function NAME_M per token count M = 1..6 (EV_GEMM_MR), each
 * calling the inline micro-kernel BODY(M, ...) with M a constant so that its accumulators stay
 * in registers; ATTR is the set's target attribute (or nothing). The set lists them in its
 * ev_gemm_dq_tile_fn table {NULL, NAME_1, ..., NAME_6}. */
#define EV_GEMM_DQ_TILE(ATTR, NAME, BODY, M)                                                  \
    ATTR __attribute__((noinline)) static void NAME##_##M(                                   \
        const float *x, const float *pw, int kc, float *y, int64_t ldy, int R, int first,     \
        const float *bias) {                                                                 \
        BODY(M, x, pw, kc, y, ldy, R, first, bias);                                          \
    }
#define EV_GEMM_DQ_TILES(ATTR, NAME, BODY)                                                    \
    EV_GEMM_DQ_TILE(ATTR, NAME, BODY, 1) EV_GEMM_DQ_TILE(ATTR, NAME, BODY, 2)                 \
    EV_GEMM_DQ_TILE(ATTR, NAME, BODY, 3) EV_GEMM_DQ_TILE(ATTR, NAME, BODY, 4)                 \
    EV_GEMM_DQ_TILE(ATTR, NAME, BODY, 5) EV_GEMM_DQ_TILE(ATTR, NAME, BODY, 6)
_Static_assert(EV_GEMM_MR == 6, "EV_GEMM_DQ_TILES makes tiles of 1..6 tokens");

/* The BLIS loop nest of gemm_dq for rows [r0, r1), packing into a->pack. */
void ev_gemm_dq_run(const ev_gemm_args *a, int64_t r0, int64_t r1, const ev_gemm_dq_ops *ops);

/* Computes y[t][r] for every token t and the weight rows r in [r0, r1). */
typedef void (*ev_gemm_fn)(const ev_gemm_args *a, int64_t r0, int64_t r1);

typedef struct ev_kernels {
    const char *name;                        /* "scalar", "avx2", "neon-dotprod", ... */
    ev_vec_dot_fn vec_dot[EV_TYPE_MAX + 1];  /* by weight type (every type of the type
                                                table in the scalar set and the sets derived
                                                from it; NULL for other ids) */
    /* float32 dot and axpy for attention: */
    float (*dot_f32)(int64_t n, const float *a, const float *b);
    void (*axpy_f32)(int64_t n, float a, const float *x, float *y);      /* y += a*x */
    float (*dot_f16_f32)(int64_t n, const ev_fp16 *a, const float *b);   /* f16 KV cache */
    void (*axpy_f16_f32)(int64_t n, float a, const ev_fp16 *x, float *y);
    /* Float matrix product for attention over long sequences (the ViT):
     * C[m][n] = alpha * sum_k A[m][k] * B[k][n]; A rows lda floats apart, B rows ldb, C rows
     * ldc; C is overwritten. */
    void (*sgemm_f32)(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                      const float *b, int64_t ldb, float *c, int64_t ldc);
    /* x[i] = exp(x[i] - max) in place; returns the sum of the results (softmax numerator). */
    float (*exp_sum_f32)(float *x, int64_t n, float max);
    void (*gelu_tanh_f32)(float *x, int64_t n);                          /* in place */
    /* Activation quantisation for Q8_0/Q4_0/IQ4_NL weights; bit-identical to
     * ev_quantize_row_q8_0. */
    void (*quantize_q8_0)(const float *x, ev_block_q8_0 *y, int64_t n);
    /* Activation quantisation for the K-quants and IQ4_XS; bit-identical to
     * ev_quantize_row_q8_K (the scalar one; AVX2 and NEON have their own). */
    void (*quantize_q8_K)(const float *x, ev_block_q8_K *y, int64_t n);
    /* Register-blocked matrix products by weight type (many tokens per weight block decoded);
     * NULL: ev_matmul runs vec_dot over every (token, row) pair. */
    ev_gemm_fn gemm[EV_TYPE_MAX + 1];
    /* The many-token product on float32 activations (x: float rows, x_scale NULL): weights of
     * every type dequantised exactly, float sums. ev_matmul uses it from
     * EV_MATMUL_FLOAT_MIN_TOK tokens on, in every kernel set (it must not be NULL). */
    ev_gemm_fn gemm_dq[EV_TYPE_MAX + 1];
    /* Many-token products of Q8_0/Q4_0 (gemm_q16x also Q4_K/Q5_K/IQ4_XS/Q6_K, gemm_q8x also
     * Q4_K/Q5_K/IQ4_XS/Q6_K) weights on
     * integer activations, where the CPU has integer dot products that outrun float FMAs
     * (AVX-512 VNNI; AVX2's vpmaddwd on int16, gemm_q16x of Q8_0/Q4_0; aarch64 SDOT, gemm_q16x
     * and in the fast set gemm_q8x of Q8_0/Q4_0); ev_matmul prefers them to gemm_dq from EV_MATMUL_INT_MIN_TOK tokens on
     * (Q4_K/Q5_K/IQ4_XS/Q6_K: EV_MATMUL_INT_MIN_TOK_K; pack:
     * this thread's EV_GEMM_PACK_FLOATS buffer). NULL: gemm_dq.
     *  gemm_q16x: x = [n_tok][n_in/32][32] int16 from quantize_i16, x_scale their scales
     *             (Q4_K/Q5_K: and x_sum); within ~1e-5 of gemm_dq (the default sets).
     *  gemm_q8x:  x = Q8_0 blocks with x_scale and x_sum: ggml's arithmetic (for the
     *             K-quants blocks of 32, finer than ggml's Q8_K), the fastest and
     *             least exact (only in the "fast" sets, EDGEVLM_KERNELS_FAST). */
    ev_gemm_fn gemm_q16x[EV_TYPE_MAX + 1];
    void (*quantize_i16)(const float *x, int16_t *q, float *d, int64_t n);  /* d[n/32] */
    ev_gemm_fn gemm_q8x[EV_TYPE_MAX + 1];
    /* The many-token product of BF16 weights on the float activations rounded to bf16 (same
     * arguments as gemm_dq), as llama.cpp does: only in the "fast" sets. NULL: gemm_dq. */
    ev_gemm_fn gemm_bf16x[EV_TYPE_MAX + 1];
    /* The one-token product of F16/BF16 weights on the float activations rounded to the
     * weight's own 16-bit type (f16, bf16; same arguments as gemm), as llama.cpp's
     * vec_dot_f16 / vec_dot_bf16 do: half the activation bytes, so long rows keep them in L1
     * (x86_avx512_gemv.c). Only in the "fast" sets; ev_matmul prefers it to gemm at one
     * token. NULL: gemm. */
    ev_gemm_fn gemv_x16[EV_TYPE_MAX + 1];
} ev_kernels;

/* From this many tokens on, ev_matmul multiplies float32 activations with the dequantised
 * weights (prefill chunks, the ViT), or integer activations with integer dot products where
 * the kernel set has gemm_q16x / gemm_q8x, or bf16-rounded ones where it has gemm_bf16x;
 * below it, decode-sized products of quantised weights run against activations quantised to
 * the weight type's vec_dot_type (Q8_0 or Q8_K: ggml's arithmetic, memory-bound anyway). */
#define EV_MATMUL_FLOAT_MIN_TOK 16
/* Sets with integer products (gemm_q16x / gemm_q8x for weights whose vec_dot_type is Q8_0,
 * gemm_q16x for Q4_K/Q5_K/IQ4_XS/Q6_K: activations in blocks of 32 either way) use them from this
 * many tokens on: the weights are read once either way, and the integer micro-kernel beats
 * the few-token tiles from 4 tokens (a 14-token chat prompt on the 2B Q8_0 model: 443 ms with
 * the tiles, 357 ms for 16 tokens through gemm_q16x, AVX-512 host, 2026-12-01). */
#define EV_MATMUL_INT_MIN_TOK 4
/* The same for Q4_K/Q5_K (and IQ4_XS/Q6_K: same tiles, same loop), whose few-token products
 * otherwise run the Q8_K tiles:
 * at 4 tokens those were 10-25 % faster on the 2B's 2048x6144 / 6144x2048 projections, at 6
 * even, at 8 gemm_q16x 15-20 % faster (AVX-512 host, 1 and 2 threads, 2026-12-02; a shared
 * machine, so +-10 %). */
#define EV_MATMUL_INT_MIN_TOK_K 8

const ev_kernels *ev_kernels_scalar(void);
/* The scalar set's dot products of the K-quants and IQ4 (kernels_scalar_k.c): ggml's generic
 * kernels, float operation for float operation. */
void ev_vec_dot_q2_K_q8_K(int64_t n, float *out, const void *w_row, const void *x_row);
void ev_vec_dot_q3_K_q8_K(int64_t n, float *out, const void *w_row, const void *x_row);
void ev_vec_dot_q4_K_q8_K(int64_t n, float *out, const void *w_row, const void *x_row);
void ev_vec_dot_q5_K_q8_K(int64_t n, float *out, const void *w_row, const void *x_row);
void ev_vec_dot_q6_K_q8_K(int64_t n, float *out, const void *w_row, const void *x_row);
void ev_vec_dot_iq4_nl_q8_0(int64_t n, float *out, const void *w_row, const void *x_row);
void ev_vec_dot_iq4_xs_q8_K(int64_t n, float *out, const void *w_row, const void *x_row);
/* A SIMD set is assembled as out = base (the scalar set, or a set derived from it) with every
 * non-NULL entry of own put in its place: an entry a set does not implement runs base's
 * kernel (kernels_dispatch.c). */
void ev_kernels_derive(ev_kernels *out, const ev_kernels *base, const ev_kernels *own);
const ev_kernels *ev_kernels_best(void);   /* the scalar set when no SIMD path applies */
/* The best set's "fast" variant (llama.cpp's rounding of the many-token products'
 * activations: Q8_0 for Q8_0/Q4_0 weights, and blocks of 32 as Q8_0 for Q4_K/Q5_K/IQ4_XS/Q6_K;
 * bf16 for BF16), or the best set when it has none. */
const ev_kernels *ev_kernels_fast(void);
/* The SIMD sets, each NULL when the running CPU lacks its extensions (and only declared on
 * the architecture it is compiled for): src/arch/x86_avx2.c, src/arch/arm_neon.c. */
#if defined(__x86_64__)
const ev_kernels *ev_kernels_x86_avx2(void);    /* AVX2 + FMA + F16C */
const ev_kernels *ev_kernels_x86_avx512(void);       /* the AVX2 set + AVX-512 VNNI kernels */
const ev_kernels *ev_kernels_x86_avx512_fast(void);  /* that + the "fast" kernels (+ BF16) */
#endif
#if defined(__aarch64__)
const ev_kernels *ev_kernels_arm_neon(void);    /* NEON, with SDOT when the CPU has dotprod */
const ev_kernels *ev_kernels_arm_neon_plain(void);  /* NEON without SDOT (tests, old cores) */
const ev_kernels *ev_kernels_arm_neon_fast(void);   /* the dotprod set + gemm_q8x, or NULL */
#endif

/* Y[n_tok][n_out] = X[n_tok][n_in] . W[n_out][n_in]^T (+ bias[n_out] if bias != NULL).
 * n_in must be a multiple of the weight type's block size.
 * scratch: at least ev_matmul_scratch_bytes(wtype, n_in, n_tok, threads of the pool) bytes,
 * 64-byte aligned (the quantised activations of decode-sized products, or the per-thread
 * packing buffers of many-token ones). Threads split the output rows.
 * Quantised weights: fewer than EV_MATMUL_FLOAT_MIN_TOK tokens run against the activations
 * quantised to the weight type's vec_dot_type (Q8_0 for Q8_0/Q4_0/IQ4_NL, Q8_K for the
 * K-quants and IQ4_XS), more against the float32 activations (see gemm_dq), or, for Q8_0/Q4_0,
 * against int16 / Q8_0 ones where the kernel set has gemm_q16x / gemm_q8x (Q4_K/Q5_K/IQ4_XS/
 * Q6_K: int16, gemm_q16x; from EV_MATMUL_INT_MIN_TOK_K tokens on). */
/* Never skips silently: a kernel k lacks for wtype (a hand-made set with NULL entries) runs
 * the scalar set's. Returns 0, or -1 for arguments no set can multiply (a type outside the
 * type table, n_in not whole blocks, a NULL operand, a size <= 0); y (when it and the sizes
 * are usable) is then filled with NaN, never left stale. */
int ev_matmul(ev_pool *pool, const ev_kernels *k, int32_t wtype, const void *w,
              const float *bias, int64_t n_out, int64_t n_in, const float *x, int64_t n_tok,
              float *y, void *scratch);
size_t ev_matmul_scratch_bytes(int32_t wtype, int64_t n_in, int64_t n_tok, int n_threads);

/* Row operations (x: [n_rows][n]); out may alias x. */
void ev_rmsnorm(float *out, const float *x, const float *w, int64_t n_rows, int64_t n,
                float eps);
void ev_layernorm(float *out, const float *x, const float *w, const float *b, int64_t n_rows,
                  int64_t n, float eps);
void ev_softmax(float *x, int64_t n);                    /* in place, max-subtracted */
float ev_row_max(const float *x, int64_t n);             /* n >= 1 finite values (scores) */
void ev_gelu_tanh(float *x, int64_t n);                  /* in place */
void ev_gelu_erf(float *x, int64_t n);                   /* in place */
void ev_silu_mul(float *gate, const float *up, int64_t n); /* gate = silu(gate) * up */
void ev_add(float *y, const float *x, int64_t n);        /* y += x */

/* Rotary embedding, NeoX / "rotate_half" style, in place on n_heads heads of hd values:
 * pairs (j, j + hd/2) rotate by the angle whose cos/sin are c[j], s[j] (j < hd/2). */
void ev_rope_rotate_half(float *x, int n_heads, int hd, const float *c, const float *s);

/* Dequantise one row of any supported type to float32. */
void ev_row_to_f32(int32_t type, const void *src, float *dst, int64_t n);

#endif
