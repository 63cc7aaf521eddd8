/*
 * loader.h - what every model family's loader uses to read a GGUF file: metadata with
 * defaults, and tensors checked for presence, shape and type before a view of them is kept.
 */
#ifndef EDGEVLM_LOADER_H
#define EDGEVLM_LOADER_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"

typedef struct ev_loader {
    const gguf_file *f;
    const char *file_label;        /* "model" or "mmproj", for messages */
    char *err;
    size_t err_len;
} ev_loader;

/* The key's value, or dflt when it is absent or not a number. */
int64_t ev_meta_i64(const gguf_file *f, const char *key, int64_t dflt);
float ev_meta_f32(const gguf_file *f, const char *key, float dflt);

/* Finds a tensor and checks its type class and shape into *out. ne1 < 0: a 1-D tensor of ne0
 * values. Matrices must have a type of the type table (types.c) with rows of whole blocks;
 * vectors must be F32; every float16 scale of a matrix must be finite (ev_load_check_scales);
 * the data must be aligned for the type (float32: 4 bytes, the others: 2).
 * optional: an absent tensor leaves *out zeroed and succeeds.
 * Returns 1, or 0 with the message in L->err. */
int ev_load_tensor(ev_loader *L, ev_tensor *out, const char *name, int64_t ne0, int64_t ne1,
                   int optional);

/* 1 when data is aligned for the type (float32: 4 bytes, the others: 2) and every float16
 * scale (d, dmin) of the n_rows rows of row_len values of type at data is finite, else 0
 * with the message in L->err naming the tensor (and the block and the row).
 * Reads every block's scales, so every page of the tensor (llama.cpp checks the same only
 * with --check-tensors; here a NaN scale is refused at load time, not met as NaN logits). */
int ev_load_check_scales(ev_loader *L, const char *name, int32_t type, const void *data,
                         int64_t n_rows, int64_t row_len);

/* 1 when 1 <= v <= max, else 0 with the message in L->err. */
int ev_load_positive(ev_loader *L, const char *what, int64_t v, int64_t max);

#endif
