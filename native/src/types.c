/*
 * types.c - the element-type table (ggml ids and block layouts), half/bfloat16 conversions,
 * row dequantisation and llama.cpp's reference quantisers of Q8_0/Q4_0 (Q4_1/Q5_0/Q5_1, the
 * K-quants and IQ4 are in quants_legacy.c, quants_k.c and quants_iq4.c).
 *
 * The conversions here are the exact scalar reference: round to nearest even, subnormals,
 * infinities and NaNs handled bit for bit. SIMD paths elsewhere are tested against them.
 */
#include "types.h"

#include "util.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

/* ---- half and bfloat16 ---------------------------------------------------------------- */

static inline float f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

float ev_fp16_to_f32(ev_fp16 h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0) {
        if (mant == 0) return f32_from_bits(sign);                  /* +-0 */
        uint32_t e = 113;                                            /* subnormal: normalise */
        while (!(mant & 0x400u)) {
            mant <<= 1;
            e--;
        }
        return f32_from_bits(sign | (e << 23) | ((mant & 0x3ffu) << 13));
    }
    if (exp == 31) return f32_from_bits(sign | 0x7f800000u | (mant << 13));   /* inf, NaN */
    return f32_from_bits(sign | ((exp + 112) << 23) | (mant << 13));
}

ev_fp16 ev_f32_to_fp16(float f) {
    uint32_t x = f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    x &= 0x7fffffffu;
    if (x >= 0x7f800000u) {                                          /* inf or NaN */
        if (x == 0x7f800000u) return (ev_fp16)(sign | 0x7c00u);
        return (ev_fp16)(sign | 0x7e00u | ((x >> 13) & 0x3ffu));     /* quiet NaN, payload kept */
    }
    if (x >= 0x477ff000u) return (ev_fp16)(sign | 0x7c00u);          /* >= 65520 rounds to inf */
    uint32_t result, rem, half;
    if (x < 0x38800000u) {                                           /* below 2^-14: subnormal */
        if (x < 0x33000000u) return (ev_fp16)sign;                   /* below 2^-25: to zero */
        uint32_t e = x >> 23;
        uint32_t m = (x & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126 - e;                                    /* 14..24 */
        result = m >> shift;
        rem = m & ((1u << shift) - 1);
        half = 1u << (shift - 1);
    } else {
        result = (((x >> 23) - 112) << 10) | ((x >> 13) & 0x3ffu);
        rem = x & 0x1fffu;
        half = 0x1000u;
    }
    if (rem > half || (rem == half && (result & 1u))) result++;     /* carries into exponent */
    return (ev_fp16)(sign | result);
}

float ev_bf16_to_f32(ev_bf16 h) {
    return f32_from_bits((uint32_t)h << 16);
}

ev_bf16 ev_f32_to_bf16(float f) {
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (ev_bf16)((x >> 16) | 0x40u);   /* quiet NaN */
    return (ev_bf16)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

/* ---- rows to float32 ------------------------------------------------------------------ */

static void f32_to_float(const void *src, float *dst, int64_t n) {
    memcpy(dst, src, (size_t)n * sizeof(float));
}

static void f16_to_float(const void *src, float *dst, int64_t n) {
    const ev_fp16 *s = src;
    for (int64_t i = 0; i < n; i++) dst[i] = ev_fp16_to_f32(s[i]);
}

static void bf16_to_float(const void *src, float *dst, int64_t n) {
    const ev_bf16 *s = src;
    for (int64_t i = 0; i < n; i++) dst[i] = ev_bf16_to_f32(s[i]);
}

static void q8_0_to_float(const void *src, float *dst, int64_t n) {
    const ev_block_q8_0 *b = src;
    for (int64_t i = 0; i < n / EV_QK; i++) {
        float d = ev_fp16_to_f32(b[i].d);
        for (int j = 0; j < EV_QK; j++) dst[i * EV_QK + j] = (float)b[i].qs[j] * d;
    }
}

static void q4_0_to_float(const void *src, float *dst, int64_t n) {
    const ev_block_q4_0 *b = src;
    for (int64_t i = 0; i < n / EV_QK; i++) {
        float d = ev_fp16_to_f32(b[i].d);
        for (int j = 0; j < EV_QK / 2; j++) {
            dst[i * EV_QK + j] = (float)((b[i].qs[j] & 0x0f) - 8) * d;
            dst[i * EV_QK + j + EV_QK / 2] = (float)((b[i].qs[j] >> 4) - 8) * d;
        }
    }
}

/* ---- rows from float32 (the reference rounding) ----------------------------------------- */

static void f32_from_float(const float *src, void *dst, int64_t n) {
    memcpy(dst, src, (size_t)n * sizeof(float));
}

static void f16_from_float(const float *src, void *dst, int64_t n) {
    ev_fp16 *d = dst;
    for (int64_t i = 0; i < n; i++) d[i] = ev_f32_to_fp16(src[i]);
}

static void bf16_from_float(const float *src, void *dst, int64_t n) {
    ev_bf16 *d = dst;
    for (int64_t i = 0; i < n; i++) d[i] = ev_f32_to_bf16(src[i]);
}

static void q8_0_from_float(const float *src, void *dst, int64_t n) {
    ev_quantize_row_q8_0(src, dst, n);
}

static void q4_0_from_float(const float *src, void *dst, int64_t n) {
    ev_quantize_row_q4_0(src, dst, n);
}

/* Q4_1/Q5_0/Q5_1, the K-quants, IQ4 and Q8_K through the table's untyped signatures */
#define UNTYPED_ROW_FUNCS(suffix, block)                                                   \
    static void suffix##_to_float(const void *src, float *dst, int64_t n) {                \
        ev_dequantize_row_##suffix((const block *)src, dst, n);                            \
    }                                                                                      \
    static void suffix##_from_float(const float *src, void *dst, int64_t n) {              \
        ev_quantize_row_##suffix(src, (block *)dst, n);                                    \
    }
UNTYPED_ROW_FUNCS(q4_1, ev_block_q4_1)
UNTYPED_ROW_FUNCS(q5_0, ev_block_q5_0)
UNTYPED_ROW_FUNCS(q5_1, ev_block_q5_1)
UNTYPED_ROW_FUNCS(q2_K, ev_block_q2_K)
UNTYPED_ROW_FUNCS(q3_K, ev_block_q3_K)
UNTYPED_ROW_FUNCS(q4_K, ev_block_q4_K)
UNTYPED_ROW_FUNCS(q5_K, ev_block_q5_K)
UNTYPED_ROW_FUNCS(q6_K, ev_block_q6_K)
UNTYPED_ROW_FUNCS(iq4_nl, ev_block_iq4_nl)
UNTYPED_ROW_FUNCS(iq4_xs, ev_block_iq4_xs)
UNTYPED_ROW_FUNCS(q8_K, ev_block_q8_K)
#undef UNTYPED_ROW_FUNCS

/* ---- the table ------------------------------------------------------------------------ */

#define NO_SCALES {-1, -1}
#define SCALE_D(block) {(int32_t)offsetof(block, d), -1}
#define SCALES_D_DMIN(block) {(int32_t)offsetof(block, d), (int32_t)offsetof(block, dmin)}
#define SCALES_D_M(block) {(int32_t)offsetof(block, d), (int32_t)offsetof(block, m)}
#define BLOCK(block) (int32_t)sizeof(block)

static const ev_type_traits TYPES[] = {
    {EV_TYPE_F32, "f32", 1, 4, EV_TYPE_F32, NO_SCALES, f32_to_float, f32_from_float},
    {EV_TYPE_F16, "f16", 1, 2, EV_TYPE_F32, NO_SCALES, f16_to_float, f16_from_float},
    {EV_TYPE_BF16, "bf16", 1, 2, EV_TYPE_F32, NO_SCALES, bf16_to_float, bf16_from_float},
    {EV_TYPE_Q8_0, "q8_0", EV_QK, BLOCK(ev_block_q8_0), EV_TYPE_Q8_0, SCALE_D(ev_block_q8_0),
     q8_0_to_float, q8_0_from_float},
    {EV_TYPE_Q4_0, "q4_0", EV_QK, BLOCK(ev_block_q4_0), EV_TYPE_Q8_0, SCALE_D(ev_block_q4_0),
     q4_0_to_float, q4_0_from_float},
    /* Q4_1/Q5_1 take Q8_0 activations, not ggml's Q8_1 (vec_dot_type, types.h) */
    {EV_TYPE_Q4_1, "q4_1", EV_QK, BLOCK(ev_block_q4_1), EV_TYPE_Q8_0, SCALES_D_M(ev_block_q4_1),
     q4_1_to_float, q4_1_from_float},
    {EV_TYPE_Q5_0, "q5_0", EV_QK, BLOCK(ev_block_q5_0), EV_TYPE_Q8_0, SCALE_D(ev_block_q5_0),
     q5_0_to_float, q5_0_from_float},
    {EV_TYPE_Q5_1, "q5_1", EV_QK, BLOCK(ev_block_q5_1), EV_TYPE_Q8_0, SCALES_D_M(ev_block_q5_1),
     q5_1_to_float, q5_1_from_float},
    {EV_TYPE_Q2_K, "q2_K", EV_QK_K, BLOCK(ev_block_q2_K), EV_TYPE_Q8_K,
     SCALES_D_DMIN(ev_block_q2_K), q2_K_to_float, q2_K_from_float},
    {EV_TYPE_Q3_K, "q3_K", EV_QK_K, BLOCK(ev_block_q3_K), EV_TYPE_Q8_K, SCALE_D(ev_block_q3_K),
     q3_K_to_float, q3_K_from_float},
    {EV_TYPE_Q4_K, "q4_K", EV_QK_K, BLOCK(ev_block_q4_K), EV_TYPE_Q8_K,
     SCALES_D_DMIN(ev_block_q4_K), q4_K_to_float, q4_K_from_float},
    {EV_TYPE_Q5_K, "q5_K", EV_QK_K, BLOCK(ev_block_q5_K), EV_TYPE_Q8_K,
     SCALES_D_DMIN(ev_block_q5_K), q5_K_to_float, q5_K_from_float},
    {EV_TYPE_Q6_K, "q6_K", EV_QK_K, BLOCK(ev_block_q6_K), EV_TYPE_Q8_K, SCALE_D(ev_block_q6_K),
     q6_K_to_float, q6_K_from_float},
    {EV_TYPE_IQ4_NL, "iq4_nl", EV_QK, BLOCK(ev_block_iq4_nl), EV_TYPE_Q8_0,
     SCALE_D(ev_block_iq4_nl), iq4_nl_to_float, iq4_nl_from_float},
    {EV_TYPE_IQ4_XS, "iq4_xs", EV_QK_K, BLOCK(ev_block_iq4_xs), EV_TYPE_Q8_K,
     SCALE_D(ev_block_iq4_xs), iq4_xs_to_float, iq4_xs_from_float},
};
#define N_TYPES ((int)(sizeof TYPES / sizeof TYPES[0]))

/* the formats dot products take their activations in (ev_act_type_get) */
static const ev_type_traits ACT_TYPES[] = {
    {EV_TYPE_F32, "f32", 1, 4, EV_TYPE_F32, NO_SCALES, f32_to_float, f32_from_float},
    {EV_TYPE_Q8_0, "q8_0", EV_QK, BLOCK(ev_block_q8_0), EV_TYPE_Q8_0, NO_SCALES, q8_0_to_float,
     q8_0_from_float},
    {EV_TYPE_Q8_K, "q8_K", EV_QK_K, BLOCK(ev_block_q8_K), EV_TYPE_Q8_K, NO_SCALES, q8_K_to_float,
     q8_K_from_float},
};
#define N_ACT_TYPES ((int)(sizeof ACT_TYPES / sizeof ACT_TYPES[0]))

_Static_assert(sizeof(ev_block_q8_0) == 34, "Q8_0 block is 34 bytes");
_Static_assert(sizeof(ev_block_q4_0) == 18, "Q4_0 block is 18 bytes");
_Static_assert(sizeof(ev_block_iq4_nl) == 18, "IQ4_NL block is 18 bytes");
_Static_assert(sizeof(ev_block_q4_1) == 20, "Q4_1 block is 20 bytes");
_Static_assert(sizeof(ev_block_q5_0) == 22, "Q5_0 block is 22 bytes");
_Static_assert(sizeof(ev_block_q5_1) == 24, "Q5_1 block is 24 bytes");
_Static_assert(sizeof(ev_block_q2_K) == 84, "Q2_K block is 84 bytes");
_Static_assert(sizeof(ev_block_q3_K) == 110, "Q3_K block is 110 bytes");
_Static_assert(sizeof(ev_block_q4_K) == 144, "Q4_K block is 144 bytes");
_Static_assert(sizeof(ev_block_q5_K) == 176, "Q5_K block is 176 bytes");
_Static_assert(sizeof(ev_block_q6_K) == 210, "Q6_K block is 210 bytes");
_Static_assert(sizeof(ev_block_iq4_xs) == 136, "IQ4_XS block is 136 bytes");
_Static_assert(sizeof(ev_block_q8_K) == 292, "Q8_K block is 292 bytes");

int ev_type_count(void) {
    return N_TYPES;
}

const ev_type_traits *ev_type_at(int i) {
    return i >= 0 && i < N_TYPES ? &TYPES[i] : NULL;
}

const ev_type_traits *ev_type_get(int32_t type) {
    for (int i = 0; i < N_TYPES; i++)
        if (TYPES[i].type == type) return &TYPES[i];
    return NULL;
}

const ev_type_traits *ev_act_type_get(int32_t type) {
    for (int i = 0; i < N_ACT_TYPES; i++)
        if (ACT_TYPES[i].type == type) return &ACT_TYPES[i];
    return NULL;
}

const char *ev_type_list(char *buf, size_t len) {
    if (!buf || !len) return buf;
    buf[0] = '\0';
    for (size_t i = 0, used = 0; i < N_TYPES; i++)
        used = ev_append(buf, len, used, ", ", TYPES[i].name);
    for (char *c = buf; *c; c++)
        if (*c >= 'a' && *c <= 'z') *c = (char)(*c - 'a' + 'A');
    return buf;
}

int64_t ev_row_bytes(int32_t type, int64_t n) {
    const ev_type_traits *t = ev_type_get(type);
    if (!t || n < 0 || n % t->block_size != 0) return 0;
    int64_t blocks = n / t->block_size;
    if (blocks > INT64_MAX / t->type_size) return 0;
    return blocks * t->type_size;
}

/* a half whose exponent bits are all ones: infinity or NaN */
static int fp16_is_nonfinite(ev_fp16 h) {
    return (h & 0x7c00u) == 0x7c00u;
}

int64_t ev_first_nonfinite_scale(int32_t type, const void *data, int64_t n_blocks) {
    const ev_type_traits *t = ev_type_get(type);
    if (!t || t->scale_at[0] < 0) return -1;
    const uint8_t *block = data;
    for (int64_t b = 0; b < n_blocks; b++, block += t->type_size) {
        for (int s = 0; s < 2 && t->scale_at[s] >= 0; s++) {
            ev_fp16 h;
            memcpy(&h, block + t->scale_at[s], sizeof h);
            if (fp16_is_nonfinite(h)) return b;
        }
    }
    return -1;
}

/* ---- reference quantisers (llama.cpp's quantize_row_*_ref) ----------------------------- */

void ev_quantize_row_q8_0(const float *x, ev_block_q8_0 *y, int64_t n) {
    for (int64_t i = 0; i < n / EV_QK; i++) {
        const float *xb = x + i * EV_QK;
        float amax = 0.0f;
        for (int j = 0; j < EV_QK; j++) amax = fmaxf(amax, fabsf(xb[j]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = ev_f32_to_fp16(d);
        for (int j = 0; j < EV_QK; j++) y[i].qs[j] = (int8_t)roundf(xb[j] * id);
    }
}

void ev_quantize_row_q4_0(const float *x, ev_block_q4_0 *y, int64_t n) {
    for (int64_t i = 0; i < n / EV_QK; i++) {
        const float *xb = x + i * EV_QK;
        float amax = 0.0f, max = 0.0f;     /* max: the value of largest magnitude, signed */
        for (int j = 0; j < EV_QK; j++) {
            if (amax < fabsf(xb[j])) {
                amax = fabsf(xb[j]);
                max = xb[j];
            }
        }
        const float d = max / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = ev_f32_to_fp16(d);
        for (int j = 0; j < EV_QK / 2; j++) {
            int q0 = (int8_t)(xb[j] * id + 8.5f);
            int q1 = (int8_t)(xb[j + EV_QK / 2] * id + 8.5f);
            q0 = q0 < 15 ? q0 : 15;
            q1 = q1 < 15 ? q1 : 15;
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}
