/*
 * session.h - one inference session: KV cache, scratch buffers, thread pool, RNG.
 *
 * Everything is allocated in edgevlm_session_new, sized by the session parameters and the
 * model's family (src/models/family.h); the forward passes only use these buffers. Shapes
 * are row-major, rows first.
 */
#ifndef EDGEVLM_SESSION_H
#define EDGEVLM_SESSION_H

#include <stdatomic.h>
#include <stdint.h>

#include "kernels.h"
#include "linear.h"
#include "model.h"
#include "rows.h"
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
    float *attn_tile;              /* [n_threads, family->text_attn_floats(head_dim)]
                                    * prefill attention: K^T, V, scores and output blocks */
} ev_text_scratch;

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
    float *attn;                   /* [n_threads, family->vision_attn_floats(head_dim, N)]:
                                      per thread attention blocks (qwen3vl: K^T [hd, S],
                                      V [hd rows of S], P [EV_VIT_ATT_QB, S], S <= N) */
} ev_vit_scratch;

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

#endif
