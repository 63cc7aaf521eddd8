/*
 * ggml_shim.cpp - what prefill.c needs of llama.cpp's C++ files (llamafile/sgemm.cpp and
 * ggml-cpu/arch/arm/repack.cpp), compiled with ggml's headers so that none of them meets ours:
 *  - nc_ggml_fp16_arith: whether this build has FP16 vector arithmetic;
 *  - nc_ggml_sgemm: llamafile_sgemm as ggml_compute_forward_mul_mat calls it first (weights
 *    src0 of Atype, activations src1 of Btype, dst F32), on one thread (ith 0, nth 1);
 *  - the threadpool calls tinyBLAS makes (one thread: the barrier is a no-op, the chunk
 *    counter a plain int);
 *  - the symbols the two objects reference but the harness never reaches (the _generic
 *    kernels of the i8mm/SVE variants, ggml_abort, the logger): each aborts if called.
 */
#include <cstdio>
#include <cstdlib>

#include "ggml-cpu-impl.h"
#include "llamafile/sgemm.h"

extern "C" {

static int chunk_counter;

void ggml_barrier(struct ggml_threadpool *) {}

void ggml_threadpool_chunk_set(struct ggml_threadpool *, int value) { chunk_counter = value; }

int ggml_threadpool_chunk_add(struct ggml_threadpool *, int value) {
    const int old = chunk_counter;
    chunk_counter += value;
    return old;
}

/* 1 when ggml was built with FP16 vector arithmetic (its F16 paths then sum in F16) */
int nc_ggml_fp16_arith(void) {
#if defined(__ARM_FEATURE_FP16_VECTOR_ARITHMETIC)
    return 1;
#else
    return 0;
#endif
}

/* 1: llamafile_sgemm took the product, 0: it declined (ggml would fall back to vec_dot) */
int nc_ggml_sgemm(int64_t m, int64_t n, int64_t k, const void *a, const void *b, float *c,
                  int atype, int btype) {
    struct ggml_compute_params params = {};
    params.ith = 0;
    params.nth = 1;
    return llamafile_sgemm(&params, m, n, k, a, k, b, k, c, m, atype, btype, GGML_TYPE_F32);
}

[[noreturn]] static void unreached(const char *name) {
    std::fprintf(stderr, "ggml_shim: %s called\n", name);
    std::abort();
}

void ggml_abort(const char *file, int line, const char *fmt, ...) {
    std::fprintf(stderr, "ggml_abort at %s:%d (%s)\n", file, line, fmt);
    std::abort();
}

void ggml_log_internal(enum ggml_log_level, const char *, ...) {}

#define NC_UNREACHED(name) \
    void name(int, float *, size_t, const void *, const void *, int, int) { unreached(#name); }
NC_UNREACHED(ggml_gemm_q1_0_4x8_q8_0_generic)
NC_UNREACHED(ggml_gemm_q4_0_4x8_q8_0_generic)
NC_UNREACHED(ggml_gemm_q4_0_8x8_q8_0_generic)
NC_UNREACHED(ggml_gemm_q4_K_8x8_q8_K_generic)
NC_UNREACHED(ggml_gemm_q5_K_8x8_q8_K_generic)
NC_UNREACHED(ggml_gemm_q6_K_8x8_q8_K_generic)
NC_UNREACHED(ggml_gemm_q8_0_4x8_q8_0_generic)
NC_UNREACHED(ggml_gemv_q4_0_8x8_q8_0_generic)
#undef NC_UNREACHED

}  // extern "C"
