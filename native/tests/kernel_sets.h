/* kernel_sets.h - every kernel set this CPU runs, for the tests that walk them all
 * (test_dispatch.c, test_kquants_simd.c). */
#ifndef EDGEVLM_TEST_KERNEL_SETS_H
#define EDGEVLM_TEST_KERNEL_SETS_H

#include <stddef.h>

#include "kernels.h"

#define MAX_SETS 6

/* out[0..n) as given, then every SIMD set this CPU runs that is not among them; the count */
static inline int tu_add_simd_sets(const ev_kernels *out[MAX_SETS], int n) {
#if defined(__x86_64__)
    const ev_kernels *cand[] = {ev_kernels_x86_avx2(), ev_kernels_x86_avx512(),
                                ev_kernels_x86_avx512_fast()};
#elif defined(__aarch64__)
    const ev_kernels *cand[] = {ev_kernels_arm_neon_plain(), ev_kernels_arm_neon(),
                                ev_kernels_arm_neon_fast()};
#else
    const ev_kernels *cand[] = {NULL};
#endif
    for (size_t i = 0; i < sizeof cand / sizeof cand[0]; i++) {
        int seen = !cand[i];
        for (int j = 0; j < n && !seen; j++) seen = out[j] == cand[i];
        if (!seen && n < MAX_SETS) out[n++] = cand[i];
    }
    return n;
}

#endif
