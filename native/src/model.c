/*
 * model.c - loading a Qwen3-VL text + mmproj GGUF pair in llama.cpp's layout.
 *
 * Every hyperparameter comes from the metadata (or a documented default for keys llama.cpp
 * does not store); every tensor is checked for presence, type and shape before use. Weights
 * stay in the maps.
 */
#include "model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kernels.h"
#include "util.h"

typedef struct loader {
    const gguf_file *f;
    const char *file_label;        /* "model" or "mmproj", for messages */
    char *err;
    size_t err_len;
} loader;

const gguf_file *ev_model_file(const edgevlm_model *model, int which) {
    if (!model) return NULL;
    if (which == 0) return &model->text;
    if (which == 1 && model->info.has_vision) return &model->vision;
    return NULL;
}

static int64_t meta_i64(const gguf_file *f, const char *key, int64_t dflt) {
    int64_t v;
    return gguf_get_i64(f, key, &v) ? v : dflt;
}

static float meta_f32(const gguf_file *f, const char *key, float dflt) {
    float v;
    return gguf_get_f32(f, key, &v) ? v : dflt;
}

/* Finds a tensor and checks its type class and shape. ne1 < 0: a 1-D tensor of ne0 values.
 * Matrices must have a type the kernels multiply; vectors must be F32. */
static int get_tensor(loader *L, ev_tensor *out, const char *name, int64_t ne0, int64_t ne1,
                      int optional) {
    memset(out, 0, sizeof *out);
    const gguf_tensor *t = gguf_find_tensor(L->f, name);
    if (!t) {
        if (optional) return 1;
        ev_errf(L->err, L->err_len, "%s file: tensor '%s' is missing", L->file_label, name);
        return 0;
    }
    int is_matrix = ne1 >= 0;
    int64_t want1 = is_matrix ? ne1 : 1;
    if (t->ne[0] != ne0 || t->ne[1] != want1 || t->ne[2] != 1 || t->ne[3] != 1) {
        ev_errf(L->err, L->err_len,
                "%s file: tensor '%s' has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld]",
                L->file_label, name, (long long)t->ne[0], (long long)t->ne[1],
                (long long)t->ne[2], (long long)t->ne[3], (long long)ne0, (long long)want1);
        return 0;
    }
    const ev_type_traits *tr = ev_type_get(t->type);
    if (!tr || (is_matrix && !ev_kernels_scalar()->vec_dot[t->type]) ||
        (!is_matrix && t->type != EV_TYPE_F32)) {
        ev_errf(L->err, L->err_len, "%s file: tensor '%s' has type %d, which edgevlm does not "
                "support here (matrices: F32, F16, BF16, Q8_0, Q4_0; vectors: F32)",
                L->file_label, name, (int)t->type);
        return 0;
    }
    if (is_matrix && ne0 % tr->block_size != 0) {
        ev_errf(L->err, L->err_len, "%s file: tensor '%s' rows of %lld values are not a "
                "multiple of the %s block size %d", L->file_label, name, (long long)ne0,
                tr->name, tr->block_size);
        return 0;
    }
    out->data = t->data;
    out->type = t->type;
    for (int i = 0; i < 4; i++) out->ne[i] = t->ne[i];
    return 1;
}

static int require_positive(loader *L, const char *what, int64_t v, int64_t max) {
    if (v < 1 || v > max) {
        ev_errf(L->err, L->err_len, "%s file: %s = %lld is out of range [1, %lld]",
                L->file_label, what, (long long)v, (long long)max);
        return 0;
    }
    return 1;
}

static edgevlm_status load_text(edgevlm_model *m, char *err, size_t err_len) {
    loader L = {&m->text, "model", err, err_len};
    edgevlm_model_info *in = &m->info;
    gguf_str arch = {NULL, 0};  /* stays NULL when the key is absent or not a string */
    if (!gguf_get_str(&m->text, "general.architecture", &arch) || !gguf_str_eq(arch, "qwen3vl")) {
        ev_errf(err, err_len, "model file: general.architecture is %s%.*s%s, edgevlm runs "
                "\"qwen3vl\" text models", arch.ptr ? "\"" : "(missing",
                arch.ptr ? (int)(arch.len < 64 ? arch.len : 64) : 0,
                arch.ptr ? arch.ptr : "", arch.ptr ? "\"" : ")");
        return arch.ptr ? EDGEVLM_ERR_UNSUPPORTED : EDGEVLM_ERR_FORMAT;
    }
    in->n_layer = (int32_t)meta_i64(&m->text, "qwen3vl.block_count", 0);
    in->n_embd = (int32_t)meta_i64(&m->text, "qwen3vl.embedding_length", 0);
    in->n_ff = (int32_t)meta_i64(&m->text, "qwen3vl.feed_forward_length", 0);
    in->n_head = (int32_t)meta_i64(&m->text, "qwen3vl.attention.head_count", 0);
    in->n_head_kv = (int32_t)meta_i64(&m->text, "qwen3vl.attention.head_count_kv", in->n_head);
    if (!require_positive(&L, "qwen3vl.block_count", in->n_layer, 1024) ||
        !require_positive(&L, "qwen3vl.embedding_length", in->n_embd, 65536) ||
        !require_positive(&L, "qwen3vl.feed_forward_length", in->n_ff, 1 << 20) ||
        !require_positive(&L, "qwen3vl.attention.head_count", in->n_head, 1024) ||
        !require_positive(&L, "qwen3vl.attention.head_count_kv", in->n_head_kv, 1024))
        return EDGEVLM_ERR_FORMAT;
    in->head_dim = (int32_t)meta_i64(&m->text, "qwen3vl.attention.key_length",
                                     in->n_embd / in->n_head);
    int64_t vlen = meta_i64(&m->text, "qwen3vl.attention.value_length", in->head_dim);
    if (!require_positive(&L, "qwen3vl.attention.key_length", in->head_dim, 4096)) return EDGEVLM_ERR_FORMAT;
    if (vlen != in->head_dim || in->head_dim % 2 || in->n_head % in->n_head_kv) {
        ev_errf(err, err_len, "model file: unsupported attention shape (heads %d, kv heads %d, "
                "key length %d, value length %lld): need equal even key/value lengths and "
                "heads divisible by kv heads", in->n_head, in->n_head_kv, in->head_dim,
                (long long)vlen);
        return EDGEVLM_ERR_UNSUPPORTED;
    }
    in->n_ctx_train = (int32_t)meta_i64(&m->text, "qwen3vl.context_length", 262144);
    in->rms_eps = meta_f32(&m->text, "qwen3vl.attention.layer_norm_rms_epsilon", 1e-6f);
    in->rope_theta = meta_f32(&m->text, "qwen3vl.rope.freq_base", 5000000.0f);
    int64_t sections[4] = {0, 0, 0, 0};
    int64_t n_sec = gguf_get_arr_i64(&m->text, "qwen3vl.rope.dimension_sections", sections, 4);
    if (n_sec < 3 || sections[0] + sections[1] + sections[2] + sections[3] != in->head_dim / 2 ||
        sections[0] < 0 || sections[1] < 0 || sections[2] < 0 || sections[3] < 0) {
        ev_errf(err, err_len, "model file: qwen3vl.rope.dimension_sections must hold 3 or 4 "
                "non-negative sections summing to head_dim/2 = %d", in->head_dim / 2);
        return EDGEVLM_ERR_FORMAT;
    }
    for (int i = 0; i < 4; i++) in->rope_sections[i] = (int32_t)sections[i];
    in->n_deepstack = (int32_t)meta_i64(&m->text, "qwen3vl.n_deepstack_layers", 0);
    if (in->n_deepstack < 0 || in->n_deepstack > EV_MAX_DEEPSTACK || in->n_deepstack > in->n_layer) {
        ev_errf(err, err_len, "model file: qwen3vl.n_deepstack_layers = %d is out of range "
                "[0, %d]", in->n_deepstack, EV_MAX_DEEPSTACK);
        return EDGEVLM_ERR_FORMAT;
    }
    in->eos_id = (int32_t)meta_i64(&m->text, "tokenizer.ggml.eos_token_id", -1);
    in->bos_id = (int32_t)meta_i64(&m->text, "tokenizer.ggml.bos_token_id", -1);

    const gguf_tensor *emb = gguf_find_tensor(&m->text, "token_embd.weight");
    if (!emb) { ev_errf(err, err_len, "model file: tensor 'token_embd.weight' is missing"); return EDGEVLM_ERR_FORMAT; }
    in->n_vocab = (int32_t)emb->ne[1];
    if (emb->ne[1] < 1 || emb->ne[1] > (1 << 24)) {
        ev_errf(err, err_len, "model file: token_embd.weight has %lld rows", (long long)emb->ne[1]);
        return EDGEVLM_ERR_FORMAT;
    }
    const int64_t d = in->n_embd, q_out = (int64_t)in->n_head * in->head_dim;
    const int64_t kv_out = (int64_t)in->n_head_kv * in->head_dim;
    if (!get_tensor(&L, &m->token_embd, "token_embd.weight", d, in->n_vocab, 0) ||
        !get_tensor(&L, &m->output_norm, "output_norm.weight", d, -1, 0) ||
        !get_tensor(&L, &m->output, "output.weight", d, in->n_vocab, 1))
        return EDGEVLM_ERR_FORMAT;
    in->tied_output = m->output.data == NULL;
    if (in->tied_output) m->output = m->token_embd;

    m->layers = calloc((size_t)in->n_layer, sizeof *m->layers);
    if (!m->layers) { ev_errf(err, err_len, "out of memory"); return EDGEVLM_ERR_NOMEM; }
    char name[96];
#define T(field, suffix, ne0, ne1) \
    (snprintf(name, sizeof name, "blk.%d." suffix ".weight", l), \
     get_tensor(&L, &lay->field, name, (ne0), (ne1), 0))
    for (int l = 0; l < in->n_layer; l++) {
        ev_text_layer *lay = &m->layers[l];
        if (!T(attn_norm, "attn_norm", d, -1) || !T(wq, "attn_q", d, q_out) ||
            !T(wk, "attn_k", d, kv_out) || !T(wv, "attn_v", d, kv_out) ||
            !T(wo, "attn_output", q_out, d) || !T(q_norm, "attn_q_norm", in->head_dim, -1) ||
            !T(k_norm, "attn_k_norm", in->head_dim, -1) || !T(ffn_norm, "ffn_norm", d, -1) ||
            !T(w_gate, "ffn_gate", d, in->n_ff) || !T(w_up, "ffn_up", d, in->n_ff) ||
            !T(w_down, "ffn_down", in->n_ff, d))
            return EDGEVLM_ERR_FORMAT;
    }
#undef T
    in->weight_type = m->layers[0].wq.type;
    return EDGEVLM_OK;
}

static int load_merger(loader *L, ev_merger *mg, const char *prefix, const char *norm,
                       const char *fc1, const char *fc2, int64_t c, int64_t d, int post) {
    char name[96];
    int64_t norm_w = post ? 4 * c : c;
    mg->post_shuffle_norm = post;
#define M(field, part, suffix, ne0, ne1) \
    (snprintf(name, sizeof name, "%s%s.%s", prefix, part, suffix), \
     get_tensor(L, &mg->field, name, (ne0), (ne1), 0))
    return M(norm_w, norm, "weight", norm_w, -1) && M(norm_b, norm, "bias", norm_w, -1) &&
           M(fc1_w, fc1, "weight", 4 * c, 4 * c) && M(fc1_b, fc1, "bias", 4 * c, -1) &&
           M(fc2_w, fc2, "weight", 4 * c, d) && M(fc2_b, fc2, "bias", d, -1);
#undef M
}

static edgevlm_status load_vision(edgevlm_model *m, char *err, size_t err_len) {
    loader L = {&m->vision, "mmproj", err, err_len};
    edgevlm_model_info *in = &m->info;
    const gguf_file *f = &m->vision;
    gguf_str proj;
    if (!gguf_get_str(f, "clip.projector_type", &proj) || !gguf_str_eq(proj, "qwen3vl_merger")) {
        ev_errf(err, err_len, "mmproj file: clip.projector_type must be \"qwen3vl_merger\"");
        return EDGEVLM_ERR_UNSUPPORTED;
    }
    in->has_vision = 1;
    in->v_n_embd = (int32_t)meta_i64(f, "clip.vision.embedding_length", 0);
    in->v_n_ff = (int32_t)meta_i64(f, "clip.vision.feed_forward_length", 0);
    in->v_n_layer = (int32_t)meta_i64(f, "clip.vision.block_count", 0);
    in->v_n_head = (int32_t)meta_i64(f, "clip.vision.attention.head_count", 0);
    in->v_patch_size = (int32_t)meta_i64(f, "clip.vision.patch_size", 16);
    in->v_merge = (int32_t)meta_i64(f, "clip.vision.spatial_merge_size", 2);
    in->v_temporal_patch = (int32_t)meta_i64(f, "edgevlm.vision.temporal_patch_size", 2);
    in->v_eps = meta_f32(f, "clip.vision.attention.layer_norm_epsilon", 1e-6f);
    in->v_rope_theta = meta_f32(f, "edgevlm.vision.rope_theta", 10000.0f);
    int64_t proj_dim = meta_i64(f, "clip.vision.projection_dim", in->n_embd);
    if (!require_positive(&L, "clip.vision.embedding_length", in->v_n_embd, 65536) ||
        !require_positive(&L, "clip.vision.feed_forward_length", in->v_n_ff, 1 << 20) ||
        !require_positive(&L, "clip.vision.block_count", in->v_n_layer, 1024) ||
        !require_positive(&L, "clip.vision.attention.head_count", in->v_n_head, 1024) ||
        !require_positive(&L, "clip.vision.patch_size", in->v_patch_size, 1024) ||
        !require_positive(&L, "clip.vision.spatial_merge_size", in->v_merge, 16))
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
            !ev_type_get(pt->type) || !ev_kernels_scalar()->vec_dot[pt->type] ||
            (3 * p * p) % ev_type_get(pt->type)->block_size) {
            ev_errf(err, err_len, "mmproj file: tensor '%s' is missing or not [%lld, %lld, 3, %lld] "
                    "of a supported type", t ? "v.patch_embd.weight.1" : "v.patch_embd.weight",
                    (long long)p, (long long)p, (long long)c);
            return EDGEVLM_ERR_FORMAT;
        }
        m->patch_w[t] = (ev_tensor){pt->data, pt->type, {3 * p * p, c, 1, 1}};
    }
    const gguf_tensor *pe = gguf_find_tensor(f, "v.position_embd.weight");
    int64_t side = pe ? (int64_t)llround(sqrt((double)pe->ne[1])) : 0;
    if (!pe || side < 1 || side * side != pe->ne[1] || side > 4096) {
        ev_errf(err, err_len, "mmproj file: tensor 'v.position_embd.weight' is missing or its "
                "row count is not a square (a side x side learned grid)");
        return EDGEVLM_ERR_FORMAT;
    }
    in->v_pos_side = (int32_t)side;
    if (!get_tensor(&L, &m->pos_embd, "v.position_embd.weight", c, side * side, 0) ||
        !get_tensor(&L, &m->patch_b, "v.patch_embd.bias", c, -1, 0))
        return EDGEVLM_ERR_FORMAT;
    if (m->pos_embd.type != EV_TYPE_F32) {
        ev_errf(err, err_len, "mmproj file: v.position_embd.weight must be F32");
        return EDGEVLM_ERR_UNSUPPORTED;
    }

    m->vlayers = calloc((size_t)in->v_n_layer, sizeof *m->vlayers);
    if (!m->vlayers) { ev_errf(err, err_len, "out of memory"); return EDGEVLM_ERR_NOMEM; }
    char name[96];
    const int64_t ff = in->v_n_ff;
#define V(field, part, suffix, ne0, ne1) \
    (snprintf(name, sizeof name, "v.blk.%d.%s.%s", l, part, suffix), \
     get_tensor(&L, &vl->field, name, (ne0), (ne1), 0))
    for (int l = 0; l < in->v_n_layer; l++) {
        ev_vit_layer *vl = &m->vlayers[l];
        if (!V(ln1_w, "ln1", "weight", c, -1) || !V(ln1_b, "ln1", "bias", c, -1) ||
            !V(qkv_w, "attn_qkv", "weight", c, 3 * c) || !V(qkv_b, "attn_qkv", "bias", 3 * c, -1) ||
            !V(out_w, "attn_out", "weight", c, c) || !V(out_b, "attn_out", "bias", c, -1) ||
            !V(ln2_w, "ln2", "weight", c, -1) || !V(ln2_b, "ln2", "bias", c, -1) ||
            !V(up_w, "ffn_up", "weight", c, ff) || !V(up_b, "ffn_up", "bias", ff, -1) ||
            !V(down_w, "ffn_down", "weight", ff, c) || !V(down_b, "ffn_down", "bias", c, -1))
            return EDGEVLM_ERR_FORMAT;
    }
#undef V
    in->v_weight_type = m->vlayers[0].qkv_w.type;
    if (!load_merger(&L, &m->merger, "", "v.post_ln", "mm.0", "mm.2", c, d, 0))
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
        if (!load_merger(&L, &m->deepstack[n_taps], prefix, "norm", "fc1", "fc2", c, d, 1))
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

void edgevlm_model_free(edgevlm_model *model) {
    if (!model) return;
    free(model->layers);
    free(model->vlayers);
    gguf_close(&model->text);
    if (model->info.has_vision || model->vision.base) gguf_close(&model->vision);
    free(model);
}

edgevlm_status edgevlm_model_load(const char *text_path, const char *mmproj_path,
                                  edgevlm_model **out, char *err, size_t err_len) {
    if (err && err_len) err[0] = '\0';
    if (!out || !text_path) {
        ev_errf(err, err_len, "edgevlm_model_load: text_path and out are required");
        return EDGEVLM_ERR_ARGUMENT;
    }
    *out = NULL;
    edgevlm_model *m = calloc(1, sizeof *m);
    if (!m) { ev_errf(err, err_len, "out of memory"); return EDGEVLM_ERR_NOMEM; }
    edgevlm_status st = gguf_open(text_path, &m->text, err, err_len);
    if (st == EDGEVLM_OK) st = load_text(m, err, err_len);
    if (st == EDGEVLM_OK && mmproj_path) {
        st = gguf_open(mmproj_path, &m->vision, err, err_len);
        if (st == EDGEVLM_OK) st = load_vision(m, err, err_len);
    }
    if (st != EDGEVLM_OK) {
        edgevlm_model_free(m);
        return st;
    }
    *out = m;
    return EDGEVLM_OK;
}

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22   /* Linux 5.14; older kernels answer EINVAL */
#endif

static int64_t prefault_map(const gguf_file *f) {
    if (!f->base || !f->size) return 0;
    if (madvise((void *)f->base, f->size, MADV_POPULATE_READ) != 0) {
        const size_t page = (size_t)sysconf(_SC_PAGESIZE);
        const volatile uint8_t *p = (const volatile uint8_t *)f->base;
        uint8_t sink = 0;
        for (size_t off = 0; off < f->size; off += page) sink ^= p[off];
        (void)sink;
    }
    return (int64_t)f->size;
}

int64_t edgevlm_model_prefault(const edgevlm_model *model) {
    return edgevlm_model_prefault_file(model, 0) + edgevlm_model_prefault_file(model, 1);
}

int64_t edgevlm_model_prefault_file(const edgevlm_model *model, int which) {
    if (!model || (which != 0 && which != 1)) return 0;
    return prefault_map(which == 0 ? &model->text : &model->vision);
}

void edgevlm_model_get_info(const edgevlm_model *model, edgevlm_model_info *out) {
    if (!model || !out) return;
    *out = model->info;
}
