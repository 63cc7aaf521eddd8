/*
 * session.h - one inference session: KV cache, scratch buffers, thread pool, RNG.
 *
 * Everything is allocated in edgevlm_session_new, sized by the session parameters and the
 * model's family (src/models/family.h): the KV cache, the matmul scratch and the sampler's
 * candidates here; the forward passes' activation buffers are the family's (s->scratch, its
 * shapes in the family's header, e.g. src/models/qwen3vl/qwen3vl.h). The forward passes only
 * use these buffers. Shapes are row-major, rows first.
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

struct edgevlm_session {
    const edgevlm_model *model;
    edgevlm_session_params params; /* as given, n_batch at most n_ctx */
    ev_pool *pool;
    const ev_kernels *kernels;
    atomic_int cancel;
    int32_t n_past;                /* tokens in the KV cache */
    uint64_t rng_state;
    char error[512];

    void *k_cache;                 /* [n_layer, n_ctx, n_head_kv * head_dim] f32 or f16 */
    void *v_cache;                 /* same */
    size_t kv_elem;                /* 4 or 2 bytes */

    void *scratch;                 /* the family's activation buffers, its own struct: made and
                                      freed by family->session_alloc / session_free */
    void *mm_scratch;              /* quantised activations for ev_matmul */
    size_t mm_scratch_bytes;
    int32_t *cand_idx;             /* [n_vocab] sampler candidates */
    float *cand_p;                 /* [n_vocab] */
};

#endif
