/*
 * kernels_dispatch.c - which kernel set runs, and how a SIMD set is assembled.
 *
 * Every set starts as a copy of the scalar reference (kernels_scalar.c, which has a kernel
 * for every type of the type table, types.c) and overrides only the entries it implements
 * (ev_kernels_derive): a type or kernel a CPU set lacks runs the scalar kernel instead of
 * nothing. ev_kernels_best / ev_kernels_fast pick the set for the running CPU.
 */
#include <stdlib.h>
#include <string.h>

#include "kernels.h"

/* EDGEVLM_MAX_CPU_ISA caps the instruction set of the kernels, as oneDNN's ONEDNN_MAX_CPU_ISA
 * does: "avx2" runs an AVX-512 host on its AVX2 set (the bench's pinned mode: the AVX2 code
 * path measured on any x86 host), "scalar" the reference kernels on any CPU. Unset, empty or
 * any other value: no cap. Read when a session picks its kernels. */
static int isa_capped_to(const char *isa) {
    const char *cap = getenv("EDGEVLM_MAX_CPU_ISA");
    return cap && strcmp(cap, isa) == 0;
}

const ev_kernels *ev_kernels_best(void) {
    if (isa_capped_to("scalar")) return ev_kernels_scalar();
#if defined(__x86_64__)
    const ev_kernels *k = isa_capped_to("avx2") ? NULL : ev_kernels_x86_avx512();
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
    const ev_kernels *k = isa_capped_to("avx2") || isa_capped_to("scalar")
                              ? NULL : ev_kernels_x86_avx512_fast();
    if (k) return k;
#elif defined(__aarch64__)
    const ev_kernels *k = isa_capped_to("scalar") ? NULL : ev_kernels_arm_neon_fast();
    if (k) return k;
#endif
    return ev_kernels_best();
}

/* every field of ev_kernels is a pointer, and ev_kernels_derive below takes each of them:
 * a new field must be added there (this count fails until it is) */
_Static_assert(sizeof(ev_kernels) == sizeof(void *) * (11 + 7 * (EV_TYPE_MAX + 1)),
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
    TAKE_TYPES(gemv_x16);
#undef TAKE_TYPES
#undef TAKE
}
