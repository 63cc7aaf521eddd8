/*
 * rows.c - the text decoder's row operations, split across the session's thread pool by rows:
 * RMSNorm, SwiGLU's silu(gate) * up, the residual add and the rotary embedding of q and k.
 *
 * During prefill these ran on the calling thread while the pool's other threads spun (6 % of a
 * 512-token prefill in sched_yield). Small calls (decode: one row) stay on the calling thread,
 * where waking the pool would cost more than the work. The arithmetic per element is the
 * serial functions' of kernels.c, except silu, whose exp now comes from the kernel set.
 */
#include "session.h"

#define INLINE_ELEMS 16384   /* calls with fewer elements than this run on the calling thread */
#define SILU_CHUNK 256       /* silu: elements per vector-exp call (a stack buffer) */

typedef struct rows_job {
    float *y;                /* [rows, n] output (or the row operand updated in place) */
    const float *x;          /* [rows, n] input */
    const float *w;          /* [n] RMSNorm weight */
    int64_t n;               /* elements per row */
    float eps;
    const ev_kernels *k;
} rows_job;

static void run_rows(edgevlm_session *s, ev_task_fn fn, rows_job *j, int64_t rows) {
    if (rows < 2 || rows * j->n < INLINE_ELEMS) {
        fn(j, 0, rows, 0);
        return;
    }
    ev_pool_for(s->pool, rows, 1, fn, j);
}

static void rmsnorm_task(void *ctx, int64_t r0, int64_t r1, int tid) {
    const rows_job *j = ctx;
    ev_rmsnorm(j->y + r0 * j->n, j->x + r0 * j->n, j->w, r1 - r0, j->n, j->eps);
}

void ev_rows_rmsnorm(edgevlm_session *s, float *out, const float *x, const float *w,
                     int64_t rows, int64_t n, float eps) {
    rows_job j = {out, x, w, n, eps, s->kernels};
    run_rows(s, rmsnorm_task, &j, rows);
}

/* gate = silu(gate) * up = gate / (1 + exp(-gate)) * up */
static void silu_mul_task(void *ctx, int64_t r0, int64_t r1, int tid) {
    const rows_job *j = ctx;
    float e[SILU_CHUNK];
    const int64_t end = r1 * j->n;
    for (int64_t i = r0 * j->n; i < end; i += SILU_CHUNK) {
        const int64_t m = end - i < SILU_CHUNK ? end - i : SILU_CHUNK;
        float *g = j->y + i;
        const float *u = j->x + i;
        for (int64_t t = 0; t < m; t++) e[t] = -g[t];
        j->k->exp_sum_f32(e, m, 0.0f);                /* e = exp(-gate) */
        for (int64_t t = 0; t < m; t++) g[t] = g[t] / (1.0f + e[t]) * u[t];
    }
}

void ev_rows_silu_mul(edgevlm_session *s, float *gate, const float *up, int64_t rows, int64_t n) {
    rows_job j = {gate, up, NULL, n, 0.0f, s->kernels};
    run_rows(s, silu_mul_task, &j, rows);
}

static void add_task(void *ctx, int64_t r0, int64_t r1, int tid) {
    const rows_job *j = ctx;
    ev_add(j->y + r0 * j->n, j->x + r0 * j->n, (r1 - r0) * j->n);
}

void ev_rows_add(edgevlm_session *s, float *y, const float *x, int64_t rows, int64_t n) {
    rows_job j = {y, x, NULL, n, 0.0f, s->kernels};
    run_rows(s, add_task, &j, rows);
}

/* rows = tokens: the n_q heads of q and the n_k heads of k of each row rotated in place;
 * row i's heads start at q + i * q_stride and k + i * k_stride (floats) */
typedef struct rope_job {
    float *q, *k;
    int64_t q_stride, k_stride;
    int n_q, n_k, hd;
    const float *cos, *sin;  /* [rows, hd / 2] */
} rope_job;

static void rope_task(void *ctx, int64_t r0, int64_t r1, int tid) {
    const rope_job *j = ctx;
    for (int64_t i = r0; i < r1; i++) {
        const float *c = j->cos + i * (j->hd / 2), *sn = j->sin + i * (j->hd / 2);
        ev_rope_rotate_half(j->q + i * j->q_stride, j->n_q, j->hd, c, sn);
        ev_rope_rotate_half(j->k + i * j->k_stride, j->n_k, j->hd, c, sn);
    }
}

void ev_rows_rope(edgevlm_session *s, float *q, int64_t q_stride, int n_q, float *k,
                  int64_t k_stride, int n_k, int hd, int64_t rows, const float *cos,
                  const float *sin) {
    rope_job j = {q, k, q_stride, k_stride, n_q, n_k, hd, cos, sin};
    if (rows < 2 || rows * n_q * hd < INLINE_ELEMS) {
        rope_task(&j, 0, rows, 0);
        return;
    }
    ev_pool_for(s->pool, rows, 1, rope_task, &j);
}

void ev_rows_rope_qk(edgevlm_session *s, float *q, float *k, int64_t rows, const float *cos,
                     const float *sin) {
    const edgevlm_model_info *in = &s->model->info;
    const int hd = in->head_dim;
    ev_rows_rope(s, q, (int64_t)in->n_head * hd, in->n_head, k, (int64_t)in->n_head_kv * hd,
                 in->n_head_kv, hd, rows, cos, sin);
}
