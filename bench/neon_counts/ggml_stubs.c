/*
 * ggml_stubs.c - the two symbols ggml-cpu/arch/arm/quants.c references outside the dot
 * products the harness calls (the NVFP4 kernel's scale table, the Q8_K reference quantiser);
 * neither is reached by the harness, which brings its own Q8_K blocks. Compiling these here
 * spares linking ggml-quants.c and ggml.c.
 */
#include <stdint.h>

float ggml_table_f32_ue4m3[256];

void quantize_row_q8_K_ref(const float *x, void *y, int64_t k);
void quantize_row_q8_K_ref(const float *x, void *y, int64_t k) {
    (void)x;
    (void)y;
    (void)k;
}
