/*
 * rows.h - the decoder's row operations over a session's thread pool (rows.c); small calls
 * run inline. x, y: [rows, n] row-major.
 */
#ifndef EDGEVLM_ROWS_H
#define EDGEVLM_ROWS_H

#include <stdint.h>

#include "../include/edgevlm.h"

void ev_rows_rmsnorm(edgevlm_session *s, float *out, const float *x, const float *w,
                     int64_t rows, int64_t n, float eps);
void ev_rows_silu_mul(edgevlm_session *s, float *gate, const float *up, int64_t rows, int64_t n);
void ev_rows_add(edgevlm_session *s, float *y, const float *x, int64_t rows, int64_t n);
/* rotate-half rope of q's n_q and k's n_k heads per row (row i at q + i * q_stride, ...) */
void ev_rows_rope(edgevlm_session *s, float *q, int64_t q_stride, int n_q, float *k,
                  int64_t k_stride, int n_k, int hd, int64_t rows, const float *cos,
                  const float *sin);
/* the decoder's: q [rows, n_head * head_dim], k [rows, n_head_kv * head_dim] */
void ev_rows_rope_qk(edgevlm_session *s, float *q, float *k, int64_t rows, const float *cos,
                     const float *sin);

#endif
