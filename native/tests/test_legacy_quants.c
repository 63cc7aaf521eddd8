/* test_legacy_quants.c - Q4_1, Q5_0 and Q5_1 (the 32-element types llama-quantize falls back to
 * for rows that are not whole 256-element super-blocks): the type table's entries, the
 * quantisers' bytes and the dequantisation bit-exact against the Python gguf package
 * (legacy_fixtures.h, gen_legacy_fixtures.py), the quantisers' error on Gaussian rows, and the
 * scalar dot products against Q8_0 activations: against dequantise-then-multiply, against
 * ggml's Q8_1 arithmetic, and exactly at the extremes of the codes. The checks every quantised
 * type gets (edge inputs, the non-finite scale check, every kernel set) walk the type table in
 * test_kquants.c, test_dispatch.c and test_kernels.c. */
#include <stdint.h>

#include "kernels.h"
#include "legacy_fixtures.h"
#include "test_util.h"
#include "types.h"

static unsigned long long seed = 31415;

static const struct {
    int32_t type;
    const uint8_t *quantized;      /* gguf-py's quantisation of lqf_input (LQF_N values) */
    const uint64_t *quantized_hash;
    const uint8_t *random;         /* LQF_RANDOM_BLOCKS random blocks, finite scales */
    const uint64_t *random_hash;
} FIXTURES[] = {
    {EV_TYPE_Q4_1, lqf_q4_1, lqf_q4_1_hash, lqf_q4_1_random, lqf_q4_1_random_hash},
    {EV_TYPE_Q5_0, lqf_q5_0, lqf_q5_0_hash, lqf_q5_0_random, lqf_q5_0_random_hash},
    {EV_TYPE_Q5_1, lqf_q5_1, lqf_q5_1_hash, lqf_q5_1_random, lqf_q5_1_random_hash},
};
#define N_FIXTURES ((int)(sizeof FIXTURES / sizeof FIXTURES[0]))

static void test_table_entries(void) {
    const struct { int32_t id, ts, scale0, scale1; const char *name; } want[] = {
        {EV_TYPE_Q4_1, 20, 0, 2, "q4_1"}, {EV_TYPE_Q5_0, 22, 0, -1, "q5_0"},
        {EV_TYPE_Q5_1, 24, 0, 2, "q5_1"}};
    CHECK(EV_TYPE_Q4_1 == 3 && EV_TYPE_Q5_0 == 6 && EV_TYPE_Q5_1 == 7);   /* ggml's ids */
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const ev_type_traits *t = ev_type_get(want[i].id);
        /* Q8_0 activations for all three (ggml: Q8_1 for Q4_1/Q5_1, types.h says why) */
        CHECK_MSG(t && t->block_size == 32 && t->type_size == want[i].ts &&
                  t->vec_dot_type == EV_TYPE_Q8_0 && strcmp(t->name, want[i].name) == 0 &&
                  t->scale_at[0] == want[i].scale0 && t->scale_at[1] == want[i].scale1 &&
                  t->to_float && t->from_float,
                  "type %d", (int)want[i].id);
        CHECK(ev_kernels_scalar()->vec_dot[want[i].id] != NULL);
    }
    CHECK(ev_row_bytes(EV_TYPE_Q4_1, 1152) == 36 * 20);      /* a 1152-wide ViT row */
    CHECK(ev_row_bytes(EV_TYPE_Q5_0, 1152) == 36 * 22);
    CHECK(ev_row_bytes(EV_TYPE_Q5_1, 4320) == 135 * 24);
    CHECK(ev_row_bytes(EV_TYPE_Q5_1, 4304) == 0 && ev_row_bytes(EV_TYPE_Q5_0, 48) == 0);
    /* (not whole blocks) */
}

static void input(float *x) {
    for (int i = 0; i < LQF_N; i++) memcpy(&x[i], &lqf_input_bits[i], 4);
}

static void test_quantizers_store_gguf_py_bytes(void) {
    static float x[LQF_N];
    static uint8_t q[LQF_N / 32 * 24];
    input(x);
    for (int f = 0; f < N_FIXTURES; f++) {
        const ev_type_traits *t = ev_type_get(FIXTURES[f].type);
        t->from_float(x, q, LQF_N);
        int bad = 0;
        for (int b = 0; b < LQF_N / 32; b++) {
            if (memcmp(q + b * t->type_size, FIXTURES[f].quantized + b * t->type_size,
                       (size_t)t->type_size) == 0)
                continue;
            if (bad++ < 2)
                fprintf(stderr, "  %s block %d: bytes differ from gguf-py's (first value %.9g)\n",
                        t->name, b, x[32 * b]);
        }
        CHECK_MSG(bad == 0, "%s: %d of %d blocks quantise differently from gguf-py", t->name,
                  bad, LQF_N / 32);
    }
}

/* each block's float32 values hashed against gguf-py's; blocks with an infinite scale (the
 * loader refuses them: NaN values) are skipped */
static int dequantized_blocks_differing(const ev_type_traits *t, const uint8_t *blocks,
                                        const uint64_t *hashes, int n_blocks, int *checked) {
    int bad = 0;
    float out[32];
    for (int b = 0; b < n_blocks; b++) {
        const uint8_t *block = blocks + (size_t)b * t->type_size;
        if (ev_first_nonfinite_scale(t->type, block, 1) >= 0) continue;
        ++*checked;
        ev_row_to_f32(t->type, block, out, 32);
        if (tu_fnv1a64(out, 32) == hashes[b]) continue;
        if (bad++ < 2)
            fprintf(stderr, "  %s block %d: values %.9g %.9g ... %.9g differ from gguf-py's\n",
                    t->name, b, out[0], out[1], out[31]);
    }
    return bad;
}

static void test_dequantize_matches_gguf_python(void) {
    for (int f = 0; f < N_FIXTURES; f++) {
        const ev_type_traits *t = ev_type_get(FIXTURES[f].type);
        int checked = 0;
        int bad = dequantized_blocks_differing(t, FIXTURES[f].quantized, FIXTURES[f].quantized_hash,
                                               LQF_N / 32, &checked);
        /* (2 input blocks overflow Q4_1's and Q5_1's d or m to inf, as in gguf-py) */
        CHECK_MSG(bad == 0 && checked >= LQF_N / 32 - 2,
                  "%s: %d of %d quantised blocks dequantise differently from gguf-py", t->name,
                  bad, checked);
        checked = 0;
        bad = dequantized_blocks_differing(t, FIXTURES[f].random, FIXTURES[f].random_hash,
                                           LQF_RANDOM_BLOCKS, &checked);
        CHECK_MSG(bad == 0 && checked == LQF_RANDOM_BLOCKS,
                  "%s: %d of %d random blocks dequantise differently from gguf-py", t->name, bad,
                  checked);
    }
    /* the one input block whose Q4_1 d overflows float16 is stored as gguf-py stores it (inf)
     * and found by the loader's scale check */
    CHECK(ev_first_nonfinite_scale(EV_TYPE_Q4_1, lqf_q4_1, LQF_N / 32) >= 0);
}

/* RMS of quantise -> dequantise errors over RMS of x, for n Gaussian values * scale (+ an
 * offset of 2 sigma for the types with a minimum) */
static double relative_rms_error(int32_t type, int64_t n, float scale, float offset) {
    const ev_type_traits *t = ev_type_get(type);
    float *x = malloc((size_t)n * 4), *y = malloc((size_t)n * 4);
    void *q = malloc((size_t)ev_row_bytes(type, n));
    for (int64_t i = 0; i < n; i++) x[i] = tu_gaussian(&seed) * scale + offset * scale;
    t->from_float(x, q, n);
    t->to_float(q, y, n);
    double err = 0.0, ref = 0.0;
    for (int64_t i = 0; i < n; i++) {
        err += ((double)y[i] - x[i]) * ((double)y[i] - x[i]);
        ref += ((double)x[i] - offset * scale) * ((double)x[i] - offset * scale);
    }
    free(x);
    free(y);
    free(q);
    return sqrt(err / ref);
}

/* Bounds ~25 % above what these quantisers give on Gaussian rows (measured: Q4_1 .078,
 * Q5_0 .043, Q5_1 .038; with an offset of 2 sigma the same for Q4_1/Q5_1, whose m absorbs
 * it, Q5_0 .074). A mis-packed nibble or high bit lands far above them. */
static void test_quantizer_error_bounds(void) {
    const struct { int32_t type; double bound, bound_offset; } bounds[] = {
        {EV_TYPE_Q4_1, 0.098, 0.098}, {EV_TYPE_Q5_0, 0.054, 0.092}, {EV_TYPE_Q5_1, 0.047, 0.047}};
    const float scales[] = {1.0f, 0.25f, 40.0f};
    for (size_t i = 0; i < sizeof bounds / sizeof bounds[0]; i++) {
        for (size_t s = 0; s < sizeof scales / sizeof scales[0]; s++) {
            const double e = relative_rms_error(bounds[i].type, 8192, scales[s], 0.0f);
            const double eo = relative_rms_error(bounds[i].type, 8192, scales[s], 2.0f);
            CHECK_MSG(e <= bounds[i].bound && eo <= bounds[i].bound_offset,
                      "%s: relative RMS error %.4f (> %.3f?), with offset %.4f (> %.3f?), scale %g",
                      ev_type_get(bounds[i].type)->name, e, bounds[i].bound, eo,
                      bounds[i].bound_offset, scales[s]);
        }
    }
}

/* ggml's dot of a row against Q8_1 activations, as ggml_vec_dot_q4_1_q8_1 / q5_1_q8_1 compute
 * it: Q8_1 = Q8_0's d and qs plus s = fp16(d_unrounded * sum(q)); m_w * s per block */
static double ggml_q8_1_dot(int32_t type, const uint8_t *w, const float *x, int64_t n) {
    const ev_type_traits *t = ev_type_get(type);
    float wf[32];
    double total = 0.0;
    for (int64_t b = 0; b < n / 32; b++) {
        const uint8_t *block = w + b * t->type_size;
        ev_block_q8_0 xq;
        ev_quantize_row_q8_0(x + 32 * b, &xq, 32);
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[32 * b + j]));
        int32_t sum_q = 0;
        for (int j = 0; j < 32; j++) sum_q += xq.qs[j];
        const float s = ev_fp16_to_f32(ev_f32_to_fp16((float)sum_q * (amax / 127.0f)));
        ev_fp16 m_half;
        memcpy(&m_half, block + t->scale_at[1], 2);
        const float m = ev_fp16_to_f32(m_half);
        /* the d*q part: the dequantised weights minus m, against the Q8_0 values */
        t->to_float(block, wf, 32);
        for (int j = 0; j < 32; j++)
            total += ((double)wf[j] - m) * ((double)xq.qs[j] * ev_fp16_to_f32(xq.d));
        total += (double)m * s;
    }
    return total;
}

/* The scalar dot against Q8_0 activations: within 1e-5 of sum |w x| of the double product
 * of the dequantised rows; Q4_1/Q5_1 also within 2^-10 of sum |m s| (s: each activation
 * block's sum) of ggml's Q8_1 arithmetic, whose s carries two float16 roundings that edgevlm's
 * exact s = d_x * sum(q_x) does not. */
static void test_vec_dot(void) {
    const ev_kernels *k = ev_kernels_scalar();
    const int64_t sizes[] = {32, 1152, 4096};
    for (int f = 0; f < N_FIXTURES; f++) {
        const ev_type_traits *t = ev_type_get(FIXTURES[f].type);
        int bad = 0, bad_ggml = 0, runs = 0;
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
            const int64_t n = sizes[si];
            float *x = malloc((size_t)n * 4), *wf = malloc((size_t)n * 4);
            float *xf = malloc((size_t)n * 4);
            uint8_t *w = malloc((size_t)ev_row_bytes(t->type, n));
            ev_block_q8_0 *xq = malloc((size_t)(n / 32) * sizeof(ev_block_q8_0));
            for (int rep = 0; rep < 12; rep++, runs++) {
                const float ws = rep % 2 ? 0.02f : 3.0f, offset = rep % 3 == 0 ? 2.0f * ws : 0.0f;
                for (int64_t i = 0; i < n; i++) wf[i] = tu_gaussian(&seed) * ws + offset;
                const float xs = rep % 4 == 1 ? 100.0f : 1.0f, x_offset = rep % 5 == 0 ? xs : 0.0f;
                for (int64_t i = 0; i < n; i++) x[i] = tu_gaussian(&seed) * xs + x_offset;
                t->from_float(wf, w, n);
                ev_quantize_row_q8_0(x, xq, n);
                t->to_float(w, wf, n);
                ev_act_type_get(EV_TYPE_Q8_0)->to_float(xq, xf, n);
                double ref = 0.0, mag = 0.0;
                for (int64_t i = 0; i < n; i++) {
                    ref += (double)wf[i] * xf[i];
                    mag += fabs((double)wf[i] * xf[i]);
                }
                float got;
                k->vec_dot[t->type](n, &got, w, xq);
                if (!(fabs(got - ref) <= 1e-5 * mag + 1e-30) && bad++ < 2)
                    fprintf(stderr, "  %s n=%lld: vec_dot %.9g, dequantised %.9g (mag %.3g)\n",
                            t->name, (long long)n, got, ref, mag);
                if (t->scale_at[1] < 0) continue;
                /* ggml's s = fp16(d * sum(q)) takes the unrounded d (its qs part the float16
                 * one): two roundings of 2^-11 apart from d_x * sum(q_x) */
                double ms = 0.0;
                for (int64_t b = 0; b < n / 32; b++) {
                    ev_fp16 m_half;
                    memcpy(&m_half, w + b * t->type_size + t->scale_at[1], 2);
                    double sx = 0.0;
                    for (int j = 0; j < 32; j++) sx += xf[32 * b + j];
                    ms += fabs(ev_fp16_to_f32(m_half) * sx);
                }
                const double ggml = ggml_q8_1_dot(t->type, w, x, n);
                if (!(fabs(got - ggml) <= ldexp(ms, -10) + 1e-5 * mag + 1e-30) && bad_ggml++ < 2)
                    fprintf(stderr, "  %s n=%lld: vec_dot %.9g, ggml's Q8_1 arithmetic %.9g\n",
                            t->name, (long long)n, got, ggml);
            }
            free(x);
            free(wf);
            free(xf);
            free(w);
            free(xq);
        }
        CHECK_MSG(bad == 0 && bad_ggml == 0, "%s vec_dot: %d of %d off the dequantised product, "
                  "%d off ggml's", t->name, bad, runs, bad_ggml);
    }
}

/* every code at an extreme against |q8| = 127, d = 1: exact integer results */
static void test_vec_dot_extremes_exact(void) {
    ev_block_q8_0 x[2];
    for (int b = 0; b < 2; b++) {
        x[b].d = ev_f32_to_fp16(1.0f);
        for (int i = 0; i < 32; i++) x[b].qs[i] = -127;
    }
    const ev_kernels *s = ev_kernels_scalar();
    float got;
    /* Q4_1: codes 15, d = 1, m = -8: value 7 */
    ev_block_q4_1 w4[2];
    memset(w4, 0xff, sizeof w4);
    for (int b = 0; b < 2; b++) {
        w4[b].d = ev_f32_to_fp16(1.0f);
        w4[b].m = ev_f32_to_fp16(-8.0f);
    }
    s->vec_dot[EV_TYPE_Q4_1](64, &got, w4, x);
    CHECK_NEAR(got, 64.0 * 7 * -127, 0.0);
    /* Q5_0: codes 0 (value -16) and codes 31 (value 15) */
    ev_block_q5_0 w50[2];
    memset(w50, 0x00, sizeof w50);
    memset(&w50[1], 0xff, sizeof w50[1]);
    for (int b = 0; b < 2; b++) w50[b].d = ev_f32_to_fp16(1.0f);
    s->vec_dot[EV_TYPE_Q5_0](64, &got, w50, x);
    CHECK_NEAR(got, 32.0 * -16 * -127 + 32.0 * 15 * -127, 0.0);
    /* Q5_1: codes 31, d = 1, m = 1: value 32 */
    ev_block_q5_1 w51[2];
    memset(w51, 0xff, sizeof w51);
    for (int b = 0; b < 2; b++) w51[b].d = w51[b].m = ev_f32_to_fp16(1.0f);
    s->vec_dot[EV_TYPE_Q5_1](64, &got, w51, x);
    CHECK_NEAR(got, 64.0 * 32 * -127, 0.0);
    /* the 5th bits land on the right elements: only element e of block 0 has its high bit */
    for (int e = 0; e < 32; e++) {
        ev_block_q5_0 one;
        memset(&one, 0, sizeof one);
        one.d = ev_f32_to_fp16(1.0f);
        one.qh[e / 8] = (uint8_t)(1u << (e % 8));
        float v[32];
        ev_row_to_f32(EV_TYPE_Q5_0, &one, v, 32);
        int ok = 1;
        for (int j = 0; j < 32; j++) ok &= v[j] == (j == e ? 0.0f : -16.0f);
        CHECK_MSG(ok, "Q5_0: the high bit of element %d", e);
    }
}

int main(void) {
    test_table_entries();
    test_quantizers_store_gguf_py_bytes();
    test_dequantize_matches_gguf_python();
    test_quantizer_error_bounds();
    test_vec_dot();
    test_vec_dot_extremes_exact();
    return tu_report("test_legacy_quants");
}
