/*
 * model.h - a loaded model: its GGUF files, hyperparameters, family and the family's weight
 * views into the maps.
 *
 * Weights are never copied: every ev_tensor points into a memory-mapped file. Shapes follow
 * GGUF (ne[0] innermost): a linear layer's weight W[n_out][n_in] has ne = {n_in, n_out}.
 * Which tensors a model has is its family's business (src/models/<family>/).
 */
#ifndef EDGEVLM_MODEL_H
#define EDGEVLM_MODEL_H

#include <stdint.h>

#include "../include/edgevlm.h"
#include "gguf.h"

struct ev_family;

typedef struct ev_tensor {
    const void *data;              /* NULL when absent */
    int32_t type;                  /* ggml type id */
    int64_t ne[4];                 /* innermost first */
} ev_tensor;

struct edgevlm_model {
    gguf_file text;
    gguf_file vision;              /* zeroed when no mmproj was loaded */
    edgevlm_model_info info;
    const struct ev_family *family;   /* by the text file's general.architecture */
    void *weights;                 /* the family's tensor views (qwen3vl: ev_qwen3vl) */
};

#include "model_files.h"   /* ev_model_file: the GGUF files behind a model */

#endif
