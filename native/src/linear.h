/*
 * linear.h - what the model code asks of a session (linear.c): a linear layer on the
 * session's pool, kernels and scratch, and the session's error message. The model families
 * (src/models/) call these; the API file session.c calls the families: no cycle.
 */
#ifndef EDGEVLM_LINEAR_H
#define EDGEVLM_LINEAR_H

#include <stdint.h>

#include "../include/edgevlm.h"
#include "model.h"

/* Sets the session error message; returns st. */
edgevlm_status ev_fail(edgevlm_session *s, edgevlm_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* y[n_tok, n_out] = x[n_tok, n_in] . W^T (+ b[n_out]) with the session's pool, kernels and
 * scratch; W = w: ne = {n_in, n_out}. */
void ev_linear(edgevlm_session *s, const ev_tensor *w, const ev_tensor *b, const float *x,
               int64_t n_tok, float *y);

#endif
