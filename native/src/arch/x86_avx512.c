/*
 * x86_avx512.c - the AVX-512 kernel sets: the AVX2 set with the kernels that AVX-512 makes
 * faster put in its place. Chosen when the CPU (and the OS, for the zmm state) has AVX-512
 * F, BW, VL and VNNI: Intel from Ice Lake / Cascade Lake, AMD from Zen 4.
 *  - "avx512-vnni" (the best set): many-token products of Q8_0/Q4_0/Q4_K/Q5_K/IQ4_XS/Q6_K
 *    weights on int16 activations (vpdpwssd, x86_avx512_qgemm.c), within ~1e-5 of the float
 *    products; decode against Q8_0 weights with vpdpbusd (x86_avx512_qgemv.c), on AMD against
 *    F16/BF16 weights on 256-bit FMAs tuned for Zen 4 (x86_avx512_gemv.c), and
 *    against Q4_K/Q6_K weights with vpdpbusd + vpdpwssd row kernels (x86_avx512_kgemv.c).
 *  - "avx512-vnni-fast" (EDGEVLM_KERNELS_FAST): llama.cpp's arithmetic for the many-token
 *    products of Q8_0/Q4_0/Q4_K/Q5_K/IQ4_XS/Q6_K weights, Q8_0 activations (vpdpbusd) and, where the CPU has AVX-512 BF16, bf16 activations for BF16 weights
 *    (vdpbf16ps, x86_avx512_bf16.c); and for the one-token rows of F16 weights f16
 *    activations (on AMD), of BF16 weights (with AVX-512 BF16) bf16 ones (gemv_x16,
 *    x86_avx512_gemv.c).
 */
#if defined(__x86_64__)

#include <pthread.h>

#include "x86_avx512.h"

static ev_kernels AVX512, AVX512_FAST;
static pthread_once_t built = PTHREAD_ONCE_INIT;

/* One-token F16/BF16 rows: x86_avx512_gemv.c's one-row streams (exact: float32 activations;
 * fast: F16's gemv_x16 on f16 ones) were measured and tuned on Zen 4, where they beat the AVX2
 * set's four rows with prefetch; on an Intel Xeon (AVX-512 + AMX, 2026-12-04) the AVX2 set's
 * rows decoded 12-19 % faster than the exact ones and 16 % faster than F16's gemv_x16
 * (bench/README-kernels.md, "One-token F16/BF16 rows on Intel"). So AMD takes them and every
 * other CPU keeps the AVX2 set's rows (BF16's gemv_x16, vdpbf16ps, stays: as fast there). */
static int own_float_decode_rows(void) {
    return ev_x86_cpu_vendor() == EV_X86_AMD;
}

static void build(void) {
    AVX512 = *ev_kernels_x86_avx2();
    AVX512.name = "avx512-vnni";
    AVX512.quantize_i16 = ev_avx512_quantize_i16;
    AVX512.gemm_q16x[EV_TYPE_Q8_0] = ev_avx512_gemm_q16x_q8_0;
    AVX512.gemm_q16x[EV_TYPE_Q4_0] = ev_avx512_gemm_q16x_q4_0;
    AVX512.gemm_q16x[EV_TYPE_Q4_K] = ev_avx512_gemm_q16x_q4_K;
    AVX512.gemm_q16x[EV_TYPE_Q5_K] = ev_avx512_gemm_q16x_q5_K;
    AVX512.gemm_q16x[EV_TYPE_IQ4_XS] = ev_avx512_gemm_q16x_iq4_xs;
    AVX512.gemm_q16x[EV_TYPE_Q6_K] = ev_avx512_gemm_q16x_q6_K;
    /* gemm_dq: the AVX2 set's panels under 512-bit tiles, type by type */
    static const struct { ev_gemm_fn avx2, avx512; } dq[] = {
        {ev_avx2_gemm_dq_f32, ev_avx512_gemm_dq_f32},     {ev_avx2_gemm_dq_f16, ev_avx512_gemm_dq_f16},
        {ev_avx2_gemm_dq_bf16, ev_avx512_gemm_dq_bf16},   {ev_avx2_gemm_dq_q8_0, ev_avx512_gemm_dq_q8_0},
        {ev_avx2_gemm_dq_q4_0, ev_avx512_gemm_dq_q4_0},   {ev_avx2_gemm_dq_q4_K, ev_avx512_gemm_dq_q4_K},
        {ev_avx2_gemm_dq_q6_K, ev_avx512_gemm_dq_q6_K},   {ev_avx2_gemm_dq_q2_K, ev_avx512_gemm_dq_q2_K},
        {ev_avx2_gemm_dq_q3_K, ev_avx512_gemm_dq_q3_K},   {ev_avx2_gemm_dq_q5_K, ev_avx512_gemm_dq_q5_K},
        {ev_avx2_gemm_dq_iq4_xs, ev_avx512_gemm_dq_iq4_xs},
        {ev_avx2_gemm_dq_by_table, ev_avx512_gemm_dq_by_table}};
    for (int t = 0; t <= EV_TYPE_MAX; t++)
        for (size_t i = 0; i < sizeof dq / sizeof dq[0]; i++)
            if (AVX512.gemm_dq[t] == dq[i].avx2) AVX512.gemm_dq[t] = dq[i].avx512;
    if (own_float_decode_rows()) {
        AVX512.gemm[EV_TYPE_F16] = ev_avx512_gemm_f16;
        AVX512.gemm[EV_TYPE_BF16] = ev_avx512_gemm_bf16;
    }
    AVX512.gemm[EV_TYPE_Q8_0] = ev_avx512_gemm_q8_0;
    AVX512.gemm[EV_TYPE_Q4_K] = ev_avx512_gemm_q4_K;
    AVX512.gemm[EV_TYPE_Q6_K] = ev_avx512_gemm_q6_K;
    AVX512.gemm[EV_TYPE_IQ4_XS] = ev_avx512_gemm_iq4_xs;
    AVX512_FAST = AVX512;
    AVX512_FAST.name = "avx512-vnni-fast";
    AVX512_FAST.gemm_q8x[EV_TYPE_Q8_0] = ev_avx512_gemm_q8x_q8_0;
    AVX512_FAST.gemm_q8x[EV_TYPE_Q4_0] = ev_avx512_gemm_q8x_q4_0;
    AVX512_FAST.gemm_q8x[EV_TYPE_Q4_K] = ev_avx512_gemm_q8x_q4_K;
    AVX512_FAST.gemm_q8x[EV_TYPE_Q5_K] = ev_avx512_gemm_q8x_q5_K;
    AVX512_FAST.gemm_q8x[EV_TYPE_IQ4_XS] = ev_avx512_gemm_q8x_iq4_xs;
    AVX512_FAST.gemm_q8x[EV_TYPE_Q6_K] = ev_avx512_gemm_q8x_q6_K;
    if (own_float_decode_rows()) AVX512_FAST.gemv_x16[EV_TYPE_F16] = ev_avx512_gemv_x16_f16;
    if (__builtin_cpu_supports("avx512bf16")) {
        AVX512_FAST.name = "avx512-vnni-bf16-fast";
        AVX512_FAST.gemm_bf16x[EV_TYPE_BF16] = ev_avx512_gemm_bf16x;
        AVX512_FAST.gemv_x16[EV_TYPE_BF16] = ev_avx512_gemv_x16_bf16;
    }
}

static int cpu_has_avx512_vnni(void) {
    if (!ev_kernels_x86_avx2()) return 0;
    __builtin_cpu_init();   /* checks the OS's XCR0 for the zmm state as well */
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
}

const ev_kernels *ev_kernels_x86_avx512(void) {
    if (!cpu_has_avx512_vnni()) return NULL;
    pthread_once(&built, build);
    return &AVX512;
}

const ev_kernels *ev_kernels_x86_avx512_fast(void) {
    if (!cpu_has_avx512_vnni()) return NULL;
    pthread_once(&built, build);
    return &AVX512_FAST;
}

#endif
