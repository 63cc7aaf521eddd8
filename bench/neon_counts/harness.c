/*
 * harness.c - one weight type's decode dot product, ours (the NEON kernel table) and llama.cpp's
 * (ggml_vec_dot_<type>_q8_{0,K} from ggml-cpu/arch/arm/quants.c), on identical random blocks,
 * bracketed by two marker calls so that a qemu instruction trace can count each call alone.
 *
 *     harness TYPE N1 N2        N1 < N2 super-blocks of 256 weights
 *
 * Runs, in this order, each between nc_region_begin() and nc_region_end():
 *   0. a known loop of 3 instructions, 10 times     1. the same loop 110 times
 *      (the driver checks that the count grows by exactly 300: the method's self-test)
 *   2. ours' call site around an empty function (1 instruction, its RET)
 *   3. ggml's call site around an empty function
 *   4. ours over N1      5. ours over N2      6. ggml over N1      7. ggml over N2
 * and prints one line "TYPE set=<kernel set> ours=<how> d1=.. d2=.. g1=.. g2=.. agree=0|1";
 * exits 1 when ours and ggml's results differ by more than a relative 1e-4 (the harness would
 * then be calling the wrong functions). bench/neon_counts.py builds it (a static aarch64
 * binary) and counts the trace lines of each region.
 *
 * The blocks are random bytes (every bit pattern is a valid code of these types) with their
 * float16 scales set to sane values, and Q8_0 / Q8_K activations with codes in [-127, 127] and
 * true bsums: no quantiser runs, so the trace stays short. Block layouts are ggml's, which
 * ours copy byte for byte (src/types.h).
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "nc_common.h"
#include "types.h"

/* llama.cpp's dot products (ggml-cpu/quants.h), declared here so that no ggml header meets
 * ours */
typedef void (*ggml_vec_dot_fn)(int n, float *s, size_t bs, const void *vx, size_t bx,
                                const void *vy, size_t by, int nrc);
#define GGML_DOT(name) \
    void name(int, float *, size_t, const void *, size_t, const void *, size_t, int)
GGML_DOT(ggml_vec_dot_q8_0_q8_0);
GGML_DOT(ggml_vec_dot_q4_0_q8_0);
GGML_DOT(ggml_vec_dot_q5_0_q8_0);
GGML_DOT(ggml_vec_dot_iq4_nl_q8_0);
GGML_DOT(ggml_vec_dot_q2_K_q8_K);
GGML_DOT(ggml_vec_dot_q3_K_q8_K);
GGML_DOT(ggml_vec_dot_q4_K_q8_K);
GGML_DOT(ggml_vec_dot_q5_K_q8_K);
GGML_DOT(ggml_vec_dot_q6_K_q8_K);
GGML_DOT(ggml_vec_dot_iq4_xs_q8_K);
#undef GGML_DOT

/* one weight type: its block, where its float16 scales lie, and both dot products */
typedef struct nc_type {
    const char *name;
    int32_t type;               /* EV_TYPE_* */
    size_t block_bytes;
    int block_elems;            /* 32 or 256 */
    size_t fp16_off[2];         /* offsets of the block's float16 scales (d, dmin) */
    int n_fp16;
    ggml_vec_dot_fn ggml;
} nc_type;

/* the first fields of a TYPES row (name, type id, block bytes and elements), and its float16
 * scale fields */
#define ROW(NAME, T, QK) #NAME, EV_TYPE_##T, sizeof(ev_block_##NAME), QK
#define FP16_1(NAME, a) {offsetof(ev_block_##NAME, a), 0}, 1
#define FP16_2(NAME, a, b) {offsetof(ev_block_##NAME, a), offsetof(ev_block_##NAME, b)}, 2
static const nc_type TYPES[] = {
    {ROW(q8_0, Q8_0, EV_QK), FP16_1(q8_0, d), ggml_vec_dot_q8_0_q8_0},
    {ROW(q4_0, Q4_0, EV_QK), FP16_1(q4_0, d), ggml_vec_dot_q4_0_q8_0},
    {ROW(q5_0, Q5_0, EV_QK), FP16_1(q5_0, d), ggml_vec_dot_q5_0_q8_0},
    {ROW(iq4_nl, IQ4_NL, EV_QK), FP16_1(iq4_nl, d), ggml_vec_dot_iq4_nl_q8_0},
    {ROW(q2_K, Q2_K, EV_QK_K), FP16_2(q2_K, d, dmin), ggml_vec_dot_q2_K_q8_K},
    {ROW(q3_K, Q3_K, EV_QK_K), FP16_1(q3_K, d), ggml_vec_dot_q3_K_q8_K},
    {ROW(q4_K, Q4_K, EV_QK_K), FP16_2(q4_K, d, dmin), ggml_vec_dot_q4_K_q8_K},
    {ROW(q5_K, Q5_K, EV_QK_K), FP16_2(q5_K, d, dmin), ggml_vec_dot_q5_K_q8_K},
    {ROW(q6_K, Q6_K, EV_QK_K), FP16_1(q6_K, d), ggml_vec_dot_q6_K_q8_K},
    {ROW(iq4_xs, IQ4_XS, EV_QK_K), FP16_1(iq4_xs, d), ggml_vec_dot_iq4_xs_q8_K},
};
#undef ROW
#undef FP16_1
#undef FP16_2

/* The two markers: the driver finds their addresses with nm and counts the trace lines from
 * the first instruction of begin to the first of end. noipa: never inlined, cloned or folded
 * into one another. */

/* One call between the markers; the same instructions around the call whatever n is (each
 * region's count differs from another's by the dot product alone). */
__attribute__((noipa)) static void timed_ours(ev_vec_dot_fn f, int64_t n, float *out,
                                              const void *w, const void *x) {
    nc_region_begin();
    f(n, out, w, x);
    nc_region_end();
}

__attribute__((noipa)) static void timed_ggml(ggml_vec_dot_fn f, int64_t n, float *out,
                                              const void *w, const void *x) {
    nc_region_begin();
    f((int)n, out, 0, w, 0, x, 0, 1);
    nc_region_end();
}

/* the call sites' own cost: functions of one instruction (RET) */
__attribute__((noipa)) static void nc_empty_ours(int64_t n, float *out, const void *w,
                                                 const void *x) {}
__attribute__((noipa)) static void nc_empty_ggml(int n, float *s, size_t bs, const void *vx,
                                                 size_t bx, const void *vy, size_t by, int nrc) {}



static void fill_random(uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i += 8) {
        const uint64_t r = next_u64();
        memcpy(p + i, &r, n - i < 8 ? n - i : 8);
    }
}

/* a float16 in [2^-8, 2^-7): small enough that no sum overflows, never 0 or NaN */
static void put_scale(uint8_t *p) {
    const __fp16 h = (__fp16)((1.0f + (float)(next_u64() % 1024) / 1024.0f) / 256.0f);
    memcpy(p, &h, sizeof h);
}

static int8_t code_q8(uint8_t b) { return b == 0x80 ? -127 : (int8_t)b; }

/* n weights of type t as random blocks */
static void *make_weights(const nc_type *t, int64_t n) {
    const size_t nb = (size_t)(n / t->block_elems), bytes = nb * t->block_bytes;
    uint8_t *w = malloc(bytes + 8);
    if (!w) return NULL;
    fill_random(w, bytes);
    for (size_t b = 0; b < nb; b++)
        for (int k = 0; k < t->n_fp16; k++) put_scale(w + b * t->block_bytes + t->fp16_off[k]);
    return w;
}

/* n activations as Q8_0 blocks (q8k 0) or Q8_K super-blocks (q8k 1) */
static void *make_activations(int64_t n, int q8k) {
    if (q8k) {
        ev_block_q8_K *x = malloc((size_t)(n / EV_QK_K) * sizeof *x);
        if (!x) return NULL;
        for (int64_t b = 0; b < n / EV_QK_K; b++) {
            uint8_t raw[EV_QK_K];
            fill_random(raw, sizeof raw);
            x[b].d = (1.0f + (float)(next_u64() % 1024) / 1024.0f) / 128.0f;
            for (int g = 0; g < EV_QK_K / 16; g++) {
                int sum = 0;
                for (int l = 0; l < 16; l++) sum += x[b].qs[16 * g + l] = code_q8(raw[16 * g + l]);
                x[b].bsums[g] = (int16_t)sum;
            }
        }
        return x;
    }
    ev_block_q8_0 *x = malloc((size_t)(n / EV_QK) * sizeof *x);
    if (!x) return NULL;
    for (int64_t b = 0; b < n / EV_QK; b++) {
        uint8_t raw[EV_QK];
        fill_random(raw, sizeof raw);
        for (int l = 0; l < EV_QK; l++) x[b].qs[l] = code_q8(raw[l]);
        put_scale((uint8_t *)&x[b].d);
    }
    return x;
}

int main(int argc, char **argv) {
    const nc_type *t = NULL;
    for (size_t i = 0; argc == 4 && i < sizeof TYPES / sizeof TYPES[0]; i++)
        if (strcmp(argv[1], TYPES[i].name) == 0) t = &TYPES[i];
    const long n1 = argc == 4 ? atol(argv[2]) : 0, n2 = argc == 4 ? atol(argv[3]) : 0;
    if (!t || n1 < 1 || n2 <= n1) {
        fprintf(stderr, "usage: %s TYPE N1 N2   (N1 < N2 super-blocks of 256 weights; TYPE:",
                argv[0]);
        for (size_t i = 0; i < sizeof TYPES / sizeof TYPES[0]; i++)
            fprintf(stderr, " %s", TYPES[i].name);
        fprintf(stderr, ")\n");
        return 2;
    }
    const ev_kernels *k = ev_kernels_arm_neon();
    const ev_vec_dot_fn ours = k ? k->vec_dot[t->type] : NULL;
    if (!ours) {
        fprintf(stderr, "no NEON kernel set or no vec_dot for %s\n", t->name);
        return 2;
    }
    const char *how = ours == ev_kernels_scalar()->vec_dot[t->type] ? "scalar-fallback" : "neon";
    const int64_t e1 = (int64_t)n1 * EV_QK_K, e2 = (int64_t)n2 * EV_QK_K;
    void *w = make_weights(t, e2), *x = make_activations(e2, t->block_elems == EV_QK_K);
    if (!w || !x) return 2;

    float d1 = 0, d2 = 0, g1 = 0, g2 = 0;
    nc_calibrate();
    timed_ours(nc_empty_ours, e1, &d1, w, x);
    timed_ggml(nc_empty_ggml, e1, &g1, w, x);
    timed_ours(ours, e1, &d1, w, x);
    timed_ours(ours, e2, &d2, w, x);
    timed_ggml(t->ggml, e1, &g1, w, x);
    timed_ggml(t->ggml, e2, &g2, w, x);

    const int agree = fabsf(d1 - g1) <= 1e-4f * fmaxf(fabsf(d1), fabsf(g1)) &&
                      fabsf(d2 - g2) <= 1e-4f * fmaxf(fabsf(d2), fabsf(g2));
    printf("%s set=%s ours=%s d1=%.9g d2=%.9g g1=%.9g g2=%.9g agree=%d\n", t->name, k->name, how,
           d1, d2, g1, g2, agree);
    free(w);
    free(x);
    return agree ? 0 : 1;
}
