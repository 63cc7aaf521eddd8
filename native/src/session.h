/*
 * session.h - one inference session: KV cache, scratch buffers, thread pool, RNG.
 *
 * Everything is allocated in edgevlm_session_new, sized by the session parameters; the
 * forward passes only use these buffers. Shapes are row-major, rows first.
 */
#ifndef EDGEVLM_SESSION_H
#define EDGEVLM_SESSION_H

#include <stdatomic.h>
#include <stdint.h>

#include "kernels.h"
#include "model.h"
#include "threadpool.h"

typedef struct ev_text_scratch {
    float *x;                      /* [n_batch, n_embd] residual stream */
    float *xb;                     /* [n_batch, n_embd] normalised input of a sublayer */
    float *q;                      /* [n_batch, n_head * head_dim] */
    float *k;                      /* [n_batch, n_head_kv * head_dim] */
    float *v;                      /* [n_batch, n_head_kv * head_dim] */
    float *att;                    /* [n_batch, n_head * head_dim] attention output */
    float *gate;                   /* [n_batch, n_ff] */
    float *up;                     /* [n_batch, n_ff] */
    float *rope_cos;               /* [n_batch, head_dim / 2] */
    float *rope_sin;               /* [n_batch, head_dim / 2] */
    float *scores;                 /* [n_threads, n_ctx] attention probabilities */
    float *acc;                    /* [n_threads, head_dim] f32 accumulator for f16 V */
    float *attn_tile;              /* [n_threads, ev_dec_attn_floats(head_dim)] prefill
                                    * attention: K^T, V, scores and output blocks */
} ev_text_scratch;

/* decoder_attn.c's blocking: calls of at least MIN_TILED queries run in blocks of QB queries
 * against chunks of KB keys */
#define EV_DEC_ATT_MIN_TILED 8
#define EV_DEC_ATT_QB 64
#define EV_DEC_ATT_KB 256

typedef struct ev_vit_scratch {
    int64_t max_patches;           /* capacity N */
    float *h;                      /* [N, C] residual stream */
    float *y;                      /* [N, max(C, 768)] normalised input / patch gather */
    float *y2;                     /* [N, 768] second temporal slice of the patch gather */
    float *qkv;                    /* [N, 3C] */
    float *att;                    /* [N, C] */
    float *mlp;                    /* [N, max(FF, 4C)] (fc1 output; merger hidden [N/4, 4C]) */
    float *merge_in;               /* [N/4, 4C] = [N, C] normalised merger input */
    float *rope_cos;               /* [N, head_dim / 2] */
    float *rope_sin;               /* [N, head_dim / 2] */
    int32_t *pos_row;              /* [N] patch row (full resolution) */
    int32_t *pos_col;              /* [N] patch column */
    float *attn;                   /* [n_threads, ev_vit_attn_floats(head_dim, N)]: per thread
                                      K^T [hd, S], V [hd rows of S], P [EV_VIT_ATT_QB, S], S <= N */
} ev_vit_scratch;

#define EV_VIT_ATT_QB 64           /* queries per block of ViT attention scores */

static inline int64_t ev_vit_attn_floats(int64_t head_dim, int64_t max_patches) {
    return (2 * head_dim + EV_VIT_ATT_QB) * max_patches;
}

struct edgevlm_session {
    const edgevlm_model *model;
    edgevlm_session_params params;
    ev_pool *pool;
    const ev_kernels *kernels;
    atomic_int cancel;
    int32_t n_past;                /* tokens in the KV cache */
    uint64_t rng_state;
    char error[512];

    void *k_cache;                 /* [n_layer, n_ctx, n_head_kv * head_dim] f32 or f16 */
    void *v_cache;                 /* same */
    size_t kv_elem;                /* 4 or 2 bytes */

    ev_text_scratch t;
    ev_vit_scratch v;
    void *mm_scratch;              /* quantised activations for ev_matmul */
    size_t mm_scratch_bytes;
    int32_t *cand_idx;             /* [n_vocab] sampler candidates */
    float *cand_p;                 /* [n_vocab] */
};

/* Sets the session error message; returns st. */
edgevlm_status ev_fail(edgevlm_session *s, edgevlm_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* y[n_tok, n_out] = x[n_tok, n_in] . W^T (+ b) with the session's pool, kernels and scratch. */
void ev_linear(edgevlm_session *s, const ev_tensor *w, const ev_tensor *b, const float *x,
               int64_t n_tok, float *y);

/* The text forward pass (decoder.c). */
/* rows.c: the decoder's row operations over the thread pool (small calls run inline) */
void ev_rows_rmsnorm(edgevlm_session *s, float *out, const float *x, const float *w,
                     int64_t rows, int64_t n, float eps);
void ev_rows_silu_mul(edgevlm_session *s, float *gate, const float *up, int64_t rows, int64_t n);
void ev_rows_add(edgevlm_session *s, float *y, const float *x, int64_t rows, int64_t n);
/* rotate-half rope of q's n_q and k's n_k heads per row (row i at q + i * q_stride, ...) */
void ev_rows_rope(edgevlm_session *s, float *q, int64_t q_stride, int n_q, float *k,
                  int64_t k_stride, int n_k, int hd, int64_t rows, const float *cos,
                  const float *sin);
/* the decoder's: q [rows, n_head * head_dim], k [rows, n_head_kv * head_dim] */
void ev_rows_rope_qk(edgevlm_session *s, float *q, float *k, int64_t rows, const float *cos,
                     const float *sin);

/* decoder_attn.c: causal GQA attention of the call's n queries (q in s->t.q, keys and values
 * already in the cache at n_past ..) into s->t.att */
void ev_decoder_attention(edgevlm_session *s, int layer, int64_t n);
int64_t ev_dec_attn_floats(int64_t head_dim);   /* per-thread attn_tile floats */

edgevlm_status ev_text_forward(edgevlm_session *s, const int32_t *tokens, int64_t n_tokens,
                               const int32_t *positions, int64_t pos_stride,
                               const int32_t *vision_index, const float *vision_rows,
                               int64_t n_vision, const float *deepstack_rows, int32_t n_ds,
                               float *logits_out, int64_t n_logits);

/* The vision forward pass (vit.c). */
edgevlm_status ev_vision_forward(edgevlm_session *s, const float *pixel_values,
                                 int64_t n_patches, int32_t grid_t, int32_t grid_h,
                                 int32_t grid_w, float *out_embeds, float *out_deepstack,
                                 float *out_vit);

/* Scratch sizing for the vision encoder (vit.c); 0 when the model has no vision. */
size_t ev_vit_matmul_scratch_bytes(const edgevlm_model *m, int64_t max_patches, int threads);

#endif
