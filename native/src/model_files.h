/*
 * model_files.h - how the metadata calls of edgevlm.h (api_meta.c) reach a loaded model's
 * parsed GGUF files, and the gguf-level functions behind those calls.
 */
#ifndef EDGEVLM_MODEL_FILES_H
#define EDGEVLM_MODEL_FILES_H

#include <stddef.h>
#include <stdint.h>

#include "gguf.h"

/* The parsed text file (which == 0) or mmproj file (which == 1) of a loaded model; NULL when
 * model is NULL, which is neither 0 nor 1, or no mmproj was loaded. Implemented by the model
 * loader (model.c). */
const gguf_file *ev_model_file(const edgevlm_model *m, int which);

/* The edgevlm_model_meta_* calls on one parsed file (f may be NULL: -1). Same conventions as
 * in edgevlm.h: strings are copied NUL-terminated into buf (truncated to buf_len - 1 bytes)
 * and the full length is returned; -1 when the key is absent or of another type. */
int64_t ev_meta_str(const gguf_file *f, const char *key, char *buf, size_t buf_len);
int64_t ev_meta_arr_len(const gguf_file *f, const char *key);
int64_t ev_meta_arr_str(const gguf_file *f, const char *key, int64_t index, char *buf,
                        size_t buf_len);
int64_t ev_meta_ints(const gguf_file *f, const char *key, int64_t *out, int64_t n);

#endif
