/*
 * kernels.h - the compute kernels of the core: matrix products over quantised or float
 * weights, and the row operations of the transformer.
 *
 * Two kernel sets exist: the scalar reference (always compiled, plain C) and the best SIMD set
 * for the CPU (AVX2/FMA/F16C on x86-64, NEON + dotprod on aarch64), chosen at run time.
 * Tests run both and compare. Weight matrices are ggml rows: W[n_out][n_in] in the weight's
 * type, exactly as they lie in the GGUF map.
 */
#ifndef EDGEVLM_KERNELS_H
#define EDGEVLM_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "threadpool.h"
#include "types.h"

#define EV_TYPE_MAX 31

/* One weight row (n elements, type-specific layout) times one activation row.
 * The activation is float32 for F32/F16/BF16 weights and Q8_0 blocks for Q8_0/Q4_0 weights. */
typedef void (*ev_vec_dot_fn)(int64_t n, float *out, const void *w_row, const void *x_row);

/* One matrix product as a register-blocked kernel sees it (ev_matmul builds it). */
typedef struct ev_gemm_args {
    const uint8_t *w;      /* weight rows [n_out][w_stride bytes], the weight's own layout */
    int64_t w_stride;      /* bytes per weight row */
    const uint8_t *x;      /* activations [n_tok][x_stride bytes]: float32 rows for F32/F16/BF16
                              weights, Q8_0 blocks for Q8_0/Q4_0 weights */
    int64_t x_stride;      /* bytes per activation row */
    const float *x_scale;  /* [n_tok][n_in/32] the Q8_0 activation scales as float32, or NULL
                              for float weights */
    const float *bias;     /* [n_out] or NULL */
    float *y;              /* [n_tok][n_out] */
    int64_t n_out, n_in, n_tok;
} ev_gemm_args;

/* Computes y[t][r] for every token t and the weight rows r in [r0, r1). */
typedef void (*ev_gemm_fn)(const ev_gemm_args *a, int64_t r0, int64_t r1);

typedef struct ev_kernels {
    const char *name;                        /* "scalar", "avx2", "neon-dotprod", ... */
    ev_vec_dot_fn vec_dot[EV_TYPE_MAX + 1];  /* by weight type; NULL when unsupported */
    /* float32 dot and axpy for attention: */
    float (*dot_f32)(int64_t n, const float *a, const float *b);
    void (*axpy_f32)(int64_t n, float a, const float *x, float *y);      /* y += a*x */
    float (*dot_f16_f32)(int64_t n, const ev_fp16 *a, const float *b);   /* f16 KV cache */
    void (*axpy_f16_f32)(int64_t n, float a, const ev_fp16 *x, float *y);
    /* Activation quantisation for Q8_0/Q4_0 weights; bit-identical to ev_quantize_row_q8_0. */
    void (*quantize_q8_0)(const float *x, ev_block_q8_0 *y, int64_t n);
    /* Register-blocked matrix products by weight type (many tokens per weight block decoded);
     * NULL: ev_matmul runs vec_dot over every (token, row) pair. */
    ev_gemm_fn gemm[EV_TYPE_MAX + 1];
} ev_kernels;

const ev_kernels *ev_kernels_scalar(void);
const ev_kernels *ev_kernels_best(void);   /* the scalar set when no SIMD path applies */
/* The SIMD sets, each NULL when the running CPU lacks its extensions (and only declared on
 * the architecture it is compiled for): src/arch/x86_avx2.c, src/arch/arm_neon.c. */
#if defined(__x86_64__)
const ev_kernels *ev_kernels_x86_avx2(void);    /* AVX2 + FMA + F16C */
#endif
#if defined(__aarch64__)
const ev_kernels *ev_kernels_arm_neon(void);    /* NEON, with SDOT when the CPU has dotprod */
const ev_kernels *ev_kernels_arm_neon_plain(void);  /* NEON without SDOT (tests, old cores) */
#endif

/* Y[n_tok][n_out] = X[n_tok][n_in] . W[n_out][n_in]^T (+ bias[n_out] if bias != NULL).
 * n_in must be a multiple of the weight type's block size.
 * scratch: at least ev_matmul_scratch_bytes(wtype, n_in, n_tok) bytes, 64-byte aligned
 * (holds the quantised activations). Threads split the output rows. */
void ev_matmul(ev_pool *pool, const ev_kernels *k, int32_t wtype, const void *w,
               const float *bias, int64_t n_out, int64_t n_in, const float *x, int64_t n_tok,
               float *y, void *scratch);
size_t ev_matmul_scratch_bytes(int32_t wtype, int64_t n_in, int64_t n_tok);

/* Row operations (x: [n_rows][n]); out may alias x. */
void ev_rmsnorm(float *out, const float *x, const float *w, int64_t n_rows, int64_t n,
                float eps);
void ev_layernorm(float *out, const float *x, const float *w, const float *b, int64_t n_rows,
                  int64_t n, float eps);
void ev_softmax(float *x, int64_t n);                    /* in place, max-subtracted */
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
