/* test_gguf.c - the GGUF reader on files built byte by byte here: every value type, arrays
 * (nested, strings), tensors of each type, alignment; and every malformed case the reader must
 * refuse with EDGEVLM_ERR_FORMAT and a message (including every truncated prefix). Also the
 * loader's refusal of tensor data the alignment key leaves misaligned (loader.c). */
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include "gguf.h"
#include "loader.h"
#include "model_files.h"
#include "test_util.h"
#include "types.h"

/* Test-only accessor so this test also links without the model code (gguf.c + api_meta.c,
 * and loader.c + types.c for the alignment test); model.c's definition wins when the whole
 * core is linked. Only NULL models are
 * passed to the public calls here, which both definitions map to "no file". */
__attribute__((weak)) const gguf_file *ev_model_file(const edgevlm_model *m, int which) {
    (void)m;
    (void)which;
    return NULL;
}

/* ---- a tiny GGUF writer ---------------------------------------------------------------- */

typedef struct wbuf { uint8_t *p; size_t n, cap; } wbuf;

static void put(wbuf *b, const void *d, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        if (!b->p) { fprintf(stderr, "out of memory\n"); exit(2); }
    }
    if (n) memcpy(b->p + b->n, d, n);
    b->n += n;
}
static void u8(wbuf *b, uint8_t v) { put(b, &v, 1); }
static void u16(wbuf *b, uint16_t v) { u8(b, (uint8_t)v); u8(b, (uint8_t)(v >> 8)); }
static void u32(wbuf *b, uint32_t v) { u16(b, (uint16_t)v); u16(b, (uint16_t)(v >> 16)); }
static void u64(wbuf *b, uint64_t v) { u32(b, (uint32_t)v); u32(b, (uint32_t)(v >> 32)); }
static void f32(wbuf *b, float v) { uint32_t u; memcpy(&u, &v, 4); u32(b, u); }
static void f64(wbuf *b, double v) { uint64_t u; memcpy(&u, &v, 8); u64(b, u); }
static void str(wbuf *b, const char *s) { u64(b, strlen(s)); put(b, s, strlen(s)); }
static void header(wbuf *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    put(b, "GGUF", 4); u32(b, version); u64(b, n_tensors); u64(b, n_kv);
}
static void key(wbuf *b, const char *k, uint32_t type) { str(b, k); u32(b, type); }
static void kv_u32(wbuf *b, const char *k, uint32_t v) { key(b, k, GGUF_T_UINT32); u32(b, v); }
static void arr(wbuf *b, uint32_t type, uint64_t n) { u32(b, type); u64(b, n); }
static void tinfo(wbuf *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type,
                  uint64_t offset) {
    str(b, name); u32(b, n_dims);
    for (uint32_t i = 0; i < n_dims; i++) u64(b, ne[i]);
    u32(b, type); u64(b, offset);
}
static void pad_to(wbuf *b, size_t align) { while (b->n % align) u8(b, 0); }
static void fill(wbuf *b, size_t n, uint8_t seed) {
    for (size_t i = 0; i < n; i++) u8(b, (uint8_t)(seed + i * 7));
}

/* ---- helpers ----------------------------------------------------------------------------- */

static char err[512];

/* Parses a file that must be refused: FORMAT, a message containing want, a zeroed result. */
#define EXPECT_FORMAT(b, want) expect_format((b)->p, (b)->n, want, __LINE__)
static void expect_format(const uint8_t *p, size_t n, const char *want, int line) {
    gguf_file f;
    memset(err, 'x', sizeof err);
    edgevlm_status st = gguf_parse(p ? (const void *)p : "", n, &f, err, sizeof err);
    CHECK_MSG(st == EDGEVLM_ERR_FORMAT, "line %d: status %d (want FORMAT), err '%s'", line, st,
              err);
    CHECK_MSG(memchr(err, 0, sizeof err) && err[0], "line %d: no message", line);
    CHECK_MSG(!want || strstr(err, want), "line %d: message '%s' lacks '%s'", line, err, want);
    CHECK_MSG(f.kv == NULL && f.tensors == NULL && f.n_kv == 0, "line %d: result not reset", line);
}

static int parse_ok(const wbuf *b, gguf_file *f) {
    edgevlm_status st = gguf_parse(b->p, b->n, f, err, sizeof err);
    CHECK_MSG(st == EDGEVLM_OK, "status %d: %s", st, err);
    return st == EDGEVLM_OK;
}

static const uint64_t NE1[1] = {32};

/* A file with one kv of every value type, arrays of every kind and five tensors. The last
 * tensor's data ends the file, so every shorter prefix is malformed. */
static void rich_file(wbuf *b, uint32_t version) {
    header(b, version, 7, 22);
    key(b, "t.u8", GGUF_T_UINT8); u8(b, 200);
    key(b, "t.i8", GGUF_T_INT8); u8(b, (uint8_t)-100);
    key(b, "t.u16", GGUF_T_UINT16); u16(b, 60000);
    key(b, "t.i16", GGUF_T_INT16); u16(b, (uint16_t)-30000);
    kv_u32(b, "t.u32", 4000000000u);
    key(b, "t.i32", GGUF_T_INT32); u32(b, (uint32_t)-2000000000);
    key(b, "t.f32", GGUF_T_FLOAT32); f32(b, 1.5f);
    key(b, "t.bool", GGUF_T_BOOL); u8(b, 1);
    key(b, "t.str", GGUF_T_STRING); str(b, "hello");
    key(b, "t.u64", GGUF_T_UINT64); u64(b, (1ull << 63) + 5);
    key(b, "t.i64", GGUF_T_INT64); u64(b, (uint64_t)-5);
    key(b, "t.f64", GGUF_T_FLOAT64); f64(b, 0.25);
    key(b, "a.i32", GGUF_T_ARRAY); arr(b, GGUF_T_INT32, 3);
    u32(b, 1); u32(b, (uint32_t)-2); u32(b, 3);
    key(b, "a.f64", GGUF_T_ARRAY); arr(b, GGUF_T_FLOAT64, 2); f64(b, 0.5); f64(b, 1e300);
    key(b, "a.bool", GGUF_T_ARRAY); arr(b, GGUF_T_BOOL, 3); u8(b, 1); u8(b, 0); u8(b, 7);
    key(b, "a.u64", GGUF_T_ARRAY); arr(b, GGUF_T_UINT64, 2); u64(b, 7); u64(b, ~0ull);
    key(b, "a.str", GGUF_T_ARRAY); arr(b, GGUF_T_STRING, 3); str(b, "a"); str(b, "bc"); str(b, "");
    key(b, "a.nested", GGUF_T_ARRAY); arr(b, GGUF_T_ARRAY, 2);
    arr(b, GGUF_T_UINT8, 2); u8(b, 1); u8(b, 2);
    arr(b, GGUF_T_STRING, 1); str(b, "deep");
    key(b, "a.empty", GGUF_T_ARRAY); arr(b, GGUF_T_INT32, 0);
    key(b, "a.f32", GGUF_T_ARRAY); arr(b, GGUF_T_FLOAT32, 2); f32(b, 0.5f); f32(b, -2.0f);
    key(b, "t.strbig", GGUF_T_STRING); str(b, "a longer string value");
    kv_u32(b, "general.alignment", 64);
    /* tensors listed out of data order; one of a type edgevlm does not run (Q4_K = 12), one
     * of a type nobody knows (200), one with a zero dim */
    static const uint64_t f32ne[2] = {8, 2}, f16ne[1] = {16}, bf16ne[2] = {4, 4},
                          q8ne[2] = {64, 2}, q4ne[3] = {32, 3, 1}, q4kne[1] = {256},
                          zne[2] = {0, 5};
    tinfo(b, "w.q4_0", 3, q4ne, 2, 576);        /* 3 blocks x 18 = 54 bytes */
    tinfo(b, "w.f32", 2, f32ne, 0, 0);          /* 64 bytes */
    tinfo(b, "w.f16", 1, f16ne, 1, 64);         /* 32 */
    tinfo(b, "w.bf16", 2, bf16ne, 30, 128);     /* 32 */
    tinfo(b, "w.q8_0", 2, q8ne, 8, 192);        /* 4 x 34 = 136 */
    tinfo(b, "w.q4_k", 1, q4kne, 12, 384);      /* 144 */
    tinfo(b, "w.zero", 2, zne, 0, 576);         /* 0 bytes, shares an offset */
    pad_to(b, 64);
    fill(b, 576 + 54, 11);
}

/* ---- valid files --------------------------------------------------------------------------- */

static void test_every_value_type_reads_back(uint32_t version) {
    wbuf b = {0};
    gguf_file f;
    rich_file(&b, version);
    if (!parse_ok(&b, &f)) { free(b.p); return; }
    int64_t i;
    float x;
    int bo;
    gguf_str s;
    CHECK(f.version == version && f.n_kv == 22 && f.n_tensors == 7 && f.alignment == 64);
    CHECK(gguf_get_i64(&f, "t.u8", &i) && i == 200);
    CHECK(gguf_get_i64(&f, "t.i8", &i) && i == -100);
    CHECK(gguf_get_i64(&f, "t.u16", &i) && i == 60000);
    CHECK(gguf_get_i64(&f, "t.i16", &i) && i == -30000);
    CHECK(gguf_get_i64(&f, "t.u32", &i) && i == 4000000000LL);
    CHECK(gguf_get_i64(&f, "t.i32", &i) && i == -2000000000LL);
    CHECK(gguf_get_i64(&f, "t.i64", &i) && i == -5);
    CHECK(!gguf_get_i64(&f, "t.u64", &i));          /* 2^63 + 5 does not fit in int64 */
    CHECK(!gguf_get_i64(&f, "t.f32", &i) && !gguf_get_i64(&f, "t.bool", &i));
    CHECK(gguf_get_f32(&f, "t.f32", &x) && x == 1.5f);
    CHECK(gguf_get_f32(&f, "t.f64", &x) && x == 0.25f);
    CHECK(!gguf_get_f32(&f, "t.u8", &x) && !gguf_get_f32(&f, "nope", &x));
    CHECK(gguf_get_bool(&f, "t.bool", &bo) && bo == 1 && !gguf_get_bool(&f, "t.u8", &bo));
    CHECK(gguf_get_str(&f, "t.str", &s) && gguf_str_eq(s, "hello") && !gguf_str_eq(s, "hell"));
    CHECK(gguf_get_str(&f, "t.strbig", &s) && gguf_str_eq(s, "a longer string value"));
    CHECK(!gguf_get_str(&f, "t.u8", &s) && !gguf_get_str(&f, "a.str", &s));

    int64_t ia[4] = {9, 9, 9, 9};
    CHECK(gguf_get_arr_i64(&f, "a.i32", ia, 4) == 3 && ia[0] == 1 && ia[1] == -2 && ia[2] == 3 &&
          ia[3] == 9);
    CHECK(gguf_get_arr_i64(&f, "a.i32", ia, 1) == 3 && gguf_get_arr_i64(&f, "a.i32", NULL, 0) == 3);
    CHECK(gguf_get_arr_i64(&f, "a.u64", ia, 1) == 2 && ia[0] == 7);
    CHECK(gguf_get_arr_i64(&f, "a.u64", ia, 2) == -1);  /* 2^64 - 1 does not fit */
    CHECK(gguf_get_arr_i64(&f, "a.f64", ia, 2) == -1 && gguf_get_arr_i64(&f, "t.i32", ia, 2) == -1);
    CHECK(gguf_get_arr_i64(&f, "a.empty", ia, 4) == 0);
    float fa[2];
    CHECK(gguf_get_arr_f32(&f, "a.f64", fa, 2) == 2 && fa[0] == 0.5f && fa[1] == INFINITY);
    CHECK(gguf_get_arr_f32(&f, "a.f32", fa, 2) == 2 && fa[0] == 0.5f && fa[1] == -2.0f);
    CHECK(gguf_get_arr_f32(&f, "a.i32", fa, 2) == -1);
    int ba[3];
    CHECK(gguf_get_arr_bool(&f, "a.bool", ba, 3) == 3 && ba[0] == 1 && ba[1] == 0 && ba[2] == 1);
    CHECK(gguf_get_arr_bool(&f, "a.i32", ba, 3) == -1);
    CHECK(gguf_arr_len(&f, "a.str", GGUF_T_STRING) == 3 && gguf_arr_len(&f, "a.str", -1) == 3);
    CHECK(gguf_arr_len(&f, "a.str", GGUF_T_INT32) == -1 && gguf_arr_len(&f, "t.str", -1) == -1);
    CHECK(gguf_arr_len(&f, "a.nested", GGUF_T_ARRAY) == 2);
    CHECK(gguf_get_arr_str(&f, "a.str", 0, &s) && gguf_str_eq(s, "a"));
    CHECK(gguf_get_arr_str(&f, "a.str", 1, &s) && gguf_str_eq(s, "bc"));
    CHECK(gguf_get_arr_str(&f, "a.str", 2, &s) && s.len == 0);
    CHECK(!gguf_get_arr_str(&f, "a.str", 3, &s) && !gguf_get_arr_str(&f, "a.str", -1, &s));
    CHECK(!gguf_get_arr_str(&f, "a.nested", 0, &s) && !gguf_get_arr_str(&f, "t.str", 0, &s));
    const gguf_kv *kv = gguf_find_kv(&f, "a.nested");
    CHECK(kv && kv->arr_type == GGUF_T_ARRAY && kv->arr_len == 2 && kv->nbytes == 12 + 2 + 12 + 12);
    kv = gguf_find_kv(&f, "t.str");
    CHECK(kv && kv->nbytes == 5 && !memcmp(kv->data, "hello", 5));
    CHECK(!gguf_find_kv(&f, "t.st") && !gguf_find_kv(&f, "") && !gguf_find_kv(NULL, "t.str"));

    /* tensors */
    CHECK(f.data_offset % 64 == 0 && f.data_offset + 576 + 54 == b.n);
    static const struct {
        const char *name;
        int32_t type;
        uint64_t off, nbytes;
        int64_t ne0, ne1;
    } want[] = {
        {"w.q4_0", 2, 576, 54, 32, 3}, {"w.f32", 0, 0, 64, 8, 2}, {"w.f16", 1, 64, 32, 16, 1},
        {"w.bf16", 30, 128, 32, 4, 4}, {"w.q8_0", 8, 192, 136, 64, 2},
        {"w.q4_k", 12, 384, 144, 256, 1}, {"w.zero", 0, 576, 0, 0, 5}};
    for (int k = 0; k < 7; k++) {
        const gguf_tensor *t = gguf_find_tensor(&f, want[k].name);
        CHECK_MSG(t && t->type == want[k].type && t->offset == want[k].off &&
                  t->nbytes == want[k].nbytes && t->ne[0] == want[k].ne0 &&
                  t->ne[1] == want[k].ne1 && t->ne[2] == 1 && t->ne[3] == 1,
                  "tensor %s", want[k].name);
        CHECK(t && t->data == f.base + f.data_offset + want[k].off);
        CHECK(t && (!t->nbytes || !memcmp(t->data, b.p + f.data_offset + want[k].off, t->nbytes)));
    }
    CHECK(f.tensors[0].n_dims == 3 && f.tensors[2].n_dims == 1);
    CHECK(!gguf_find_tensor(&f, "w.f3") && !gguf_find_tensor(&f, "w.f32x"));
    gguf_close(&f);
    CHECK(f.kv == NULL && f.base == NULL);
    gguf_close(&f);   /* twice is harmless */
    gguf_close(NULL);
    free(b.p);
}

static void test_unknown_tensor_type_parses_with_null_data(void) {
    wbuf b = {0};
    gguf_file f;
    static const uint64_t ne[2] = {10, 3};
    header(&b, 3, 2, 0);
    tinfo(&b, "odd", 2, ne, 200, 32);
    tinfo(&b, "f", 1, ne, 0, 0);
    pad_to(&b, 32);
    fill(&b, 40, 1);
    if (parse_ok(&b, &f)) {
        const gguf_tensor *t = gguf_find_tensor(&f, "odd");
        CHECK(t && t->type == 200 && t->data == NULL && t->nbytes == 0 && t->ne[1] == 3);
        t = gguf_find_tensor(&f, "f");
        CHECK(t && t->data && t->nbytes == 40);
        gguf_close(&f);
    }
    free(b.p);
}

static void test_alignment_key_is_honoured(void) {
    static const uint32_t aligns[] = {1, 8, 32, 256, 4096};
    for (int k = 0; k < 5; k++) {
        wbuf b = {0};
        gguf_file f;
        header(&b, 3, 2, 1);
        key(&b, "general.alignment", GGUF_T_UINT64); u64(&b, aligns[k]);
        tinfo(&b, "a", 1, NE1, 0, 0);
        tinfo(&b, "b", 1, NE1, 0, aligns[k] > 128 ? aligns[k] : 128);
        size_t before = b.n;
        pad_to(&b, aligns[k]);
        fill(&b, (aligns[k] > 128 ? aligns[k] : 128) + 128, 3);
        if (parse_ok(&b, &f)) {
            CHECK(f.alignment == aligns[k] && f.data_offset % aligns[k] == 0);
            CHECK(f.data_offset >= before && f.data_offset < before + aligns[k]);
            gguf_close(&f);
        }
        free(b.p);
    }
    /* no tensors: trailing padding may be missing */
    wbuf b = {0};
    gguf_file f;
    header(&b, 3, 0, 1);
    key(&b, "x", GGUF_T_UINT8); u8(&b, 1);
    if (parse_ok(&b, &f)) { CHECK(f.data_offset == b.n && f.alignment == 32); gguf_close(&f); }
    free(b.p);
}

static void test_token_array_access_is_constant_time(void) {
    enum { N = 151936 };
    wbuf b = {0};
    gguf_file f;
    char tok[32];
    header(&b, 3, 0, 2);
    key(&b, "tokenizer.ggml.tokens", GGUF_T_ARRAY); arr(&b, GGUF_T_STRING, N);
    for (int i = 0; i < N; i++) { snprintf(tok, sizeof tok, "tok%d", i); str(&b, tok); }
    kv_u32(&b, "after", 7);
    if (!parse_ok(&b, &f)) { free(b.p); return; }
    CHECK(gguf_arr_len(&f, "tokenizer.ggml.tokens", GGUF_T_STRING) == N);
    int64_t v;
    CHECK(gguf_get_i64(&f, "after", &v) && v == 7);
    clock_t t0 = clock();
    int bad = 0;
    for (int rep = 0; rep < 3; rep++)
        for (int i = 0; i < N; i++) {
            gguf_str s;
            snprintf(tok, sizeof tok, "tok%d", i);
            if (!gguf_get_arr_str(&f, "tokenizer.ggml.tokens", i, &s) || !gguf_str_eq(s, tok))
                bad++;
        }
    double secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
    CHECK_MSG(bad == 0, "%d tokens read back wrong", bad);
    /* O(i) access would be ~10^10 byte steps here */
    CHECK_MSG(secs < 2.0, "3 x %d sequential reads took %.3f s", N, secs);
    char buf[8];
    CHECK(ev_meta_arr_len(&f, "tokenizer.ggml.tokens") == N);
    CHECK(ev_meta_arr_str(&f, "tokenizer.ggml.tokens", 151935, buf, sizeof buf) == 9 &&
          !strcmp(buf, "tok1519"));
    gguf_close(&f);
    free(b.p);
}

static void test_meta_api(void) {
    wbuf b = {0};
    gguf_file f;
    rich_file(&b, 3);
    if (!parse_ok(&b, &f)) { free(b.p); return; }
    char buf[4];
    int64_t v[4] = {0, 0, 0, 0};
    CHECK(ev_meta_str(&f, "t.str", buf, sizeof buf) == 5 && !strcmp(buf, "hel"));
    CHECK(ev_meta_str(&f, "t.str", NULL, 0) == 5 && ev_meta_str(&f, "t.u8", buf, 4) == -1);
    CHECK(ev_meta_str(&f, "t.str", buf, 1) == 5 && buf[0] == 0);
    CHECK(ev_meta_arr_len(&f, "a.str") == 3 && ev_meta_arr_len(&f, "a.i32") == -1);
    CHECK(ev_meta_arr_str(&f, "a.str", 1, buf, sizeof buf) == 2 && !strcmp(buf, "bc"));
    CHECK(ev_meta_arr_str(&f, "a.str", 3, buf, sizeof buf) == -1);
    CHECK(ev_meta_ints(&f, "t.i16", v, 4) == 1 && v[0] == -30000);
    CHECK(ev_meta_ints(&f, "t.bool", v, 4) == 1 && v[0] == 1);
    CHECK(ev_meta_ints(&f, "a.i32", v, 4) == 3 && v[1] == -2);
    CHECK(ev_meta_ints(&f, "a.bool", v, 2) == 3 && v[0] == 1 && v[1] == 0);
    CHECK(ev_meta_ints(&f, "a.f64", v, 4) == -1 && ev_meta_ints(&f, "t.str", v, 4) == -1);
    CHECK(ev_meta_ints(NULL, "t.i16", v, 4) == -1 && ev_meta_str(NULL, "t.str", buf, 4) == -1);
    /* the public calls: a NULL model has no files */
    CHECK(edgevlm_model_meta_str(NULL, 0, "t.str", buf, sizeof buf) == -1);
    CHECK(edgevlm_model_meta_arr_len(NULL, 0, "a.str") == -1);
    CHECK(edgevlm_model_meta_arr_str(NULL, 1, "a.str", 0, buf, sizeof buf) == -1);
    CHECK(edgevlm_model_meta_ints(NULL, 0, "t.i16", v, 4) == -1);
    gguf_close(&f);
    free(b.p);
}

/* b into a new file named from the mkstemp template path; 0 (a failed check) when it cannot */
static int write_temp(char *path, const wbuf *b) {
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0) return 0;
    CHECK(write(fd, b->p, b->n) == (ssize_t)b->n);
    close(fd);
    return 1;
}

static void test_open_maps_a_file_and_reports_io_errors(void) {
    char path[] = "/tmp/test_gguf_XXXXXX";
    wbuf b = {0};
    rich_file(&b, 3);
    if (!write_temp(path, &b)) return;
    gguf_file f;
    edgevlm_status st = gguf_open(path, &f, err, sizeof err);
    CHECK_MSG(st == EDGEVLM_OK, "%s", err);
    if (st == EDGEVLM_OK) {
        CHECK(f.owns_map && f.size == b.n && (uintptr_t)f.tensors[1].data % 64 == 0);
        gguf_str s;
        CHECK(gguf_get_str(&f, "t.str", &s) && gguf_str_eq(s, "hello"));
        gguf_close(&f);
    }
    CHECK(truncate(path, 100) == 0);
    CHECK(gguf_open(path, &f, err, sizeof err) == EDGEVLM_ERR_FORMAT && strstr(err, path));
    CHECK(truncate(path, 0) == 0);
    CHECK(gguf_open(path, &f, err, sizeof err) == EDGEVLM_ERR_FORMAT && strstr(err, "empty"));
    unlink(path);
    CHECK(gguf_open(path, &f, err, sizeof err) == EDGEVLM_ERR_IO && strstr(err, path));
    CHECK(gguf_open("/tmp", &f, err, sizeof err) == EDGEVLM_ERR_IO);
    CHECK(gguf_open(NULL, &f, err, sizeof err) == EDGEVLM_ERR_ARGUMENT);
    CHECK(gguf_parse(NULL, 10, &f, NULL, 0) == EDGEVLM_ERR_ARGUMENT);
    CHECK(gguf_parse(b.p, b.n, NULL, NULL, 0) == EDGEVLM_ERR_ARGUMENT);
    CHECK(gguf_parse(b.p, 100, &f, NULL, 0) == EDGEVLM_ERR_FORMAT);   /* no err buffer */
    CHECK(gguf_parse(b.p, 100, &f, err, 8) == EDGEVLM_ERR_FORMAT && strlen(err) == 7);
    free(b.p);
}

/* ---- malformed files ----------------------------------------------------------------------- */

static void test_every_truncated_prefix_is_refused(void) {
    wbuf b = {0};
    rich_file(&b, 3);
    int bad = 0;
    for (size_t n = 0; n < b.n; n++) {
        gguf_file f;
        err[0] = 0;
        edgevlm_status st = gguf_parse(b.p, n, &f, err, sizeof err);
        if (st != EDGEVLM_ERR_FORMAT || !err[0]) {
            if (bad++ < 5) fprintf(stderr, "prefix %zu: status %d, err '%s'\n", n, st, err);
        }
    }
    CHECK_MSG(bad == 0, "%d of %zu prefixes not refused", bad, b.n);
    free(b.p);
}

static void test_bad_headers_are_refused(void) {
    wbuf b = {0};
    rich_file(&b, 3);
    uint8_t *c = malloc(b.n);
    memcpy(c, b.p, b.n); c[0] = 'g';
    expect_format(c, b.n, "not a GGUF file", __LINE__);
    static const struct { uint32_t v; const char *want; } versions[] = {
        {0, "version 0"}, {1, "version 1"}, {4, "version 4"}, {0x03000000, "big-endian"},
        {0x02000000, "big-endian"}};
    for (int k = 0; k < 5; k++) {
        memcpy(c, b.p, b.n);
        c[4] = (uint8_t)versions[k].v; c[5] = (uint8_t)(versions[k].v >> 8);
        c[6] = (uint8_t)(versions[k].v >> 16); c[7] = (uint8_t)(versions[k].v >> 24);
        expect_format(c, b.n, versions[k].want, __LINE__);
    }
    free(c);
    free(b.p);
    static const uint64_t counts[][2] = {{0, 1ull << 62}, {1ull << 62, 0}, {0, ~0ull},
                                         {0, 1000}, {1000, 0}, {(1ull << 20) + 1, 0}};
    for (int k = 0; k < 6; k++) {
        wbuf h = {0};
        header(&h, 3, counts[k][0], counts[k][1]);
        fill(&h, 5000, 0);
        expect_format(h.p, h.n, k < 3 || k == 5 ? "limit" : "need at least", __LINE__);
        free(h.p);
    }
}

static void test_bad_key_values_are_refused(void) {
    wbuf b = {0};
    header(&b, 3, 0, 1); key(&b, "k", 13); u32(&b, 0);
    EXPECT_FORMAT(&b, "unknown value type 13"); b.n = 0;
    header(&b, 3, 0, 1); key(&b, "k", GGUF_T_ARRAY); arr(&b, 77, 1); u32(&b, 0);
    EXPECT_FORMAT(&b, "unknown array element type 77"); b.n = 0;
    header(&b, 3, 0, 1); key(&b, "k", GGUF_T_STRING); u64(&b, 1000); fill(&b, 20, 0);
    EXPECT_FORMAT(&b, "kv 0 'k': string value of 1000 bytes"); b.n = 0;
    header(&b, 3, 0, 1); u64(&b, ~0ull); fill(&b, 20, 0);
    EXPECT_FORMAT(&b, "runs past the end"); b.n = 0;
    header(&b, 3, 0, 2); key(&b, "k", GGUF_T_ARRAY); arr(&b, GGUF_T_STRING, 2); str(&b, "x");
    u64(&b, 1ull << 40); fill(&b, 10, 0);
    EXPECT_FORMAT(&b, "runs past the end"); b.n = 0;
    header(&b, 3, 0, 1); key(&b, "k", GGUF_T_ARRAY); arr(&b, GGUF_T_UINT64, 1ull << 61);
    fill(&b, 64, 0);
    EXPECT_FORMAT(&b, "is impossible"); b.n = 0;
    header(&b, 3, 0, 1); key(&b, "k", GGUF_T_ARRAY); arr(&b, GGUF_T_STRING, 1ull << 62);
    fill(&b, 64, 0);
    EXPECT_FORMAT(&b, "is impossible"); b.n = 0;
    header(&b, 3, 0, 2); kv_u32(&b, "dup", 1); kv_u32(&b, "dup", 2);
    EXPECT_FORMAT(&b, "duplicate key 'dup' (kv 0 and kv 1)"); b.n = 0;
    header(&b, 3, 0, 1); key(&b, "", GGUF_T_UINT8); u8(&b, 0); fill(&b, 16, 0);
    EXPECT_FORMAT(&b, "key length 0"); b.n = 0;
    /* nesting: 8 levels are fine, 9 are refused */
    for (int depth = 8; depth <= 9; depth++) {
        header(&b, 3, 0, 1); key(&b, "deep", GGUF_T_ARRAY);
        for (int d = 1; d < depth; d++) arr(&b, GGUF_T_ARRAY, 1);
        arr(&b, GGUF_T_UINT8, 1); u8(&b, 5);
        if (depth == 8) {
            gguf_file f;
            if (parse_ok(&b, &f)) {
                CHECK(gguf_arr_len(&f, "deep", GGUF_T_ARRAY) == 1);
                gguf_close(&f);
            }
        } else {
            EXPECT_FORMAT(&b, "nested deeper");
        }
        b.n = 0;
    }
    static const struct { uint32_t type; uint64_t v; const char *want; } aligns[] = {
        {GGUF_T_UINT32, 0, "power of two"}, {GGUF_T_UINT32, 3, "power of two"},
        {GGUF_T_UINT64, 1ull << 31, "power of two"}, {GGUF_T_INT32, 0xffffffe0u, "power of two"},
        {GGUF_T_FLOAT32, 0x42000000u, "(it is a float32)"},
        {GGUF_T_UINT64, ~0ull, "(it is a uint64)"}};
    for (int k = 0; k < 6; k++) {
        header(&b, 3, 0, 1); key(&b, "general.alignment", aligns[k].type);
        if (aligns[k].type == GGUF_T_UINT64) u64(&b, aligns[k].v);
        else u32(&b, (uint32_t)aligns[k].v);
        EXPECT_FORMAT(&b, aligns[k].want); b.n = 0;
    }
    free(b.p);
}

/* One tensor info (plus optional second) after an empty kv section, then `data` bytes. */
static void one_tensor(wbuf *b, uint32_t n_dims, const uint64_t *ne, uint32_t type, uint64_t off,
                       size_t data) {
    b->n = 0;
    header(b, 3, 1, 0);
    tinfo(b, "blk.3.attn_q.weight", n_dims, ne, type, off);
    pad_to(b, 32);
    fill(b, data, 0);
}

static void test_bad_tensors_are_refused(void) {
    wbuf b = {0};
    static const uint64_t ne5[5] = {1, 1, 1, 1, 1}, big[2] = {1ull << 32, 1ull << 32},
                          neg[2] = {4, 1ull << 63}, bytes_ovf[1] = {1ull << 62},
                          q8odd[1] = {33}, ne4[2] = {4, 4};
    one_tensor(&b, 5, ne5, 0, 0, 64);
    EXPECT_FORMAT(&b, "n_dims 5");
    one_tensor(&b, 2, big, 0, 0, 64);
    EXPECT_FORMAT(&b, "overflow");
    one_tensor(&b, 2, neg, 0, 0, 64);
    EXPECT_FORMAT(&b, "negative");
    one_tensor(&b, 1, bytes_ovf, 0, 0, 64);
    EXPECT_FORMAT(&b, "overflow int64 bytes");
    one_tensor(&b, 1, q8odd, 8, 0, 64);
    EXPECT_FORMAT(&b, "not a multiple of the block size 32");
    one_tensor(&b, 2, ne4, 0, 0, 63);
    EXPECT_FORMAT(&b, "tensor 'blk.3.attn_q.weight': data [offset 96, 64 bytes] runs past the end "
                      "of the file (size 159)");
    one_tensor(&b, 2, ne4, 0, 1ull << 63, 64);
    EXPECT_FORMAT(&b, "data offset 9223372036854775808 (from the data section at 96) is past");
    one_tensor(&b, 2, ne4, 0, ~0ull << 5, 64);
    EXPECT_FORMAT(&b, "is past the end");
    one_tensor(&b, 2, ne4, 200, 64, 32);     /* unknown type: its offset is still checked */
    EXPECT_FORMAT(&b, "is past the end");
    one_tensor(&b, 2, ne4, 0x80000000u, 0, 64);
    EXPECT_FORMAT(&b, "type id 2147483648");
    one_tensor(&b, 2, ne4, 0, 16, 128);
    EXPECT_FORMAT(&b, "not a multiple of the alignment 32");
    /* the data section itself past the end */
    b.n = 0; header(&b, 3, 1, 0); tinfo(&b, "t", 1, ne4, 0, 0);
    EXPECT_FORMAT(&b, "data section");
    /* overlap, duplicate names, an empty name */
    b.n = 0; header(&b, 3, 3, 0);
    tinfo(&b, "a", 2, ne4, 0, 0); tinfo(&b, "b", 2, ne4, 0, 64); tinfo(&b, "c", 2, ne4, 0, 32);
    pad_to(&b, 32); fill(&b, 128, 0);
    EXPECT_FORMAT(&b, "overlaps tensor 'a'");
    b.n = 0; header(&b, 3, 2, 0);
    tinfo(&b, "a", 2, ne4, 0, 0); tinfo(&b, "a", 2, ne4, 0, 64);
    pad_to(&b, 32); fill(&b, 128, 0);
    EXPECT_FORMAT(&b, "duplicate tensor name 'a'");
    b.n = 0; header(&b, 3, 1, 0); tinfo(&b, "", 2, ne4, 0, 0); pad_to(&b, 32); fill(&b, 64, 0);
    EXPECT_FORMAT(&b, "name length 0");
    /* adjacent tensors and zero-dim tensors are fine */
    b.n = 0; header(&b, 3, 3, 0);
    tinfo(&b, "a", 2, ne4, 0, 0); tinfo(&b, "b", 2, ne4, 0, 64);
    static const uint64_t zero[3] = {0, 1ull << 31, 1ull << 31};
    tinfo(&b, "z", 3, zero, 0, 64);
    pad_to(&b, 32); fill(&b, 128, 0);
    gguf_file f;
    if (parse_ok(&b, &f)) {
        CHECK(f.tensors[2].nbytes == 0 && f.tensors[2].ne[1] == 1ll << 31);
        gguf_close(&f);
    }
    static const uint64_t zero_ovf[3] = {0, 1ull << 32, 1ull << 32};   /* non-zero dims overflow */
    one_tensor(&b, 3, zero_ovf, 0, 0, 64);
    EXPECT_FORMAT(&b, "overflow");
    free(b.p);
}

/* the text file's general.architecture picks the model family (src/models/registry.c): an
 * unknown one is refused with a message naming it and the supported ones */
static void test_unknown_architecture_is_named(void) {
    char path[] = "/tmp/test_gguf_arch_XXXXXX";
    wbuf b = {0};
    header(&b, 3, 0, 1);
    key(&b, "general.architecture", GGUF_T_STRING); str(&b, "llama");
    if (!write_temp(path, &b)) return;
    edgevlm_model *m = NULL;
    CHECK(edgevlm_model_load(path, NULL, &m, err, sizeof err) == EDGEVLM_ERR_UNSUPPORTED && !m);
    CHECK_MSG(strstr(err, "\"llama\"") && strstr(err, "\"qwen3vl\""), "%s", err);
    unlink(path);
    free(b.p);
}

/* general.alignment 1 lets a tensor start at any byte: the loader refuses matrices and
 * vectors whose data the kernels would read through a misaligned pointer (a Q4_K block at an
 * odd address, float32 at 2 mod 4; UBSan in fuzz_gguf), and loads the aligned ones. */
static void build_unaligned(wbuf *b, uint64_t h) {
    static const uint64_t ne_q[2] = {256, 1}, ne_f[1] = {4};
    const uint64_t odd = h % 2 ? 2 : 1;                    /* h + odd is odd */
    const uint64_t q_ok = odd + 144 + 1;                   /* even */
    const uint64_t f_bad = (q_ok + 144 + 7) / 4 * 4 + 6 - h % 4;   /* h + f_bad = 2 mod 4 */
    const uint64_t f_ok = f_bad + 16 + 2;                  /* 0 mod 4 */
    header(b, 3, 4, 1);
    key(b, "general.alignment", GGUF_T_UINT32); u32(b, 1);
    tinfo(b, "q_bad", 2, ne_q, EV_TYPE_Q4_K, odd);
    tinfo(b, "q_ok", 2, ne_q, EV_TYPE_Q4_K, q_ok);
    tinfo(b, "f_bad", 1, ne_f, EV_TYPE_F32, f_bad);
    tinfo(b, "f_ok", 1, ne_f, EV_TYPE_F32, f_ok);
    const size_t end = b->n + f_ok + 16;
    while (b->n < end) u8(b, 0);                           /* zeros: finite scales */
}

static void test_loader_refuses_misaligned_data(void) {
    wbuf b = {0};
    gguf_file f;
    size_t hdr = 0;
    {   /* the header's length does not depend on the offsets written into it */
        wbuf t = {0};
        build_unaligned(&t, 0);
        gguf_file g;
        if (parse_ok(&t, &g)) { hdr = (size_t)g.data_offset; gguf_close(&g); }
        free(t.p);
    }
    build_unaligned(&b, hdr);
    if (!parse_ok(&b, &f)) { free(b.p); return; }
    CHECK(f.data_offset == hdr && ((uintptr_t)b.p % 16) == 0);
    ev_loader L = {&f, "model", err, sizeof err};
    ev_tensor w;
    CHECK(ev_load_tensor(&L, &w, "q_ok", 256, 1, 0) && w.data && (uintptr_t)w.data % 2 == 0);
    CHECK(ev_load_tensor(&L, &w, "f_ok", 4, -1, 0) && w.data && (uintptr_t)w.data % 4 == 0);
    err[0] = 0;
    CHECK(!ev_load_tensor(&L, &w, "q_bad", 256, 1, 0) && !w.data);
    CHECK_MSG(strstr(err, "'q_bad'") && strstr(err, "not 2-byte aligned"), "%s", err);
    err[0] = 0;
    CHECK(!ev_load_tensor(&L, &w, "f_bad", 4, -1, 0));
    CHECK_MSG(strstr(err, "'f_bad'") && strstr(err, "not 4-byte aligned"), "%s", err);
    err[0] = 0;
    const gguf_tensor *t = gguf_find_tensor(&f, "q_bad");
    CHECK(t && !ev_load_check_scales(&L, "q_bad", t->type, t->data, 1, 256) && err[0]);
    gguf_close(&f);
    free(b.p);
}

int main(void) {
    test_every_value_type_reads_back(3);
    test_every_value_type_reads_back(2);
    test_unknown_tensor_type_parses_with_null_data();
    test_alignment_key_is_honoured();
    test_token_array_access_is_constant_time();
    test_meta_api();
    test_open_maps_a_file_and_reports_io_errors();
    test_every_truncated_prefix_is_refused();
    test_bad_headers_are_refused();
    test_bad_key_values_are_refused();
    test_bad_tensors_are_refused();
    test_unknown_architecture_is_named();
    test_loader_refuses_misaligned_data();
    return tu_report("test_gguf");
}
