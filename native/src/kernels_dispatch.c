/*
 * kernels_dispatch.c - which kernel set runs, and how a SIMD set is assembled.
 *
 * Every set starts as a copy of the scalar reference (kernels_scalar.c, which has a kernel
 * for every type of the type table, types.c) and overrides only the entries it implements
 * (ev_kernels_derive): a type or kernel a CPU set lacks runs the scalar kernel instead of
 * nothing. ev_kernels_best / ev_kernels_fast pick the set for the running CPU.
 */
#include "kernels.h"

const ev_kernels *ev_kernels_best(void) {
#if defined(__x86_64__)
    const ev_kernels *k = ev_kernels_x86_avx512();
    if (k) return k;
    k = ev_kernels_x86_avx2();
    if (k) return k;
#elif defined(__aarch64__)
    const ev_kernels *k = ev_kernels_arm_neon();
    if (k) return k;
#endif
    return ev_kernels_scalar();
}

const ev_kernels *ev_kernels_fast(void) {
#if defined(__x86_64__)
    const ev_kernels *k = ev_kernels_x86_avx512_fast();
    if (k) return k;
#endif
    return ev_kernels_best();
}

/* every field of ev_kernels is a pointer, and ev_kernels_derive below takes each of them:
 * a new field must be added there (this count fails until it is) */
_Static_assert(sizeof(ev_kernels) == sizeof(void *) * (11 + 6 * (EV_TYPE_MAX + 1)),
               "ev_kernels_derive must take every field of ev_kernels");

/* out = base, then every non-NULL entry of own in its place */
void ev_kernels_derive(ev_kernels *out, const ev_kernels *base, const ev_kernels *own) {
    *out = *base;
#define TAKE(field) \
    do { if (own->field) out->field = own->field; } while (0)
#define TAKE_TYPES(field) \
    do { for (int t = 0; t <= EV_TYPE_MAX; t++) TAKE(field[t]); } while (0)
    TAKE(name);
    TAKE_TYPES(vec_dot);
    TAKE(dot_f32);
    TAKE(axpy_f32);
    TAKE(dot_f16_f32);
    TAKE(axpy_f16_f32);
    TAKE(sgemm_f32);
    TAKE(exp_sum_f32);
    TAKE(gelu_tanh_f32);
    TAKE(quantize_q8_0);
    TAKE(quantize_q8_K);
    TAKE_TYPES(gemm);
    TAKE_TYPES(gemm_dq);
    TAKE_TYPES(gemm_q16x);
    TAKE(quantize_i16);
    TAKE_TYPES(gemm_q8x);
    TAKE_TYPES(gemm_bf16x);
#undef TAKE_TYPES
#undef TAKE
}
