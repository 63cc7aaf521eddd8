/*
 * model.h - the loaded Qwen3-VL model: hyperparameters and weight views into the GGUF maps.
 *
 * Weights are never copied: every ev_tensor points into a memory-mapped file. Shapes follow
 * GGUF (ne[0] innermost): a linear layer's weight W[n_out][n_in] has ne = {n_in, n_out}.
 */
#ifndef EDGEVLM_MODEL_H
#define EDGEVLM_MODEL_H

#include <stdint.h>

#include "../include/edgevlm.h"
#include "gguf.h"

#define EV_MAX_DEEPSTACK 4

typedef struct ev_tensor {
    const void *data;              /* NULL when absent */
    int32_t type;                  /* ggml type id */
    int64_t ne[4];                 /* innermost first */
} ev_tensor;

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

struct edgevlm_model {
    gguf_file text;
    gguf_file vision;              /* zeroed when no mmproj was loaded */
    edgevlm_model_info info;

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
};

#include "model_files.h"   /* ev_model_file: the GGUF files behind a model */

#endif
