/*
 * gguf_get.c - lookups and typed getters on a parsed GGUF file (gguf.h); parsing and
 * validation are in gguf.c, which also holds gguf_get_arr_str (it uses the string index).
 * Every value here was bounds-checked at parse time, so the getters only convert.
 * Integers: any integer type whose value fits in int64 (a uint64 > INT64_MAX does not).
 * Floats: float32, or float64 rounded to float (beyond float's range: +-inf).
 * Array getters copy min(n, length) elements and return the length (-1: absent, not an array
 * of a compatible element type, or - for gguf_get_arr_i64 - a copied uint64 > INT64_MAX).
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "gguf.h"

static const uint8_t elem_size[13] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

static uint16_t le16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t le64(const uint8_t *p) { return le32(p) | (uint64_t)le32(p + 4) << 32; }

int gguf_str_eq(gguf_str s, const char *cstr) {
    if (!cstr || (!s.ptr && s.len)) return 0;
    size_t n = strlen(cstr);
    return s.len == n && (n == 0 || !memcmp(s.ptr, cstr, n));
}

const gguf_kv *gguf_find_kv(const gguf_file *f, const char *key) {
    if (!f || !key) return NULL;
    for (int64_t i = 0; i < f->n_kv; i++)
        if (f->kv[i].key.len && gguf_str_eq(f->kv[i].key, key)) return &f->kv[i];
    return NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name) {
    if (!f || !name) return NULL;
    for (int64_t i = 0; i < f->n_tensors; i++)
        if (f->tensors[i].name.len && gguf_str_eq(f->tensors[i].name, name))
            return &f->tensors[i];
    return NULL;
}

/* One integer element of type `type` at p; 0 when not an integer type or a u64 > INT64_MAX. */
static int int_at(int32_t type, const uint8_t *p, int64_t *out) {
    switch (type) {
    case GGUF_T_UINT8: *out = p[0]; return 1;
    case GGUF_T_INT8: *out = (int8_t)p[0]; return 1;
    case GGUF_T_UINT16: *out = le16(p); return 1;
    case GGUF_T_INT16: *out = (int16_t)le16(p); return 1;
    case GGUF_T_UINT32: *out = le32(p); return 1;
    case GGUF_T_INT32: *out = (int32_t)le32(p); return 1;
    case GGUF_T_INT64: { uint64_t u = le64(p); memcpy(out, &u, sizeof u); return 1; }
    case GGUF_T_UINT64: if (le64(p) > INT64_MAX) return 0; *out = (int64_t)le64(p); return 1;
    default: return 0;
    }
}

/* One float element; float64 values beyond float's range become +-inf. */
static int float_at(int32_t type, const uint8_t *p, float *out) {
    uint32_t u32;
    uint64_t u64;
    double d;
    if (type == GGUF_T_FLOAT32) { u32 = le32(p); memcpy(out, &u32, sizeof u32); return 1; }
    if (type != GGUF_T_FLOAT64) return 0;
    u64 = le64(p);
    memcpy(&d, &u64, sizeof d);
    *out = d > FLT_MAX ? INFINITY : d < -FLT_MAX ? -INFINITY : (float)d;
    return 1;
}

int gguf_get_i64(const gguf_file *f, const char *key, int64_t *out) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    int64_t v;
    return kv && int_at(kv->type, kv->data, out ? out : &v);
}

int gguf_get_f32(const gguf_file *f, const char *key, float *out) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    float v;
    return kv && float_at(kv->type, kv->data, out ? out : &v);
}

int gguf_get_bool(const gguf_file *f, const char *key, int *out) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv || kv->type != GGUF_T_BOOL) return 0;
    if (out) *out = kv->data[0] != 0;
    return 1;
}

int gguf_get_str(const gguf_file *f, const char *key, gguf_str *out) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv || kv->type != GGUF_T_STRING) return 0;
    if (out) *out = (gguf_str){(const char *)kv->data, kv->nbytes};
    return 1;
}

static const gguf_kv *find_arr(const gguf_file *f, const char *key) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    return kv && kv->type == GGUF_T_ARRAY ? kv : NULL;
}

/* How many elements an array getter copies. */
static uint64_t n_copy(const gguf_kv *kv, const void *out, int64_t n) {
    return out && n > 0 ? ((uint64_t)n < kv->arr_len ? (uint64_t)n : kv->arr_len) : 0;
}

static int is_int_type(int32_t t) {
    return (t >= GGUF_T_UINT8 && t <= GGUF_T_INT32) || t == GGUF_T_UINT64 || t == GGUF_T_INT64;
}

/* Copies min(n, len) elements; -1 when an element does not convert (a u64 > INT64_MAX). */
int64_t gguf_get_arr_i64(const gguf_file *f, const char *key, int64_t *out, int64_t n) {
    const gguf_kv *kv = find_arr(f, key);
    if (!kv || !is_int_type(kv->arr_type)) return -1;
    uint64_t m = n_copy(kv, out, n);
    for (uint64_t i = 0; i < m; i++)
        if (!int_at(kv->arr_type, kv->data + i * elem_size[kv->arr_type], &out[i])) return -1;
    return (int64_t)kv->arr_len;
}

int64_t gguf_get_arr_f32(const gguf_file *f, const char *key, float *out, int64_t n) {
    const gguf_kv *kv = find_arr(f, key);
    if (!kv || (kv->arr_type != GGUF_T_FLOAT32 && kv->arr_type != GGUF_T_FLOAT64)) return -1;
    uint64_t m = n_copy(kv, out, n);
    for (uint64_t i = 0; i < m; i++)
        float_at(kv->arr_type, kv->data + i * elem_size[kv->arr_type], &out[i]);
    return (int64_t)kv->arr_len;
}

int64_t gguf_get_arr_bool(const gguf_file *f, const char *key, int *out, int64_t n) {
    const gguf_kv *kv = find_arr(f, key);
    if (!kv || kv->arr_type != GGUF_T_BOOL) return -1;
    uint64_t m = n_copy(kv, out, n);
    for (uint64_t i = 0; i < m; i++) out[i] = kv->data[i] != 0;
    return (int64_t)kv->arr_len;
}

/* want_type < 0 accepts any element type. */
int64_t gguf_arr_len(const gguf_file *f, const char *key, int32_t want_type) {
    const gguf_kv *kv = find_arr(f, key);
    if (!kv || (want_type >= 0 && kv->arr_type != want_type)) return -1;
    return (int64_t)kv->arr_len;
}
