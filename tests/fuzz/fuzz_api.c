/* fuzz_api.c - libFuzzer harness of the C entry points Python calls through cffi
 * (native/include/edgevlm.h, cdef in daemon/edgevlm/engine/native.py).
 *
 * At start-up it writes a valid tiny Qwen3-VL pair (text d=8, 1 layer, 32 tokens; ViT c=8,
 * patch 2, one DeepStack tap) into memory files, loads it and opens one session. Each input
 * then drives one entry point, chosen by its first byte, with fuzzer-chosen arguments:
 *   0 model load: the rest of the input is the text GGUF (no mmproj); a model that loads is
 *     queried, given a session and one prefill/decode
 *   1 model load: the valid text GGUF + the input as the mmproj GGUF; a model that loads
 *     encodes one 2x2 image
 *   2 prefill  3 decode  4 sample  5 encode_vision  6 metadata getters  7 session_new
 *   8 base64_decode with any out_cap
 * Buffers are exactly as large as the counts passed say (ASan catches a read past them);
 * counts the API must refuse come with buffers too small for them. Besides ASan/UBSan it
 * traps when a promise of edgevlm.h breaks: a failure without a message, a status outside
 * the enum, a failed load with a model, a sampled token outside the vocabulary, a prefill
 * that does not advance n_past by n_tokens.
 * Seeds: EDGEVLM_FUZZ_API_SEEDS=<dir> writes mode-0 and mode-1 seeds of the tiny pair there
 * (tests/fuzz/corpus/api/ was made so). Built by `make -C native fuzz`. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "edgevlm.h"

#define REQUIRE(c) do { if (!(c)) __builtin_trap(); } while (0)

/* ---- a tiny GGUF writer (v3, F32 tensors, alignment 32) -------------------------------- */

typedef struct buf { uint8_t *p; size_t n, cap; } buf;

static void put(buf *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2;
        b->p = realloc(b->p, b->cap);
        REQUIRE(b->p);
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}
static void u32(buf *b, uint32_t v) { put(b, &v, 4); }
static void u64(buf *b, uint64_t v) { put(b, &v, 8); }
static void gstr(buf *b, const char *s) { u64(b, strlen(s)); put(b, s, strlen(s)); }
static void kv_str(buf *b, const char *k, const char *v) { gstr(b, k); u32(b, 8); gstr(b, v); }
static void kv_u32(buf *b, const char *k, uint32_t v) { gstr(b, k); u32(b, 4); u32(b, v); }
static void kv_arr(buf *b, const char *k, uint32_t type, size_t elem, const void *v, size_t n) {
    gstr(b, k); u32(b, 9); u32(b, type); u64(b, n); put(b, v, elem * n);
}

typedef struct tensor { const char *name; int64_t ne[4]; } tensor;

/* header + kvs already in *b (n_kv counted by the caller); appends the tensors. */
static void finish(buf *b, const tensor *t, size_t nt) {
    uint64_t off = 0;
    for (size_t i = 0; i < nt; i++) {
        int nd = 1;
        uint64_t n = 1;
        for (int j = 0; j < 4; j++) if (t[i].ne[j]) { nd = j + 1; n *= (uint64_t)t[i].ne[j]; }
        gstr(b, t[i].name); u32(b, (uint32_t)nd);
        for (int j = 0; j < nd; j++) u64(b, (uint64_t)t[i].ne[j]);
        u32(b, 0); u64(b, off);
        off += (n * 4 + 31) / 32 * 32;
    }
    static const uint8_t zero[32];
    put(b, zero, (32 - b->n % 32) % 32);
    uint32_t rng = 12345;
    for (size_t i = 0; i < nt; i++) {
        uint64_t n = 1;
        for (int j = 0; j < 4; j++) if (t[i].ne[j]) n *= (uint64_t)t[i].ne[j];
        for (uint64_t k = 0; k < n; k++) {
            rng = rng * 1103515245u + 12345u;
            float v = (float)((int)(rng >> 16 & 0xff) - 128) / 256.0f;
            put(b, &v, 4);
        }
        put(b, zero, (32 - n * 4 % 32) % 32);
    }
}

static void header(buf *b, uint64_t n_tensors, uint64_t n_kv) {
    put(b, "GGUF", 4); u32(b, 3); u64(b, n_tensors); u64(b, n_kv);
}

enum { D = 8, VOCAB = 32, FF = 16, HD = 4, C = 8, VFF = 16, P = 2 };

static buf text_gguf(void) {
    static const tensor t[] = {
        {"token_embd.weight", {D, VOCAB}}, {"output_norm.weight", {D}},
        {"blk.0.attn_norm.weight", {D}}, {"blk.0.attn_q.weight", {D, 2 * HD}},
        {"blk.0.attn_k.weight", {D, HD}}, {"blk.0.attn_v.weight", {D, HD}},
        {"blk.0.attn_output.weight", {2 * HD, D}}, {"blk.0.attn_q_norm.weight", {HD}},
        {"blk.0.attn_k_norm.weight", {HD}}, {"blk.0.ffn_norm.weight", {D}},
        {"blk.0.ffn_gate.weight", {D, FF}}, {"blk.0.ffn_up.weight", {D, FF}},
        {"blk.0.ffn_down.weight", {FF, D}},
    };
    buf b = {0};
    header(&b, sizeof t / sizeof t[0], 9);
    kv_str(&b, "general.architecture", "qwen3vl");
    kv_u32(&b, "qwen3vl.block_count", 1);
    kv_u32(&b, "qwen3vl.embedding_length", D);
    kv_u32(&b, "qwen3vl.feed_forward_length", FF);
    kv_u32(&b, "qwen3vl.attention.head_count", 2);
    kv_u32(&b, "qwen3vl.attention.head_count_kv", 1);
    int32_t sections[4] = {1, 1, 0, 0};
    kv_arr(&b, "qwen3vl.rope.dimension_sections", 5, 4, sections, 4);
    kv_u32(&b, "qwen3vl.n_deepstack_layers", 1);
    static const char *tokens[] = {"a", "b", "<|im_end|>"};
    gstr(&b, "tokenizer.ggml.tokens"); u32(&b, 9); u32(&b, 8); u64(&b, 3);
    for (int i = 0; i < 3; i++) gstr(&b, tokens[i]);
    finish(&b, t, sizeof t / sizeof t[0]);
    return b;
}

static buf vision_gguf(void) {
    static const tensor t[] = {
        {"v.patch_embd.weight", {P, P, 3, C}}, {"v.patch_embd.weight.1", {P, P, 3, C}},
        {"v.position_embd.weight", {C, 16}}, {"v.patch_embd.bias", {C}},
        {"v.blk.0.ln1.weight", {C}}, {"v.blk.0.ln1.bias", {C}},
        {"v.blk.0.attn_qkv.weight", {C, 3 * C}}, {"v.blk.0.attn_qkv.bias", {3 * C}},
        {"v.blk.0.attn_out.weight", {C, C}}, {"v.blk.0.attn_out.bias", {C}},
        {"v.blk.0.ln2.weight", {C}}, {"v.blk.0.ln2.bias", {C}},
        {"v.blk.0.ffn_up.weight", {C, VFF}}, {"v.blk.0.ffn_up.bias", {VFF}},
        {"v.blk.0.ffn_down.weight", {VFF, C}}, {"v.blk.0.ffn_down.bias", {C}},
        {"v.post_ln.weight", {C}}, {"v.post_ln.bias", {C}},
        {"mm.0.weight", {4 * C, 4 * C}}, {"mm.0.bias", {4 * C}},
        {"mm.2.weight", {4 * C, D}}, {"mm.2.bias", {D}},
        {"v.deepstack.0.norm.weight", {4 * C}}, {"v.deepstack.0.norm.bias", {4 * C}},
        {"v.deepstack.0.fc1.weight", {4 * C, 4 * C}}, {"v.deepstack.0.fc1.bias", {4 * C}},
        {"v.deepstack.0.fc2.weight", {4 * C, D}}, {"v.deepstack.0.fc2.bias", {D}},
    };
    buf b = {0};
    header(&b, sizeof t / sizeof t[0], 9);
    kv_str(&b, "clip.projector_type", "qwen3vl_merger");
    kv_u32(&b, "clip.vision.embedding_length", C);
    kv_u32(&b, "clip.vision.feed_forward_length", VFF);
    kv_u32(&b, "clip.vision.block_count", 1);
    kv_u32(&b, "clip.vision.attention.head_count", 2);
    kv_u32(&b, "clip.vision.patch_size", P);
    kv_u32(&b, "clip.vision.projection_dim", D);
    uint8_t taps[1] = {1};
    kv_arr(&b, "clip.vision.is_deepstack_layers", 7, 1, taps, 1);
    float mean[3] = {0.5f, 0.5f, 0.5f};
    kv_arr(&b, "clip.vision.image_mean", 6, 4, mean, 3);
    finish(&b, t, sizeof t / sizeof t[0]);
    return b;
}

/* ---- state built once ------------------------------------------------------------------ */

typedef struct memfile { int fd; char path[64]; } memfile;

static void memfile_open(memfile *f, const char *name) {
    f->fd = memfd_create(name, 0);
    REQUIRE(f->fd >= 0);
    snprintf(f->path, sizeof f->path, "/proc/self/fd/%d", f->fd);
}

static void memfile_set(memfile *f, const void *data, size_t size) {
    REQUIRE(ftruncate(f->fd, 0) == 0);
    REQUIRE(pwrite(f->fd, data, size, 0) == (ssize_t)size);
}

static memfile text_file, vision_file, scratch_file;
static edgevlm_model *model;
static edgevlm_session *session;
static edgevlm_model_info info;
enum { N_CTX = 64, N_BATCH = 8, MAX_PATCHES = 16 };

static void write_seed(const char *dir, const char *name, uint8_t mode, const buf *b) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    REQUIRE(f);
    REQUIRE(fwrite(&mode, 1, 1, f) == 1 && fwrite(b->p, 1, b->n, f) == b->n);
    fclose(f);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    buf t = text_gguf(), v = vision_gguf();
    const char *seeds = getenv("EDGEVLM_FUZZ_API_SEEDS");
    if (seeds) {
        write_seed(seeds, "load_text", 0, &t);
        write_seed(seeds, "load_mmproj", 1, &v);
    }
    memfile_open(&text_file, "text");
    memfile_open(&vision_file, "mmproj");
    memfile_open(&scratch_file, "input");
    memfile_set(&text_file, t.p, t.n);
    memfile_set(&vision_file, v.p, v.n);
    free(t.p);
    free(v.p);
    char err[256];
    REQUIRE(edgevlm_model_load(text_file.path, vision_file.path, &model, err, sizeof err) ==
            EDGEVLM_OK);
    edgevlm_model_get_info(model, &info);
    REQUIRE(info.n_vocab == VOCAB && info.has_vision && info.n_deepstack == 1);
    edgevlm_session_params p = {N_CTX, N_BATCH, 1, EDGEVLM_KV_F32, MAX_PATCHES};
    REQUIRE(edgevlm_session_new(model, &p, &session, err, sizeof err) == EDGEVLM_OK);
    return 0;
}

/* ---- reading arguments from the input -------------------------------------------------- */

typedef struct input { const uint8_t *p; size_t n; } input;

static uint64_t take(input *in, size_t bytes) {
    uint64_t v = 0;
    for (size_t i = 0; i < bytes && in->n; i++, in->p++, in->n--) v |= (uint64_t)in->p[0] << (8 * i);
    return v;
}
static int32_t take_i32(input *in) { return (int32_t)(uint32_t)take(in, 4); }
static float take_f32(input *in) {
    uint32_t bits = (uint32_t)take(in, 4);
    float f;
    memcpy(&f, &bits, 4);
    return f;
}
/* A count: mostly small, sometimes any 64-bit value (negative, huge). */
static int64_t take_count(input *in, int64_t small) {
    uint8_t sel = (uint8_t)take(in, 1);
    if (sel < 224) return sel % (small + 1);
    return (int64_t)take(in, 8);
}
/* An int32 argument: mostly small, sometimes any value. */
static int32_t take_small_i32(input *in, int32_t small) {
    uint8_t sel = (uint8_t)take(in, 1);
    if (sel < 200) return (int32_t)(sel % (small + 1)) - (sel >= 192 ? small : 0);
    return take_i32(in);
}
static void fill_i32(input *in, int32_t *out, int64_t n, int32_t small) {
    for (int64_t i = 0; i < n; i++) out[i] = take_small_i32(in, small);
}
static void fill_f32(input *in, float *out, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = in->n >= 4 ? take_f32(in) : (float)i / 7.0f;
}

static void check_status(edgevlm_status st, const char *message) {
    REQUIRE(st >= EDGEVLM_OK && st <= EDGEVLM_ERR_INVALID_INPUT);
    if (st != EDGEVLM_OK) REQUIRE(message && message[0]);
}
static void check_session(edgevlm_session *s, edgevlm_status st) {
    check_status(st, edgevlm_session_error(s));
}

/* Allocates exactly n elements (at least 1, so that a 0-count call still gets a pointer). */
static void *alloc_n(int64_t n, size_t elem) {
    void *p = malloc((size_t)(n > 0 ? n : 1) * elem);
    REQUIRE(p);
    return p;
}
/* The elements allocated for a count the caller passes: the count itself when it is one a
 * valid call could use, else a single element (the API must refuse before reading). */
static int64_t room(int64_t count, int64_t valid_max) {
    return count >= 0 && count <= valid_max ? count : 1;
}

/* ---- the entry points ------------------------------------------------------------------ */

static void use_loaded(edgevlm_model *m, int vision) {
    edgevlm_model_info mi;
    edgevlm_model_get_info(m, &mi);
    edgevlm_model_prefault(m);
    edgevlm_model_prefault_file(m, 1);
    edgevlm_model_prefault_file(m, -1);
    edgevlm_model_prefault_file(NULL, 0);
    edgevlm_model_release_metadata(m);
    edgevlm_model_release_metadata(NULL);
    char small[8];
    edgevlm_model_meta_str(m, 0, "general.architecture", small, sizeof small);
    edgevlm_model_meta_arr_len(m, 0, "tokenizer.ggml.tokens");
    edgevlm_model_meta_arr_str(m, 0, "tokenizer.ggml.tokens", 0, small, sizeof small);
    int64_t ints[4];
    edgevlm_model_meta_ints(m, 0, "qwen3vl.rope.dimension_sections", ints, 4);
    if (mi.n_vocab > 4096 || mi.n_embd > 256 || mi.n_ff > 1024 || mi.n_layer > 4 ||
        mi.n_head > 16 || mi.v_n_embd > 64 || mi.v_n_ff > 256 || mi.v_n_layer > 4 ||
        mi.v_patch_size > 4)
        return;  /* a valid but big model: loading was the test */
    edgevlm_session_params p = {16, 4, 1, EDGEVLM_KV_F16, vision ? 4 : 0};
    edgevlm_session *s = NULL;
    char err[256];
    edgevlm_status st = edgevlm_session_new(m, &p, &s, err, sizeof err);
    check_status(st, err);
    if (st != EDGEVLM_OK) return;
    float *logits = alloc_n(mi.n_vocab, sizeof(float));
    if (vision) {
        const int64_t row = 6LL * mi.v_patch_size * mi.v_patch_size;
        float *pix = calloc((size_t)(4 * row), sizeof(float));
        float *emb = alloc_n(mi.n_embd, sizeof(float));
        float *ds = alloc_n((int64_t)mi.n_deepstack * mi.n_embd, sizeof(float));
        REQUIRE(pix);
        check_session(s, edgevlm_encode_vision(s, pix, 4, 1, 2, 2, emb, ds, NULL));
        free(pix); free(emb); free(ds);
    }
    int32_t tokens[2] = {0, mi.n_vocab - 1}, pos[6] = {0, 1, 0, 1, 0, 1};
    check_session(s, edgevlm_prefill(s, tokens, 2, pos, NULL, NULL, 0, NULL, 0, logits, 1));
    check_session(s, edgevlm_decode(s, 0, 2, logits));
    free(logits);
    edgevlm_session_free(s);
}

static void fuzz_load(input *in, int vision) {
    memfile_set(&scratch_file, in->p, in->n);
    edgevlm_model *m = (edgevlm_model *)1;
    char err[256];
    edgevlm_status st = vision
        ? edgevlm_model_load(text_file.path, scratch_file.path, &m, err, sizeof err)
        : edgevlm_model_load(scratch_file.path, NULL, &m, err, sizeof err);
    check_status(st, err);
    REQUIRE((st == EDGEVLM_OK) == (m != NULL));
    if (m) use_loaded(m, vision);
    edgevlm_model_free(m);
}

static void fuzz_prefill(input *in) {
    if (edgevlm_session_n_past(session) > N_CTX - 2 * N_BATCH) edgevlm_session_reset(session);
    const int64_t n_tokens = take_count(in, 2 * N_BATCH + 1);
    /* n_vision is the caller's word on the size of vision_rows (the API cannot check it):
     * any negative value, or the true row count */
    int64_t n_vision = take_count(in, 4);
    if (n_vision > 64) n_vision %= 65;
    const int32_t n_ds = take_small_i32(in, 2);
    const int64_t n_logits = take_count(in, 3);
    const uint8_t flags = (uint8_t)take(in, 1);
    const int64_t nt = room(n_tokens, N_CTX), nv = room(n_vision, 64);
    int32_t *tokens = alloc_n(nt, 4), *pos = alloc_n(3 * nt, 4), *vidx = alloc_n(nt, 4);
    fill_i32(in, tokens, nt, VOCAB + 1);
    fill_i32(in, pos, 3 * nt, 1000);
    fill_i32(in, vidx, nt, 5);
    float *rows = alloc_n(nv * D, 4);
    fill_f32(in, rows, nv * D);
    const int64_t nds = n_ds >= 0 && n_ds <= 1 ? n_ds : 0;
    float *ds = alloc_n(nds * nv * D, 4);
    fill_f32(in, ds, nds * nv * D);
    float *logits = alloc_n(room(n_logits, nt) * VOCAB, 4);
    const int32_t before = edgevlm_session_n_past(session);
    edgevlm_status st = edgevlm_prefill(session, tokens, n_tokens, pos,
                                        flags & 1 ? vidx : NULL, flags & 2 ? rows : NULL,
                                        n_vision, flags & 4 ? ds : NULL, n_ds,
                                        flags & 8 ? NULL : logits, n_logits);
    check_session(session, st);
    if (st == EDGEVLM_OK) REQUIRE(edgevlm_session_n_past(session) == before + n_tokens);
    free(tokens); free(pos); free(vidx); free(rows); free(ds); free(logits);
}

static void fuzz_decode(input *in) {
    if (edgevlm_session_n_past(session) >= N_CTX - 1 && (take(in, 1) & 1))
        edgevlm_session_reset(session);
    const int32_t token = take_small_i32(in, VOCAB + 1), position = take_i32(in);
    float *logits = alloc_n(VOCAB, 4);
    const int32_t before = edgevlm_session_n_past(session);
    edgevlm_status st = edgevlm_decode(session, token, position, take(in, 1) == 0xff ? NULL : logits);
    check_session(session, st);
    if (st == EDGEVLM_OK) REQUIRE(edgevlm_session_n_past(session) == before + 1);
    free(logits);
}

static void fuzz_sample(input *in) {
    edgevlm_sampling p = {take_f32(in), take_small_i32(in, VOCAB + 2), take_f32(in), take_f32(in)};
    edgevlm_session_set_seed(session, take(in, 8));
    int64_t n_history = take_count(in, 16);  /* like n_vision: negative or the true size */
    if (n_history > 64) n_history %= 65;
    const int64_t nh = room(n_history, 64);
    int32_t *history = alloc_n(nh, 4);
    fill_i32(in, history, nh, VOCAB + 2);
    float *logits = alloc_n(VOCAB, 4);
    fill_f32(in, logits, VOCAB);
    int32_t token = -1;
    edgevlm_status st = edgevlm_sample(session, logits, &p, history, n_history, &token);
    check_session(session, st);
    if (st == EDGEVLM_OK) REQUIRE(token >= 0 && token < VOCAB);
    free(history); free(logits);
}

static void fuzz_encode(input *in) {
    const int64_t n_patches = take_count(in, MAX_PATCHES + 4);
    const int32_t gt = take_small_i32(in, 3), gh = take_small_i32(in, 6),
                  gw = take_small_i32(in, 6);
    const uint8_t flags = (uint8_t)take(in, 1);
    const int64_t np = room(n_patches, MAX_PATCHES), row = 6 * P * P;
    float *pix = alloc_n(np * row, 4);
    fill_f32(in, pix, np * row);
    float *emb = alloc_n(np / 4 * D, 4), *ds = alloc_n(np / 4 * D, 4), *vit = alloc_n(np * C, 4);
    edgevlm_status st = edgevlm_encode_vision(session, flags & 1 ? NULL : pix, n_patches, gt, gh,
                                              gw, flags & 2 ? NULL : emb, flags & 4 ? ds : NULL,
                                              flags & 8 ? vit : NULL);
    check_session(session, st);
    free(pix); free(emb); free(ds); free(vit);
}

static void fuzz_meta(input *in) {
    const int32_t which = take_small_i32(in, 2);
    const int64_t index = take_count(in, 4);
    const size_t buf_len = (size_t)take(in, 1) % 40;
    const uint8_t fn = (uint8_t)take(in, 1) % 5;
    const int64_t n = take_count(in, 5);
    char *key = alloc_n((int64_t)in->n + 1, 1);
    memcpy(key, in->p, in->n);
    key[in->n] = '\0';
    char *out = alloc_n((int64_t)buf_len, 1);
    int64_t ints[8];
    double f;
    const edgevlm_model *m = buf_len == 39 ? NULL : model;  /* NULL model: -1 / 0 */
    int64_t r = 0;
    switch (fn) {
    case 0:
        r = edgevlm_model_meta_str(m, which, key, buf_len ? out : NULL, buf_len);
        if (r >= 0 && buf_len) REQUIRE(strlen(out) < buf_len);
        break;
    case 1: r = edgevlm_model_meta_arr_len(m, which, key); break;
    case 2:
        r = edgevlm_model_meta_arr_str(m, which, key, index, buf_len ? out : NULL, buf_len);
        if (r >= 0 && buf_len) REQUIRE(strlen(out) < buf_len);
        break;
    case 3: r = edgevlm_model_meta_ints(m, which, key, n >= 0 && n <= 8 ? ints : NULL,
                                        n >= 0 && n <= 8 ? n : 0); break;
    default: r = edgevlm_model_meta_f64(m, which, key, &f); REQUIRE(r == 0 || r == 1); break;
    }
    REQUIRE(r >= -1);
    free(key); free(out);
}

static void fuzz_session_new(input *in) {
    edgevlm_session_params p;
    p.n_ctx = take_small_i32(in, 64);
    p.n_batch = take_small_i32(in, 16);
    p.n_threads = take_small_i32(in, 1);
    p.kv_type = take_small_i32(in, 2);
    p.max_patches = take_small_i32(in, 20);
    /* valid but big sessions only cost memory: keep the accepted range small */
    if (p.n_ctx > 64 && p.n_ctx <= (1 << 24)) p.n_ctx = 64;
    if (p.n_threads > 1 && p.n_threads <= 256) p.n_threads = 1;  /* threads cost time */
    if (p.max_patches > 64 && p.max_patches <= (1 << 22)) p.max_patches = 64;
    edgevlm_session *s = (edgevlm_session *)1;
    char err[256];
    const size_t err_len = (size_t)take(in, 1) % 2 ? sizeof err : 0;
    edgevlm_status st = edgevlm_session_new(model, &p, &s, err_len ? err : NULL, err_len);
    REQUIRE(st >= EDGEVLM_OK && st <= EDGEVLM_ERR_INVALID_INPUT);
    if (err_len) check_status(st, err);
    REQUIRE((st == EDGEVLM_OK) == (s != NULL));
    if (s) {
        check_session(s, edgevlm_session_set_kernels(s, take_small_i32(in, 2)));
        float logits[VOCAB];
        check_session(s, edgevlm_decode(s, 1, 0, logits));
    }
    edgevlm_session_free(s);
}

static void fuzz_base64(input *in) {
    const size_t cap = (size_t)take(in, 2) % 4096;
    const int32_t kernels = take_small_i32(in, 2);
    uint8_t *out = alloc_n((int64_t)cap, 1);
    size_t out_len = 0, offset = 0;
    edgevlm_status st = edgevlm_base64_decode(in->n ? (const char *)in->p : NULL, in->n, out,
                                              cap, kernels, &out_len, &offset);
    REQUIRE(st == EDGEVLM_OK || st == EDGEVLM_ERR_ARGUMENT || st == EDGEVLM_ERR_INVALID_INPUT);
    if (st == EDGEVLM_OK) REQUIRE(out_len <= cap);
    if (st == EDGEVLM_ERR_INVALID_INPUT) REQUIRE(offset <= in->n);
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    input in = {data + 1, size - 1};
    switch (data[0] % 9) {
    case 0: fuzz_load(&in, 0); break;
    case 1: fuzz_load(&in, 1); break;
    case 2: fuzz_prefill(&in); break;
    case 3: fuzz_decode(&in); break;
    case 4: fuzz_sample(&in); break;
    case 5: fuzz_encode(&in); break;
    case 6: fuzz_meta(&in); break;
    case 7: fuzz_session_new(&in); break;
    default: fuzz_base64(&in); break;
    }
    return 0;
}
