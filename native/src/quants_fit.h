/*
 * quants_fit.h - the scale searches behind llama.cpp's K-quant and IQ4 quantisers
 * (ggml-quants.c), shared by quants_k.c and quants_iq4.c.
 *
 * Each is a transcription of the llama.cpp helper it names, float operation for float
 * operation and in the same order, so that the quantisers built on them store the same bytes
 * as llama-quantize. That only holds when neither side fuses a*b + c into one FMA: this core
 * is built as ISO C (-std=c11, where GCC does not contract) with -ffp-contract=off.
 */
#ifndef EDGEVLM_QUANTS_FIT_H
#define EDGEVLM_QUANTS_FIT_H

#include <stdint.h>
#include <string.h>

/* Groups whose largest magnitude is below this quantise to zero (llama.cpp's GROUP_MAX_EPS). */
#define EV_GROUP_MAX_EPS 1e-15f

/* Round to nearest, ties to even, for |x| <= 2^22: llama.cpp's nearest_int, the magic-number
 * trick (x + 1.5 * 2^23 leaves the integer in the low mantissa bits). Larger x give what the
 * trick gives, which is what llama.cpp stores for them too. */
static inline int ev_nearest_int(float x) {
    const float v = x + 12582912.0f;
    int32_t bits;
    memcpy(&bits, &v, sizeof bits);
    return (bits & 0x007fffff) - 0x00400000;
}

/* The index of the level of values[n] (ascending, n a power of 2) nearest to x, the upper
 * one on a tie (llama.cpp's best_index_int8). */
static inline int ev_nearest_level(int n, const int8_t *values, float x) {
    const float x2 = x + x;   /* compared with level sums: both sides exact */
    int idx = 0;
    for (int step = n >> 1; step > 0; step >>= 1) {
        const int j = idx + step;
        idx = x2 >= (float)(values[j - 1] + values[j]) ? j : idx;
    }
    return idx;
}

/* Symmetric levels L[i] in [0, 2 nmax) for x[n] (value = scale * (L - nmax)), weighted by
 * x^2, with 18 trial scales around nmax/max: llama.cpp's make_qx_quants(n, nmax, x, L,
 * rmse_type = 1, qw = NULL). Returns the scale. */
float ev_fit_symmetric(int n, int nmax, const float *x, int8_t *L);

/* Symmetric levels L[i] in [0, 2 nmax) for x[n], refined coordinate-wise (up to 5 passes) for
 * the x^2-weighted error: llama.cpp's make_q3_quants(n, nmax, x, L, do_rmse = true). Returns
 * the scale. */
float ev_fit_symmetric_refined(int n, int nmax, const float *x, int8_t *L);

/* Levels L[i] in [0, nmax] with a scale and a min (value = scale * L - *the_min), least
 * squares (or least absolute deviations: use_mad) over nstep + 1 trial scales
 * (nmax + rmin + rdelta * is) / (max - min): llama.cpp's make_qkx2_quants. weights[n] weigh
 * the errors; Laux[n] is scratch. Returns the scale; *the_min >= 0. */
float ev_fit_scale_min(int n, int nmax, const float *x, const float *weights, uint8_t *L,
                       float *the_min, uint8_t *Laux, float rmin, float rdelta, int nstep,
                       int use_mad);

#endif
