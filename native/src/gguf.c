/*
 * gguf.c - the GGUF v2/v3 reader declared in gguf.h: open/parse/close and gguf_get_arr_str
 * (the other getters are in gguf_get.c). Any failure is EDGEVLM_ERR_FORMAT with a
 * message saying what and where, e.g. "tensor 'blk.3.attn_q.weight': data [offset 1234, 8192
 * bytes] runs past the end of the file (size 5000)". Checked, in file order:
 *   header     magic "GGUF"; version 2 or 3 (one layout); a byte-swapped version is a
 *              big-endian file: refused. n_kv, n_tensors <= GGUF_MAX_COUNT and within what
 *              the remaining bytes could hold (a pair takes >= 14 bytes, a tensor info >= 25),
 *              checked before anything is allocated.
 *   key/value  keys 1..65535 bytes (the spec's limit), unique; value types 0..12; strings and
 *              arrays inside the file. Arrays of arrays are walked (>= 12 bytes per element,
 *              so linear in the file size) up to GGUF_MAX_DEPTH levels; getters treat them as
 *              opaque. Any non-zero bool byte is true.
 *   alignment  general.alignment: any integer type, a power of two in 1..2^30 (default 32).
 *   tensors    names 1..65535 bytes, unique; n_dims 0..4 (0: a scalar); each ne >= 0 and the
 *              product of the non-zero dims fits in int64, so no partial product overflows.
 *              A 0 dim is accepted, as ggml does (0 elements, 0 bytes). ne[0] a multiple of
 *              the block size; bytes fit in int64; offset aligned; data inside the file;
 *              tensors with data do not overlap (order and gaps are free).
 *   types      every ggml type id with a known block layout is sized and bounds-checked (Q4_K
 *              files parse too); whether edgevlm runs a type is the loader's call
 *              (ev_type_get). An id this table does not know (0..2^31-1) parses with
 *              nbytes 0 and data NULL (the "unsupported" mark); only its offset is checked.
 * gguf_kv data/nbytes: a string's characters (no length); an array's elements from the first
 * (a nested array element starts at its own 4-byte type).
 * String arrays get an index at parse time (a uint64 offset per element; each element takes
 * >= 8 bytes, so the index is at most the file's size): gguf_get_arr_str is O(1). gguf.h has
 * no field for it, so the pointers live in a hidden tail of the kv allocation: f->kv is
 * [n_kv gguf_kv][n_kv const uint64_t *]. Only gguf_parse/gguf_open build kv arrays.
 * Tensor data is aligned only if the buffer is (a mapped file always is).
 */
#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_DEFAULT_ALIGNMENT 32u
#define GGUF_MAX_ALIGNMENT (1ull << 30)
#define GGUF_MAX_COUNT (1ull << 20)     /* n_kv and n_tensors; real models have < 10^4 */
#define GGUF_MAX_NAME 65535u           /* key and tensor name bytes */
#define GGUF_MAX_DEPTH 8               /* array nesting levels, the outermost array included */
#define GGUF_MIN_KV_BYTES 14u          /* key length 8 + key >= 1 + type 4 + value >= 1 */
#define GGUF_MIN_TI_BYTES 25u          /* name len 8 + name >= 1 + n_dims 4 + type 4 + offset 8 */
#define GGUF_N_VALUE_TYPES 13

static const uint8_t value_size[GGUF_N_VALUE_TYPES] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
static const char *const value_name[GGUF_N_VALUE_TYPES] = {
    "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32", "bool", "string", "array",
    "uint64", "int64", "float64"};

/* ggml's block layouts {elements per block, bytes per block}, by type id; {0, 0} = unknown
 * (ids ggml retired, e.g. 4, 5, 31-33, 36-38). Q8_1 follows ggml's C struct (36 bytes). */
static const struct { uint16_t blck, size; } ggml_layout[] = {
    [0] = {1, 4},      [1] = {1, 2},      [2] = {32, 18},    [3] = {32, 20},
    [6] = {32, 22},    [7] = {32, 24},    [8] = {32, 34},    [9] = {32, 36},
    [10] = {256, 84},  [11] = {256, 110}, [12] = {256, 144}, [13] = {256, 176},
    [14] = {256, 210}, [15] = {256, 292}, [16] = {256, 66},  [17] = {256, 74},
    [18] = {256, 98},  [19] = {256, 50},  [20] = {32, 18},   [21] = {256, 110},
    [22] = {256, 82},  [23] = {256, 136}, [24] = {1, 1},     [25] = {1, 2},
    [26] = {1, 4},     [27] = {1, 8},     [28] = {1, 8},     [29] = {256, 56},
    [30] = {1, 2},     [34] = {256, 54},  [35] = {256, 66},  [39] = {32, 17},
    [40] = {64, 36},   [41] = {128, 18},
};
#define GGML_N_LAYOUTS ((int32_t)(sizeof(ggml_layout) / sizeof(ggml_layout[0])))

typedef unsigned long long ull;

typedef struct reader {
    const uint8_t *p;
    size_t size, pos;
    char *err;
    size_t err_len;
    char where[128];               /* "kv 3 'general.name'", prefixed to messages */
    int nomem;                     /* the failure was an allocation, not the file */
} reader;

static uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t le64(const uint8_t *p) { return le32(p) | (uint64_t)le32(p + 4) << 32; }
static int64_t as_i64(uint64_t u) { return u <= INT64_MAX ? (int64_t)u : -(int64_t)~u - 1; }

static int fail(reader *r, const char *fmt, ...) {
    if (r->err && r->err_len) {
        int n = snprintf(r->err, r->err_len, "%s%s", r->where, r->where[0] ? ": " : "");
        if (n >= 0 && (size_t)n < r->err_len) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(r->err + n, r->err_len - (size_t)n, fmt, ap);
            va_end(ap);
        }
    }
    return 0;
}

/* A printable, shortened copy of a name for messages. */
static void quote_name(char *dst, size_t cap, const char *s, uint64_t len) {
    size_t n = 0, max = cap > 4 ? cap - 4 : 0;
    uint64_t i = 0;
    for (; i < len && n < max; i++) {
        unsigned char c = (unsigned char)s[i];
        dst[n++] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
    }
    if (i < len) { while (n < cap - 1 && n < max + 3) dst[n++] = '.'; }
    dst[n] = 0;
}

static int need(reader *r, uint64_t n, const char *what) {
    if (n > r->size - r->pos)
        return fail(r, "%s at offset %zu needs %llu bytes, but the file ends at %zu", what,
                    r->pos, (ull)n, r->size);
    return 1;
}

static int rd_u32(reader *r, uint32_t *v, const char *what) {
    if (!need(r, 4, what)) return 0;
    *v = le32(r->p + r->pos);
    r->pos += 4;
    return 1;
}

static int rd_u64(reader *r, uint64_t *v, const char *what) {
    if (!need(r, 8, what)) return 0;
    *v = le64(r->p + r->pos);
    r->pos += 8;
    return 1;
}

static int rd_str(reader *r, gguf_str *s, const char *what) {
    size_t at = r->pos;
    uint64_t len;
    if (!rd_u64(r, &len, what)) return 0;
    if (len > r->size - r->pos)
        return fail(r, "%s of %llu bytes (length at offset %zu) runs past the end of the file "
                    "(size %zu)", what, (ull)len, at, r->size);
    s->ptr = (const char *)r->p + r->pos;
    s->len = len;
    r->pos += len;
    return 1;
}

/* Checks that n elements of elem_min bytes each could fit in what is left of the file. */
static int fits(reader *r, uint64_t n, uint64_t elem_min, size_t at, const char *what) {
    if (n > (r->size - r->pos) / elem_min)
        return fail(r, "%s count %llu at offset %zu is impossible: the remaining %zu bytes hold "
                    "at most %llu", what, (ull)n, at, r->size - r->pos,
                    (ull)((r->size - r->pos) / elem_min));
    return 1;
}

static int skip_array(reader *r, int depth, uint64_t **idx_out);

/* Skips one value of a known type. */
static int skip_value(reader *r, uint32_t type, int depth) {
    gguf_str s;
    if (type == GGUF_T_STRING) return rd_str(r, &s, "string");
    if (type == GGUF_T_ARRAY) return skip_array(r, depth + 1, NULL);
    if (!need(r, value_size[type], value_name[type])) return 0;
    r->pos += value_size[type];
    return 1;
}

static int oom(reader *r, const char *what) {
    r->nomem = 1;
    return fail(r, "out of memory for %s", what);
}

/* Reads an array header + elements at depth (1 = a kv's own array). For a string array and
 * idx_out != NULL, *idx_out gets each element's offset from the first element (malloc'd). */
static int skip_array(reader *r, int depth, uint64_t **idx_out) {
    uint32_t type;
    uint64_t len;
    size_t at = r->pos;
    if (depth > GGUF_MAX_DEPTH)
        return fail(r, "arrays nested deeper than %d levels at offset %zu", GGUF_MAX_DEPTH, at);
    if (!rd_u32(r, &type, "array element type") || !rd_u64(r, &len, "array length")) return 0;
    if (type >= GGUF_N_VALUE_TYPES)
        return fail(r, "unknown array element type %u at offset %zu", type, at);
    if (type == GGUF_T_STRING || type == GGUF_T_ARRAY) {
        if (!fits(r, len, type == GGUF_T_STRING ? 8 : 12, at + 4, "array element")) return 0;
        size_t start = r->pos;
        uint64_t *idx = NULL;
        if (type == GGUF_T_STRING && idx_out && len) {
            idx = malloc((size_t)len * sizeof(uint64_t));
            if (!idx) return oom(r, "a string array index");
        }
        for (uint64_t i = 0; i < len; i++) {
            if (idx) idx[i] = r->pos - start;
            if (!skip_value(r, type, depth)) { free(idx); return 0; }
        }
        if (idx_out) *idx_out = idx;
        return 1;
    }
    if (!fits(r, len, value_size[type], at + 4, "array element")) return 0;
    r->pos += (size_t)len * value_size[type];
    return 1;
}

static const uint64_t **str_index_of(const gguf_file *f) {
    return (const uint64_t **)(void *)(f->kv + f->n_kv);
}

typedef struct name_ref { const char *ptr; uint64_t len; int64_t idx; } name_ref;

static int cmp_name(const void *a, const void *b) {
    const name_ref *x = a, *y = b;
    uint64_t n = x->len < y->len ? x->len : y->len;
    int c = n ? memcmp(x->ptr, y->ptr, (size_t)n) : 0;
    if (c) return c;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* Sorts the n names (key or tensor name of each entry) and reports the first duplicate. */
static int check_unique(reader *r, const gguf_file *f, int tensors) {
    int64_t n = tensors ? f->n_tensors : f->n_kv;
    const char *what = tensors ? "tensor name" : "key", *label = tensors ? "tensor" : "kv";
    name_ref *refs = malloc((size_t)n * sizeof(*refs) + 1);
    if (!refs) return oom(r, "the name check");
    for (int64_t i = 0; i < n; i++) {
        gguf_str s = tensors ? f->tensors[i].name : f->kv[i].key;
        refs[i] = (name_ref){s.ptr, s.len, i};
    }
    qsort(refs, (size_t)n, sizeof(*refs), cmp_name);
    r->where[0] = 0;
    for (int64_t i = 1; i < n; i++) {
        if (refs[i].len == refs[i - 1].len && !memcmp(refs[i].ptr, refs[i - 1].ptr, refs[i].len)) {
            char q[80];
            quote_name(q, sizeof q, refs[i].ptr, refs[i].len);
            fail(r, "duplicate %s '%s' (%s %lld and %s %lld)", what, q, label,
                 (long long)refs[i - 1].idx, label, (long long)refs[i].idx);
            free(refs);
            return 0;
        }
    }
    free(refs);
    return 1;
}

static int read_kvs(gguf_file *f, reader *r) {
    const uint64_t **sidx = (const uint64_t **)str_index_of(f);
    for (int64_t i = 0; i < f->n_kv; i++) {
        gguf_kv *kv = &f->kv[i];
        uint32_t type;
        char q[80];
        snprintf(r->where, sizeof r->where, "kv %lld", (long long)i);
        if (!rd_str(r, &kv->key, "key")) return 0;
        if (kv->key.len == 0 || kv->key.len > GGUF_MAX_NAME)
            return fail(r, "key length %llu at offset %zu is not in 1..%u", (ull)kv->key.len,
                        r->pos - kv->key.len - 8, GGUF_MAX_NAME);
        quote_name(q, sizeof q, kv->key.ptr, kv->key.len);
        snprintf(r->where, sizeof r->where, "kv %lld '%s'", (long long)i, q);
        size_t at = r->pos;
        if (!rd_u32(r, &type, "value type")) return 0;
        if (type >= GGUF_N_VALUE_TYPES)
            return fail(r, "unknown value type %u at offset %zu", type, at);
        kv->type = (int32_t)type;
        if (type == GGUF_T_STRING) {
            gguf_str s;
            if (!rd_str(r, &s, "string value")) return 0;
            kv->data = (const uint8_t *)s.ptr;
            kv->nbytes = s.len;
        } else if (type == GGUF_T_ARRAY) {
            uint64_t *idx = NULL;
            if (!skip_array(r, 1, &idx)) return 0;
            sidx[i] = idx;
            kv->arr_type = (int32_t)le32(r->p + at + 4);
            kv->arr_len = le64(r->p + at + 8);
            kv->data = r->p + at + 16;
            kv->nbytes = r->pos - (at + 16);
        } else {
            kv->data = r->p + r->pos;
            kv->nbytes = value_size[type];
            if (!skip_value(r, type, 0)) return 0;
        }
    }
    return check_unique(r, f, 0);
}

static int read_alignment(gguf_file *f, reader *r) {
    const gguf_kv *kv = gguf_find_kv(f, "general.alignment");
    int64_t a;
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    if (!kv) return 1;
    snprintf(r->where, sizeof r->where, "general.alignment");
    if (!gguf_get_i64(f, "general.alignment", &a))
        return fail(r, "must be an integer power of two in 1..%llu (it is a %s)",
                    (ull)GGUF_MAX_ALIGNMENT, value_name[kv->type]);
    if (a <= 0 || (uint64_t)a > GGUF_MAX_ALIGNMENT || (a & (a - 1)))
        return fail(r, "%lld is not a power of two in 1..%llu", (long long)a,
                    (ull)GGUF_MAX_ALIGNMENT);
    f->alignment = (uint64_t)a;
    r->where[0] = 0;
    return 1;
}

/* Reads one tensor info; sizes it; data is placed later. */
static int read_tensor_info(reader *r, int64_t i, gguf_tensor *t) {
    uint32_t n_dims, type;
    snprintf(r->where, sizeof r->where, "tensor %lld", (long long)i);
    if (!rd_str(r, &t->name, "name")) return 0;
    if (t->name.len == 0 || t->name.len > GGUF_MAX_NAME)
        return fail(r, "name length %llu is not in 1..%u", (ull)t->name.len, GGUF_MAX_NAME);
    char q[80];
    quote_name(q, sizeof q, t->name.ptr, t->name.len);
    snprintf(r->where, sizeof r->where, "tensor '%s'", q);
    size_t at = r->pos;
    if (!rd_u32(r, &n_dims, "n_dims")) return 0;
    if (n_dims > GGUF_MAX_DIMS)
        return fail(r, "n_dims %u at offset %zu is more than %d", n_dims, at, GGUF_MAX_DIMS);
    t->n_dims = (int32_t)n_dims;
    int64_t prod = 1, nelem = 1;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) {
        uint64_t ne = 1;
        at = r->pos;
        if ((uint32_t)d < n_dims && !rd_u64(r, &ne, "dimension")) return 0;
        if (ne > INT64_MAX)
            return fail(r, "dimension %d (%lld) at offset %zu is negative", d,
                        (long long)as_i64(ne), at);
        t->ne[d] = (int64_t)ne;
        if (ne == 0) { nelem = 0; continue; }
        if ((int64_t)ne > INT64_MAX / prod)
            return fail(r, "dimension %d (%lld) makes the element count overflow int64", d,
                        (long long)ne);
        prod *= (int64_t)ne;
    }
    if (nelem) nelem = prod;
    at = r->pos;
    if (!rd_u32(r, &type, "type") || !rd_u64(r, &t->offset, "data offset")) return 0;
    if (type > INT32_MAX)   /* gguf_tensor.type is an int32, as ggml's enum */
        return fail(r, "type id %u at offset %zu is not a ggml type id", type, at);
    t->type = (int32_t)type;
    t->nbytes = 0;
    if (type < (uint32_t)GGML_N_LAYOUTS && ggml_layout[type].blck) {
        int64_t blck = ggml_layout[type].blck, size = ggml_layout[type].size;
        if (t->ne[0] % blck)
            return fail(r, "row of %lld elements is not a multiple of the block size %lld of "
                        "type %u", (long long)t->ne[0], (long long)blck, type);
        if (nelem / blck > INT64_MAX / size)
            return fail(r, "%lld elements of type %u overflow int64 bytes", (long long)nelem,
                        type);
        t->nbytes = (uint64_t)(nelem / blck * size);
    }
    return 1;
}

typedef struct span { uint64_t start, end; int64_t idx; } span;

static int cmp_span(const void *a, const void *b) {
    const span *x = a, *y = b;
    if (x->start != y->start) return x->start < y->start ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

static int place_tensors(gguf_file *f, reader *r) {
    uint64_t avail = f->size - f->data_offset;
    int64_t n_spans = 0;
    int ok = 1;
    span *spans = malloc((size_t)f->n_tensors * sizeof(*spans) + 1);
    if (!spans) return oom(r, "the overlap check");
    for (int64_t i = 0; ok && i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        int known = t->type >= 0 && t->type < GGML_N_LAYOUTS && ggml_layout[t->type].blck;
        char q[80];
        quote_name(q, sizeof q, t->name.ptr, t->name.len);
        snprintf(r->where, sizeof r->where, "tensor '%s'", q);
        if (t->offset % f->alignment)
            ok = fail(r, "data offset %llu is not a multiple of the alignment %llu",
                      (ull)t->offset, (ull)f->alignment);
        else if (t->offset > avail)
            ok = fail(r, "data offset %llu (from the data section at %llu) is past the end of "
                      "the file (size %zu)", (ull)t->offset, (ull)f->data_offset, f->size);
        else if (t->nbytes > avail - t->offset)
            ok = fail(r, "data [offset %llu, %llu bytes] runs past the end of the file "
                      "(size %zu)", (ull)(f->data_offset + t->offset), (ull)t->nbytes, f->size);
        if (!ok) break;
        t->data = known ? f->base + f->data_offset + t->offset : NULL;
        if (t->nbytes) spans[n_spans++] = (span){t->offset, t->offset + t->nbytes, i};
    }
    if (ok) {
        r->where[0] = 0;
        qsort(spans, (size_t)n_spans, sizeof(*spans), cmp_span);
    }
    for (int64_t i = 1; ok && i < n_spans; i++) {
        if (spans[i].start < spans[i - 1].end) {
            const gguf_tensor *a = &f->tensors[spans[i - 1].idx], *b = &f->tensors[spans[i].idx];
            char qa[80], qb[80];
            quote_name(qa, sizeof qa, a->name.ptr, a->name.len);
            quote_name(qb, sizeof qb, b->name.ptr, b->name.len);
            ok = fail(r, "tensor '%s': data [offset %llu, %llu bytes] overlaps tensor '%s' "
                      "[offset %llu, %llu bytes]", qb, (ull)(f->data_offset + b->offset),
                      (ull)b->nbytes, qa, (ull)(f->data_offset + a->offset), (ull)a->nbytes);
        }
    }
    free(spans);
    return ok;
}

static int parse_file(gguf_file *f, reader *r) {
    uint32_t version;
    uint64_t n_tensors, n_kv;
    if (f->size < 4) return fail(r, "file of %zu bytes is too small to be GGUF", f->size);
    if (memcmp(f->base, "GGUF", 4))
        return fail(r, "not a GGUF file: magic at offset 0 is %02x %02x %02x %02x, not "
                    "\"GGUF\"", f->base[0], f->base[1], f->base[2], f->base[3]);
    r->pos = 4;
    if (!rd_u32(r, &version, "version")) return 0;
    if (version && !(version & 0xffff))
        return fail(r, "big-endian GGUF (version field 0x%08x at offset 4) is not supported",
                    version);
    if (version != 2 && version != 3)
        return fail(r, "GGUF version %u at offset 4 is not supported (only 2 and 3)", version);
    f->version = version;
    if (!rd_u64(r, &n_tensors, "tensor count") || !rd_u64(r, &n_kv, "key/value count"))
        return 0;
    if (n_tensors > GGUF_MAX_COUNT)
        return fail(r, "tensor count %llu at offset 8 is more than the limit %llu",
                    (ull)n_tensors, (ull)GGUF_MAX_COUNT);
    if (n_kv > GGUF_MAX_COUNT)
        return fail(r, "key/value count %llu at offset 16 is more than the limit %llu",
                    (ull)n_kv, (ull)GGUF_MAX_COUNT);
    uint64_t min_bytes = n_kv * GGUF_MIN_KV_BYTES + n_tensors * GGUF_MIN_TI_BYTES;
    if (min_bytes > f->size - r->pos)
        return fail(r, "%llu tensors and %llu key/value pairs (counts at offset 8) need at "
                    "least %llu bytes, but only %zu remain", (ull)n_tensors, (ull)n_kv,
                    (ull)min_bytes, f->size - r->pos);
    f->kv = calloc((size_t)n_kv + 1, sizeof(gguf_kv) + sizeof(uint64_t *));
    f->tensors = calloc((size_t)n_tensors + 1, sizeof(gguf_tensor));
    if (!f->kv || !f->tensors) return oom(r, "the key/value and tensor tables");
    f->n_kv = (int64_t)n_kv;
    if (!read_kvs(f, r) || !read_alignment(f, r)) return 0;
    f->n_tensors = (int64_t)n_tensors;
    for (int64_t i = 0; i < f->n_tensors; i++)
        if (!read_tensor_info(r, i, &f->tensors[i])) return 0;
    if (!check_unique(r, f, 1)) return 0;
    /* the data section starts at the next multiple of the alignment */
    uint64_t pad = (f->alignment - r->pos % f->alignment) % f->alignment;
    f->data_offset = r->pos + pad;
    if (f->data_offset > f->size) {
        if (f->n_tensors)
            return fail(r, "data section (at offset %llu, after %llu bytes of padding) starts "
                        "past the end of the file (size %zu)", (ull)f->data_offset, (ull)pad,
                        f->size);
        f->data_offset = f->size;  /* no tensors: the trailing padding may be left out */
    }
    return place_tensors(f, r);
}

static edgevlm_status parse_status(gguf_file *f, reader *r) {
    if (parse_file(f, r)) return EDGEVLM_OK;
    return r->nomem ? EDGEVLM_ERR_NOMEM : EDGEVLM_ERR_FORMAT;
}

static void init_out(gguf_file *out, char *err, size_t err_len) {
    memset(out, 0, sizeof(*out));
    if (err && err_len) err[0] = 0;
}

edgevlm_status gguf_parse(const void *data, size_t size, gguf_file *out, char *err,
                          size_t err_len) {
    if (!out) return EDGEVLM_ERR_ARGUMENT;
    init_out(out, err, err_len);
    reader r = {.p = data, .size = size, .err = err, .err_len = err_len};
    if (!data) {
        fail(&r, "no buffer");
        return EDGEVLM_ERR_ARGUMENT;
    }
    out->base = data;
    out->size = size;
    edgevlm_status st = parse_status(out, &r);
    if (st != EDGEVLM_OK) gguf_close(out);
    return st;
}

edgevlm_status gguf_open(const char *path, gguf_file *out, char *err, size_t err_len) {
    char msg[512] = "";
    edgevlm_status st = EDGEVLM_ERR_IO;
    struct stat sb;
    if (!out) return EDGEVLM_ERR_ARGUMENT;
    init_out(out, err, err_len);
    if (!path) {
        if (err && err_len) snprintf(err, err_len, "no path");
        return EDGEVLM_ERR_ARGUMENT;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(msg, sizeof msg, "cannot open: %s", strerror(errno));
    } else if (fstat(fd, &sb) != 0) {
        snprintf(msg, sizeof msg, "cannot stat: %s", strerror(errno));
    } else if (!S_ISREG(sb.st_mode)) {
        snprintf(msg, sizeof msg, "not a regular file");
    } else if ((uint64_t)sb.st_size > SIZE_MAX) {
        snprintf(msg, sizeof msg, "%lld bytes is too large to map", (long long)sb.st_size);
    } else if (sb.st_size == 0) {
        snprintf(msg, sizeof msg, "empty file, not GGUF");
        st = EDGEVLM_ERR_FORMAT;
    } else {
        void *map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            snprintf(msg, sizeof msg, "cannot map %lld bytes: %s", (long long)sb.st_size,
                     strerror(errno));
        } else {
            reader r = {.p = map, .size = (size_t)sb.st_size, .err = msg, .err_len = sizeof msg};
            out->base = map;
            out->size = (size_t)sb.st_size;
            out->owns_map = 1;
            st = parse_status(out, &r);
        }
    }
    if (fd >= 0) close(fd);
    if (st != EDGEVLM_OK) {
        if (err && err_len) snprintf(err, err_len, "%s: %s", path, msg);
        gguf_close(out);
    }
    return st;
}

void gguf_close(gguf_file *f) {
    if (!f) return;
    if (f->kv) {
        const uint64_t **sidx = str_index_of(f);
        for (int64_t i = 0; i < f->n_kv; i++) free((void *)sidx[i]);
        free(f->kv);
    }
    free(f->tensors);
    if (f->owns_map && f->base) munmap((void *)f->base, f->size);
    memset(f, 0, sizeof(*f));
}

/* The one getter that needs the hidden string index; the others are in gguf_get.c. */
int gguf_get_arr_str(const gguf_file *f, const char *key, int64_t i, gguf_str *out) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv || kv->type != GGUF_T_ARRAY || kv->arr_type != GGUF_T_STRING || i < 0 ||
        (uint64_t)i >= kv->arr_len)
        return 0;
    const uint64_t *idx = str_index_of(f)[kv - f->kv];
    if (!idx) return 0;
    const uint8_t *p = kv->data + idx[i];
    if (out) *out = (gguf_str){(const char *)p + 8, le64(p)};
    return 1;
}
