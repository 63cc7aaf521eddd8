/* fuzz_gguf.c - libFuzzer harness of the GGUF reader: parse any bytes, then call every getter
 * on every key and tensor of what parsed, then close. Built by `make -C native fuzz`
 * (clang, -fsanitize=fuzzer,address,undefined). Besides the sanitizers' own checks it traps
 * when the reader breaks a promise of gguf.h: a failure without a message, a tensor outside
 * the buffer or misaligned, a lookup that does not find what was parsed. */
#include <stdint.h>
#include <string.h>

#include "gguf.h"
#include "model_files.h"

/* Lets the harness link with gguf.c + api_meta.c alone; model.c's definition wins otherwise. */
__attribute__((weak)) const gguf_file *ev_model_file(const edgevlm_model *m, int which) {
    (void)m;
    (void)which;
    return NULL;
}

#define REQUIRE(c) do { if (!(c)) __builtin_trap(); } while (0)

static volatile uint64_t sink;

static void exercise_key(const gguf_file *f, const gguf_kv *kv, const char *key) {
    int64_t i64, ints[8];
    float f32, floats[8];
    int b, bools[8];
    gguf_str s;
    char buf[16];
    REQUIRE(gguf_find_kv(f, key) == kv);
    sink += (uint64_t)gguf_get_i64(f, key, &i64) + (uint64_t)gguf_get_f32(f, key, &f32);
    sink += (uint64_t)gguf_get_bool(f, key, &b);
    if (gguf_get_str(f, key, &s)) {
        REQUIRE(s.len == kv->nbytes && (const uint8_t *)s.ptr >= f->base &&
                s.len <= (uint64_t)(f->base + f->size - (const uint8_t *)s.ptr));
        sink += s.len ? (uint8_t)s.ptr[s.len - 1] : 0;
    }
    sink += (uint64_t)gguf_get_arr_i64(f, key, ints, 8);
    sink += (uint64_t)gguf_get_arr_f32(f, key, floats, 8);
    sink += (uint64_t)gguf_get_arr_bool(f, key, bools, 8) + (uint64_t)gguf_arr_len(f, key, -1);
    int64_t n = gguf_arr_len(f, key, GGUF_T_STRING);
    REQUIRE(n < 0 || (uint64_t)n == kv->arr_len);
    for (int64_t i = 0; i < n; i++) {
        REQUIRE(gguf_get_arr_str(f, key, i, &s));
        const uint8_t *p = (const uint8_t *)s.ptr;
        REQUIRE(p >= f->base && s.len <= (uint64_t)(f->base + f->size - p));
        sink += s.len ? (uint8_t)s.ptr[s.len - 1] : 0;
    }
    REQUIRE(!gguf_get_arr_str(f, key, n < 0 ? 0 : n, &s));
    sink += (uint64_t)ev_meta_str(f, key, buf, sizeof buf) + (uint64_t)ev_meta_arr_len(f, key);
    sink += (uint64_t)ev_meta_arr_str(f, key, 0, buf, sizeof buf);
    sink += (uint64_t)ev_meta_ints(f, key, ints, 8);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gguf_file f;
    char err[256], name[96];
    memset(err, 'x', sizeof err);
    edgevlm_status st = gguf_parse(data, size, &f, err, sizeof err);
    if (st != EDGEVLM_OK) {
        REQUIRE(st == EDGEVLM_ERR_FORMAT && memchr(err, 0, sizeof err) && err[0]);
        REQUIRE(f.kv == NULL && f.tensors == NULL);
        return 0;
    }
    REQUIRE(f.alignment && !(f.alignment & (f.alignment - 1)) && f.data_offset <= size);
    for (int64_t i = 0; i < f.n_kv; i++) {
        const gguf_kv *kv = &f.kv[i];
        REQUIRE(kv->data >= f.base && kv->nbytes <= (uint64_t)(f.base + size - kv->data));
        if (kv->key.len >= sizeof name || memchr(kv->key.ptr, 0, kv->key.len)) continue;
        memcpy(name, kv->key.ptr, kv->key.len);
        name[kv->key.len] = 0;
        exercise_key(&f, kv, name);
    }
    for (int64_t i = 0; i < f.n_tensors; i++) {
        const gguf_tensor *t = &f.tensors[i];
        REQUIRE(t->n_dims >= 0 && t->n_dims <= GGUF_MAX_DIMS && t->offset % f.alignment == 0);
        for (int d = 0; d < GGUF_MAX_DIMS; d++) REQUIRE(t->ne[d] >= 0);
        if (t->data) {
            const uint8_t *p = t->data;
            REQUIRE(p == f.base + f.data_offset + t->offset);
            REQUIRE(t->nbytes <= (uint64_t)(f.base + size - p));
            if (t->nbytes) sink += p[0] + p[t->nbytes - 1];
        } else {
            REQUIRE(t->nbytes == 0);
        }
        if (t->name.len < sizeof name && !memchr(t->name.ptr, 0, t->name.len)) {
            memcpy(name, t->name.ptr, t->name.len);
            name[t->name.len] = 0;
            REQUIRE(gguf_find_tensor(&f, name) == t);
        }
    }
    REQUIRE(!gguf_find_kv(&f, "") && !gguf_find_tensor(&f, ""));
    gguf_close(&f);
    return 0;
}
