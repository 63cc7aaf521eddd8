/*
 * family.h - the model families edgevlm runs, keyed by the text file's GGUF
 * general.architecture: each family is one folder src/models/<family>/ (its weights and
 * loader, its session scratch: the activation buffers' struct, shapes and allocation, its
 * forward passes) and one row of the registry (registry.c). The API files (model.c,
 * session.c) reach a family only through this table; session.c holds what any family's
 * session has (KV cache [n_layer, n_ctx, n_head_kv * head_dim], matmul scratch, sampler
 * candidates), the family's buffers are behind s->scratch.
 */
#ifndef EDGEVLM_FAMILY_H
#define EDGEVLM_FAMILY_H

#include <stddef.h>
#include <stdint.h>

#include "../include/edgevlm.h"

typedef struct ev_family {
    const char *arch;   /* general.architecture of the text file, e.g. "qwen3vl" */
    /* Loading: hyperparameters into m->info and the family's tensor views into m->weights
     * (text file, then the mmproj file when one is given); messages into err. */
    edgevlm_status (*load_text)(edgevlm_model *m, char *err, size_t err_len);
    edgevlm_status (*load_vision)(edgevlm_model *m, char *err, size_t err_len);
    void (*free_weights)(edgevlm_model *m);   /* what the loads allocated (partial loads too) */
    /* Session buffers. matmul_scratch_bytes: the ev_matmul scratch (session.c allocates it)
     * for n_batch tokens and max_patches patches (0: no vision) on n_threads.
     * session_alloc: the family's own activation buffers (its struct, its shapes) into
     * s->scratch, sized by s->params (n_batch already at most n_ctx; max_patches 0: no vision
     * buffers) and s->model->info; called by edgevlm_session_new once the family-independent
     * buffers are in place. On failure a message naming the sizes (n_ctx, n_batch,
     * max_patches ..) into err and EDGEVLM_ERR_NOMEM; what it allocated stays in s->scratch
     * for session_free. session_free: frees s->scratch, also when partial or NULL. */
    size_t (*matmul_scratch_bytes)(const edgevlm_model *m, int64_t n_batch,
                                   int64_t max_patches, int n_threads);
    edgevlm_status (*session_alloc)(edgevlm_session *s, char *err, size_t err_len);
    void (*session_free)(edgevlm_session *s);
    /* The forward passes behind edgevlm_prefill / edgevlm_decode (one chunk of at most
     * n_batch tokens, arguments checked) and edgevlm_encode_vision. */
    edgevlm_status (*text_forward)(edgevlm_session *s, const int32_t *tokens, int64_t n_tokens,
                                   const int32_t *positions, int64_t pos_stride,
                                   const int32_t *vision_index, const float *vision_rows,
                                   int64_t n_vision, const float *deepstack_rows, int32_t n_ds,
                                   float *logits_out, int64_t n_logits);
    edgevlm_status (*vision_forward)(edgevlm_session *s, const float *pixel_values,
                                     int64_t n_patches, int32_t grid_t, int32_t grid_h,
                                     int32_t grid_w, float *out_embeds, float *out_deepstack,
                                     float *out_vit);
} ev_family;

/* The family of an architecture name (len bytes, not NUL-terminated), or NULL. */
const ev_family *ev_family_find(const char *arch, size_t len);
/* "\"qwen3vl\"" (the supported names, quoted, ", " apart) into buf; returns buf. */
const char *ev_family_list(char *buf, size_t len);

#endif
