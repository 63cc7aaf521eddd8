/* gguf_dump.c - prints a GGUF file's metadata and tensor table as JSON, through the reader in
 * src/gguf.c (tests/native/test_gguf_files.py compares it with what the Python gguf package
 * wrote). Build: cc -std=c11 -Iinclude -Isrc -o gguf_dump tests/gguf_dump.c src/gguf.c \
 *                   src/gguf_get.c
 * Usage: gguf_dump FILE  -> JSON on stdout, exit 0; a refused file -> {"error", "status"}, 1. */
#include <stdio.h>
#include <string.h>

#include "gguf.h"

static const char *const type_names[] = {"uint8", "int8", "uint16", "int16", "uint32", "int32",
                                         "float32", "bool", "string", "array", "uint64", "int64",
                                         "float64"};

static void json_str(const char *p, uint64_t n) {
    putchar('"');
    for (uint64_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c < 0x20) printf("\\u%04x", c);
        else putchar(c);
    }
    putchar('"');
}

static uint64_t rd(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* Prints one value of type t at p and returns its size in bytes. */
static uint64_t value(int32_t t, const uint8_t *p) {
    float f;
    double d;
    uint32_t u32;
    uint64_t u64, n, off;
    switch (t) {
    case GGUF_T_UINT8: printf("%u", p[0]); return 1;
    case GGUF_T_INT8: printf("%d", (int8_t)p[0]); return 1;
    case GGUF_T_UINT16: printf("%u", (unsigned)rd(p, 2)); return 2;
    case GGUF_T_INT16: printf("%d", (int16_t)rd(p, 2)); return 2;
    case GGUF_T_UINT32: printf("%u", (unsigned)rd(p, 4)); return 4;
    case GGUF_T_INT32: printf("%d", (int32_t)rd(p, 4)); return 4;
    case GGUF_T_UINT64: printf("%llu", (unsigned long long)rd(p, 8)); return 8;
    case GGUF_T_INT64: printf("%lld", (long long)(int64_t)rd(p, 8)); return 8;
    case GGUF_T_BOOL: printf(p[0] ? "true" : "false"); return 1;
    case GGUF_T_FLOAT32: u32 = (uint32_t)rd(p, 4); memcpy(&f, &u32, 4); printf("%.9g", f); return 4;
    case GGUF_T_FLOAT64: u64 = rd(p, 8); memcpy(&d, &u64, 8); printf("%.17g", d); return 8;
    case GGUF_T_STRING: n = rd(p, 8); json_str((const char *)p + 8, n); return 8 + n;
    case GGUF_T_ARRAY:  /* nested: element type, count, elements */
        t = (int32_t)rd(p, 4);
        n = rd(p + 4, 8);
        off = 12;
        putchar('[');
        for (uint64_t i = 0; i < n; i++) { if (i) putchar(','); off += value(t, p + off); }
        putchar(']');
        return off;
    }
    return 0;
}

int main(int argc, char **argv) {
    gguf_file f;
    char err[512];
    if (argc != 2) { fprintf(stderr, "usage: gguf_dump FILE\n"); return 2; }
    edgevlm_status st = gguf_open(argv[1], &f, err, sizeof err);
    if (st != EDGEVLM_OK) {
        printf("{\"status\": %d, \"error\": ", st);
        json_str(err, strlen(err));
        printf("}\n");
        return 1;
    }
    printf("{\"version\": %u, \"alignment\": %llu, \"data_offset\": %llu, \"kv\": [", f.version,
           (unsigned long long)f.alignment, (unsigned long long)f.data_offset);
    for (int64_t i = 0; i < f.n_kv; i++) {
        const gguf_kv *kv = &f.kv[i];
        printf("%s\n {\"key\": ", i ? "," : "");
        json_str(kv->key.ptr, kv->key.len);
        printf(", \"type\": \"%s\", \"value\": ", type_names[kv->type]);
        if (kv->type == GGUF_T_STRING) {
            json_str((const char *)kv->data, kv->nbytes);
        } else if (kv->type != GGUF_T_ARRAY) {
            value(kv->type, kv->data);
        } else {
            char key[256];   /* string elements go through the indexed getter */
            snprintf(key, sizeof key, "%.*s", (int)kv->key.len, kv->key.ptr);
            printf("[");
            uint64_t off = 0;
            for (uint64_t j = 0; j < kv->arr_len; j++) {
                gguf_str s;
                if (j) putchar(',');
                if (kv->arr_type != GGUF_T_STRING) off += value(kv->arr_type, kv->data + off);
                else if (gguf_get_arr_str(&f, key, (int64_t)j, &s)) json_str(s.ptr, s.len);
                else printf("null");
            }
            printf("], \"arr_type\": \"%s\", \"nbytes\": %llu", type_names[kv->arr_type],
                   (unsigned long long)kv->nbytes);
        }
        printf("}");
    }
    printf("],\n\"tensors\": [");
    for (int64_t i = 0; i < f.n_tensors; i++) {
        const gguf_tensor *t = &f.tensors[i];
        printf("%s\n {\"name\": ", i ? "," : "");
        json_str(t->name.ptr, t->name.len);
        printf(", \"n_dims\": %d, \"ne\": [%lld, %lld, %lld, %lld], \"type\": %d, "
               "\"offset\": %llu, \"nbytes\": %llu, \"data\": ", t->n_dims,
               (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3],
               t->type, (unsigned long long)t->offset, (unsigned long long)t->nbytes);
        if (!t->data) { printf("null}"); continue; }
        putchar('"');
        for (uint64_t j = 0; j < t->nbytes; j++) printf("%02x", ((const uint8_t *)t->data)[j]);
        printf("\"}");
    }
    printf("]}\n");
    gguf_close(&f);
    return 0;
}
