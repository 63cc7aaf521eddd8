/*
 * quants_fit.c - the scale searches of llama.cpp's K-quant quantisers (quants_fit.h).
 *
 * Read against ggml/src/ggml-quants.c (llama.cpp master, 2026): every expression keeps the
 * order and the float/int types of the original, since a last-bit difference in a running
 * sum can flip a comparison and so change the stored levels. Integers enter float products
 * as (float)l exactly where C's usual conversions put them in the original.
 */
#include "quants_fit.h"

#include <math.h>

/* the value of largest magnitude in x[n] (the first on a tie), and that magnitude */
static float signed_max(int n, const float *x, float *amax_out) {
    float max = 0.0f, amax = 0.0f;
    for (int i = 0; i < n; i++) {
        const float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    *amax_out = amax;
    return max;
}

static inline int clamp_int(int v, int lo, int hi) {
    return v < lo ? lo : v > hi ? hi : v;
}

/* llama.cpp: make_qx_quants with rmse_type 1 and no importance weights (weight x^2) */
float ev_fit_symmetric(int n, int nmax, const float *x, int8_t *L) {
    float amax;
    const float max = signed_max(n, x, &amax);
    if (amax < EV_GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    float iscale = (float)-nmax / max;
    float sumlx = 0.0f, suml2 = 0.0f;
    for (int i = 0; i < n; i++) {
        const int l = clamp_int(ev_nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)(l + nmax);
        const float w = x[i] * x[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        iscale = -((float)nmax + 0.1f * (float)is) / max;
        sumlx = suml2 = 0.0f;
        for (int i = 0; i < n; i++) {
            const int l = clamp_int(ev_nearest_int(iscale * x[i]), -nmax, nmax - 1);
            const float w = x[i] * x[i];
            sumlx += w * x[i] * (float)l;
            suml2 += w * (float)l * (float)l;
        }
        if (suml2 > 0.0f && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++)
                L[i] = (int8_t)(nmax + clamp_int(ev_nearest_int(iscale * x[i]), -nmax, nmax - 1));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* llama.cpp: make_q3_quants with do_rmse (weight x^2) */
float ev_fit_symmetric_refined(int n, int nmax, const float *x, int8_t *L) {
    float amax;
    const float max = signed_max(n, x, &amax);
    if (amax < EV_GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    const float iscale = (float)-nmax / max;
    float sumlx = 0.0f, suml2 = 0.0f;
    for (int i = 0; i < n; i++) {
        const int l = clamp_int(ev_nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)l;
        const float w = x[i] * x[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    for (int itry = 0; itry < 5; itry++) {
        int n_changed = 0;
        for (int i = 0; i < n; i++) {
            const float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * (float)L[i];
            if (!(slx > 0.0f)) continue;
            float sl2 = suml2 - w * (float)L[i] * (float)L[i];
            const int new_l = clamp_int(ev_nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
            if (new_l == L[i]) continue;
            slx += w * x[i] * (float)new_l;
            sl2 += w * (float)new_l * (float)new_l;
            if (sl2 > 0.0f && slx * slx * suml2 > sumlx * sumlx * sl2) {
                L[i] = (int8_t)new_l;
                sumlx = slx;
                suml2 = sl2;
                n_changed++;
            }
        }
        if (!n_changed) break;
    }
    for (int i = 0; i < n; i++) L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* the weighted error of levels L with scale and min against x (squared, or absolute) */
static float scale_min_error(int n, const float *x, const float *weights, const uint8_t *L,
                             float scale, float min, int use_mad) {
    float err = 0.0f;
    for (int i = 0; i < n; i++) {
        float diff = scale * (float)L[i] + min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        err += weights[i] * diff;
    }
    return err;
}

/* llama.cpp: make_qkx2_quants */
float ev_fit_scale_min(int n, int nmax, const float *x, const float *weights, uint8_t *L,
                       float *the_min, uint8_t *Laux, float rmin, float rdelta, int nstep,
                       int use_mad) {
    float min = x[0], max = x[0];
    float sum_w = weights[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        const float w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0.0f) min = 0.0f;
    if (max == min) {
        memset(L, 0, (size_t)n);
        *the_min = -min;
        return 0.0f;
    }
    float iscale = (float)nmax / (max - min);
    float scale = 1.0f / iscale;
    for (int i = 0; i < n; i++)
        L[i] = (uint8_t)clamp_int(ev_nearest_int(iscale * (x[i] - min)), 0, nmax);
    float best_error = scale_min_error(n, x, weights, L, scale, min, use_mad);
    if (nstep < 1) {
        *the_min = -min;
        return scale;
    }
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * (float)is + (float)nmax) / (max - min);
        float sum_l = 0.0f, sum_l2 = 0.0f, sum_xl = 0.0f;
        for (int i = 0; i < n; i++) {
            const int l = clamp_int(ev_nearest_int(iscale * (x[i] - min)), 0, nmax);
            Laux[i] = (uint8_t)l;
            const float w = weights[i];
            sum_l += w * (float)l;
            sum_l2 += w * (float)l * (float)l;
            sum_xl += w * (float)l * x[i];
        }
        const float D = sum_w * sum_l2 - sum_l * sum_l;
        if (!(D > 0.0f)) continue;
        float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
        float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
        if (this_min > 0.0f) {
            this_min = 0.0f;
            this_scale = sum_xl / sum_l2;
        }
        const float cur_error = scale_min_error(n, x, weights, Laux, this_scale, this_min, use_mad);
        if (cur_error < best_error) {
            memcpy(L, Laux, (size_t)n);
            best_error = cur_error;
            scale = this_scale;
            min = this_min;
        }
    }
    *the_min = -min;
    return scale;
}
