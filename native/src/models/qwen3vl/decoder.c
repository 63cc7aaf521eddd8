/*
 * decoder.c - the Qwen3-VL text decoder forward pass (spec section 8).
 *
 *   x = embed(tokens), vision rows replacing placeholder embeddings
 *   per layer: RMSNorm -> q,k,v -> per-head q/k RMSNorm -> interleaved MRoPE -> KV cache
 *              -> causal GQA attention -> o -> residual -> RMSNorm -> SwiGLU -> residual
 *              -> DeepStack rows added at the vision rows after layers 0..n_ds-1
 *   logits of the last n_logits tokens = output(RMSNorm(x))
 */
#include <math.h>
#include <string.h>

#include "qwen3vl.h"
#include "util.h"

/* Which MRoPE axis (0 t, 1 h, 2 w) frequency j takes its position from (interleaved). */
static int mrope_axis(int j, const int32_t *sections) {
    if (j % 3 == 1 && j < 3 * sections[1]) return 1;
    if (j % 3 == 2 && j < 3 * sections[2]) return 2;
    return 0;
}

/* cos/sin [n, hd/2] for the tokens' 3-axis positions (positions[axis * stride + i]). */
static void rope_tables(const edgevlm_model_info *in, const int32_t *positions, int64_t stride,
                        int64_t n, float *cos_out, float *sin_out) {
    const int half = in->head_dim / 2;
    for (int64_t i = 0; i < n; i++) {
        for (int j = 0; j < half; j++) {
            float inv = 1.0f / powf(in->rope_theta, (float)(2 * j) / (float)in->head_dim);
            float angle = (float)positions[mrope_axis(j, in->rope_sections) * stride + i] * inv;
            cos_out[i * half + j] = cosf(angle);
            sin_out[i * half + j] = sinf(angle);
        }
    }
}

static void store_kv(edgevlm_session *s, int layer, int64_t n) {
    const edgevlm_model_info *in = &s->model->info;
    const int64_t kv_row = (int64_t)in->n_head_kv * in->head_dim, n_ctx = s->params.n_ctx;
    const size_t base = ((size_t)layer * n_ctx + (size_t)s->n_past) * kv_row;
    const ev_text_scratch *t = ev_text_scratch_of(s);
    if (s->kv_elem == 4) {
        memcpy((float *)s->k_cache + base, t->k, sizeof(float) * (size_t)(n * kv_row));
        memcpy((float *)s->v_cache + base, t->v, sizeof(float) * (size_t)(n * kv_row));
        return;
    }
    ev_fp16 *kd = (ev_fp16 *)s->k_cache + base, *vd = (ev_fp16 *)s->v_cache + base;
    for (int64_t i = 0; i < n * kv_row; i++) {
        kd[i] = ev_f32_to_fp16(t->k[i]);
        vd[i] = ev_f32_to_fp16(t->v[i]);
    }
}

static edgevlm_status embed(edgevlm_session *s, const int32_t *tokens, int64_t n,
                            const int32_t *vision_index, const float *vision_rows,
                            int64_t n_vision) {
    const edgevlm_model_info *in = &s->model->info;
    const ev_qwen3vl *m = ev_qwen3vl_of(s->model);
    const int64_t d = in->n_embd;
    const int64_t row_bytes = ev_row_bytes(m->token_embd.type, d);
    float *const x0 = ev_text_scratch_of(s)->x;
    for (int64_t i = 0; i < n; i++) {
        float *x = x0 + i * d;
        int32_t r = vision_index ? vision_index[i] : -1;
        if (r >= 0) {
            if (r >= n_vision || !vision_rows)
                return ev_fail(s, EDGEVLM_ERR_ARGUMENT, "vision_index[%lld] = %d, but only %lld "
                               "vision rows were given", (long long)i, r, (long long)n_vision);
            memcpy(x, vision_rows + (int64_t)r * d, sizeof(float) * (size_t)d);
            continue;
        }
        if (tokens[i] < 0 || tokens[i] >= in->n_vocab)
            return ev_fail(s, EDGEVLM_ERR_ARGUMENT, "token %d at index %lld is outside the "
                           "vocabulary [0, %d)", tokens[i], (long long)i, in->n_vocab);
        ev_row_to_f32(m->token_embd.type,
                      (const char *)m->token_embd.data + (int64_t)tokens[i] * row_bytes, x, d);
    }
    return EDGEVLM_OK;
}

edgevlm_status ev_text_forward(edgevlm_session *s, const int32_t *tokens, int64_t n,
                               const int32_t *positions, int64_t pos_stride,
                               const int32_t *vision_index, const float *vision_rows,
                               int64_t n_vision, const float *deepstack_rows, int32_t n_ds,
                               float *logits_out, int64_t n_logits) {
    const edgevlm_model_info *in = &s->model->info;
    const ev_qwen3vl *m = ev_qwen3vl_of(s->model);
    const int64_t d = in->n_embd, hd = in->head_dim;
    ev_text_scratch *t = ev_text_scratch_of(s);

    edgevlm_status st = embed(s, tokens, n, vision_index, vision_rows, n_vision);
    if (st != EDGEVLM_OK) return st;
    rope_tables(in, positions, pos_stride, n, t->rope_cos, t->rope_sin);

    for (int l = 0; l < in->n_layer; l++) {
        if (atomic_load(&s->cancel)) return ev_fail(s, EDGEVLM_ERR_CANCELLED, "cancelled");
        const ev_text_layer *L = &m->layers[l];
        ev_rows_rmsnorm(s, t->xb, t->x, L->attn_norm.data, n, d, in->rms_eps);
        ev_linear(s, &L->wq, NULL, t->xb, n, t->q);
        ev_linear(s, &L->wk, NULL, t->xb, n, t->k);
        ev_linear(s, &L->wv, NULL, t->xb, n, t->v);
        ev_rows_rmsnorm(s, t->q, t->q, L->q_norm.data, n * in->n_head, hd, in->rms_eps);
        ev_rows_rmsnorm(s, t->k, t->k, L->k_norm.data, n * in->n_head_kv, hd, in->rms_eps);
        ev_rows_rope_qk(s, t->q, t->k, n, t->rope_cos, t->rope_sin);
        store_kv(s, l, n);
        ev_decoder_attention(s, l, n);
        ev_linear(s, &L->wo, NULL, t->att, n, t->xb);
        ev_rows_add(s, t->x, t->xb, n, d);

        ev_rows_rmsnorm(s, t->xb, t->x, L->ffn_norm.data, n, d, in->rms_eps);
        ev_linear(s, &L->w_gate, NULL, t->xb, n, t->gate);
        ev_linear(s, &L->w_up, NULL, t->xb, n, t->up);
        ev_rows_silu_mul(s, t->gate, t->up, n, in->n_ff);
        ev_linear(s, &L->w_down, NULL, t->gate, n, t->xb);
        ev_rows_add(s, t->x, t->xb, n, d);

        if (l < n_ds && deepstack_rows && vision_index) {
            const float *ds = deepstack_rows + (int64_t)l * n_vision * d;
            for (int64_t i = 0; i < n; i++)
                if (vision_index[i] >= 0) ev_add(t->x + i * d, ds + (int64_t)vision_index[i] * d, d);
        }
    }
    s->n_past += (int32_t)n;

    if (n_logits > 0) {
        const float *last = t->x + (n - n_logits) * d;
        ev_rmsnorm(t->xb, last, m->output_norm.data, n_logits, d, in->rms_eps);
        ev_linear(s, &m->output, NULL, t->xb, n_logits, logits_out);
    }
    return EDGEVLM_OK;
}
