/* fuzz_gguf.c - libFuzzer harness of the GGUF reader: parse any bytes, then call every getter
 * on every key and tensor of what parsed, then run the block parsers on every tensor of a
 * type of the type table, then close. Built by `make -C native fuzz`
 * (clang, -fsanitize=fuzzer,address,undefined). Besides the sanitizers' own checks it traps
 * when the reader breaks a promise of gguf.h: a failure without a message, a tensor outside
 * the buffer or misaligned, a lookup that does not find what was parsed; or when the block
 * code breaks one of loader.h / types.h / kernels.h (exercise_blocks below). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "kernels.h"
#include "loader.h"
#include "model_files.h"
#include "types.h"

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

/* ---- the block parsers ---------------------------------------------------------------------
 * For a tensor of a type of the type table, as the loader sees it (ev_load_tensor: shape
 * [ne0, ne1, 1, 1], whole blocks, data aligned for the type, finite float16 scales), on at
 * most MAX_ROWS rows of at most MAX_ELEMS values (a prefix of whole blocks: a row is an array
 * of blocks):
 *  - the loader's verdict agrees with ev_first_nonfinite_scale and the reader's size agrees
 *    with ev_row_bytes (the reader's and the type table's layouts are one);
 *  - ev_row_to_f32 and the scalar vec_dot against a fixed activation row quantised to the
 *    type's vec_dot_type; when every scale is finite, a quantised type's values and dot are
 *    finite (fp16 scales are <= 65504 and codes/sub-scales small: the largest, Q6_K's
 *    65504*128*32 ~ 2.7e8, is far from FLT_MAX), and the dot is the exact dot of the
 *    dequantised rows up to float rounding;
 *  - from_float (the reference quantiser) on the dequantised row (non-finite values replaced)
 *    of the first row into a heap buffer of exactly ev_row_bytes (ASan: a byte past it), and
 *    back: inputs within the float16 range give finite scales and values. */
#define MAX_ROWS 4
#define MAX_ELEMS 4096
#define MAX_QUANT_ELEMS 512        /* the K-quant / IQ4 quantisers search: keep them short */

static float act_f32[MAX_ELEMS];
static ev_block_q8_0 act_q8_0[MAX_ELEMS / EV_QK];
static ev_block_q8_K act_q8_K[MAX_ELEMS / EV_QK_K];
static float act_deq_q8_0[MAX_ELEMS], act_deq_q8_K[MAX_ELEMS];

static void make_activations(void) {
    for (int i = 0; i < MAX_ELEMS; i++) act_f32[i] = sinf(0.37f * (float)i) * (1.0f + (float)(i % 7));
    ev_act_type_get(EV_TYPE_Q8_0)->from_float(act_f32, act_q8_0, MAX_ELEMS);
    ev_act_type_get(EV_TYPE_Q8_K)->from_float(act_f32, act_q8_K, MAX_ELEMS);
    ev_act_type_get(EV_TYPE_Q8_0)->to_float(act_q8_0, act_deq_q8_0, MAX_ELEMS);
    ev_act_type_get(EV_TYPE_Q8_K)->to_float(act_q8_K, act_deq_q8_K, MAX_ELEMS);
}

static int all_finite(const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return 0;
    return 1;
}

static void exercise_blocks(const gguf_file *f, const gguf_tensor *t, const char *name) {
    const ev_type_traits *tr = ev_type_get(t->type);
    if (!tr || !t->data) return;
    REQUIRE(ev_act_type_get(tr->vec_dot_type) != NULL);
    char err[256] = "";
    ev_loader L = {f, "model", err, sizeof err};
    ev_tensor w;
    const int loaded = ev_load_tensor(&L, &w, name, t->ne[0], t->ne[1], 0);
    const int shape_ok = t->ne[2] == 1 && t->ne[3] == 1;   /* ne0 % block: the reader's check */
    REQUIRE(t->ne[0] % tr->block_size == 0);
    if (!shape_ok) {
        REQUIRE(!loaded && err[0]);
        return;
    }
    /* the reader places data at general.alignment, which may be 1: the loader refuses data
     * the kernels cannot read as the type's C type (float32: 4 bytes, the others: 2) */
    if ((uintptr_t)t->data % (t->type == EV_TYPE_F32 ? 4u : 2u)) {
        REQUIRE(!loaded && err[0]);
        return;
    }
    const int64_t ne0 = t->ne[0], ne1 = t->ne[1], rb = ev_row_bytes(t->type, ne0);
    if (ne0 == 0 || ne1 == 0) {    /* no data: ne0 may be up to INT64_MAX when ne1 is 0 */
        REQUIRE(t->nbytes == 0 && loaded);
        return;
    }
    /* nbytes = ne0 / block * size * ne1 fits in int64 (the reader), so this does not overflow */
    REQUIRE(rb == ne0 / tr->block_size * tr->type_size);
    REQUIRE((uint64_t)rb * (uint64_t)ne1 == t->nbytes);
    const int64_t n_blocks = ne0 / tr->block_size * ne1;
    const int64_t bad = ev_first_nonfinite_scale(t->type, t->data, n_blocks);
    REQUIRE(bad == -1 || (bad >= 0 && bad < n_blocks));
    if (loaded) REQUIRE(bad == -1 && w.data == t->data && w.type == t->type);
    else REQUIRE(bad >= 0 && err[0]);
    const int finite_promised = bad == -1 && tr->scale_at[0] >= 0;

    const int64_t n = (ne0 < MAX_ELEMS ? ne0 : MAX_ELEMS) / tr->block_size * tr->block_size;
    if (n == 0) return;
    const int64_t rows = ne1 < MAX_ROWS ? ne1 : MAX_ROWS;
    static float row[MAX_ELEMS], back[MAX_ELEMS];
    const ev_kernels *k = ev_kernels_scalar();
    REQUIRE(k->vec_dot[t->type] != NULL);
    const void *x = tr->vec_dot_type == EV_TYPE_F32 ? (const void *)act_f32
                    : tr->vec_dot_type == EV_TYPE_Q8_0 ? (const void *)act_q8_0
                                                       : (const void *)act_q8_K;
    const float *xd = tr->vec_dot_type == EV_TYPE_F32 ? act_f32
                      : tr->vec_dot_type == EV_TYPE_Q8_0 ? act_deq_q8_0 : act_deq_q8_K;
    for (int64_t r = 0; r < rows; r++) {
        const uint8_t *src = (const uint8_t *)t->data + r * rb;
        ev_row_to_f32(t->type, src, row, n);
        float dot = 0.0f;
        k->vec_dot[t->type](n, &dot, src, x);
        sink += (uint64_t)(dot != 0.0f);
        if (finite_promised) {
            REQUIRE(all_finite(row, n));
            double ref = 0.0, mag = 0.0;
            for (int64_t i = 0; i < n; i++) {
                ref += (double)row[i] * (double)xd[i];
                mag += fabs((double)row[i] * (double)xd[i]);
            }
            REQUIRE(isfinite(dot));
            REQUIRE(fabs((double)dot - ref) <= 1e-3 * mag + 1e-30);
        }
    }
    /* the reference quantiser on the first row's values */
    const int64_t nq = (n < MAX_QUANT_ELEMS ? n : MAX_QUANT_ELEMS) / tr->block_size * tr->block_size;
    if (nq == 0) return;
    ev_row_to_f32(t->type, t->data, row, nq);
    float amax = 0.0f;
    for (int64_t i = 0; i < nq; i++) {
        if (!isfinite(row[i])) row[i] = 0.0f;
        amax = fmaxf(amax, fabsf(row[i]));
    }
    const int64_t qb = ev_row_bytes(t->type, nq);
    uint8_t *q = malloc((size_t)qb);
    REQUIRE(q != NULL);
    tr->from_float(row, q, nq);
    ev_row_to_f32(t->type, q, back, nq);
    if (amax <= 60000.0f) {
        REQUIRE(ev_first_nonfinite_scale(t->type, q, nq / tr->block_size) == -1);
        REQUIRE(all_finite(back, nq));
    }
    sink += q[qb - 1];
    free(q);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int ready;
    if (!ready) {
        make_activations();
        ready = 1;
    }
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
            exercise_blocks(&f, t, name);
        }
    }
    REQUIRE(!gguf_find_kv(&f, "") && !gguf_find_tensor(&f, ""));
    gguf_close(&f);
    return 0;
}
