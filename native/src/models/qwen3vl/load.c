/*
 * load.c - loading a Qwen3-VL text + mmproj GGUF pair in llama.cpp's layout into the
 * family's tensors (ev_qwen3vl, qwen3vl.h).
 *
 * Every hyperparameter comes from the metadata (or a documented default for keys llama.cpp
 * does not store); every tensor is checked for presence, type and shape before use. Weights
 * stay in the maps.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "loader.h"
#include "qwen3vl.h"
#include "types.h"
#include "util.h"

edgevlm_status ev_qwen3vl_load_text(edgevlm_model *m, char *err, size_t err_len) {
    ev_loader L = {&m->text, "model", err, err_len};
    edgevlm_model_info *in = &m->info;
    ev_qwen3vl *w = calloc(1, sizeof *w);
    if (!w) { ev_errf(err, err_len, "out of memory"); return EDGEVLM_ERR_NOMEM; }
    m->weights = w;
    in->n_layer = (int32_t)ev_meta_i64(&m->text, "qwen3vl.block_count", 0);
    in->n_embd = (int32_t)ev_meta_i64(&m->text, "qwen3vl.embedding_length", 0);
    in->n_ff = (int32_t)ev_meta_i64(&m->text, "qwen3vl.feed_forward_length", 0);
    in->n_head = (int32_t)ev_meta_i64(&m->text, "qwen3vl.attention.head_count", 0);
    in->n_head_kv = (int32_t)ev_meta_i64(&m->text, "qwen3vl.attention.head_count_kv", in->n_head);
    if (!ev_load_positive(&L, "qwen3vl.block_count", in->n_layer, 1024) ||
        !ev_load_positive(&L, "qwen3vl.embedding_length", in->n_embd, 65536) ||
        !ev_load_positive(&L, "qwen3vl.feed_forward_length", in->n_ff, 1 << 20) ||
        !ev_load_positive(&L, "qwen3vl.attention.head_count", in->n_head, 1024) ||
        !ev_load_positive(&L, "qwen3vl.attention.head_count_kv", in->n_head_kv, 1024))
        return EDGEVLM_ERR_FORMAT;
    in->head_dim = (int32_t)ev_meta_i64(&m->text, "qwen3vl.attention.key_length",
                                     in->n_embd / in->n_head);
    int64_t vlen = ev_meta_i64(&m->text, "qwen3vl.attention.value_length", in->head_dim);
    if (!ev_load_positive(&L, "qwen3vl.attention.key_length", in->head_dim, 4096)) return EDGEVLM_ERR_FORMAT;
    if (vlen != in->head_dim || in->head_dim % 2 || in->n_head % in->n_head_kv) {
        ev_errf(err, err_len, "model file: unsupported attention shape (heads %d, kv heads %d, "
                "key length %d, value length %lld): need equal even key/value lengths and "
                "heads divisible by kv heads", in->n_head, in->n_head_kv, in->head_dim,
                (long long)vlen);
        return EDGEVLM_ERR_UNSUPPORTED;
    }
    in->n_ctx_train = (int32_t)ev_meta_i64(&m->text, "qwen3vl.context_length", 262144);
    in->rms_eps = ev_meta_f32(&m->text, "qwen3vl.attention.layer_norm_rms_epsilon", 1e-6f);
    in->rope_theta = ev_meta_f32(&m->text, "qwen3vl.rope.freq_base", 5000000.0f);
    int64_t sections[4] = {0, 0, 0, 0};
    int64_t n_sec = gguf_get_arr_i64(&m->text, "qwen3vl.rope.dimension_sections", sections, 4);
    if (n_sec < 3 || sections[0] + sections[1] + sections[2] + sections[3] != in->head_dim / 2 ||
        sections[0] < 0 || sections[1] < 0 || sections[2] < 0 || sections[3] < 0) {
        ev_errf(err, err_len, "model file: qwen3vl.rope.dimension_sections must hold 3 or 4 "
                "non-negative sections summing to head_dim/2 = %d", in->head_dim / 2);
        return EDGEVLM_ERR_FORMAT;
    }
    for (int i = 0; i < 4; i++) in->rope_sections[i] = (int32_t)sections[i];
    in->n_deepstack = (int32_t)ev_meta_i64(&m->text, "qwen3vl.n_deepstack_layers", 0);
    if (in->n_deepstack < 0 || in->n_deepstack > EV_MAX_DEEPSTACK || in->n_deepstack > in->n_layer) {
        ev_errf(err, err_len, "model file: qwen3vl.n_deepstack_layers = %d is out of range "
                "[0, %d]", in->n_deepstack, EV_MAX_DEEPSTACK);
        return EDGEVLM_ERR_FORMAT;
    }
    in->eos_id = (int32_t)ev_meta_i64(&m->text, "tokenizer.ggml.eos_token_id", -1);
    in->bos_id = (int32_t)ev_meta_i64(&m->text, "tokenizer.ggml.bos_token_id", -1);

    const gguf_tensor *emb = gguf_find_tensor(&m->text, "token_embd.weight");
    if (!emb) { ev_errf(err, err_len, "model file: tensor 'token_embd.weight' is missing"); return EDGEVLM_ERR_FORMAT; }
    in->n_vocab = (int32_t)emb->ne[1];
    if (emb->ne[1] < 1 || emb->ne[1] > (1 << 24)) {
        ev_errf(err, err_len, "model file: token_embd.weight has %lld rows", (long long)emb->ne[1]);
        return EDGEVLM_ERR_FORMAT;
    }
    const int64_t d = in->n_embd, q_out = (int64_t)in->n_head * in->head_dim;
    const int64_t kv_out = (int64_t)in->n_head_kv * in->head_dim;
    if (!ev_load_tensor(&L, &w->token_embd, "token_embd.weight", d, in->n_vocab, 0) ||
        !ev_load_tensor(&L, &w->output_norm, "output_norm.weight", d, -1, 0) ||
        !ev_load_tensor(&L, &w->output, "output.weight", d, in->n_vocab, 1))
        return EDGEVLM_ERR_FORMAT;
    in->tied_output = w->output.data == NULL;
    if (in->tied_output) w->output = w->token_embd;

    w->layers = calloc((size_t)in->n_layer, sizeof *w->layers);
    if (!w->layers) { ev_errf(err, err_len, "out of memory"); return EDGEVLM_ERR_NOMEM; }
    char name[96];
#define T(field, suffix, ne0, ne1) \
    (snprintf(name, sizeof name, "blk.%d." suffix ".weight", l), \
     ev_load_tensor(&L, &lay->field, name, (ne0), (ne1), 0))
    for (int l = 0; l < in->n_layer; l++) {
        ev_text_layer *lay = &w->layers[l];
        if (!T(attn_norm, "attn_norm", d, -1) || !T(wq, "attn_q", d, q_out) ||
            !T(wk, "attn_k", d, kv_out) || !T(wv, "attn_v", d, kv_out) ||
            !T(wo, "attn_output", q_out, d) || !T(q_norm, "attn_q_norm", in->head_dim, -1) ||
            !T(k_norm, "attn_k_norm", in->head_dim, -1) || !T(ffn_norm, "ffn_norm", d, -1) ||
            !T(w_gate, "ffn_gate", d, in->n_ff) || !T(w_up, "ffn_up", d, in->n_ff) ||
            !T(w_down, "ffn_down", in->n_ff, d))
            return EDGEVLM_ERR_FORMAT;
    }
#undef T
    in->weight_type = w->layers[0].wq.type;
    return EDGEVLM_OK;
}

static int load_merger(ev_loader *L, ev_merger *mg, const char *prefix, const char *norm,
                       const char *fc1, const char *fc2, int64_t c, int64_t d, int post) {
    char name[96];
    int64_t norm_w = post ? 4 * c : c;
    mg->post_shuffle_norm = post;
#define M(field, part, suffix, ne0, ne1) \
    (snprintf(name, sizeof name, "%s%s.%s", prefix, part, suffix), \
     ev_load_tensor(L, &mg->field, name, (ne0), (ne1), 0))
    return M(norm_w, norm, "weight", norm_w, -1) && M(norm_b, norm, "bias", norm_w, -1) &&
           M(fc1_w, fc1, "weight", 4 * c, 4 * c) && M(fc1_b, fc1, "bias", 4 * c, -1) &&
           M(fc2_w, fc2, "weight", 4 * c, d) && M(fc2_b, fc2, "bias", d, -1);
#undef M
}

edgevlm_status ev_qwen3vl_load_vision(edgevlm_model *m, char *err, size_t err_len) {
    ev_qwen3vl *w = m->weights;
    ev_loader L = {&m->vision, "mmproj", err, err_len};
    edgevlm_model_info *in = &m->info;
    const gguf_file *f = &m->vision;
    gguf_str proj;
    if (!gguf_get_str(f, "clip.projector_type", &proj) || !gguf_str_eq(proj, "qwen3vl_merger")) {
        ev_errf(err, err_len, "mmproj file: clip.projector_type must be \"qwen3vl_merger\"");
        return EDGEVLM_ERR_UNSUPPORTED;
    }
    in->has_vision = 1;
    in->v_n_embd = (int32_t)ev_meta_i64(f, "clip.vision.embedding_length", 0);
    in->v_n_ff = (int32_t)ev_meta_i64(f, "clip.vision.feed_forward_length", 0);
    in->v_n_layer = (int32_t)ev_meta_i64(f, "clip.vision.block_count", 0);
    in->v_n_head = (int32_t)ev_meta_i64(f, "clip.vision.attention.head_count", 0);
    in->v_patch_size = (int32_t)ev_meta_i64(f, "clip.vision.patch_size", 16);
    in->v_merge = (int32_t)ev_meta_i64(f, "clip.vision.spatial_merge_size", 2);
    in->v_temporal_patch = (int32_t)ev_meta_i64(f, "edgevlm.vision.temporal_patch_size", 2);
    in->v_eps = ev_meta_f32(f, "clip.vision.attention.layer_norm_epsilon", 1e-6f);
    in->v_rope_theta = ev_meta_f32(f, "edgevlm.vision.rope_theta", 10000.0f);
    int64_t proj_dim = ev_meta_i64(f, "clip.vision.projection_dim", in->n_embd);
    if (!ev_load_positive(&L, "clip.vision.embedding_length", in->v_n_embd, 65536) ||
        !ev_load_positive(&L, "clip.vision.feed_forward_length", in->v_n_ff, 1 << 20) ||
        !ev_load_positive(&L, "clip.vision.block_count", in->v_n_layer, 1024) ||
        !ev_load_positive(&L, "clip.vision.attention.head_count", in->v_n_head, 1024) ||
        !ev_load_positive(&L, "clip.vision.patch_size", in->v_patch_size, 1024) ||
        !ev_load_positive(&L, "clip.vision.spatial_merge_size", in->v_merge, 16))
        return EDGEVLM_ERR_FORMAT;
    if (proj_dim != in->n_embd) {
        ev_errf(err, err_len, "mmproj file: clip.vision.projection_dim = %lld does not match the "
                "text model's embedding_length %d: the two files are not a pair",
                (long long)proj_dim, in->n_embd);
        return EDGEVLM_ERR_FORMAT;
    }
    const int64_t c = in->v_n_embd, hd = c / in->v_n_head;
    if (c % in->v_n_head || hd % 4 || in->v_merge != 2 || in->v_temporal_patch != 2) {
        ev_errf(err, err_len, "mmproj file: unsupported vision shape (width %lld, heads %d, "
                "merge %d, temporal patch %d): need head_dim %% 4 == 0, merge 2, temporal 2",
                (long long)c, in->v_n_head, in->v_merge, in->v_temporal_patch);
        return EDGEVLM_ERR_UNSUPPORTED;
    }
    float mean[3] = {0.5f, 0.5f, 0.5f}, std[3] = {0.5f, 0.5f, 0.5f};
    gguf_get_arr_f32(f, "clip.vision.image_mean", mean, 3);
    gguf_get_arr_f32(f, "clip.vision.image_std", std, 3);
    memcpy(in->v_image_mean, mean, sizeof mean);
    memcpy(in->v_image_std, std, sizeof std);

    const int64_t p = in->v_patch_size, d = in->n_embd;
    /* GGUF shape [P, P, 3, C]: check it by hand, then view as C rows of 3*P*P. */
    for (int t = 0; t < 2; t++) {
        const gguf_tensor *pt = gguf_find_tensor(f, t ? "v.patch_embd.weight.1" : "v.patch_embd.weight");
        if (!pt || pt->ne[0] != p || pt->ne[1] != p || pt->ne[2] != 3 || pt->ne[3] != c ||
            !ev_type_get(pt->type) ||
            (3 * p * p) % ev_type_get(pt->type)->block_size) {
            ev_errf(err, err_len, "mmproj file: tensor '%s' is missing or not [%lld, %lld, 3, %lld] "
                    "of a supported type", t ? "v.patch_embd.weight.1" : "v.patch_embd.weight",
                    (long long)p, (long long)p, (long long)c);
            return EDGEVLM_ERR_FORMAT;
        }
        if (!ev_load_check_scales(&L, t ? "v.patch_embd.weight.1" : "v.patch_embd.weight",
                                  pt->type, pt->data, c, 3 * p * p))
            return EDGEVLM_ERR_FORMAT;
        w->patch_w[t] = (ev_tensor){pt->data, pt->type, {3 * p * p, c, 1, 1}};
    }
    const gguf_tensor *pe = gguf_find_tensor(f, "v.position_embd.weight");
    int64_t side = pe ? (int64_t)llround(sqrt((double)pe->ne[1])) : 0;
    if (!pe || side < 1 || side * side != pe->ne[1] || side > 4096) {
        ev_errf(err, err_len, "mmproj file: tensor 'v.position_embd.weight' is missing or its "
                "row count is not a square (a side x side learned grid)");
        return EDGEVLM_ERR_FORMAT;
    }
    in->v_pos_side = (int32_t)side;
    if (!ev_load_tensor(&L, &w->pos_embd, "v.position_embd.weight", c, side * side, 0) ||
        !ev_load_tensor(&L, &w->patch_b, "v.patch_embd.bias", c, -1, 0))
        return EDGEVLM_ERR_FORMAT;
    if (w->pos_embd.type != EV_TYPE_F32) {
        ev_errf(err, err_len, "mmproj file: v.position_embd.weight must be F32");
        return EDGEVLM_ERR_UNSUPPORTED;
    }

    w->vlayers = calloc((size_t)in->v_n_layer, sizeof *w->vlayers);
    if (!w->vlayers) { ev_errf(err, err_len, "out of memory"); return EDGEVLM_ERR_NOMEM; }
    char name[96];
    const int64_t ff = in->v_n_ff;
#define V(field, part, suffix, ne0, ne1) \
    (snprintf(name, sizeof name, "v.blk.%d.%s.%s", l, part, suffix), \
     ev_load_tensor(&L, &vl->field, name, (ne0), (ne1), 0))
    for (int l = 0; l < in->v_n_layer; l++) {
        ev_vit_layer *vl = &w->vlayers[l];
        if (!V(ln1_w, "ln1", "weight", c, -1) || !V(ln1_b, "ln1", "bias", c, -1) ||
            !V(qkv_w, "attn_qkv", "weight", c, 3 * c) || !V(qkv_b, "attn_qkv", "bias", 3 * c, -1) ||
            !V(out_w, "attn_out", "weight", c, c) || !V(out_b, "attn_out", "bias", c, -1) ||
            !V(ln2_w, "ln2", "weight", c, -1) || !V(ln2_b, "ln2", "bias", c, -1) ||
            !V(up_w, "ffn_up", "weight", c, ff) || !V(up_b, "ffn_up", "bias", ff, -1) ||
            !V(down_w, "ffn_down", "weight", ff, c) || !V(down_b, "ffn_down", "bias", c, -1))
            return EDGEVLM_ERR_FORMAT;
    }
#undef V
    in->v_weight_type = w->vlayers[0].qkv_w.type;
    if (!load_merger(&L, &w->merger, "", "v.post_ln", "mm.0", "mm.2", c, d, 0))
        return EDGEVLM_ERR_FORMAT;

    /* DeepStack taps: clip.vision.is_deepstack_layers (bool per ViT block). */
    for (int i = 0; i < 4; i++) in->v_deepstack_layers[i] = -1;
    int flags[1024];
    int64_t n_flags = gguf_get_arr_bool(f, "clip.vision.is_deepstack_layers", flags, 1024);
    int n_taps = 0;
    for (int64_t l = 0; l < n_flags && l < in->v_n_layer; l++) {
        if (!flags[l]) continue;
        if (n_taps == EV_MAX_DEEPSTACK) {
            ev_errf(err, err_len, "mmproj file: more than %d DeepStack layers", EV_MAX_DEEPSTACK);
            return EDGEVLM_ERR_UNSUPPORTED;
        }
        char prefix[48];
        snprintf(prefix, sizeof prefix, "v.deepstack.%d.", (int)l);
        if (!load_merger(&L, &w->deepstack[n_taps], prefix, "norm", "fc1", "fc2", c, d, 1))
            return EDGEVLM_ERR_FORMAT;
        in->v_deepstack_layers[n_taps++] = (int32_t)l;
    }
    if (n_taps != in->n_deepstack) {
        ev_errf(err, err_len, "mmproj file has %d DeepStack layers, the model file expects %d "
                "(qwen3vl.n_deepstack_layers): the two files are not a pair", n_taps,
                in->n_deepstack);
        return EDGEVLM_ERR_FORMAT;
    }
    return EDGEVLM_OK;
}

void ev_qwen3vl_free(edgevlm_model *m) {
    ev_qwen3vl *w = m->weights;
    if (!w) return;
    free(w->layers);
    free(w->vlayers);
    free(w);
    m->weights = NULL;
}
