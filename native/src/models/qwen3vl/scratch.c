/*
 * scratch.c - a Qwen3-VL session's activation buffers (family.h's session_alloc /
 * session_free): the text decoder's for n_batch tokens, the vision encoder's for max_patches
 * patches (none when max_patches is 0). The shapes are ev_qwen3vl_scratch's (qwen3vl.h).
 */
#include <stdlib.h>

#include "qwen3vl.h"
#include "util.h"

/* floats of [rows, cols] rounded up to a 64-byte multiple: the next view stays aligned */
static int64_t padded(int64_t rows, int64_t cols) { return (rows * cols + 15) / 16 * 16; }

/* The attention's and the FFN's buffers share work (their lives do not overlap: see
 * ev_text_scratch): 2B at n_batch 512, 25 MiB instead of 38. */
static int alloc_work(ev_text_scratch *t, int64_t nb, int64_t q_row, int64_t kv_row,
                      int64_t n_ff) {
    const int64_t attn = 2 * padded(nb, q_row) + 2 * padded(nb, kv_row);
    const int64_t ffn = 2 * padded(nb, n_ff);
    if (!(t->work = ev_alloc_f32(attn > ffn ? attn : ffn, 1))) return 0;
    t->q = t->work;
    t->k = t->q + padded(nb, q_row);
    t->v = t->k + padded(nb, kv_row);
    t->att = t->v + padded(nb, kv_row);
    t->gate = t->work;
    t->up = t->gate + padded(nb, n_ff);
    return 1;
}

static int alloc_text(ev_text_scratch *t, const edgevlm_model_info *in,
                      const edgevlm_session_params *p) {
    const int64_t nb = p->n_batch, d = in->n_embd, hd = in->head_dim;
    const int64_t q_row = (int64_t)in->n_head * hd, kv_row = (int64_t)in->n_head_kv * hd;
    return (t->x = ev_alloc_f32(nb, d)) &&                  /* [n_batch, n_embd] */
           (t->xb = ev_alloc_f32(nb, d)) &&                 /* [n_batch, n_embd] */
           alloc_work(t, nb, q_row, kv_row, in->n_ff) &&    /* q, k, v, att | gate, up */
           (t->rope_cos = ev_alloc_f32(nb, hd / 2)) &&      /* [n_batch, hd / 2] */
           (t->rope_sin = ev_alloc_f32(nb, hd / 2)) &&      /* [n_batch, hd / 2] */
           (t->scores = ev_alloc_f32(p->n_threads, p->n_ctx)) &&   /* [n_threads, n_ctx] */
           (t->acc = ev_alloc_f32(p->n_threads, hd)) &&            /* [n_threads, hd] */
           (t->attn_tile = ev_alloc_f32(p->n_threads, ev_dec_attn_floats(hd)));
}

static int alloc_vit(ev_vit_scratch *v, const edgevlm_model_info *in,
                     const edgevlm_session_params *p) {
    const int64_t np = p->max_patches, c = in->v_n_embd, hd = c / in->v_n_head;
    const int64_t pp3 = 3LL * in->v_patch_size * in->v_patch_size;   /* one patch's pixels */
    const int64_t wide = in->v_n_ff > 4 * c ? in->v_n_ff : 4 * c;
    v->max_patches = np;
    return (v->h = ev_alloc_f32(np, c)) &&                  /* [N, C] */
           (v->y = ev_alloc_f32(np, c > pp3 ? c : pp3)) &&  /* [N, max(C, 3*P*P)] */
           (v->y2 = ev_alloc_f32(np, pp3)) &&               /* [N, 3*P*P] */
           (v->qkv = ev_alloc_f32(np, 3 * c)) &&            /* [N, 3C] */
           (v->att = ev_alloc_f32(np, c)) &&                /* [N, C] */
           (v->mlp = ev_alloc_f32(np, wide)) &&             /* [N, max(FF, 4C)] */
           (v->merge_in = ev_alloc_f32(np, c)) &&           /* [N/4, 4C] = [N, C] */
           (v->rope_cos = ev_alloc_f32(np, hd / 2)) &&      /* [N, hd / 2] */
           (v->rope_sin = ev_alloc_f32(np, hd / 2)) &&      /* [N, hd / 2] */
           (v->attn = ev_alloc_f32(p->n_threads, ev_vit_attn_floats(hd, np))) &&
           (v->pos_row = ev_alloc(sizeof(int32_t) * (size_t)np)) != NULL &&   /* [N] */
           (v->pos_col = ev_alloc(sizeof(int32_t) * (size_t)np)) != NULL;     /* [N] */
}

edgevlm_status ev_qwen3vl_session_alloc(edgevlm_session *s, char *err, size_t err_len) {
    const edgevlm_session_params *p = &s->params;
    ev_qwen3vl_scratch *sc = calloc(1, sizeof *sc);
    s->scratch = sc;
    const char *what = !sc                                         ? "qwen3vl"
                       : !alloc_text(&sc->t, &s->model->info, p)   ? "qwen3vl decoder"
                       : p->max_patches > 0 && !alloc_vit(&sc->v, &s->model->info, p)
                           ? "qwen3vl vision encoder"
                           : NULL;
    if (!what) return EDGEVLM_OK;
    ev_errf(err, err_len, "cannot allocate the session's %s buffers (n_ctx %d, n_batch %d, "
            "n_threads %d, max_patches %d): out of memory", what, p->n_ctx, p->n_batch,
            p->n_threads, p->max_patches);
    return EDGEVLM_ERR_NOMEM;
}

void ev_qwen3vl_session_free(edgevlm_session *s) {
    ev_qwen3vl_scratch *sc = s->scratch;
    if (!sc) return;
    ev_text_scratch *t = &sc->t;
    ev_vit_scratch *v = &sc->v;
    void *bufs[] = {t->x, t->xb, t->work, t->rope_cos,
                    t->rope_sin, t->scores, t->acc, t->attn_tile, v->h, v->y, v->y2, v->qkv,
                    v->att, v->mlp, v->merge_in, v->rope_cos, v->rope_sin, v->pos_row,
                    v->pos_col, v->attn};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    free(sc);
    s->scratch = NULL;
}
