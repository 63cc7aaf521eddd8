/* test_dispatch.c - kernel dispatch: every (weight type of the type table x kernel set this
 * CPU runs x kernel) against the scalar reference, called directly on the same operands, and
 * the fallback that replaced silent skipping: a set without an entry runs the scalar one
 * (ev_kernels_derive, and ev_matmul on a hand-made set with NULL entries).
 *
 * Tolerances as in test_kernels.c: (terms + 32) * 2^-23 * sum|w_i x_i| (any summation order
 * of exactly computed or once-rounded products); integer block sums are exact everywhere. */
#include <stdint.h>

#include "kernels.h"
#include "kernel_sets.h"
#include "test_util.h"

static unsigned long long seed = 4242;


/* the scalar set first, then every SIMD set this CPU runs */
static int all_sets(const ev_kernels *out[MAX_SETS]) {
    out[0] = ev_kernels_scalar();
    return tu_add_simd_sets(out, 1);
}

static double tol_for(int64_t terms, double mag) {
    return ((double)terms + 32.0) * ldexp(1.0, -23) * mag + 1e-30;
}

static void fill(float *x, int64_t n, float scale) {
    for (int64_t i = 0; i < n; i++) x[i] = tu_randf(&seed) * scale;
}

/* the operands of one product, every form a kernel takes them in */
typedef struct operands {
    int32_t type;
    int64_t n_out, n_in, n_tok, nb;  /* nb = n_in / 32 (quantised activations) */
    uint8_t *w;                      /* [n_out][row bytes] weights of type */
    float *wf;                       /* [n_out][n_in] the weights dequantised */
    float *x;                        /* [n_tok][n_in] float activations */
    float *xr;                       /* [n_tok][n_in] x as a kernel rounded it (scratch) */
    uint8_t *xa;                     /* [n_tok][xa_stride] x in the type's vec_dot_type (Q8_0
                                        or Q8_K blocks; float types: unused) */
    int64_t xa_stride;
    ev_block_q8_0 *xq;               /* [n_tok][nb] Q8_0 activations */
    float *xq_scale;                 /* [n_tok][nb] their scales */
    int32_t *xq_sum;                 /* [n_tok][nb] their block sums */
    int16_t *x16;                    /* [n_tok][nb][32] int16 activations (quantize_i16) */
    float *x16_scale;                /* [n_tok][nb] */
    float *bias;                     /* [n_out] */
    float *pack;                     /* EV_GEMM_PACK_FLOATS, 64-byte aligned */
    float *y, *y_ref;                /* [n_tok][n_out] */
} operands;

static void ops_new(operands *o, int32_t type, int64_t n_out, int64_t n_in, int64_t n_tok) {
    const ev_type_traits *tr = ev_type_get(type);
    const int64_t rb = ev_row_bytes(type, n_in), nb = n_in / EV_QK + 1;
    *o = (operands){.type = type, .n_out = n_out, .n_in = n_in, .n_tok = n_tok, .nb = n_in / EV_QK};
    o->w = malloc((size_t)(rb * n_out));
    o->wf = malloc(sizeof(float) * (size_t)(n_out * n_in));
    o->x = malloc(sizeof(float) * (size_t)(n_tok * n_in));
    o->xr = malloc(sizeof(float) * (size_t)(n_tok * n_in));
    const ev_type_traits *act = ev_act_type_get(tr->vec_dot_type);
    o->xa_stride = n_in / act->block_size * act->type_size;
    o->xa = malloc((size_t)(o->xa_stride * n_tok) + 1);
    o->xq = malloc(sizeof(ev_block_q8_0) * (size_t)(n_tok * nb));
    o->xq_scale = malloc(sizeof(float) * (size_t)(n_tok * nb));
    o->xq_sum = malloc(sizeof(int32_t) * (size_t)(n_tok * nb));
    o->x16 = malloc(sizeof(int16_t) * 32 * (size_t)(n_tok * nb));
    o->x16_scale = malloc(sizeof(float) * (size_t)(n_tok * nb));
    o->bias = malloc(sizeof(float) * (size_t)n_out);
    o->pack = aligned_alloc(64, sizeof(float) * (size_t)EV_GEMM_PACK_FLOATS);
    o->y = malloc(sizeof(float) * (size_t)(n_tok * n_out));
    o->y_ref = malloc(sizeof(float) * (size_t)(n_tok * n_out));
    for (int64_t r = 0; r < n_out; r++) {
        fill(o->wf + r * n_in, n_in, 1.0f + (float)(r % 5));
        tr->from_float(o->wf + r * n_in, o->w + r * rb, n_in);
        tr->to_float(o->w + r * rb, o->wf + r * n_in, n_in);
    }
    fill(o->x, n_tok * n_in, 2.0f);
    fill(o->bias, n_out, 1.0f);
    for (int64_t t = 0; t < n_tok && act->type != EV_TYPE_F32; t++)
        act->from_float(o->x + t * n_in, o->xa + t * o->xa_stride, n_in);
    for (int64_t t = 0; t < n_tok && act->type != EV_TYPE_F32; t++) {
        ev_block_q8_0 *q = o->xq + t * o->nb;   /* Q8_0 forms (for the integer products) */
        ev_quantize_row_q8_0(o->x + t * n_in, q, n_in);
        for (int64_t b = 0; b < o->nb; b++) {
            o->xq_scale[t * o->nb + b] = ev_fp16_to_f32(q[b].d);
            int32_t s = 0;
            for (int i = 0; i < EV_QK; i++) s += q[b].qs[i];
            o->xq_sum[t * o->nb + b] = s;
        }
    }
}

static void ops_free(operands *o) {
    void *p[] = {o->w, o->wf, o->x, o->xr, o->xa, o->xq, o->xq_scale, o->xq_sum, o->x16,
                 o->x16_scale, o->bias, o->pack, o->y, o->y_ref};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) free(p[i]);
}

/* gemm arguments over o with activations x (x_stride bytes a row) */
static ev_gemm_args args(const operands *o, const void *x, int64_t x_stride, const float *scale,
                         const int32_t *sum, float *y) {
    return (ev_gemm_args){.w = o->w, .w_stride = ev_row_bytes(o->type, o->n_in), .x = x,
                          .x_stride = x_stride, .x_scale = scale, .x_sum = sum, .bias = o->bias,
                          .y = y, .n_out = o->n_out, .n_in = o->n_in, .n_tok = o->n_tok,
                          .w_type = o->type, .pack = o->pack};
}

/* y against y_ref = bias + wf . xa (the activations the kernel multiplies, [n_tok][n_in]) in
 * double; returns the outputs off */
static int compare(const operands *o, const float *xa) {
    int bad = 0;
    for (int64_t t = 0; t < o->n_tok; t++)
        for (int64_t r = 0; r < o->n_out; r++) {
            double v = o->bias[r], mag = fabs(v);
            for (int64_t i = 0; i < o->n_in; i++) {
                const double p = (double)o->wf[r * o->n_in + i] * xa[t * o->n_in + i];
                v += p;
                mag += fabs(p);
            }
            const double got = o->y[t * o->n_out + r], ref = o->y_ref[t * o->n_out + r];
            bad += !(fabs(got - v) <= tol_for(o->n_in, mag)) ||
                   !(fabs(ref - v) <= tol_for(o->n_in, mag));
        }
    return bad;
}

/* the scalar reference: vec_dot over every (token, row) on x rows x_stride bytes apart */
static void ref_rows(const operands *o, const void *x, int64_t x_stride) {
    const ev_kernels *s = ev_kernels_scalar();
    const int64_t rb = ev_row_bytes(o->type, o->n_in);
    for (int64_t t = 0; t < o->n_tok; t++)
        for (int64_t r = 0; r < o->n_out; r++) {
            float v;
            s->vec_dot[o->type](o->n_in, &v, o->w + r * rb, (const uint8_t *)x + t * x_stride);
            o->y_ref[t * o->n_out + r] = v + o->bias[r];
        }
}

/* xr = xa dequantised (act: the type's activation format) */
static void xa_as_float(const operands *o, const ev_type_traits *act) {
    for (int64_t t = 0; t < o->n_tok; t++)
        act->to_float(o->xa + t * o->xa_stride, o->xr + t * o->n_in, o->n_in);
}

/* xr = the Q8_0 activations dequantised */
static void xq_as_float(const operands *o) {
    for (int64_t t = 0; t < o->n_tok; t++)
        ev_row_to_f32(EV_TYPE_Q8_0, o->xq + t * o->nb, o->xr + t * o->n_in, o->n_in);
}

/* Every kernel of set k for o's type; kernels the set takes from the scalar set are compared
 * too (trivially equal). Returns the outputs off, *ran counts the kernels run. */
static int check_kernels(const ev_kernels *k, operands *o, int *ran) {
    const ev_kernels *s = ev_kernels_scalar();
    const ev_type_traits *tr = ev_type_get(o->type);
    const int32_t ty = o->type;
    const int64_t fstride = o->n_in * (int64_t)sizeof(float);
    const int64_t qstride = o->nb * (int64_t)sizeof(ev_block_q8_0);
    const ev_type_traits *act = ev_act_type_get(tr->vec_dot_type);
    const int quantized = act->type != EV_TYPE_F32, q8_0_act = act->type == EV_TYPE_Q8_0;
    const void *xd = quantized ? (const void *)o->xa : o->x;   /* vec_dot / gemm operand */
    const int64_t xd_stride = quantized ? o->xa_stride : fstride;
    ev_gemm_args a;
    int bad = 0;
    if (quantized) xa_as_float(o, act);
    const float *xd_f = quantized ? o->xr : o->x;

    /* vec_dot */
    ref_rows(o, xd, xd_stride);
    for (int64_t t = 0; t < o->n_tok; t++)
        for (int64_t r = 0; r < o->n_out; r++) {
            float v;
            k->vec_dot[ty](o->n_in, &v, o->w + r * ev_row_bytes(ty, o->n_in),
                           (const uint8_t *)xd + t * xd_stride);
            o->y[t * o->n_out + r] = v + o->bias[r];
        }
    bad += compare(o, xd_f), ++*ran;

    /* gemm (few tokens): the same operands as vec_dot */
    if (k->gemm[ty]) {
        a = args(o, xd, xd_stride, q8_0_act ? o->xq_scale : NULL, NULL, o->y);
        k->gemm[ty](&a, 0, o->n_out);
        bad += compare(o, xd_f), ++*ran;
    }

    /* gemm_dq (many tokens, float activations): against the scalar gemm_dq */
    a = args(o, o->x, fstride, NULL, NULL, o->y_ref);
    s->gemm_dq[ty](&a, 0, o->n_out);
    a.y = o->y;
    k->gemm_dq[ty](&a, 0, o->n_out);
    bad += compare(o, o->x), ++*ran;

    /* gemm_q8x: Q8_0 activations with their sums, against the scalar vec_dot (Q8_K-dot
     * types: the scalar gemm_dq on those activations dequantised) */
    if (quantized && k->gemm_q8x[ty]) {
        xq_as_float(o);
        const int32_t *sums = o->xq_sum;
        if (q8_0_act) {
            ref_rows(o, o->xq, qstride);
        } else {
            a = args(o, o->xr, fstride, NULL, NULL, o->y_ref);
            s->gemm_dq[ty](&a, 0, o->n_out);
        }
        if (ty == EV_TYPE_Q6_K) {   /* its sums per half block, as two int16 */
            int32_t *h = malloc(sizeof(int32_t) * (size_t)(o->n_tok * o->nb));
            for (int64_t i = 0; i < o->n_tok * o->nb; i++) {
                int32_t s2[2] = {0, 0};
                for (int e = 0; e < EV_QK; e++) s2[e / 16] += o->xq[i].qs[e];
                h[i] = (int32_t)((uint32_t)(uint16_t)s2[0] | ((uint32_t)(uint16_t)s2[1] << 16));
            }
            sums = h;
        }
        a = args(o, o->xq, qstride, o->xq_scale, sums, o->y);
        k->gemm_q8x[ty](&a, 0, o->n_out);
        if (sums != o->xq_sum) free((void *)sums);
        bad += compare(o, o->xr), ++*ran;
    }

    /* gemm_q16x: int16 activations (the set's quantize_i16), against the scalar gemm_dq on
     * those activations dequantised */
    if (q8_0_act && k->gemm_q16x[ty] && k->quantize_i16) {
        for (int64_t t = 0; t < o->n_tok; t++) {
            k->quantize_i16(o->x + t * o->n_in, o->x16 + t * o->nb * 32, o->x16_scale + t * o->nb,
                            o->n_in);
            for (int64_t i = 0; i < o->n_in; i++)
                o->xr[t * o->n_in + i] =
                    (float)o->x16[t * o->nb * 32 + i] * o->x16_scale[t * o->nb + i / 32];
        }
        a = args(o, o->xr, fstride, NULL, NULL, o->y_ref);
        s->gemm_dq[ty](&a, 0, o->n_out);
        a = args(o, o->x16, o->nb * 64, o->x16_scale, NULL, o->y);
        k->gemm_q16x[ty](&a, 0, o->n_out);
        bad += compare(o, o->xr), ++*ran;
    }

    /* gemm_bf16x: float activations rounded to bf16, against the scalar gemm_dq on those */
    if (k->gemm_bf16x[ty]) {
        for (int64_t i = 0; i < o->n_tok * o->n_in; i++)
            o->xr[i] = ev_bf16_to_f32(ev_f32_to_bf16(o->x[i]));
        a = args(o, o->xr, fstride, NULL, NULL, o->y_ref);
        s->gemm_dq[ty](&a, 0, o->n_out);
        a = args(o, o->x, fstride, NULL, NULL, o->y);
        k->gemm_bf16x[ty](&a, 0, o->n_out);
        bad += compare(o, o->xr), ++*ran;
    }

    /* gemv_x16 (one token): float activations rounded to the weight's 16-bit type, against
     * the scalar gemm_dq on those */
    if (k->gemv_x16[ty] && o->n_tok == 1) {
        for (int64_t i = 0; i < o->n_in; i++) {
            uint16_t h[1];
            tr->from_float(o->x + i, h, 1);
            tr->to_float(h, o->xr + i, 1);
        }
        a = args(o, o->xr, fstride, NULL, NULL, o->y_ref);
        s->gemm_dq[ty](&a, 0, o->n_out);
        a = args(o, o->x, fstride, NULL, NULL, o->y);
        k->gemv_x16[ty](&a, 0, o->n_out);
        bad += compare(o, o->xr), ++*ran;
    }
    return bad;
}

/* The SIMD vec_dot kernels of the K-quants and IQ4 each family of sets has (by name prefix:
 * "avx2", "avx512-*"; "neon", "neon-dotprod"); the scalar set has none. */
static const struct { const char *prefix; int32_t types[8]; } K_DOTS[] = {
    {"avx", {EV_TYPE_Q2_K, EV_TYPE_Q3_K, EV_TYPE_Q4_K, EV_TYPE_Q5_K, EV_TYPE_Q6_K, EV_TYPE_IQ4_XS}},
    {"neon", {EV_TYPE_Q2_K, EV_TYPE_Q3_K, EV_TYPE_Q4_K, EV_TYPE_Q5_K, EV_TYPE_Q6_K, EV_TYPE_IQ4_XS}},
};

static int has_k_dot(const ev_kernels *k, int32_t type) {
    for (size_t f = 0; f < sizeof K_DOTS / sizeof K_DOTS[0]; f++) {
        if (strncmp(k->name, K_DOTS[f].prefix, strlen(K_DOTS[f].prefix)) != 0) continue;
        for (int i = 0; i < 8; i++)
            if (K_DOTS[f].types[i] == type && type != 0) return 1;
    }
    return 0;
}

/* every set has every kernel of every type of the table, and every shared helper */
static void test_tables_complete(const ev_kernels *sets[], int n_sets) {
    for (int i = 0; i < ev_type_count(); i++) {
        const ev_type_traits *tr = ev_type_at(i);
        CHECK_MSG(tr->type >= 0 && tr->type <= EV_TYPE_MAX && ev_type_get(tr->type) == tr,
                  "type table entry %d (%s): id %d", i, tr->name, (int)tr->type);
        for (int si = 0; si < n_sets; si++) {
            const ev_kernels *k = sets[si];
            CHECK_MSG(k->vec_dot[tr->type] && k->gemm_dq[tr->type],
                      "%s has no vec_dot / gemm_dq for %s", k->name, tr->name);
            /* no set claims a kernel of the wrong activation format: gemm_q8x takes Q8_0
             * activations (of the Q8_K-dot types only Q4_K/Q5_K/IQ4_XS/Q6_K, below), the bf16
             * one BF16 weights */
            CHECK_MSG(tr->vec_dot_type == EV_TYPE_Q8_0 || tr->type == EV_TYPE_Q4_K ||
                          tr->type == EV_TYPE_Q5_K || tr->type == EV_TYPE_IQ4_XS ||
                          tr->type == EV_TYPE_Q6_K || !k->gemm_q8x[tr->type],
                      "%s has a Q8_0-activation product for %s, whose dots take %s", k->name,
                      tr->name, ev_act_type_get(tr->vec_dot_type)->name);
            /* and only the weights whose integer products are tested against the scalar
             * ones (test_kernels.c, test_kquants_simd.c) have them: Q8_0/Q4_0, for
             * gemm_q16x Q4_K/Q5_K (the m term from the int16 activation sums) and IQ4_XS/
             * Q6_K (ev_matmul's scratch holds int16 activations only for these types), for
             * gemm_q8x Q4_K/Q5_K/IQ4_XS/Q6_K (the m term / offset from the int8 sums, Q6_K's
             * per half block). Q4_1/Q5_1 take Q8_0 activations too, but none of
             * them computes their m term. */
            CHECK_MSG(tr->type == EV_TYPE_Q8_0 || tr->type == EV_TYPE_Q4_0 ||
                      ((!k->gemm_q8x[tr->type] || tr->type == EV_TYPE_Q4_K ||
                        tr->type == EV_TYPE_Q5_K || tr->type == EV_TYPE_IQ4_XS ||
                        tr->type == EV_TYPE_Q6_K) &&
                       (!k->gemm_q16x[tr->type] || tr->type == EV_TYPE_Q4_K ||
                        tr->type == EV_TYPE_Q5_K || tr->type == EV_TYPE_IQ4_XS ||
                        tr->type == EV_TYPE_Q6_K)),
                      "%s claims an integer product for %s: test it against the scalar one",
                      k->name, tr->name);
            CHECK_MSG(tr->type == EV_TYPE_BF16 || !k->gemm_bf16x[tr->type],
                      "%s has a bf16 product for %s", k->name, tr->name);
            /* gemv_x16 rounds the activations to the weight's own 16-bit type: F16/BF16
             * weights, fast sets only (the default sets keep float32 activations) */
            CHECK_MSG(!k->gemv_x16[tr->type] ||
                          ((tr->type == EV_TYPE_F16 || tr->type == EV_TYPE_BF16) &&
                           strstr(k->name, "-fast") != NULL),
                      "%s has a 16-bit-activation row for %s", k->name, tr->name);
            /* the register-blocked few-token kernels of the SIMD sets exist for the five
             * types they were written for, and the AVX-512 decode row kernels for Q4_K, Q6_K
             * and IQ4_XS (x86_avx512_kgemv.c; compared below, n_tok = 1, and in
             * test_kquants_simd.c); of the K-quants and IQ4
             * a set has exactly the vec_dot kernels K_DOTS lists (each compared with the
             * scalar one below and in test_kquants.c), the others are the scalar set's */
            if (tr->type != EV_TYPE_F32 && tr->type != EV_TYPE_F16 && tr->type != EV_TYPE_BF16 &&
                tr->type != EV_TYPE_Q8_0 && tr->type != EV_TYPE_Q4_0) {
                const int own = k->vec_dot[tr->type] != ev_kernels_scalar()->vec_dot[tr->type];
                const int gemm_ok = !k->gemm[tr->type] ||
                                    ((tr->type == EV_TYPE_Q4_K || tr->type == EV_TYPE_Q6_K ||
                                      tr->type == EV_TYPE_IQ4_XS) && own);
                CHECK_MSG(gemm_ok && own == has_k_dot(k, tr->type),
                          "%s %s a SIMD vec_dot for %s", k->name, own ? "claims" : "lacks",
                          tr->name);
            }
        }
    }
    for (int si = 0; si < n_sets; si++) {
        const ev_kernels *k = sets[si];
        CHECK_MSG(k->name && k->dot_f32 && k->axpy_f32 && k->dot_f16_f32 && k->axpy_f16_f32 &&
                  k->sgemm_f32 && k->exp_sum_f32 && k->gelu_tanh_f32 && k->quantize_q8_0 &&
                  k->quantize_q8_K,
                  "%s lacks a shared helper", k->name);
        /* every SIMD set has its own Q8_K quantiser (bit-identical: test_kquants.c) */
        CHECK_MSG((k == ev_kernels_scalar()) == (k->quantize_q8_K == ev_quantize_row_q8_K),
                  "%s: quantize_q8_K %s the scalar one", k->name,
                  k == ev_kernels_scalar() ? "is not" : "is");
    }
    char buf[128];
    CHECK(strcmp(ev_type_list(buf, sizeof buf),
                 "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, "
                 "IQ4_NL, IQ4_XS") == 0);
    CHECK(ev_type_get(9) == NULL && ev_type_get(-1) == NULL && ev_type_at(ev_type_count()) == NULL);
}

static void test_every_kernel_against_scalar(const ev_kernels *sets[], int n_sets) {
    const struct { int64_t n_out, n_in, n_tok; } shapes[] = {
        {37, 96, 3}, {21, 2112, 5}, {40, 288, 19}, {17, 37, 6},   /* {17, 37}: floats only */
        {23, 768, 5}, {19, 512, 17},    /* the 256-element blocks too */
        {29, 1024, 1}, {7, 256, 1}};     /* decode (the K-quant row kernels) */
    for (int si = 0; si < n_sets; si++) {
        int ran = 0;
        for (int ti = 0; ti < ev_type_count(); ti++) {
            const ev_type_traits *tr = ev_type_at(ti);
            for (size_t hi = 0; hi < sizeof shapes / sizeof shapes[0]; hi++) {
                if (shapes[hi].n_in % tr->block_size) continue;
                operands o;
                ops_new(&o, tr->type, shapes[hi].n_out, shapes[hi].n_in, shapes[hi].n_tok);
                int bad = check_kernels(sets[si], &o, &ran);
                CHECK_MSG(bad == 0, "%s %s %lldx%lld n_tok=%lld: %d outputs off", sets[si]->name,
                          tr->name, (long long)o.n_out, (long long)o.n_in, (long long)o.n_tok, bad);
                ops_free(&o);
            }
        }
        printf("%s: %d kernel runs against the scalar reference\n", sets[si]->name, ran);
    }
}

static void sentinel_dot(int64_t n, float *out, const void *w, const void *x) {
    *out = 42.0f;
}

/* a set that implements one entry gets every other from its base */
static void test_derive_fills_from_base(const ev_kernels *best) {
    const ev_kernels *s = ev_kernels_scalar();
    ev_kernels own = {.name = "one-entry"}, k;
    own.vec_dot[EV_TYPE_F32] = sentinel_dot;
    ev_kernels_derive(&k, s, &own);
    CHECK(strcmp(k.name, "one-entry") == 0 && k.vec_dot[EV_TYPE_F32] == sentinel_dot);
    for (int i = 0; i < ev_type_count(); i++) {
        const int32_t t = ev_type_at(i)->type;
        if (t != EV_TYPE_F32) CHECK(k.vec_dot[t] == s->vec_dot[t]);
        CHECK(k.gemm_dq[t] == s->gemm_dq[t] && k.gemm[t] == s->gemm[t]);
    }
    CHECK(k.sgemm_f32 == s->sgemm_f32 && k.quantize_q8_0 == s->quantize_q8_0 &&
          k.quantize_q8_K == s->quantize_q8_K);
    ev_kernels_derive(&k, best, &(ev_kernels){.name = "copy"});
    CHECK(k.vec_dot[EV_TYPE_Q8_0] == best->vec_dot[EV_TYPE_Q8_0] &&
          k.gemm_q16x[EV_TYPE_Q8_0] == best->gemm_q16x[EV_TYPE_Q8_0] &&
          k.quantize_i16 == best->quantize_i16);
}

/* ev_matmul on a hand-made set whose entries for one type are all NULL runs the scalar
 * kernels (before: it returned without writing y); arguments no set can multiply give -1 and
 * a NaN y, never a stale one */
static void test_matmul_missing_entries(const ev_kernels *best) {
    ev_pool *pool = ev_pool_new(2);
    for (int ti = 0; ti < ev_type_count(); ti++) {
        const int32_t ty = ev_type_at(ti)->type;
        ev_kernels holes = *best;
        holes.name = "holes";
        holes.vec_dot[ty] = NULL;
        holes.gemm[ty] = holes.gemm_dq[ty] = holes.gemm_q16x[ty] = NULL;
        holes.gemm_q8x[ty] = holes.gemm_bf16x[ty] = holes.gemv_x16[ty] = NULL;
        holes.quantize_q8_0 = NULL;
        holes.quantize_q8_K = NULL;
        const int64_t toks[] = {1, 3, 5, 20};
        for (size_t ki = 0; ki < sizeof toks / sizeof toks[0]; ki++) {
            operands o;
            ops_new(&o, ty, 33, 256, toks[ki]);
            const size_t sb = ev_matmul_scratch_bytes(ty, o.n_in, o.n_tok, 2);
            void *scratch = aligned_alloc(64, (sb + 63) / 64 * 64 + 64);
            for (int64_t i = 0; i < o.n_tok * o.n_out; i++) o.y[i] = o.y_ref[i] = NAN;
            int st = ev_matmul(pool, &holes, ty, o.w, o.bias, o.n_out, o.n_in, o.x, o.n_tok,
                               o.y, scratch);
            int st_ref = ev_matmul(pool, ev_kernels_scalar(), ty, o.w, o.bias, o.n_out, o.n_in,
                                   o.x, o.n_tok, o.y_ref, scratch);
            int bad = 0;
            for (int64_t i = 0; i < o.n_tok * o.n_out; i++) {
                const double tol = 1e-4 * (fabs(o.y_ref[i]) + 1.0);
                bad += !(fabs((double)o.y[i] - o.y_ref[i]) <= tol);
            }
            CHECK_MSG(st == 0 && st_ref == 0 && bad == 0,
                      "missing %s entries, n_tok=%lld: status %d, %d outputs off the scalar set's",
                      ev_type_at(ti)->name, (long long)o.n_tok, st, bad);
            free(scratch);
            ops_free(&o);
        }
    }
    float y[4] = {1, 2, 3, 4}, x[32] = {0};
    uint8_t w[4 * 34] = {0};
    CHECK(ev_matmul(NULL, best, 9, w, NULL, 2, 32, x, 2, y, NULL) == -1);   /* Q8_1: no weight */
    CHECK(isnan(y[0]) && isnan(y[1]) && isnan(y[2]) && isnan(y[3]));
    y[0] = 1.0f;
    CHECK(ev_matmul(NULL, best, EV_TYPE_Q8_0, w, NULL, 1, 33, x, 1, y, NULL) == -1);
    CHECK(isnan(y[0]));
    ev_pool_free(pool);
}

int main(void) {
    const ev_kernels *sets[MAX_SETS];
    const int n_sets = all_sets(sets);
    test_tables_complete(sets, n_sets);
    test_every_kernel_against_scalar(sets, n_sets);
    test_derive_fills_from_base(ev_kernels_best());
    test_matmul_missing_entries(ev_kernels_best());
    return tu_report("test_dispatch");
}
