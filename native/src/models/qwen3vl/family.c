/*
 * family.c - the Qwen3-VL row of the model-family registry (family.h) and the sizing of a
 * session's matrix-product scratch for its layers (its activation buffers: scratch.c).
 */
#include "qwen3vl.h"

#include "kernels.h"

/* the largest ev_matmul scratch of the text decoder's products for n tokens */
static size_t text_matmul_scratch_bytes(const edgevlm_model *m, int64_t n, int threads) {
    const edgevlm_model_info *in = &m->info;
    const ev_qwen3vl *w = ev_qwen3vl_of(m);
    size_t best = ev_matmul_scratch_bytes(w->output.type, in->n_embd, n, threads), b;
    for (int l = 0; l < in->n_layer; l++) {
        const ev_text_layer *L = &w->layers[l];
        const ev_tensor *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) {
            b = ev_matmul_scratch_bytes(ws[i]->type, ws[i]->ne[0], n, threads);
            if (b > best) best = b;
        }
    }
    return best;
}

static size_t matmul_scratch_bytes(const edgevlm_model *m, int64_t n_batch, int64_t max_patches,
                                   int threads) {
    size_t mm = text_matmul_scratch_bytes(m, n_batch, threads);
    if (max_patches > 0) {
        size_t vm = ev_vit_matmul_scratch_bytes(m, max_patches, threads);
        if (vm > mm) mm = vm;
    }
    return mm;
}

const ev_family ev_family_qwen3vl = {
    .arch = "qwen3vl",
    .load_text = ev_qwen3vl_load_text,
    .load_vision = ev_qwen3vl_load_vision,
    .free_weights = ev_qwen3vl_free,
    .matmul_scratch_bytes = matmul_scratch_bytes,
    .session_alloc = ev_qwen3vl_session_alloc,
    .session_free = ev_qwen3vl_session_free,
    .text_forward = ev_text_forward,
    .vision_forward = ev_vision_forward,
};
