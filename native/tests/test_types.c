/* test_types.c - element types: half/bfloat16 conversions (exhaustive where possible), the
 * type table, row sizes, row dequantisation and the Q8_0/Q4_0 quantisers against the bytes of
 * the Python gguf package (bit-exact with llama.cpp's reference quantisers). */
#include <stdint.h>

#include "kernels.h"
#include "quant_fixtures.h"
#include "test_util.h"
#include "types.h"

static uint32_t bits_of(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float float_of(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* The value of a half from its fields, in double: an independent reference. */
static double half_value(uint16_t h) {
    int sign = h >> 15, exp = (h >> 10) & 31, mant = h & 1023;
    double v = exp == 0 ? ldexp(mant, -24) : ldexp(1024 + mant, exp - 25);
    if (exp == 31) v = mant ? NAN : INFINITY;
    return sign ? -v : v;
}

static void test_fp16_to_f32_exhaustive(void) {
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = ev_fp16_to_f32((ev_fp16)h);
        double ref = half_value((uint16_t)h);
        if (isnan(ref)) {
            /* NaN stays NaN with its sign and payload (top mantissa bits) */
            if (!isnan(f) || (bits_of(f) >> 31) != (h >> 15) ||
                ((bits_of(f) >> 13) & 1023) != (h & 1023))
                bad++;
        } else if ((double)f != ref || !!signbit(f) != (int)(h >> 15)) {
            bad++;
        }
    }
    CHECK_MSG(bad == 0, "%d halves convert wrongly", bad);
}

static void test_fp16_round_trip_exhaustive(void) {
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        ev_fp16 back = ev_f32_to_fp16(ev_fp16_to_f32((ev_fp16)h));
        int is_nan = ((h >> 10) & 31) == 31 && (h & 1023);
        if (is_nan ? (back & 0x7fff) <= 0x7c00 || (back >> 15) != (h >> 15) : back != h) bad++;
    }
    CHECK_MSG(bad == 0, "%d halves do not round-trip", bad);
}

/* h is the correctly rounded half of f (nearest, ties to even mantissa): compared with the
 * neighbouring halves in the direction of f. */
static int is_rne_half(float f, ev_fp16 h) {
    if (isnan(f)) return ((h >> 10) & 31) == 31 && (h & 1023) != 0;
    double v = f, a = fabs(v);
    uint16_t mag = h & 0x7fff, sign = h >> 15;
    if (a != 0.0 && sign != (v < 0)) return 0;
    if (a >= 65520.0) return mag == 0x7c00;
    if (mag >= 0x7c00) return 0;
    double hv = half_value(mag);
    double err = fabs(hv - a);
    if (mag < 0x7bff && fabs(half_value(mag + 1) - a) < err) return 0;
    if (mag > 0 && fabs(half_value(mag - 1) - a) < err) return 0;
    if (mag < 0x7bff && fabs(half_value(mag + 1) - a) == err && (mag & 1)) return 0;
    if (mag > 0 && fabs(half_value(mag - 1) - a) == err && (mag & 1)) return 0;
    return 1;
}

static void test_f32_to_fp16_rounding(void) {
    int bad = 0;
    /* every half, the midpoints to its neighbours and one float step either side of them */
    for (uint32_t h = 0; h < 0x7c00; h++) {
        double a = half_value((uint16_t)h), b = half_value((uint16_t)(h + 1));
        float mid = (float)((a + b) / 2);                 /* exact: 12 significant bits */
        float probes[5] = {(float)a, mid, nextafterf(mid, 0.0f), nextafterf(mid, 1e9f),
                           nextafterf((float)a, 1e9f)};
        for (int i = 0; i < 5; i++) {
            if (!is_rne_half(probes[i], ev_f32_to_fp16(probes[i]))) bad++;
            if (!is_rne_half(-probes[i], ev_f32_to_fp16(-probes[i]))) bad++;
        }
    }
    unsigned long long s = 7;
    for (int i = 0; i < 2000000; i++) {                   /* random bit patterns */
        float f = float_of((uint32_t)tu_rand_u64(&s));
        if (!is_rne_half(f, ev_f32_to_fp16(f))) bad++;
    }
    for (int i = 0; i < 1000000; i++) {                   /* around the half range */
        float f = ldexpf(tu_randf(&s), (int)(tu_rand_u64(&s) % 44) - 28);
        if (!is_rne_half(f, ev_f32_to_fp16(f))) bad++;
    }
    CHECK_MSG(bad == 0, "%d floats round wrongly to half", bad);
    CHECK(ev_f32_to_fp16(65504.0f) == 0x7bff);
    CHECK(ev_f32_to_fp16(65519.996f) == 0x7bff);
    CHECK(ev_f32_to_fp16(65520.0f) == 0x7c00);
    CHECK(ev_f32_to_fp16(INFINITY) == 0x7c00 && ev_f32_to_fp16(-INFINITY) == 0xfc00);
    CHECK(ev_f32_to_fp16(ldexpf(1.0f, -25)) == 0);              /* tie to even: zero */
    CHECK(ev_f32_to_fp16(ldexpf(1.5f, -25)) == 1);
    CHECK(ev_f32_to_fp16(ldexpf(3.0f, -25)) == 2);              /* 1.5 ulp: tie to even 2 */
    CHECK(ev_f32_to_fp16(-0.0f) == 0x8000);
    ev_fp16 n = ev_f32_to_fp16(float_of(0x7f800001u));          /* signalling NaN stays NaN */
    CHECK((n & 0x7c00) == 0x7c00 && (n & 0x3ff) != 0);
#ifdef __FLT16_MAX__
    int diff = 0;                                               /* the compiler's _Float16 */
    for (int i = 0; i < 1000000; i++) {
        float f = ldexpf(tu_randf(&s), (int)(tu_rand_u64(&s) % 50) - 30);
        _Float16 c = (_Float16)f;
        uint16_t cb;
        memcpy(&cb, &c, 2);
        if (cb != ev_f32_to_fp16(f)) diff++;
    }
    CHECK_MSG(diff == 0, "%d differ from _Float16", diff);
#endif
}

static void test_bf16(void) {
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = ev_bf16_to_f32((ev_bf16)h);
        if (bits_of(f) != h << 16) bad++;
        ev_bf16 back = ev_f32_to_bf16(f);
        if (isnan(f) ? (back & 0x7fff) <= 0x7f80 || (back & 0x40) == 0 : back != h) bad++;
    }
    unsigned long long s = 11;
    for (int i = 0; i < 1000000; i++) {                   /* RNE against a double reference */
        uint32_t u = (uint32_t)tu_rand_u64(&s);
        float f = float_of(u);
        if (isnan(f) || isinf(f)) continue;
        ev_bf16 b = ev_f32_to_bf16(f);
        double lo = ev_bf16_to_f32((ev_bf16)(u >> 16));
        double hi = ev_bf16_to_f32((ev_bf16)((u >> 16) + 1));
        if (isinf(hi)) hi = copysign(ldexp(1.0, 128), hi);     /* IEEE: as if unbounded */
        double dl = fabs((double)f - lo), dh = fabs(hi - (double)f);
        uint16_t want = (uint16_t)(u >> 16);
        if (dh < dl || (dh == dl && (want & 1))) want++;
        if (b != want) bad++;
    }
    CHECK_MSG(bad == 0, "%d bf16 conversions wrong", bad);
    CHECK(ev_f32_to_bf16(1.00390625f) == 0x3f80);               /* tie to even: down */
    CHECK(ev_f32_to_bf16(1.01171875f) == 0x3f82);               /* tie to even: up */
    CHECK(ev_f32_to_bf16(float_of(0x7f7fffffu)) == 0x7f80);     /* FLT_MAX rounds to inf */
    CHECK((ev_f32_to_bf16(float_of(0x7f800001u)) & 0x7fff) > 0x7f80);   /* sNaN stays NaN */
}

static void test_type_table(void) {
    const struct { int32_t id; int32_t bs, ts, act; } want[] = {
        {EV_TYPE_F32, 1, 4, EV_TYPE_F32}, {EV_TYPE_F16, 1, 2, EV_TYPE_F32},
        {EV_TYPE_BF16, 1, 2, EV_TYPE_F32}, {EV_TYPE_Q8_0, 32, 34, EV_TYPE_Q8_0},
        {EV_TYPE_Q4_0, 32, 18, EV_TYPE_Q8_0}};   /* the K-quants and IQ4: test_kquants.c;
                                                    Q4_1/Q5_0/Q5_1: test_legacy_quants.c */
    CHECK(EV_TYPE_F32 == 0 && EV_TYPE_F16 == 1 && EV_TYPE_Q4_0 == 2 && EV_TYPE_Q8_0 == 8 &&
          EV_TYPE_BF16 == 30);
    for (int i = 0; i < 5; i++) {
        const ev_type_traits *t = ev_type_get(want[i].id);
        CHECK(t && t->block_size == want[i].bs && t->type_size == want[i].ts &&
              t->vec_dot_type == want[i].act && t->to_float && t->name);
    }
    /* 4, 5: ids ggml retired; 9: Q8_1 (an activation format edgevlm does not use) */
    CHECK(ev_type_get(4) == NULL && ev_type_get(5) == NULL && ev_type_get(9) == NULL &&
          ev_type_get(-1) == NULL && ev_type_get(31) == NULL);
    CHECK(ev_row_bytes(EV_TYPE_Q8_0, 2048) == 64 * 34);
    CHECK(ev_row_bytes(EV_TYPE_Q4_0, 64) == 36);
    CHECK(ev_row_bytes(EV_TYPE_F16, 3) == 6);
    CHECK(ev_row_bytes(EV_TYPE_Q8_0, 33) == 0);                 /* not whole blocks */
    CHECK(ev_row_bytes(EV_TYPE_F32, -4) == 0);
    CHECK(ev_row_bytes(9, 32) == 0);
    CHECK(ev_row_bytes(EV_TYPE_F32, INT64_MAX / 4) == INT64_MAX / 4 * 4);
    CHECK(ev_row_bytes(EV_TYPE_F32, INT64_MAX / 4 + 1) == 0);   /* overflow */
    CHECK(ev_row_bytes(EV_TYPE_Q8_0, INT64_MAX / 32 * 32) == 0);
}

static void test_row_to_f32(void) {
    ev_block_q8_0 q8 = {ev_f32_to_fp16(0.5f), {0}};
    ev_block_q4_0 q4 = {ev_f32_to_fp16(0.25f), {0}};
    for (int j = 0; j < 32; j++) q8.qs[j] = (int8_t)(j - 16);
    for (int j = 0; j < 16; j++) q4.qs[j] = (uint8_t)(j | ((15 - j) << 4));
    float out[32];
    ev_row_to_f32(EV_TYPE_Q8_0, &q8, out, 32);
    int bad = 0;
    for (int j = 0; j < 32; j++) bad += out[j] != (j - 16) * 0.5f;
    ev_row_to_f32(EV_TYPE_Q4_0, &q4, out, 32);
    for (int j = 0; j < 16; j++) bad += out[j] != (j - 8) * 0.25f || out[j + 16] != (7 - j) * 0.25f;
    ev_fp16 h[3] = {0x3c00, 0xc000, 0x0001};
    ev_bf16 b[3] = {0x3f80, 0xc040, 0x0000};
    float f[3] = {1.5f, -2.0f, 1e-40f};
    ev_row_to_f32(EV_TYPE_F16, h, out, 3);
    bad += out[0] != 1.0f || out[1] != -2.0f || out[2] != ldexpf(1.0f, -24);
    ev_row_to_f32(EV_TYPE_BF16, b, out, 3);
    bad += out[0] != 1.0f || out[1] != -3.0f || out[2] != 0.0f;
    ev_row_to_f32(EV_TYPE_F32, f, out, 3);
    bad += memcmp(out, f, sizeof f) != 0;
    CHECK_MSG(bad == 0, "%d dequantised values wrong", bad);
}

static void test_quantizers_match_gguf_python(void) {
    float x[QF_N];
    for (int i = 0; i < QF_N; i++) x[i] = float_of(qf_input_bits[i]);
    ev_block_q8_0 q8[QF_N / 32];
    ev_block_q4_0 q4[QF_N / 32];
    ev_quantize_row_q8_0(x, q8, QF_N);
    ev_quantize_row_q4_0(x, q4, QF_N);
    int bad8 = 0, bad4 = 0;
    for (int b = 0; b < QF_N / 32; b++) {
        if (memcmp(&q8[b], qf_q8_0 + b * 34, 34) != 0) bad8++;
        if (memcmp(&q4[b], qf_q4_0 + b * 18, 18) != 0) bad4++;
    }
    CHECK_MSG(bad8 == 0, "%d Q8_0 blocks differ from gguf-py", bad8);
    CHECK_MSG(bad4 == 0, "%d Q4_0 blocks differ from gguf-py", bad4);
    /* the SIMD activation quantiser is bit-identical to the reference */
    const ev_kernels *k = ev_kernels_best();
    ev_block_q8_0 q8s[QF_N / 32];
    k->quantize_q8_0(x, q8s, QF_N);
    CHECK_MSG(memcmp(q8s, qf_q8_0, sizeof q8s) == 0, "%s quantiser differs from gguf-py", k->name);
}

static void test_simd_quantizer_random(void) {
    const ev_kernels *k = ev_kernels_best();
    enum { N = 4096 };
    static float x[N];
    static ev_block_q8_0 a[N / 32], b[N / 32];
    unsigned long long s = 99;
    int bad = 0;
    for (int rep = 0; rep < 200; rep++) {
        float scale = ldexpf(1.0f, (int)(tu_rand_u64(&s) % 60) - 30);
        for (int i = 0; i < N; i++) {
            x[i] = tu_randf(&s) * scale;
            if (rep % 3 == 0) x[i] = roundf(x[i] * 8.0f / scale) * 0.5f;   /* many .5 ties */
        }
        ev_quantize_row_q8_0(x, a, N);
        k->quantize_q8_0(x, b, N);
        bad += memcmp(a, b, sizeof a) != 0;
    }
    CHECK_MSG(bad == 0, "%s quantiser differs from the reference in %d rows", k->name, bad);
}

int main(void) {
    test_fp16_to_f32_exhaustive();
    test_fp16_round_trip_exhaustive();
    test_f32_to_fp16_rounding();
    test_bf16();
    test_type_table();
    test_row_to_f32();
    test_quantizers_match_gguf_python();
    test_simd_quantizer_random();
    return tu_report("test_types");
}
