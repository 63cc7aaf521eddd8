/*
 * prefill.c - one weight type's many-token matrix product (Y[T][M] = X[T][K] . W[M][K]^T, what
 * a prefill chunk or the ViT runs), ours against what llama.cpp runs for it on an A76 without
 * i8mm, on identical random operands, bracketed by marker calls so that a qemu instruction
 * trace counts each product alone.
 *
 *     prefill TYPE K M1 M2 T1 T2     TYPE: q4_0 q8_0 f16 q4_0-fast q8_0-fast; M multiples of
 *                                    16, T of 4, T >= 16
 *     prefill f16 K M1 M2 1 1        F16 decode: one token
 *
 * Ours: ev_matmul on one thread (pool NULL) with the NEON set (ev_kernels_arm_neon(), the
 * default precision; TYPE-fast: ev_kernels_arm_neon_fast(), `precision: fast`), the entry
 * point the decoder and the ViT call (linear.c). From EV_MATMUL_INT_MIN_TOK tokens on the
 * dotprod set multiplies Q4_0/Q8_0 weights on integer activations with SDOT
 * (arm_neon_qgemm.c): gemm_q16x (int16 activations split into two byte planes, 2 SDOT
 * chains a block) by default, gemm_q8x (Q8_0 activations, one chain) in the fast set; F16
 * from EV_MATMUL_FLOAT_MIN_TOK tokens on runs gemm_dq (ev_neon_gemm_dq: weights dequantised
 * to float panels, float FMAs). Its own quantising, packing and dequantising are counted.
 * llama.cpp (tools/llamacpp_tools.py's tree):
 *  - Q4_0 / Q8_0: the weights repacked at load (not counted; the harness repacks them as
 *    ggml's make_block_q4_0x4 / make_block_q8_0x4 with interleave 4, which
 *    ggml_repack_get_optimal_repack_type picks with dotprod and without i8mm), the
 *    activations quantised 4 tokens at a time (ggml_quantize_mat_q8_0_4x4, counted), then one
 *    ggml_gemm_q{4,8}_0_4x4_q8_0 over all rows and tokens (ggml's chunk loop not counted);
 *  - F16: llamafile_sgemm, as ggml_compute_forward_mul_mat tries it first with the F32
 *    activations: built for armv8.2-a+dotprod (no FP16 vector arithmetic) that is
 *    tinyBLAS<4, float32x4_t, float32x4_t, ggml_fp16_t, float, float>.
 *    Built with FP16 vector arithmetic (+fp16, what a native build on the A76 adds), that
 *    path does not exist: llamafile declines, ggml converts the activations to F16 (the
 *    harness's loop, counted) and llamafile runs tinyBLAS<8, float16x8_t, ...> (F16 sums);
 *  - F16 with one token (decode): llamafile_sgemm declines n < 2, so ggml converts the
 *    activations to F16 (F16's vec_dot_type; the harness's own conversion loop, counted) and
 *    runs ggml_vec_dot_f16 (vec.cpp) for every row; ours is ev_matmul again (one token: the
 *    NEON set's gemm[F16], float tiles of 4 rows).
 *
 * Regions, each between nc_region_begin() and nc_region_end():
 *   0. a known loop of 3 instructions, 10 times     1. the same loop 110 times
 *   2, 3. the call site (timed) around an empty function, twice (one site serves both
 *      sides, so its count is subtracted from both)
 *   4-7. ours at (M1,T1) (M2,T1) (M1,T2) (M2,T2)    8-11. ggml's at the same shapes
 * and prints "TYPE[ decode] set=<kernel set> ggml=base|+fp16 rel=<|ours - ggml| / |ggml| at
 * (M2,T2)> agree=0|1";
 * exits 1 when they disagree (relative error above 2e-2 for Q4_0/Q8_0, whose activations
 * ggml rounds to Q8_0, 1e-4 for F16, 1e-3 for F16 decode, whose activations ggml rounds to
 * F16, 2e-2 for F16 with ggml built +fp16, which sums in F16): the harness would be calling
 * the wrong functions or laying out the wrong blocks.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "nc_common.h"
#include "types.h"

/* llama.cpp's (ggml-cpu/repack.h, extern "C"; ggml_shim.cpp) */
void ggml_quantize_mat_q8_0_4x4(const float *x, void *vy, int64_t k);
void ggml_gemm_q4_0_4x4_q8_0(int n, float *s, size_t bs, const void *vx, const void *vy, int nr,
                             int nc);
void ggml_gemm_q8_0_4x4_q8_0(int n, float *s, size_t bs, const void *vx, const void *vy, int nr,
                             int nc);
void ggml_vec_dot_f16(int n, float *s, size_t bs, ev_fp16 *x, size_t bx, ev_fp16 *y, size_t by,
                      int nrc);
int nc_ggml_fp16_arith(void);
int nc_ggml_sgemm(int64_t m, int64_t n, int64_t k, const void *a, const void *b, float *c,
                  int atype, int btype);
#define NC_GGML_TYPE_F32 0
#define NC_GGML_TYPE_F16 1

/* float to IEEE half, round to nearest even (FCVT) */
static inline ev_fp16 ev_fp16_of(float v) {
    const __fp16 h = (__fp16)v;
    ev_fp16 bits;
    memcpy(&bits, &h, sizeof bits);
    return bits;
}



/* one product: K columns, M rows, T tokens; the operands live in the context */
typedef struct nc_ctx {
    int32_t type;               /* EV_TYPE_* */
    int64_t k;
    const void *w;              /* ours: ggml's GGUF rows [M2][K] */
    const void *w_ggml;         /* ggml: repacked (Q4_0/Q8_0) or the same rows (F16) */
    const float *x;             /* [T2][K] */
    void *scratch;              /* ours: ev_matmul's; ggml: the quantised activations */
    float *y;                   /* [T2][M2] */
    ev_fp16 *xh;                /* F16: ggml's F16 copy of the activations [T2][K] */
    const ev_kernels *kset;     /* ours: the NEON set, or its fast variant (TYPE-fast) */
} nc_ctx;

typedef void (*product_fn)(const nc_ctx *c, int64_t m, int64_t t);

__attribute__((noipa)) static void ours(const nc_ctx *c, int64_t m, int64_t t) {
    if (ev_matmul(NULL, c->kset, c->type, c->w, NULL, m, c->k, c->x, t, c->y,
                  c->scratch) != 0)
        abort();
}

__attribute__((noipa)) static void ggml(const nc_ctx *c, int64_t m, int64_t t) {
    if (c->type == EV_TYPE_F16 && t == 1) {
        for (int64_t i = 0; i < c->k; i++) c->xh[i] = ev_fp16_of(c->x[i]);
        for (int64_t r = 0; r < m; r++)
            ggml_vec_dot_f16((int)c->k, c->y + r, 0, (ev_fp16 *)c->w_ggml + r * c->k, 0, c->xh, 0,
                             1);
        return;
    }
    if (c->type == EV_TYPE_F16) {
        /* ggml_compute_forward_mul_mat: llamafile on the F32 activations; if it declines (a
         * build with FP16 vector arithmetic has no such path), the activations converted to
         * F16, F16's vec_dot_type, and llamafile again */
        if (nc_ggml_sgemm(m, t, c->k, c->w_ggml, c->x, c->y, NC_GGML_TYPE_F16, NC_GGML_TYPE_F32))
            return;
        for (int64_t i = 0; i < t * c->k; i++) c->xh[i] = ev_fp16_of(c->x[i]);
        if (!nc_ggml_sgemm(m, t, c->k, c->w_ggml, c->xh, c->y, NC_GGML_TYPE_F16, NC_GGML_TYPE_F16))
            abort();
        return;
    }
    const size_t row = (size_t)(c->k / EV_QK) * sizeof(ev_block_q8_0);
    for (int64_t i = 0; i < t; i += 4)
        ggml_quantize_mat_q8_0_4x4(c->x + i * c->k, (uint8_t *)c->scratch + i * row, c->k);
    if (c->type == EV_TYPE_Q4_0)
        ggml_gemm_q4_0_4x4_q8_0((int)c->k, c->y, (size_t)m, c->w_ggml, c->scratch, (int)t, (int)m);
    else
        ggml_gemm_q8_0_4x4_q8_0((int)c->k, c->y, (size_t)m, c->w_ggml, c->scratch, (int)t, (int)m);
}

__attribute__((noipa)) static void nc_empty(const nc_ctx *c, int64_t m, int64_t t) {}

/* one call between the markers: the same instructions around it whatever the shape */
__attribute__((noipa)) static void timed(product_fn f, const nc_ctx *c, int64_t m, int64_t t) {
    nc_region_begin();
    f(c, m, t);
    nc_region_end();
}


static float uniform(void) {   /* [-1, 1) */
    return (float)(next_u64() >> 40) / (float)(1 << 23) - 1.0f;
}

/* M rows of K weights of the type: random codes, scales in [2^-8, 2^-7) */
static void *make_weights(int32_t type, int64_t m, int64_t k) {
    const size_t n = (size_t)(m * k);
    if (type == EV_TYPE_F16) {
        ev_fp16 *w = malloc(n * sizeof *w);
        for (size_t i = 0; w && i < n; i++) w[i] = ev_fp16_of(uniform());
        return w;
    }
    const size_t nb = n / EV_QK;
    if (type == EV_TYPE_Q4_0) {
        ev_block_q4_0 *w = malloc(nb * sizeof *w);
        for (size_t b = 0; w && b < nb; b++) {
            w[b].d = ev_fp16_of((1.0f + (float)(next_u64() % 1024) / 1024.0f) / 256.0f);
            for (int i = 0; i < EV_QK / 2; i++) w[b].qs[i] = (uint8_t)next_u64();
        }
        return w;
    }
    ev_block_q8_0 *w = malloc(nb * sizeof *w);
    for (size_t b = 0; w && b < nb; b++) {
        w[b].d = ev_fp16_of((1.0f + (float)(next_u64() % 1024) / 1024.0f) / 256.0f);
        for (int i = 0; i < EV_QK; i++) w[b].qs[i] = (int8_t)(next_u64() % 255 - 127);
    }
    return w;
}

/* ggml's repack for dotprod without i8mm (repack.cpp: repack_q{4,8}_0_to_q{4,8}_0_4_bl with
 * make_block_q{4,8}_0x4, interleave 4): rows in groups of 4, each group's blocks l as one
 * block of 4 scales then the 4 rows' codes 4 bytes at a time round-robin; Q4_0's nibbles
 * XOR 0x88 (offset-8 codes to two's complement) */
static void *repack_x4(int32_t type, const void *src, int64_t m, int64_t k) {
    const int64_t nb = k / EV_QK;
    const size_t qbytes = type == EV_TYPE_Q4_0 ? EV_QK / 2 : EV_QK;
    const size_t in_bytes = type == EV_TYPE_Q4_0 ? sizeof(ev_block_q4_0) : sizeof(ev_block_q8_0);
    const size_t out_bytes = 4 * sizeof(ev_fp16) + 4 * qbytes;
    uint8_t *out = malloc((size_t)(m / 4 * nb) * out_bytes);
    if (!out) return NULL;
    for (int64_t g = 0; g < m / 4; g++) {
        for (int64_t l = 0; l < nb; l++) {
            uint8_t *o = out + (size_t)(g * nb + l) * out_bytes;
            const uint8_t *in[4];
            for (int i = 0; i < 4; i++) {
                in[i] = (const uint8_t *)src + (size_t)((4 * g + i) * nb + l) * in_bytes;
                memcpy(o + 2 * i, in[i], sizeof(ev_fp16));   /* d, the block's first field */
            }
            for (size_t j = 0; j < 4 * qbytes / 4; j++) {
                uint32_t v;
                memcpy(&v, in[j % 4] + sizeof(ev_fp16) + (j / 4) * 4, 4);
                if (type == EV_TYPE_Q4_0) v ^= 0x88888888u;
                memcpy(o + 8 + 4 * j, &v, 4);
            }
        }
    }
    return out;
}

static int type_of(const char *name) {
    return strcmp(name, "q4_0") == 0 || strcmp(name, "q4_0-fast") == 0   ? EV_TYPE_Q4_0
           : strcmp(name, "q8_0") == 0 || strcmp(name, "q8_0-fast") == 0 ? EV_TYPE_Q8_0
           : strcmp(name, "f16") == 0                                    ? EV_TYPE_F16
                                                                         : -1;
}

int main(int argc, char **argv) {
    const int type = argc == 7 ? type_of(argv[1]) : -1;
    const long k = argc == 7 ? atol(argv[2]) : 0;
    const long m1 = argc == 7 ? atol(argv[3]) : 0, m2 = argc == 7 ? atol(argv[4]) : 0;
    const long t1 = argc == 7 ? atol(argv[5]) : 0, t2 = argc == 7 ? atol(argv[6]) : 0;
    const int decode = type == EV_TYPE_F16 && t1 == 1 && t2 == 1;
    if (type < 0 || k < EV_QK || k % EV_GEMM_KC || m1 < 16 || m1 % 16 || m2 <= m1 || m2 % 16 ||
        (!decode && (t1 < EV_MATMUL_FLOAT_MIN_TOK || t1 % 4 || t2 <= t1 || t2 % 4))) {
        fprintf(stderr, "usage: %s q4_0|q8_0|f16 K M1 M2 T1 T2   (K a multiple of %d, M1 < M2 "
                "multiples of 16, %d <= T1 < T2 multiples of 4; f16 with T1 = T2 = 1: decode;"
                " q4_0-fast, q8_0-fast: the fast set)\n",
                argv[0], EV_GEMM_KC, EV_MATMUL_FLOAT_MIN_TOK);
        return 2;
    }
    const int fast = strstr(argv[1], "-fast") != NULL;
    const ev_kernels *kset = fast ? ev_kernels_arm_neon_fast() : ev_kernels_arm_neon();
    if (!kset) {
        fprintf(stderr, "no NEON kernel set%s\n", fast ? " with dotprod" : "");
        return 2;
    }
    nc_ctx c = {.type = type, .k = k, .kset = kset};
    c.w = make_weights(type, m2, k);
    c.w_ggml = type == EV_TYPE_F16 ? c.w : repack_x4(type, c.w, m2, k);
    float *x = malloc(sizeof(float) * (size_t)(t2 * k));
    const size_t ours_bytes = ev_matmul_scratch_bytes(type, k, t2, 1);
    const size_t ggml_bytes = (size_t)(t2 * k / EV_QK) * sizeof(ev_block_q8_0);
    c.scratch = aligned_alloc(64, ((ours_bytes > ggml_bytes ? ours_bytes : ggml_bytes) + 63) &
                                      ~(size_t)63);
    float *yo = malloc(sizeof(float) * (size_t)(t2 * m2));
    c.y = malloc(sizeof(float) * (size_t)(t2 * m2));
    c.xh = malloc(sizeof(ev_fp16) * (size_t)(t2 * k));
    if (!c.w || !c.w_ggml || !x || !c.scratch || !yo || !c.y || !c.xh) return 2;
    for (long i = 0; i < t2 * k; i++) x[i] = uniform();
    c.x = x;

    const long ms[4] = {m1, m2, m1, m2}, ts[4] = {t1, t1, t2, t2};
    nc_calibrate();
    timed(nc_empty, &c, m1, t1);
    timed(nc_empty, &c, m1, t1);
    for (int s = 0; s < 4; s++) timed(ours, &c, ms[s], ts[s]);
    memcpy(yo, c.y, sizeof(float) * (size_t)(t2 * m2));
    for (int s = 0; s < 4; s++) timed(ggml, &c, ms[s], ts[s]);

    double diff = 0, norm = 0;
    for (long i = 0; i < t2 * m2; i++) {
        diff += ((double)yo[i] - c.y[i]) * ((double)yo[i] - c.y[i]);
        norm += (double)c.y[i] * c.y[i];
    }
    const double rel = sqrt(diff / norm);
    const double tol = type != EV_TYPE_F16 ? 2e-2
                       : nc_ggml_fp16_arith() ? 2e-2
                       : decode ? 1e-3
                                : 1e-4;
    const int agree = rel <= tol;
    printf("%s%s set=%s ggml=%s rel=%.3g agree=%d\n", argv[1], decode ? " decode" : "",
           kset->name, nc_ggml_fp16_arith() ? "+fp16" : "base", rel, agree);
    return agree ? 0 : 1;
}
