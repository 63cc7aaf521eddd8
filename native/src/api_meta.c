/*
 * api_meta.c - the metadata calls of edgevlm.h: read keys of a loaded model's GGUF files.
 *
 * The public calls pick the file with ev_model_file() and forward to the ev_meta_* functions,
 * which work on one parsed gguf_file (and are tested on their own in tests/test_gguf.c).
 * Integers: any integer type whose value fits in int64; booleans read as 0/1 here too, so
 * flags such as tokenizer.ggml.add_bos_token or clip.vision.is_deepstack_layers are reachable.
 */
#include <string.h>

#include "model_files.h"

static int64_t copy_str(gguf_str s, char *buf, size_t buf_len) {
    if (buf && buf_len) {
        size_t n = s.len < buf_len - 1 ? (size_t)s.len : buf_len - 1;
        if (n) memcpy(buf, s.ptr, n);
        buf[n] = 0;
    }
    return (int64_t)s.len;
}

int64_t ev_meta_str(const gguf_file *f, const char *key, char *buf, size_t buf_len) {
    gguf_str s;
    if (!gguf_get_str(f, key, &s)) return -1;
    return copy_str(s, buf, buf_len);
}

int64_t ev_meta_arr_len(const gguf_file *f, const char *key) {
    return gguf_arr_len(f, key, GGUF_T_STRING);
}

int64_t ev_meta_arr_str(const gguf_file *f, const char *key, int64_t index, char *buf,
                        size_t buf_len) {
    gguf_str s;
    if (!gguf_get_arr_str(f, key, index, &s)) return -1;
    return copy_str(s, buf, buf_len);
}

int64_t ev_meta_ints(const gguf_file *f, const char *key, int64_t *out, int64_t n) {
    int64_t v;
    int b;
    if (gguf_get_i64(f, key, &v) || (gguf_get_bool(f, key, &b) && ((v = b), 1))) {
        if (out && n > 0) out[0] = v;
        return 1;
    }
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (kv && kv->type == GGUF_T_ARRAY && kv->arr_type == GGUF_T_BOOL) {
        for (uint64_t i = 0; out && n > 0 && i < kv->arr_len && i < (uint64_t)n; i++)
            out[i] = kv->data[i] != 0;
        return (int64_t)kv->arr_len;
    }
    return gguf_get_arr_i64(f, key, out, n);
}

int64_t edgevlm_model_meta_str(const edgevlm_model *model, int32_t which, const char *key,
                               char *buf, size_t buf_len) {
    return ev_meta_str(ev_model_file(model, which), key, buf, buf_len);
}

int64_t edgevlm_model_meta_arr_len(const edgevlm_model *model, int32_t which, const char *key) {
    return ev_meta_arr_len(ev_model_file(model, which), key);
}

int64_t edgevlm_model_meta_arr_str(const edgevlm_model *model, int32_t which, const char *key,
                                   int64_t index, char *buf, size_t buf_len) {
    return ev_meta_arr_str(ev_model_file(model, which), key, index, buf, buf_len);
}

int64_t edgevlm_model_meta_ints(const edgevlm_model *model, int32_t which, const char *key,
                                int64_t *out, int64_t n) {
    return ev_meta_ints(ev_model_file(model, which), key, out, n);
}

int32_t edgevlm_model_meta_f64(const edgevlm_model *model, int32_t which, const char *key,
                               double *out) {
    const gguf_file *f = ev_model_file(model, which);
    float v;
    int64_t i;
    if (!f || !out) return 0;
    if (gguf_get_f32(f, key, &v)) { *out = v; return 1; }
    if (gguf_get_i64(f, key, &i)) { *out = (double)i; return 1; }
    return 0;
}
