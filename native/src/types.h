/*
 * types.h - tensor element types (ggml's ids and block layouts) and their traits.
 *
 * One table, as ggml's type_traits: block size, bytes per block, a row-to-float converter and
 * the activation format the type's dot product runs against (ggml's vec_dot_type). A scalar
 * reference is always compiled; SIMD kernels are selected at run time (kernels.h).
 *
 * Block layouts are llama.cpp's (ggml-common.h), byte for byte: a GGUF file's tensor data is
 * an array of these structs. Multi-byte fields are little-endian, as on every target.
 */
#ifndef EDGEVLM_TYPES_H
#define EDGEVLM_TYPES_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

enum ev_type {
    EV_TYPE_F32 = 0,
    EV_TYPE_F16 = 1,
    EV_TYPE_Q4_0 = 2,
    EV_TYPE_Q4_1 = 3,
    EV_TYPE_Q5_0 = 6,
    EV_TYPE_Q5_1 = 7,
    EV_TYPE_Q8_0 = 8,
    EV_TYPE_Q2_K = 10,
    EV_TYPE_Q3_K = 11,
    EV_TYPE_Q4_K = 12,
    EV_TYPE_Q5_K = 13,
    EV_TYPE_Q6_K = 14,
    EV_TYPE_Q8_K = 15,             /* activations only (not a weight type of the table) */
    EV_TYPE_IQ4_NL = 20,
    EV_TYPE_IQ4_XS = 23,
    EV_TYPE_BF16 = 30
};
#define EV_TYPE_MAX 31             /* every id of the type table is <= this (kernel tables) */

#define EV_QK 32                   /* elements per Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL block */
#define EV_QK_K 256                /* elements per K-quant / IQ4_XS / Q8_K super-block */
#define EV_K_SCALE_BYTES 12        /* Q4_K / Q5_K: 8 6-bit scales + 8 6-bit mins in 12 bytes */

typedef uint16_t ev_fp16;          /* IEEE half */
typedef uint16_t ev_bf16;          /* bfloat16 */

/* ---- 32-element blocks ------------------------------------------------------------------ */

typedef struct ev_block_q8_0 {     /* 34 bytes */
    ev_fp16 d;                     /* scale */
    int8_t qs[EV_QK];              /* value = qs[i] * d */
} ev_block_q8_0;

typedef struct ev_block_q4_0 {     /* 18 bytes */
    ev_fp16 d;                     /* scale */
    uint8_t qs[EV_QK / 2];         /* low nibbles: elements 0..15, high: 16..31; value = (q-8)*d */
} ev_block_q4_0;

/* Q4_1, Q5_0 and Q5_1: what llama-quantize stores, in a Q4_K / Q5_K file, for matrices whose
 * rows are not whole 256-element super-blocks (quants_legacy.c). */
typedef struct ev_block_q4_1 {     /* 20 bytes, 5 bits a value */
    ev_fp16 d;                     /* scale */
    ev_fp16 m;                     /* offset: the block's minimum */
    uint8_t qs[EV_QK / 2];         /* low nibbles: elements 0..15, high: 16..31; value = q*d + m */
} ev_block_q4_1;

/* Q5_0 / Q5_1 codes q (0..31): the low 4 bits in qs as Q4_0's nibbles, the 5th bit of element
 * e (e < 32) at bit e of qh read as a little-endian uint32 (ev_q5_codes). */
typedef struct ev_block_q5_0 {     /* 22 bytes, 5.5 bits a value */
    ev_fp16 d;                     /* scale */
    uint8_t qh[4];                 /* 5th bits */
    uint8_t qs[EV_QK / 2];         /* low 4 bits; value = (q - 16)*d */
} ev_block_q5_0;

typedef struct ev_block_q5_1 {     /* 24 bytes, 6 bits a value */
    ev_fp16 d;                     /* scale */
    ev_fp16 m;                     /* offset: the block's minimum */
    uint8_t qh[4];                 /* 5th bits */
    uint8_t qs[EV_QK / 2];         /* low 4 bits; value = q*d + m */
} ev_block_q5_1;

/* The 32 5-bit codes (0..31) of a Q5_0 / Q5_1 block, in element order, into q[32]. */
static inline void ev_q5_codes(const uint8_t qs[EV_QK / 2], const uint8_t qh[4],
                               uint8_t q[EV_QK]) {
    const uint32_t high = (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 |
                          (uint32_t)qh[3] << 24;
    for (int j = 0; j < EV_QK / 2; j++) {
        q[j] = (uint8_t)((qs[j] & 0x0f) | ((high >> j) & 1u) << 4);
        q[j + EV_QK / 2] = (uint8_t)((qs[j] >> 4) | ((high >> (j + EV_QK / 2)) & 1u) << 4);
    }
}

typedef struct ev_block_iq4_nl {   /* 18 bytes: Q4_0's layout, codes into a non-linear grid */
    ev_fp16 d;                     /* scale */
    uint8_t qs[EV_QK / 2];         /* low nibbles: elements 0..15, high: 16..31;
                                      value = d * ev_iq4nl_values[q] */
} ev_block_iq4_nl;

/* The 16 levels of IQ4_NL / IQ4_XS (llama.cpp's kvalues_iq4nl), ascending. */
extern const int8_t ev_iq4nl_values[16];

/* ---- 256-element super-blocks (K-quants) -------------------------------------------------
 * Element e of a super-block lies in sub-block e/16 (Q2_K, Q3_K, Q6_K) or e/32 (Q4_K, Q5_K,
 * IQ4_XS), each with its own small integer scale (and min) that the float16 super-block
 * scale d (and dmin) multiplies. The 2-bit fields of Q2_K/Q3_K: element e = 128 h + 32 j + l
 * (h < 2, j < 4, l < 32) is bits 2j..2j+1 of qs[32 h + l]. */

typedef struct ev_block_q2_K {     /* 84 bytes, 2.625 bits a value */
    uint8_t scales[EV_QK_K / 16];  /* sub-block s: low nibble scale, high nibble min */
    uint8_t qs[EV_QK_K / 4];       /* 2-bit quants q (layout above) */
    ev_fp16 d;                     /* scale of the scales */
    ev_fp16 dmin;                  /* scale of the mins */
} ev_block_q2_K;                   /* value = d*(sc & 15)*q - dmin*(sc >> 4) */

typedef struct ev_block_q3_K {     /* 110 bytes, 3.4375 bits a value */
    uint8_t hmask[EV_QK_K / 8];    /* high bit of element e: bit e/32 of hmask[e % 32] */
    uint8_t qs[EV_QK_K / 4];       /* low 2 bits (Q2_K's layout) */
    uint8_t scales[12];            /* 16 6-bit scales: low 4 bits of scale s in the low (s < 8)
                                      or high (s >= 8) nibble of scales[s % 8], high 2 bits at
                                      bit 2*(s/4) of scales[8 + s % 4] */
    ev_fp16 d;                     /* scale of the scales */
} ev_block_q3_K;                   /* value = d*(scale - 32)*(low - (high bit ? 0 : 4)) */

typedef struct ev_block_q4_K {     /* 144 bytes, 4.5 bits a value */
    ev_fp16 d;                     /* scale of the scales */
    ev_fp16 dmin;                  /* scale of the mins */
    uint8_t scales[EV_K_SCALE_BYTES];  /* 8 6-bit scales and mins (ev_k4_scale_min) */
    uint8_t qs[EV_QK_K / 2];       /* 4-bit quants: element 64 c + l (l < 32) is the low nibble
                                      of qs[32 c + l], element 64 c + 32 + l its high nibble */
} ev_block_q4_K;                   /* value = d*scale*q - dmin*min, per 32-element sub-block */

typedef struct ev_block_q5_K {     /* 176 bytes, 5.5 bits a value */
    ev_fp16 d;                     /* scale of the scales */
    ev_fp16 dmin;                  /* scale of the mins */
    uint8_t scales[EV_K_SCALE_BYTES];  /* as Q4_K */
    uint8_t qh[EV_QK_K / 8];       /* 5th bit of element e: bit e/32 of qh[e % 32] */
    uint8_t qs[EV_QK_K / 2];       /* low 4 bits, Q4_K's layout */
} ev_block_q5_K;                   /* value = d*scale*q - dmin*min */

typedef struct ev_block_q6_K {     /* 210 bytes, 6.5625 bits a value */
    uint8_t ql[EV_QK_K / 2];       /* low 4 bits: element 128 h + 32 j + l (j < 4) is the low
                                      (j < 2) or high (j >= 2) nibble of ql[64 h + 32 (j % 2) + l] */
    uint8_t qh[EV_QK_K / 4];       /* high 2 bits: bits 2j..2j+1 of qh[32 h + l] */
    int8_t scales[EV_QK_K / 16];   /* per 16-element sub-block */
    ev_fp16 d;                     /* scale of the scales */
} ev_block_q6_K;                   /* value = d*scale*(q - 32) */

typedef struct ev_block_iq4_xs {   /* 136 bytes, 4.25 bits a value */
    ev_fp16 d;                     /* scale of the scales */
    uint16_t scales_h;             /* high 2 bits of sub-block s's 6-bit scale at bit 2s */
    uint8_t scales_l[EV_QK_K / 64];    /* low 4 bits: nibble s % 2 of scales_l[s / 2] */
    uint8_t qs[EV_QK_K / 2];       /* sub-block s (32 elements): IQ4_NL's nibbles in
                                      qs[16 s .. 16 s + 15] */
} ev_block_iq4_xs;                 /* value = d*(scale - 32)*ev_iq4nl_values[q] */

/* The activation format of the K-quants and IQ4_XS (ggml's block_q8_K). */
typedef struct ev_block_q8_K {     /* 292 bytes */
    float d;                       /* scale (float32, not half) */
    int8_t qs[EV_QK_K];            /* value = qs[i] * d */
    int16_t bsums[EV_QK_K / 16];   /* sum of each 16 consecutive qs */
} ev_block_q8_K;

/* Q4_K / Q5_K sub-block j's (j < 8) 6-bit scale and min (llama.cpp's get_scale_min_k4). */
static inline void ev_k4_scale_min(int j, const uint8_t *scales, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = scales[j] & 63;
        *m = scales[j + 4] & 63;
    } else {
        *sc = (uint8_t)((scales[j + 4] & 0x0f) | ((scales[j - 4] >> 6) << 4));
        *m = (uint8_t)((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4));
    }
}

/* All 8 at once, a byte each in a uint64 (byte j = sub-block j), for the SIMD kernels:
 * scales[0..3] / mins[0..3] are the low 6 bits of bytes 0..3 / 4..7; scales[4..7] / mins[4..7]
 * take their low 4 bits from the nibbles of bytes 8..11 and their high 2 from the top bits of
 * bytes 0..3 / 4..7. */
static inline void ev_k4_scales_mins(const uint8_t packed[EV_K_SCALE_BYTES], uint64_t *scales,
                                     uint64_t *mins) {
    uint32_t u[3];
    memcpy(u, packed, sizeof u);
    const uint32_t low6 = 0x3f3f3f3f, low4 = 0x0f0f0f0f, low2 = 0x03030303;
    const uint32_t sc_hi = (u[2] & low4) | (((u[0] >> 6) & low2) << 4);
    const uint32_t m_hi = ((u[2] >> 4) & low4) | (((u[1] >> 6) & low2) << 4);
    *scales = (uint64_t)(u[0] & low6) | (uint64_t)sc_hi << 32;
    *mins = (uint64_t)(u[1] & low6) | (uint64_t)m_hi << 32;
}

typedef struct ev_type_traits {
    int32_t type;                  /* enum ev_type id */
    const char *name;
    int32_t block_size;            /* elements per block (1 for F32/F16/BF16) */
    int32_t type_size;             /* bytes per block */
    /* The activations the dot product runs against (ggml's vec_dot_type): EV_TYPE_F32 (float
     * rows) for F32/F16/BF16, EV_TYPE_Q8_0 for Q8_0/Q4_0/IQ4_NL/Q4_1/Q5_0/Q5_1, EV_TYPE_Q8_K
     * for the K-quants and IQ4_XS. A type is "quantised" when this is not EV_TYPE_F32.
     * Q4_1/Q5_1 differ from ggml here: its dots take Q8_1 (Q8_0's d and qs plus s, the
     * block's sum d*sum(q) rounded to float16); edgevlm's take Q8_0 and compute the sum
     * d_x*sum(q_x) from the qs, exactly, in the dot (kernels_scalar.c). */
    int32_t vec_dot_type;
    /* Byte offsets in a block of its float16 scales (d, then dmin or m), -1 when absent. */
    int32_t scale_at[2];
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
/* The activation formats (F32, Q8_0, Q8_K) by id, with the same traits (to_float: their
 * dequantisation, from_float: the reference quantiser; vec_dot_type and scale_at unused);
 * NULL for any other id. ev_act_type_get(t->vec_dot_type) is what t's dot products take. */
const ev_type_traits *ev_act_type_get(int32_t type);
/* "F32, F16, BF16, Q8_0, Q4_0, ..." (upper-case names, ", " apart) into buf; returns buf. */
const char *ev_type_list(char *buf, size_t len);
/* Bytes of n elements (n % block_size == 0), or 0 when the type is unsupported / n misfits.
 * Overflow-checked: returns 0 when the result would not fit in int64. */
int64_t ev_row_bytes(int32_t type, int64_t n);
/* The first of n_blocks blocks of type (data: n_blocks * type_size bytes) whose float16
 * scale d, dmin or m is NaN or infinite, or -1 when every scale is finite (always for
 * F32/F16/BF16, which have none). */
int64_t ev_first_nonfinite_scale(int32_t type, const void *data, int64_t n_blocks);

float ev_fp16_to_f32(ev_fp16 h);
ev_fp16 ev_f32_to_fp16(float f);   /* round to nearest even */
float ev_bf16_to_f32(ev_bf16 h);
ev_bf16 ev_f32_to_bf16(float f);   /* round to nearest even, NaN kept */

/* Activation quantisation (llama.cpp's reference rounding: d = amax/127, q = round(x/d)). */
void ev_quantize_row_q8_0(const float *x, ev_block_q8_0 *y, int64_t n);
/* llama.cpp's quantize_row_q8_K_ref: d = max/-127 of the value of largest magnitude, q =
 * nearest (ties to even), bsums the 16-element sums; an all-zero block is all zero. */
void ev_quantize_row_q8_K(const float *x, ev_block_q8_K *y, int64_t n);
void ev_dequantize_row_q8_K(const ev_block_q8_K *x, float *y, int64_t n);

/* Weight quantisation, for converters and tests: llama.cpp's quantisers as llama-quantize
 * runs them without an importance matrix (quants_legacy.c, quants_k.c and quants_iq4.c say
 * which function each follows). n is a multiple of the block size; the input is finite. */
void ev_quantize_row_q4_0(const float *x, ev_block_q4_0 *y, int64_t n);
void ev_quantize_row_q4_1(const float *x, ev_block_q4_1 *y, int64_t n);
void ev_quantize_row_q5_0(const float *x, ev_block_q5_0 *y, int64_t n);
void ev_quantize_row_q5_1(const float *x, ev_block_q5_1 *y, int64_t n);
void ev_quantize_row_q2_K(const float *x, ev_block_q2_K *y, int64_t n);
void ev_quantize_row_q3_K(const float *x, ev_block_q3_K *y, int64_t n);
void ev_quantize_row_q4_K(const float *x, ev_block_q4_K *y, int64_t n);
void ev_quantize_row_q5_K(const float *x, ev_block_q5_K *y, int64_t n);
void ev_quantize_row_q6_K(const float *x, ev_block_q6_K *y, int64_t n);
void ev_quantize_row_iq4_nl(const float *x, ev_block_iq4_nl *y, int64_t n);
void ev_quantize_row_iq4_xs(const float *x, ev_block_iq4_xs *y, int64_t n);

/* Dequantisation (llama.cpp's dequantize_row_*, the same float operations in the same
 * order: bit-identical to it and to the gguf package's numpy dequantize). */
void ev_dequantize_row_q4_1(const ev_block_q4_1 *x, float *y, int64_t n);
void ev_dequantize_row_q5_0(const ev_block_q5_0 *x, float *y, int64_t n);
void ev_dequantize_row_q5_1(const ev_block_q5_1 *x, float *y, int64_t n);
void ev_dequantize_row_q2_K(const ev_block_q2_K *x, float *y, int64_t n);
void ev_dequantize_row_q3_K(const ev_block_q3_K *x, float *y, int64_t n);
void ev_dequantize_row_q4_K(const ev_block_q4_K *x, float *y, int64_t n);
void ev_dequantize_row_q5_K(const ev_block_q5_K *x, float *y, int64_t n);
void ev_dequantize_row_q6_K(const ev_block_q6_K *x, float *y, int64_t n);
void ev_dequantize_row_iq4_nl(const ev_block_iq4_nl *x, float *y, int64_t n);
void ev_dequantize_row_iq4_xs(const ev_block_iq4_xs *x, float *y, int64_t n);

#endif
