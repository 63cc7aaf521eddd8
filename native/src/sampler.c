/*
 * sampler.c - token sampling with transformers' semantics and order:
 * repetition penalty -> temperature -> top-k -> top-p -> draw from a seeded RNG.
 * Uses the session's candidate buffers; allocates nothing.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "session.h"

/* splitmix64: a small, well-mixed generator; state advances by a constant. */
static uint64_t next_u64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static double next_unit(uint64_t *state) {   /* uniform in [0, 1) */
    return (double)(next_u64(state) >> 11) * (1.0 / 9007199254740992.0);
}

void edgevlm_session_set_seed(edgevlm_session *s, uint64_t seed) {
    if (s) s->rng_state = seed;
}

static int32_t argmax(const float *x, int64_t n) {
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return (int32_t)best;
}

/* HF RepetitionPenaltyLogitsProcessor: once per distinct token in the history. The sign bit
 * of cand_p marks tokens already penalised (cand_p is free scratch here). */
static void repetition_penalty(edgevlm_session *s, float *logits, int64_t n_vocab, float penalty,
                               const int32_t *history, int64_t n_history) {
    float *mark = s->cand_p;
    for (int64_t i = 0; i < n_history; i++) {
        int32_t t = history[i];
        if (t >= 0 && t < n_vocab) mark[t] = 0.0f;
    }
    for (int64_t i = 0; i < n_history; i++) {
        int32_t t = history[i];
        if (t < 0 || t >= n_vocab || mark[t] != 0.0f) continue;
        mark[t] = 1.0f;
        logits[t] = logits[t] < 0 ? logits[t] * penalty : logits[t] / penalty;
    }
}

static _Thread_local const float *g_sort_logits;   /* qsort has no context argument */

static int by_logit_desc(const void *a, const void *b) {
    float x = g_sort_logits[*(const int32_t *)a], y = g_sort_logits[*(const int32_t *)b];
    if (x > y) return -1;
    if (x < y) return 1;
    return *(const int32_t *)a < *(const int32_t *)b ? -1 : 1;
}

/* Moves the k largest logits to the front of idx[0..n) (quickselect), unordered. */
static void select_top_k(int32_t *idx, int64_t n, int64_t k, const float *logits) {
    int64_t lo = 0, hi = n - 1;
    while (lo < hi) {
        float pivot = logits[idx[(lo + hi) / 2]];
        int64_t i = lo, j = hi;
        while (i <= j) {
            while (logits[idx[i]] > pivot) i++;
            while (logits[idx[j]] < pivot) j--;
            if (i <= j) { int32_t t = idx[i]; idx[i] = idx[j]; idx[j] = t; i++; j--; }
        }
        if (k - 1 <= j) hi = j;
        else if (k - 1 >= i) lo = i;
        else break;
    }
}

edgevlm_status edgevlm_sample(edgevlm_session *s, float *logits, const edgevlm_sampling *p,
                              const int32_t *history, int64_t n_history, int32_t *out_token) {
    if (!s || !logits || !p || !out_token || (n_history > 0 && !history))
        return s ? ev_fail(s, EDGEVLM_ERR_ARGUMENT, "edgevlm_sample: NULL argument")
                 : EDGEVLM_ERR_ARGUMENT;
    const int64_t n_vocab = s->model->info.n_vocab;
    if (p->repetition_penalty <= 0.0f || !isfinite(p->repetition_penalty))
        return ev_fail(s, EDGEVLM_ERR_ARGUMENT, "repetition_penalty must be > 0");
    if (p->repetition_penalty != 1.0f && n_history > 0)
        repetition_penalty(s, logits, n_vocab, p->repetition_penalty, history, n_history);
    if (!(p->temperature > 0.0f)) {
        *out_token = argmax(logits, n_vocab);
        return EDGEVLM_OK;
    }
    for (int64_t i = 0; i < n_vocab; i++) logits[i] /= p->temperature;

    int32_t *idx = s->cand_idx;
    for (int64_t i = 0; i < n_vocab; i++) idx[i] = (int32_t)i;
    int64_t n = n_vocab;
    if (p->top_k > 0 && p->top_k < n) {
        select_top_k(idx, n, p->top_k, logits);
        n = p->top_k;
    }
    g_sort_logits = logits;
    qsort(idx, (size_t)n, sizeof *idx, by_logit_desc);

    float *prob = s->cand_p;
    const float mx = logits[idx[0]];
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        prob[i] = expf(logits[idx[i]] - mx);
        sum += prob[i];
    }
    int64_t keep = n;
    if (p->top_p < 1.0f) {
        double before = 0.0;
        for (int64_t i = 0; i < n; i++) {
            if (i > 0 && before / sum >= p->top_p) { keep = i; break; }
            before += prob[i];
        }
    }
    double kept = 0.0;
    for (int64_t i = 0; i < keep; i++) kept += prob[i];
    double r = next_unit(&s->rng_state) * kept, acc = 0.0;
    for (int64_t i = 0; i < keep; i++) {
        acc += prob[i];
        if (r < acc) { *out_token = idx[i]; return EDGEVLM_OK; }
    }
    *out_token = idx[keep - 1];
    return EDGEVLM_OK;
}
