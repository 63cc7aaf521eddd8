/*
 * types.h - tensor element types (ggml's ids and block layouts) and their traits.
 *
 * One table, as ggml's type_traits: block size, bytes per block, a row-to-float converter and
 * the dot-product kernel against a quantised activation row. A scalar reference is always
 * compiled; SIMD kernels are selected at run time (kernels.h).
 */
#ifndef EDGEVLM_TYPES_H
#define EDGEVLM_TYPES_H

#include <stddef.h>
#include <stdint.h>

enum ev_type {
    EV_TYPE_F32 = 0,
    EV_TYPE_F16 = 1,
    EV_TYPE_Q4_0 = 2,
    EV_TYPE_Q8_0 = 8,
    EV_TYPE_BF16 = 30
};
#define EV_TYPE_MAX 31             /* every id of the type table is <= this (kernel tables) */

#define EV_QK 32                   /* elements per Q8_0 / Q4_0 block */

typedef uint16_t ev_fp16;          /* IEEE half */
typedef uint16_t ev_bf16;          /* bfloat16 */

typedef struct ev_block_q8_0 {     /* 34 bytes */
    ev_fp16 d;                     /* scale */
    int8_t qs[EV_QK];              /* value = qs[i] * d */
} ev_block_q8_0;

typedef struct ev_block_q4_0 {     /* 18 bytes */
    ev_fp16 d;                     /* scale */
    uint8_t qs[EV_QK / 2];         /* low nibbles: elements 0..15, high: 16..31; value = (q-8)*d */
} ev_block_q4_0;

typedef struct ev_type_traits {
    int32_t type;                  /* enum ev_type id */
    const char *name;
    int32_t block_size;            /* elements per block (1 for F32/F16/BF16) */
    int32_t type_size;             /* bytes per block */
    int32_t quantized;             /* 1: dot products run against Q8_0 activations */
    void (*to_float)(const void *src, float *dst, int64_t n);   /* n % block_size == 0 */
    /* float32 row -> this type (the reference rounding / quantiser); n % block_size == 0 */
    void (*from_float)(const float *src, void *dst, int64_t n);
} ev_type_traits;

/* The weight types edgevlm supports live in ONE table (types.c): every kernel set has a
 * kernel for each (kernels_scalar.c fills them all; SIMD sets fall back to it), the loader
 * accepts exactly these for matrices, and the tests walk it. */
int ev_type_count(void);
const ev_type_traits *ev_type_at(int i);               /* 0 <= i < ev_type_count() */
/* NULL for a type edgevlm does not support. */
const ev_type_traits *ev_type_get(int32_t type);
/* "F32, F16, BF16, Q8_0, Q4_0" (upper-case names, ", " apart) into buf; returns buf. */
const char *ev_type_list(char *buf, size_t len);
/* Bytes of n elements (n % block_size == 0), or 0 when the type is unsupported / n misfits.
 * Overflow-checked: returns 0 when the result would not fit in int64. */
int64_t ev_row_bytes(int32_t type, int64_t n);

float ev_fp16_to_f32(ev_fp16 h);
ev_fp16 ev_f32_to_fp16(float f);   /* round to nearest even */
float ev_bf16_to_f32(ev_bf16 h);
ev_bf16 ev_f32_to_bf16(float f);   /* round to nearest even, NaN kept */

/* Activation quantisation (llama.cpp's reference rounding: d = amax/127, q = round(x/d)). */
void ev_quantize_row_q8_0(const float *x, ev_block_q8_0 *y, int64_t n);
/* Weight quantisation, for converters and tests (llama.cpp's reference). */
void ev_quantize_row_q4_0(const float *x, ev_block_q4_0 *y, int64_t n);

#endif
