/*
 * qwen3vl.h - the Qwen3-VL family (general.architecture "qwen3vl" + a "qwen3vl_merger"
 * mmproj): its tensors, and what its files share.
 *   load.c          the family's loader (text + mmproj GGUF pair in llama.cpp's layout)
 *   family.c        the registry row (family.h) and the matmul scratch sizing
 *   scratch.c       the session's activation buffers (ev_qwen3vl_scratch below)
 *   decoder.c       the text decoder forward pass
 *   decoder_attn.c  its causal GQA attention over the KV cache
 *   vit.c           the vision encoder and its mergers
 * Shapes follow GGUF (ne[0] innermost): a linear layer's weight W[n_out][n_in] has
 * ne = {n_in, n_out}.
 */
#ifndef EDGEVLM_QWEN3VL_H
#define EDGEVLM_QWEN3VL_H

#include <stdint.h>

#include "../family.h"
#include "model.h"
#include "session.h"

#define EV_MAX_DEEPSTACK 4

typedef struct ev_text_layer {
    ev_tensor attn_norm;           /* F32 [n_embd] */
    ev_tensor wq;                  /* [n_embd] -> [n_head * head_dim] */
    ev_tensor wk;                  /* [n_embd] -> [n_head_kv * head_dim] */
    ev_tensor wv;                  /* [n_embd] -> [n_head_kv * head_dim] */
    ev_tensor wo;                  /* [n_head * head_dim] -> [n_embd] */
    ev_tensor q_norm;              /* F32 [head_dim] */
    ev_tensor k_norm;              /* F32 [head_dim] */
    ev_tensor ffn_norm;            /* F32 [n_embd] */
    ev_tensor w_gate;              /* [n_embd] -> [n_ff] */
    ev_tensor w_up;                /* [n_embd] -> [n_ff] */
    ev_tensor w_down;              /* [n_ff] -> [n_embd] */
} ev_text_layer;

typedef struct ev_vit_layer {
    ev_tensor ln1_w, ln1_b;        /* F32 [C] */
    ev_tensor qkv_w, qkv_b;        /* [C] -> [3C] (q | k | v, each heads x head_dim) */
    ev_tensor out_w, out_b;        /* [C] -> [C] */
    ev_tensor ln2_w, ln2_b;        /* F32 [C] */
    ev_tensor up_w, up_b;          /* [C] -> [FF] */
    ev_tensor down_w, down_b;      /* [FF] -> [C] */
} ev_vit_layer;

typedef struct ev_merger {
    ev_tensor norm_w, norm_b;      /* F32 [C] (final merger) or [4C] (DeepStack mergers) */
    ev_tensor fc1_w, fc1_b;        /* [4C] -> [4C] */
    ev_tensor fc2_w, fc2_b;        /* [4C] -> [n_embd] */
    int32_t post_shuffle_norm;     /* 1: norm over 4C after the 2x2 concat (DeepStack) */
} ev_merger;

/* The family's tensors (edgevlm_model.weights): views into the GGUF maps. */
typedef struct ev_qwen3vl {
    /* text decoder */
    ev_tensor token_embd;          /* [n_embd] x n_vocab rows */
    ev_tensor output_norm;         /* F32 [n_embd] */
    ev_tensor output;              /* = token_embd when tied */
    ev_text_layer *layers;         /* [n_layer] */

    /* vision encoder */
    ev_tensor patch_w[2];          /* temporal slices t=0,1: [3*P*P] -> [C] rows in (c,py,px) */
    ev_tensor patch_b;             /* F32 [C] */
    ev_tensor pos_embd;            /* [C] x side*side rows */
    ev_vit_layer *vlayers;         /* [v_n_layer] */
    ev_merger merger;
    ev_merger deepstack[EV_MAX_DEEPSTACK];  /* in tap order (deepstack_visual_indexes) */
} ev_qwen3vl;

static inline const ev_qwen3vl *ev_qwen3vl_of(const edgevlm_model *m) {
    return (const ev_qwen3vl *)m->weights;
}

/* A session's activation buffers (edgevlm_session.scratch), made by scratch.c. Shapes are
 * row-major, rows first. */
typedef struct ev_text_scratch {
    float *x;                      /* [n_batch, n_embd] residual stream */
    float *xb;                     /* [n_batch, n_embd] normalised input of a sublayer */
    /* q, k, v and att live from a layer's q/k/v projections to its o projection, gate and
     * up from its gate/up projections to its down projection: views into one buffer, work */
    float *work;                   /* [n_batch, max(2 q_row + 2 kv_row, 2 n_ff)] (+ padding) */
    float *q;                      /* [n_batch, n_head * head_dim]     work + 0 */
    float *k;                      /* [n_batch, n_head_kv * head_dim]  after q */
    float *v;                      /* [n_batch, n_head_kv * head_dim]  after k */
    float *att;                    /* [n_batch, n_head * head_dim]     after v: attention output */
    float *gate;                   /* [n_batch, n_ff]                  work + 0 */
    float *up;                     /* [n_batch, n_ff]                  after gate */
    float *rope_cos;               /* [n_batch, head_dim / 2] */
    float *rope_sin;               /* [n_batch, head_dim / 2] */
    float *scores;                 /* [n_threads, n_ctx] attention probabilities */
    float *acc;                    /* [n_threads, head_dim] f32 accumulator for f16 V */
    float *attn_tile;              /* [n_threads, ev_dec_attn_floats(head_dim)] prefill
                                    * attention: K^T, V, scores and output blocks */
} ev_text_scratch;

typedef struct ev_vit_scratch {    /* all NULL when the session has max_patches 0 */
    int64_t max_patches;           /* capacity N (0: no vision buffers) */
    float *h;                      /* [N, C] residual stream */
    float *y;                      /* [N, max(C, 3*P*P)] normalised input / patch gather */
    float *y2;                     /* [N, 3*P*P] second temporal slice of the patch gather */
    float *qkv;                    /* [N, 3C] */
    float *att;                    /* [N, C] */
    float *mlp;                    /* [N, max(FF, 4C)] (fc1 output; merger hidden [N/4, 4C]) */
    float *merge_in;               /* [N/4, 4C] = [N, C] normalised merger input */
    float *rope_cos;               /* [N, head_dim / 2] */
    float *rope_sin;               /* [N, head_dim / 2] */
    int32_t *pos_row;              /* [N] patch row (full resolution) */
    int32_t *pos_col;              /* [N] patch column */
    float *attn;                   /* [n_threads, ev_vit_attn_floats(head_dim, N)]: per thread
                                      K^T [hd, S], V [hd rows of S], P [EV_VIT_ATT_QB, S],
                                      S <= N */
} ev_vit_scratch;

typedef struct ev_qwen3vl_scratch {
    ev_text_scratch t;             /* the text decoder's */
    ev_vit_scratch v;              /* the vision encoder's */
} ev_qwen3vl_scratch;

static inline ev_text_scratch *ev_text_scratch_of(const edgevlm_session *s) {
    return &((ev_qwen3vl_scratch *)s->scratch)->t;
}
static inline ev_vit_scratch *ev_vit_scratch_of(const edgevlm_session *s) {
    return &((ev_qwen3vl_scratch *)s->scratch)->v;
}

extern const ev_family ev_family_qwen3vl;   /* family.c */

/* scratch.c: family.h's session_alloc / session_free */
edgevlm_status ev_qwen3vl_session_alloc(edgevlm_session *s, char *err, size_t err_len);
void ev_qwen3vl_session_free(edgevlm_session *s);

/* load.c */
edgevlm_status ev_qwen3vl_load_text(edgevlm_model *m, char *err, size_t err_len);
edgevlm_status ev_qwen3vl_load_vision(edgevlm_model *m, char *err, size_t err_len);
void ev_qwen3vl_free(edgevlm_model *m);

/* decoder.c: one chunk of the text forward pass (family.h's text_forward) */
edgevlm_status ev_text_forward(edgevlm_session *s, const int32_t *tokens, int64_t n_tokens,
                               const int32_t *positions, int64_t pos_stride,
                               const int32_t *vision_index, const float *vision_rows,
                               int64_t n_vision, const float *deepstack_rows, int32_t n_ds,
                               float *logits_out, int64_t n_logits);

/* decoder_attn.c's blocking: calls of at least MIN_TILED queries run in blocks of QB queries
 * against chunks of KB keys */
#define EV_DEC_ATT_MIN_TILED 8
#define EV_DEC_ATT_QB 64
#define EV_DEC_ATT_KB 256

/* decoder_attn.c: causal GQA attention of the call's n queries (q in the text scratch's q,
 * keys and values already in the cache at n_past ..) into its att */
void ev_decoder_attention(edgevlm_session *s, int layer, int64_t n);
int64_t ev_dec_attn_floats(int64_t head_dim);   /* per-thread attn_tile floats */

/* vit.c: the vision forward pass (family.h's vision_forward) */
edgevlm_status ev_vision_forward(edgevlm_session *s, const float *pixel_values,
                                 int64_t n_patches, int32_t grid_t, int32_t grid_h,
                                 int32_t grid_w, float *out_embeds, float *out_deepstack,
                                 float *out_vit);

/* vit.c: ev_matmul scratch of the vision encoder for n patches; 0 when the model has none */
size_t ev_vit_matmul_scratch_bytes(const edgevlm_model *m, int64_t max_patches, int threads);

#define EV_VIT_ATT_QB 64           /* queries per block of ViT attention scores */

/* per thread K^T [hd, S], V [hd rows of S], P [EV_VIT_ATT_QB, S], S <= max_patches */
static inline int64_t ev_vit_attn_floats(int64_t head_dim, int64_t max_patches) {
    return (2 * head_dim + EV_VIT_ATT_QB) * max_patches;
}

#endif
