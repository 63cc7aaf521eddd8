/*
 * quants_legacy.c - Q4_1, Q5_0 and Q5_1 (32-element blocks, types.h): dequantisation and
 * llama.cpp's reference quantisers.
 *
 * llama-quantize stores these for matrices whose rows are not whole 256-element super-blocks
 * (src/llama-quant.cpp, tensor_type_fallback: Q4_K -> Q5_0, Q5_K -> Q5_1), e.g. a 1152-wide
 * ViT in a Q4_K_M file; older files are Q4_1 / Q5_x throughout.
 *
 * Transcribed from ggml/src/ggml-quants.c: quantize_row_q4_1_ref, quantize_row_q5_0_ref,
 * quantize_row_q5_1_ref (what llama-quantize runs for these types without an importance
 * matrix) and dequantize_row_q4_1 / q5_0 / q5_1, float operation for float operation (built
 * with -ffp-contract=off: q*d + m is two roundings, as in llama.cpp and gguf-py's numpy).
 * The gguf package's quantisers and dequantisers of these types are bit-exact with them;
 * native/tests/test_legacy_quants.c holds edgevlm to that.
 */
#include <float.h>
#include <math.h>

#include "types.h"

/* block sizes: types.c; the fields where ggml has them: */
_Static_assert(offsetof(ev_block_q4_1, m) == 2 && offsetof(ev_block_q4_1, qs) == 4,
               "Q4_1 field offsets are ggml's");
_Static_assert(offsetof(ev_block_q5_0, qh) == 2 && offsetof(ev_block_q5_0, qs) == 6,
               "Q5_0 field offsets are ggml's");
_Static_assert(offsetof(ev_block_q5_1, m) == 2 && offsetof(ev_block_q5_1, qh) == 4 &&
               offsetof(ev_block_q5_1, qs) == 8, "Q5_1 field offsets are ggml's");

/* ---- dequantisation (llama.cpp's dequantize_row_*) --------------------------------------- */

void ev_dequantize_row_q4_1(const ev_block_q4_1 *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n / EV_QK; i++, y += EV_QK) {
        const float d = ev_fp16_to_f32(x[i].d);
        const float m = ev_fp16_to_f32(x[i].m);
        for (int j = 0; j < EV_QK / 2; j++) {
            y[j] = (float)(x[i].qs[j] & 0x0f) * d + m;
            y[j + EV_QK / 2] = (float)(x[i].qs[j] >> 4) * d + m;
        }
    }
}

void ev_dequantize_row_q5_0(const ev_block_q5_0 *x, float *y, int64_t n) {
    uint8_t q[EV_QK];
    for (int64_t i = 0; i < n / EV_QK; i++, y += EV_QK) {
        const float d = ev_fp16_to_f32(x[i].d);
        ev_q5_codes(x[i].qs, x[i].qh, q);
        for (int j = 0; j < EV_QK; j++) y[j] = (float)(q[j] - 16) * d;
    }
}

void ev_dequantize_row_q5_1(const ev_block_q5_1 *x, float *y, int64_t n) {
    uint8_t q[EV_QK];
    for (int64_t i = 0; i < n / EV_QK; i++, y += EV_QK) {
        const float d = ev_fp16_to_f32(x[i].d);
        const float m = ev_fp16_to_f32(x[i].m);
        ev_q5_codes(x[i].qs, x[i].qh, q);
        for (int j = 0; j < EV_QK; j++) y[j] = (float)q[j] * d + m;
    }
}

/* ---- quantisation (llama.cpp's quantize_row_*_ref) --------------------------------------- */

/* llama.cpp's code of a scaled value v: its cast to an integer (truncation toward zero),
 * capped at max_code (0 for v < 1). For finite blocks v lies in [0, max_code + 1.5); a NaN or
 * out-of-range v (only from an inverse scale that overflowed: a block spanning < ~1e-37)
 * gives 0 or max_code here, where the C cast would be undefined. */
static int code_of(float v, int max_code) {
    if (!(v >= 1.0f)) return 0;
    if (v >= (float)max_code) return max_code;
    return (int)v;
}

/* the smallest and largest of a block's 32 values */
static void block_min_max(const float *x, float *min, float *max) {
    float lo = FLT_MAX, hi = -FLT_MAX;
    for (int j = 0; j < EV_QK; j++) {
        if (x[j] < lo) lo = x[j];
        if (x[j] > hi) hi = x[j];
    }
    *min = lo;
    *max = hi;
}

/* the block's value of largest magnitude, with its sign (the first of equal magnitudes) */
static float block_signed_absmax(const float *x) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < EV_QK; j++) {
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    return max;
}

/* the 32 codes (< 32) of a Q5 block into its nibbles qs and 5th bits qh */
static void pack_q5(const uint8_t q[EV_QK], uint8_t qs[EV_QK / 2], uint8_t qh[4]) {
    uint32_t high = 0;
    for (int j = 0; j < EV_QK / 2; j++) {
        qs[j] = (uint8_t)((q[j] & 0x0f) | (q[j + EV_QK / 2] & 0x0f) << 4);
        high |= (uint32_t)(q[j] >> 4) << j;
        high |= (uint32_t)(q[j + EV_QK / 2] >> 4) << (j + EV_QK / 2);
    }
    for (int b = 0; b < 4; b++) qh[b] = (uint8_t)(high >> (8 * b));
}

/* value = q*d + min, d = (max - min)/15, q = trunc((x - min)/d + 0.5) capped at 15 */
void ev_quantize_row_q4_1(const float *x, ev_block_q4_1 *y, int64_t n) {
    for (int64_t i = 0; i < n / EV_QK; i++, x += EV_QK) {
        float min, max;
        block_min_max(x, &min, &max);
        const float d = (max - min) / 15.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = ev_f32_to_fp16(d);
        y[i].m = ev_f32_to_fp16(min);
        for (int j = 0; j < EV_QK / 2; j++) {
            const int q0 = code_of((x[j] - min) * id + 0.5f, 15);
            const int q1 = code_of((x[j + EV_QK / 2] - min) * id + 0.5f, 15);
            y[i].qs[j] = (uint8_t)(q0 | q1 << 4);
        }
    }
}

/* value = (q - 16)*d, d = max/-16 (max: the value of largest magnitude, signed), q =
 * trunc(x/d + 16.5) capped at 31 */
void ev_quantize_row_q5_0(const float *x, ev_block_q5_0 *y, int64_t n) {
    uint8_t q[EV_QK];
    for (int64_t i = 0; i < n / EV_QK; i++, x += EV_QK) {
        const float d = block_signed_absmax(x) / -16.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = ev_f32_to_fp16(d);
        for (int j = 0; j < EV_QK; j++) q[j] = (uint8_t)code_of(x[j] * id + 16.5f, 31);
        pack_q5(q, y[i].qs, y[i].qh);
    }
}

/* value = q*d + min, d = (max - min)/31, q = trunc((x - min)/d + 0.5) (llama.cpp does not cap
 * it: it stays below 32 for finite blocks) */
void ev_quantize_row_q5_1(const float *x, ev_block_q5_1 *y, int64_t n) {
    uint8_t q[EV_QK];
    for (int64_t i = 0; i < n / EV_QK; i++, x += EV_QK) {
        float min, max;
        block_min_max(x, &min, &max);
        const float d = (max - min) / 31.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = ev_f32_to_fp16(d);
        y[i].m = ev_f32_to_fp16(min);
        for (int j = 0; j < EV_QK; j++) q[j] = (uint8_t)code_of((x[j] - min) * id + 0.5f, 31);
        pack_q5(q, y[i].qs, y[i].qh);
    }
}
