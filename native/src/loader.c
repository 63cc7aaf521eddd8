/*
 * loader.c - the family-independent part of loading a GGUF model: metadata with defaults and
 * checked tensor views (loader.h).
 */
#include "loader.h"

#include <string.h>

#include "types.h"
#include "util.h"

int64_t ev_meta_i64(const gguf_file *f, const char *key, int64_t dflt) {
    int64_t v;
    return gguf_get_i64(f, key, &v) ? v : dflt;
}

float ev_meta_f32(const gguf_file *f, const char *key, float dflt) {
    float v;
    return gguf_get_f32(f, key, &v) ? v : dflt;
}

/* 1 when data lies where the kernels may read it as the type's C type: float32 values at a
 * multiple of 4, float16/bfloat16 values and blocks (whose widest field is a float16 scale;
 * every block size is even, so every row starts aligned too) at a multiple of 2. The reader
 * places data at the file's general.alignment, which may be 1 or 2: a file written so would
 * otherwise be read through misaligned pointers (undefined behaviour: UBSan in fuzz_gguf). */
static int check_aligned(ev_loader *L, const char *name, int32_t type, const void *data) {
    const uintptr_t need = type == EV_TYPE_F32 ? _Alignof(float) : _Alignof(ev_fp16);
    if ((uintptr_t)data % need == 0) return 1;
    ev_errf(L->err, L->err_len, "%s file: tensor '%s' data at offset %llu is not %u-byte "
            "aligned (general.alignment %llu); edgevlm reads tensors in place: write the file "
            "with the default alignment (32)", L->file_label, name,
            (unsigned long long)((const uint8_t *)data - L->f->base), (unsigned)need,
            (unsigned long long)L->f->alignment);
    return 0;
}

int ev_load_tensor(ev_loader *L, ev_tensor *out, const char *name, int64_t ne0, int64_t ne1,
                   int optional) {
    memset(out, 0, sizeof *out);
    const gguf_tensor *t = gguf_find_tensor(L->f, name);
    if (!t) {
        if (optional) return 1;
        ev_errf(L->err, L->err_len, "%s file: tensor '%s' is missing", L->file_label, name);
        return 0;
    }
    int is_matrix = ne1 >= 0;
    int64_t want1 = is_matrix ? ne1 : 1;
    if (t->ne[0] != ne0 || t->ne[1] != want1 || t->ne[2] != 1 || t->ne[3] != 1) {
        ev_errf(L->err, L->err_len,
                "%s file: tensor '%s' has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld]",
                L->file_label, name, (long long)t->ne[0], (long long)t->ne[1],
                (long long)t->ne[2], (long long)t->ne[3], (long long)ne0, (long long)want1);
        return 0;
    }
    const ev_type_traits *tr = ev_type_get(t->type);
    if (!tr || (!is_matrix && t->type != EV_TYPE_F32)) {
        char types[160];
        ev_errf(L->err, L->err_len, "%s file: tensor '%s' has type %d, which edgevlm does not "
                "support here (matrices: %s; vectors: F32)", L->file_label, name, (int)t->type,
                ev_type_list(types, sizeof types));
        return 0;
    }
    if (is_matrix && ne0 % tr->block_size != 0) {
        ev_errf(L->err, L->err_len, "%s file: tensor '%s' rows of %lld values are not a "
                "multiple of the %s block size %d", L->file_label, name, (long long)ne0,
                tr->name, tr->block_size);
        return 0;
    }
    if (!is_matrix && !check_aligned(L, name, t->type, t->data)) return 0;
    if (is_matrix && !ev_load_check_scales(L, name, t->type, t->data, want1, ne0)) return 0;
    out->data = t->data;
    out->type = t->type;
    for (int i = 0; i < 4; i++) out->ne[i] = t->ne[i];
    return 1;
}

int ev_load_check_scales(ev_loader *L, const char *name, int32_t type, const void *data,
                         int64_t n_rows, int64_t row_len) {
    if (!check_aligned(L, name, type, data)) return 0;
    const ev_type_traits *tr = ev_type_get(type);
    const int64_t per_row = row_len / tr->block_size;
    const int64_t bad = ev_first_nonfinite_scale(type, data, per_row * n_rows);
    if (bad < 0) return 1;
    char upper[16];
    size_t i = 0;
    for (; tr->name[i] && i + 1 < sizeof upper; i++)
        upper[i] = (char)(tr->name[i] >= 'a' && tr->name[i] <= 'z' ? tr->name[i] - 'a' + 'A' : tr->name[i]);
    upper[i] = '\0';
    ev_errf(L->err, L->err_len, "%s file: tensor '%s' (%s) has a NaN or infinite scale in "
            "block %lld of row %lld: the file is damaged", L->file_label, name, upper,
            (long long)(bad % per_row), (long long)(bad / per_row));
    return 0;
}

int ev_load_positive(ev_loader *L, const char *what, int64_t v, int64_t max) {
    if (v < 1 || v > max) {
        ev_errf(L->err, L->err_len, "%s file: %s = %lld is out of range [1, %lld]",
                L->file_label, what, (long long)v, (long long)max);
        return 0;
    }
    return 1;
}
