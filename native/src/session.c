/*
 * session.c - sessions: allocation of the KV cache, the sampler's candidates and the matmul
 * scratch, argument checks of the public entry points, prefill chunking and the single decode
 * step. The activation buffers (family->session_alloc) and the forward passes are the model
 * family's (s->model->family, src/models/family.h).
 */
#include "session.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/family.h"
#include "util.h"

void edgevlm_session_free(edgevlm_session *s) {
    if (!s) return;
    ev_pool_free(s->pool);
    s->model->family->session_free(s);
    free(s->k_cache);
    free(s->v_cache);
    free(s->cand_p);
    free(s->cand_idx);
    free(s->mm_scratch);
    free(s);
}

edgevlm_status edgevlm_session_new(const edgevlm_model *m, const edgevlm_session_params *p,
                                   edgevlm_session **out, char *err, size_t err_len) {
    if (err && err_len) err[0] = '\0';
    if (!m || !p || !out) {
        ev_errf(err, err_len, "edgevlm_session_new: model, params and out are required");
        return EDGEVLM_ERR_ARGUMENT;
    }
    *out = NULL;
    const edgevlm_model_info *in = &m->info;
    const ev_family *fam = m->family;
    if (p->n_ctx < 1 || p->n_batch < 1 || p->n_threads < 1 || p->n_threads > 256 ||
        (p->kv_type != EDGEVLM_KV_F32 && p->kv_type != EDGEVLM_KV_F16) || p->max_patches < 0 ||
        p->n_ctx > (1 << 24) || p->max_patches > (1 << 22)) {
        ev_errf(err, err_len, "session parameters out of range: n_ctx %d (1..16777216), n_batch "
                "%d (>= 1), n_threads %d (1..256), kv_type %d (0 f32, 1 f16), max_patches %d",
                p->n_ctx, p->n_batch, p->n_threads, p->kv_type, p->max_patches);
        return EDGEVLM_ERR_ARGUMENT;
    }
    if (p->max_patches > 0 && (!in->has_vision || p->max_patches % 4)) {
        ev_errf(err, err_len, in->has_vision ? "max_patches must be a multiple of 4"
                                             : "max_patches > 0 needs a model with an mmproj file");
        return in->has_vision ? EDGEVLM_ERR_ARGUMENT : EDGEVLM_ERR_NO_VISION;
    }
    edgevlm_session *s = calloc(1, sizeof *s);
    if (!s) { ev_errf(err, err_len, "out of memory"); return EDGEVLM_ERR_NOMEM; }
    s->model = m;
    s->params = *p;
    if (s->params.n_batch > s->params.n_ctx) s->params.n_batch = s->params.n_ctx;
    s->kernels = ev_kernels_best();
    s->kv_elem = p->kv_type == EDGEVLM_KV_F16 ? 2 : 4;
    atomic_init(&s->cancel, 0);

    /* the family-independent part: KV cache, sampler candidates, matmul scratch (its size
     * the family's); then the family's own activation buffers */
    const int64_t kv_row = (int64_t)in->n_head_kv * in->head_dim;
    size_t kv_bytes = ev_mul_size(ev_mul_size(ev_mul_size((size_t)in->n_layer, (size_t)p->n_ctx),
                                              (size_t)kv_row), s->kv_elem);
    const size_t mm = fam->matmul_scratch_bytes(m, s->params.n_batch, p->max_patches,
                                                p->n_threads);
    s->mm_scratch_bytes = mm;
    int ok = (s->pool = ev_pool_new(p->n_threads)) != NULL && kv_bytes &&
             (s->k_cache = ev_alloc(kv_bytes)) && (s->v_cache = ev_alloc(kv_bytes)) &&
             (s->cand_p = ev_alloc_f32(in->n_vocab, 1)) != NULL &&
             (s->cand_idx = ev_alloc(sizeof(int32_t) * (size_t)in->n_vocab)) != NULL &&
             (s->mm_scratch = ev_alloc(mm)) != NULL;
    if (!ok) {
        edgevlm_session_free(s);
        ev_errf(err, err_len, "cannot allocate the session (n_ctx %d, n_batch %d, max_patches "
                "%d): out of memory", p->n_ctx, p->n_batch, p->max_patches);
        return EDGEVLM_ERR_NOMEM;
    }
    edgevlm_status st = fam->session_alloc(s, err, err_len);
    if (st != EDGEVLM_OK) {
        edgevlm_session_free(s);
        return st;
    }
    *out = s;
    return EDGEVLM_OK;
}

const char *edgevlm_session_error(const edgevlm_session *s) {
    return s ? s->error : "no session";
}

void edgevlm_session_cancel(edgevlm_session *s) {
    if (s) atomic_store(&s->cancel, 1);
}

edgevlm_status edgevlm_session_set_kernels(edgevlm_session *s, int32_t mode) {
    if (!s) return EDGEVLM_ERR_ARGUMENT;
    if (mode == EDGEVLM_KERNELS_BEST) s->kernels = ev_kernels_best();
    else if (mode == EDGEVLM_KERNELS_SCALAR) s->kernels = ev_kernels_scalar();
    else if (mode == EDGEVLM_KERNELS_FAST) s->kernels = ev_kernels_fast();
    else return ev_fail(s, EDGEVLM_ERR_ARGUMENT, "unknown kernel mode %d", mode);
    return EDGEVLM_OK;
}

void edgevlm_session_reset(edgevlm_session *s) {
    if (s) s->n_past = 0;
}

int32_t edgevlm_session_n_past(const edgevlm_session *s) {
    return s ? s->n_past : 0;
}

edgevlm_status edgevlm_session_rollback(edgevlm_session *s, int32_t n_past) {
    if (!s) return EDGEVLM_ERR_ARGUMENT;
    if (n_past < 0 || n_past > s->n_past)
        return ev_fail(s, EDGEVLM_ERR_ARGUMENT, "rollback to %d: the cache holds %d tokens",
                       n_past, s->n_past);
    s->n_past = n_past;  /* the rows past it are overwritten by the next prefill or decode */
    return EDGEVLM_OK;
}

edgevlm_status edgevlm_encode_vision(edgevlm_session *s, const float *pixel_values,
                                     int64_t n_patches, int32_t gt, int32_t gh, int32_t gw,
                                     float *out_embeds, float *out_deepstack, float *out_vit) {
    if (!s) return EDGEVLM_ERR_ARGUMENT;
    atomic_store(&s->cancel, 0);
    const edgevlm_model_info *in = &s->model->info;
    if (!in->has_vision)
        return ev_fail(s, EDGEVLM_ERR_NO_VISION, "the model was loaded without an mmproj file");
    if (!pixel_values || !out_embeds)
        return ev_fail(s, EDGEVLM_ERR_ARGUMENT, "pixel_values and out_embeds are required");
    int64_t grid_patches = 0;  /* t*h*w of three int32s can overflow int64 */
    if (gt < 1 || gh < 2 || gw < 2 || gh % 2 || gw % 2 ||
        __builtin_mul_overflow((int64_t)gt * gh, (int64_t)gw, &grid_patches) ||
        grid_patches != n_patches)
        return ev_fail(s, EDGEVLM_ERR_ARGUMENT, "grid [%d, %d, %d] does not fit %lld patches "
                       "(need t >= 1, h and w even, t*h*w == n_patches)", gt, gh, gw,
                       (long long)n_patches);
    if (n_patches > s->params.max_patches)
        return ev_fail(s, EDGEVLM_ERR_ARGUMENT, "%lld patches, the session was created for at "
                       "most %d (max_patches)", (long long)n_patches, s->params.max_patches);
    return s->model->family->vision_forward(s, pixel_values, n_patches, gt, gh, gw, out_embeds,
                                            out_deepstack, out_vit);
}

edgevlm_status edgevlm_prefill(edgevlm_session *s, const int32_t *tokens, int64_t n_tokens,
                               const int32_t *positions, const int32_t *vision_index,
                               const float *vision_rows, int64_t n_vision,
                               const float *deepstack_rows, int32_t n_ds, float *logits_out,
                               int64_t n_logits) {
    if (!s) return EDGEVLM_ERR_ARGUMENT;
    atomic_store(&s->cancel, 0);
    const edgevlm_model_info *in = &s->model->info;
    if (!tokens || !positions || n_tokens < 1 || n_logits < 0 || n_logits > n_tokens ||
        (n_logits > 0 && !logits_out) || n_vision < 0 || (n_vision > 0 && !vision_rows) ||
        n_ds < 0 || n_ds > in->n_deepstack || (n_ds > 0 && !deepstack_rows))
        return ev_fail(s, EDGEVLM_ERR_ARGUMENT, "edgevlm_prefill: bad arguments (n_tokens %lld, "
                       "n_logits %lld, n_vision %lld, n_ds %d of %d)", (long long)n_tokens,
                       (long long)n_logits, (long long)n_vision, n_ds, in->n_deepstack);
    if (n_tokens > (int64_t)s->params.n_ctx - s->n_past)  /* n_past + n_tokens may overflow */
        return ev_fail(s, EDGEVLM_ERR_CONTEXT_FULL, "%lld tokens do not fit: %d in the cache, "
                       "capacity %d", (long long)n_tokens, s->n_past, s->params.n_ctx);
    const int64_t first_logit = n_tokens - n_logits, vocab = in->n_vocab;
    for (int64_t c0 = 0; c0 < n_tokens; c0 += s->params.n_batch) {
        int64_t n = n_tokens - c0 < s->params.n_batch ? n_tokens - c0 : s->params.n_batch;
        int64_t l0 = c0 > first_logit ? c0 : first_logit;
        int64_t chunk_logits = c0 + n > l0 ? c0 + n - l0 : 0;
        float *out = chunk_logits ? logits_out + (l0 - first_logit) * vocab : NULL;
        edgevlm_status st = s->model->family->text_forward(
            s, tokens + c0, n, positions + c0, n_tokens, vision_index ? vision_index + c0 : NULL,
            vision_rows, n_vision, deepstack_rows, n_ds, out, chunk_logits);
        if (st != EDGEVLM_OK) return st;
    }
    return EDGEVLM_OK;
}

edgevlm_status edgevlm_decode(edgevlm_session *s, int32_t token, int32_t position,
                              float *logits_out) {
    if (!s) return EDGEVLM_ERR_ARGUMENT;
    atomic_store(&s->cancel, 0);
    if (!logits_out) return ev_fail(s, EDGEVLM_ERR_ARGUMENT, "logits_out is required");
    if (s->n_past + 1 > s->params.n_ctx)
        return ev_fail(s, EDGEVLM_ERR_CONTEXT_FULL, "the KV cache is full (%d tokens)",
                       s->params.n_ctx);
    int32_t pos[3] = {position, position, position};
    return s->model->family->text_forward(s, &token, 1, pos, 1, NULL, NULL, 0, NULL, 0,
                                          logits_out, 1);
}

const char *edgevlm_build_info(void) {
    static char info[160];
    if (!info[0])
        snprintf(info, sizeof info, "edgevlm core 0.1.0; kernels: %s; fast: %s",
                 ev_kernels_best()->name, ev_kernels_fast()->name);
    return info;
}

const char *edgevlm_kernels_name(int32_t mode) {
    switch (mode) {
    case EDGEVLM_KERNELS_BEST: return ev_kernels_best()->name;
    case EDGEVLM_KERNELS_SCALAR: return ev_kernels_scalar()->name;
    case EDGEVLM_KERNELS_FAST: return ev_kernels_fast()->name;
    default: return NULL;
    }
}
