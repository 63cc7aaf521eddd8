/*
 * decoder_attn.c - the text decoder's causal GQA attention over the KV cache (spec section 8):
 * query i of the call (sequence index first + i) attends to keys 0 .. first + i; query head h
 * reads KV head h / (n_head / n_head_kv).
 *
 * Decode (fewer than EV_DEC_ATT_MIN_TILED queries): one (query, head) pair per item, a dot
 * product per key, then an axpy per value row.
 *
 * Prefill: one (head, block of up to EV_DEC_ATT_QB queries) per item, the keys in chunks of
 * up to EV_DEC_ATT_KB, flash-attention style, so the products are register-tiled matrix
 * products and the per-thread buffer does not grow with the context:
 *   S  = Q K^T * scale                 [qb][kb]   sgemm over the chunk's K^T gathered [hd][kb]
 *   causal mask: row i keeps keys t <= first + i, the rest of the row is zeroed after the exp
 *   m' = max(m, rowmax S); c = exp(m - m'); P = exp(S - m'); l = l c + rowsum P
 *   O  = O c + P V                     [qb][hd]   sgemm over the chunk's V gathered [kb][hd]
 *   out = O / l
 * Items are head-major, so each thread's contiguous share holds whole heads: every head costs
 * the same, while the causal blocks of one head do not.
 */
#include <math.h>
#include <string.h>

#include "qwen3vl.h"

#define MIN_TILED EV_DEC_ATT_MIN_TILED
#define QB EV_DEC_ATT_QB
#define KB EV_DEC_ATT_KB

typedef struct attn_job {
    edgevlm_session *s;
    int64_t n;                     /* query tokens in this call */
    int64_t first;                 /* sequence index of query 0 (= n_past before the call) */
    const char *k_cache, *v_cache; /* this layer's [n_ctx][n_head_kv * head_dim] */
} attn_job;

int64_t ev_dec_attn_floats(int64_t head_dim) {
    /* K^T [hd][KB], V [KB][hd], S [QB][KB], O chunk [QB][hd], O [QB][hd], m, l, c [QB] */
    return head_dim * KB * 2 + (int64_t)QB * KB + (int64_t)QB * head_dim * 2 + 3LL * QB;
}

/* One (query, head) pair per item. */
static void attn_pair_task(void *ctx, int64_t start, int64_t end, int tid) {
    const attn_job *job = ctx;
    edgevlm_session *s = job->s;
    const edgevlm_model_info *in = &s->model->info;
    const int hd = in->head_dim, n_head = in->n_head, group = in->n_head / in->n_head_kv;
    const int64_t kv_row = (int64_t)in->n_head_kv * hd;
    const float scale = 1.0f / sqrtf((float)hd);
    const ev_text_scratch *ts = ev_text_scratch_of(s);
    float *scores = ts->scores + (int64_t)tid * s->params.n_ctx;
    float *acc = ts->acc + (int64_t)tid * hd;
    const ev_kernels *k = s->kernels;
    const int f16 = s->kv_elem == 2;
    for (int64_t item = start; item < end; item++) {
        const int64_t i = item / n_head;
        const int h = (int)(item % n_head), g = h / group;
        const float *q = ts->q + i * n_head * hd + (int64_t)h * hd;
        const int64_t n_keys = job->first + i + 1;
        float mx = -INFINITY;
        for (int64_t t = 0; t < n_keys; t++) {
            const char *krow = job->k_cache + ((size_t)t * kv_row + (size_t)g * hd) * s->kv_elem;
            float sc = (f16 ? k->dot_f16_f32(hd, (const ev_fp16 *)krow, q)
                            : k->dot_f32(hd, (const float *)krow, q)) * scale;
            scores[t] = sc;
            if (sc > mx) mx = sc;
        }
        const float inv = 1.0f / k->exp_sum_f32(scores, n_keys, mx);
        memset(acc, 0, sizeof(float) * (size_t)hd);
        for (int64_t t = 0; t < n_keys; t++) {
            const char *vrow = job->v_cache + ((size_t)t * kv_row + (size_t)g * hd) * s->kv_elem;
            if (f16) k->axpy_f16_f32(hd, scores[t] * inv, (const ev_fp16 *)vrow, acc);
            else k->axpy_f32(hd, scores[t] * inv, (const float *)vrow, acc);
        }
        memcpy(ts->att + i * n_head * hd + (int64_t)h * hd, acc, sizeof(float) * (size_t)hd);
    }
}

/* Keys [t0, t0 + kb) of KV head g as K^T [hd][kb] and V [kb][hd], in float32. */
static void gather_kv(const attn_job *job, int64_t g, int64_t t0, int64_t kb, float *kt,
                      float *v) {
    const edgevlm_session *s = job->s;
    const int64_t hd = s->model->info.head_dim, kv_row = s->model->info.n_head_kv * hd;
    for (int64_t t = 0; t < kb; t++) {
        const size_t off = (size_t)(t0 + t) * kv_row + (size_t)(g * hd);
        if (s->kv_elem == 2) {
            const ev_fp16 *kr = (const ev_fp16 *)job->k_cache + off;
            const ev_fp16 *vr = (const ev_fp16 *)job->v_cache + off;
            for (int64_t d = 0; d < hd; d++) {
                kt[d * kb + t] = ev_fp16_to_f32(kr[d]);
                v[t * hd + d] = ev_fp16_to_f32(vr[d]);
            }
        } else {
            const float *kr = (const float *)job->k_cache + off;
            for (int64_t d = 0; d < hd; d++) kt[d * kb + t] = kr[d];
            memcpy(v + t * hd, (const float *)job->v_cache + off, sizeof(float) * (size_t)hd);
        }
    }
}

/* One (head, query block) per item, head-major. */
static void attn_tiled_task(void *ctx, int64_t start, int64_t end, int tid) {
    const attn_job *job = ctx;
    edgevlm_session *s = job->s;
    const edgevlm_model_info *in = &s->model->info;
    const int64_t hd = in->head_dim, q_row = (int64_t)in->n_head * hd;
    const int64_t group = in->n_head / in->n_head_kv, n_qb = (job->n + QB - 1) / QB;
    const float scale = 1.0f / sqrtf((float)hd);
    const ev_kernels *k = s->kernels;
    const ev_text_scratch *ts = ev_text_scratch_of(s);
    float *kt = ts->attn_tile + (int64_t)tid * ev_dec_attn_floats(hd);
    float *v = kt + hd * KB, *sc = v + (int64_t)KB * hd, *o = sc + (int64_t)QB * KB;
    float *acc = o + (int64_t)QB * hd, *m = acc + (int64_t)QB * hd, *l = m + QB, *c = l + QB;
    for (int64_t item = start; item < end; item++) {
        const int64_t h = item / n_qb, i0 = item % n_qb * QB;
        const int64_t nq = job->n - i0 < QB ? job->n - i0 : QB;
        const int64_t n_keys = job->first + i0 + nq;    /* what the block's last query sees */
        const float *q = ts->q + i0 * q_row + h * hd;  /* [nq] rows, q_row apart */
        for (int64_t i = 0; i < nq; i++) {
            m[i] = -INFINITY;
            l[i] = 0.0f;
        }
        memset(acc, 0, sizeof(float) * (size_t)(nq * hd));
        for (int64_t t0 = 0; t0 < n_keys; t0 += KB) {
            const int64_t kb = n_keys - t0 < KB ? n_keys - t0 : KB;
            gather_kv(job, h / group, t0, kb, kt, v);
            k->sgemm_f32(nq, kb, hd, scale, q, q_row, kt, kb, sc, kb);
            for (int64_t i = 0; i < nq; i++) {
                float *row = sc + i * kb;
                int64_t nv = job->first + i0 + i + 1 - t0;  /* keys of the chunk row i sees */
                nv = nv < kb ? nv : kb;
                if (nv <= 0) {     /* only in chunks after the first: m[i] is already finite */
                    memset(row, 0, sizeof(float) * (size_t)kb);
                    c[i] = 1.0f;
                    continue;
                }
                float mx = ev_row_max(row, nv);
                mx = m[i] > mx ? m[i] : mx;                 /* m[i]: -inf on the first chunk */
                c[i] = expf(m[i] - mx);                     /* 0 on the first chunk */
                l[i] = l[i] * c[i] + k->exp_sum_f32(row, nv, mx);
                m[i] = mx;
                memset(row + nv, 0, sizeof(float) * (size_t)(kb - nv));
            }
            k->sgemm_f32(nq, hd, kb, 1.0f, sc, kb, v, hd, o, hd);
            for (int64_t i = 0; i < nq; i++)
                for (int64_t d = 0; d < hd; d++)
                    acc[i * hd + d] = acc[i * hd + d] * c[i] + o[i * hd + d];
        }
        float *out = ts->att + i0 * q_row + h * hd;
        for (int64_t i = 0; i < nq; i++) {
            const float inv = 1.0f / l[i];
            for (int64_t d = 0; d < hd; d++) out[i * q_row + d] = acc[i * hd + d] * inv;
        }
    }
}

void ev_decoder_attention(edgevlm_session *s, int layer, int64_t n) {
    const edgevlm_model_info *in = &s->model->info;
    const size_t layer_bytes = (size_t)s->params.n_ctx * (size_t)in->n_head_kv *
                               (size_t)in->head_dim * (size_t)s->kv_elem;
    attn_job job = {s, n, s->n_past, (const char *)s->k_cache + (size_t)layer * layer_bytes,
                    (const char *)s->v_cache + (size_t)layer * layer_bytes};
    if (n < MIN_TILED) {
        ev_pool_for(s->pool, n * in->n_head, 1, attn_pair_task, &job);
        return;
    }
    ev_pool_for(s->pool, in->n_head * ((n + QB - 1) / QB), 1, attn_tiled_task, &job);
}
