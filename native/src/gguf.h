/*
 * gguf.h - a bounds-checked GGUF (v2/v3) reader. Internal to the core.
 *
 * The file is memory-mapped read-only; strings, arrays and tensor data are pointers into the
 * map (strings are NOT NUL-terminated: use gguf_str_eq / copy with the length). Every offset,
 * size, count, string length and dimension is checked against the map before use; a malformed
 * file yields EDGEVLM_ERR_FORMAT with a message, never a crash or an out-of-bounds read.
 */
#ifndef EDGEVLM_GGUF_H
#define EDGEVLM_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "../include/edgevlm.h"

enum gguf_value_type {
    GGUF_T_UINT8 = 0, GGUF_T_INT8 = 1, GGUF_T_UINT16 = 2, GGUF_T_INT16 = 3,
    GGUF_T_UINT32 = 4, GGUF_T_INT32 = 5, GGUF_T_FLOAT32 = 6, GGUF_T_BOOL = 7,
    GGUF_T_STRING = 8, GGUF_T_ARRAY = 9, GGUF_T_UINT64 = 10, GGUF_T_INT64 = 11,
    GGUF_T_FLOAT64 = 12
};

#define GGUF_MAX_DIMS 4

typedef struct gguf_str {
    const char *ptr;               /* into the map; not NUL-terminated */
    uint64_t len;
} gguf_str;

typedef struct gguf_kv {
    gguf_str key;
    int32_t type;                  /* enum gguf_value_type */
    int32_t arr_type;              /* element type when type == GGUF_T_ARRAY */
    uint64_t arr_len;              /* element count when type == GGUF_T_ARRAY */
    const uint8_t *data;           /* the value's bytes in the map (array: first element) */
    uint64_t nbytes;               /* bytes of the value (array: all elements) */
} gguf_kv;

typedef struct gguf_tensor {
    gguf_str name;
    int32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS];     /* innermost first; unused dims are 1 */
    int32_t type;                  /* ggml type id (see types.h) */
    uint64_t offset;               /* relative to the data section */
    uint64_t nbytes;
    const void *data;              /* into the map, aligned to the file's alignment */
} gguf_tensor;

typedef struct gguf_file {
    const uint8_t *base;           /* the whole file */
    size_t size;
    int owns_map;                  /* 1 when gguf_open mapped it (gguf_close unmaps) */
    uint32_t version;
    uint64_t alignment;
    uint64_t data_offset;          /* start of the tensor data section */
    int64_t n_kv;
    gguf_kv *kv;                   /* [n_kv], malloc'd */
    int64_t n_tensors;
    gguf_tensor *tensors;          /* [n_tensors], malloc'd */
} gguf_file;

/* Maps and parses a file. On failure the file is closed and err holds the reason. */
edgevlm_status gguf_open(const char *path, gguf_file *out, char *err, size_t err_len);
/* Parses a buffer the caller keeps alive (fuzzing, tests). */
edgevlm_status gguf_parse(const void *data, size_t size, gguf_file *out, char *err,
                          size_t err_len);
void gguf_close(gguf_file *f);

int gguf_str_eq(gguf_str s, const char *cstr);
const gguf_kv *gguf_find_kv(const gguf_file *f, const char *key);
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name);

/* Typed getters: 1 on success, 0 when absent or of an incompatible type. Integer getters
 * accept any integer type whose value fits; float getters accept float32/float64. */
int gguf_get_i64(const gguf_file *f, const char *key, int64_t *out);
int gguf_get_f32(const gguf_file *f, const char *key, float *out);
int gguf_get_bool(const gguf_file *f, const char *key, int *out);
int gguf_get_str(const gguf_file *f, const char *key, gguf_str *out);
/* Arrays: element count, or -1 when absent / not an array of a compatible type. */
int64_t gguf_get_arr_i64(const gguf_file *f, const char *key, int64_t *out, int64_t n);
int64_t gguf_get_arr_f32(const gguf_file *f, const char *key, float *out, int64_t n);
int64_t gguf_get_arr_bool(const gguf_file *f, const char *key, int *out, int64_t n);
int64_t gguf_arr_len(const gguf_file *f, const char *key, int32_t want_type);
/* Element i of a string array (bounds-checked; O(1) through an index built at parse time). */
int gguf_get_arr_str(const gguf_file *f, const char *key, int64_t i, gguf_str *out);

#endif
