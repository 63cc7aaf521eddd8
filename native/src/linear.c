/*
 * linear.c - a linear layer on a session's pool, kernels and scratch, and the session error
 * message (linear.h): the services the model code uses, apart from the API file session.c.
 */
#include "linear.h"

#include <stdarg.h>
#include <stdio.h>

#include "session.h"

edgevlm_status ev_fail(edgevlm_session *s, edgevlm_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->error, sizeof s->error, fmt, ap);
    va_end(ap);
    return st;
}

void ev_linear(edgevlm_session *s, const ev_tensor *w, const ev_tensor *b, const float *x,
               int64_t n_tok, float *y) {
    ev_matmul(s->pool, s->kernels, w->type, w->data, b ? (const float *)b->data : NULL, w->ne[1],
              w->ne[0], x, n_tok, y, s->mm_scratch);
}
