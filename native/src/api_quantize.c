/*
 * api_quantize.c - edgevlm_quantize_rows: float32 rows -> rows of a weight type, for
 * converters (edgevlm convert writes the K-quant and IQ4 mixes through it).
 *
 * Each row goes through the type table's from_float (types.c), the reference quantiser
 * transcribed from llama.cpp (quantize_row_*_ref / quantize_iq4_* without an importance
 * matrix), so a row quantised here is what llama-quantize writes for it. Rows are checked
 * before they are quantised: every value finite (the quantisers assume it) and n_per_row a
 * multiple of the type's block size. Nothing is allocated; nothing aborts.
 */
#include <math.h>

#include "edgevlm.h"
#include "types.h"

/* 1 when every one of the n values is finite */
static int row_is_finite(const float *row, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(row[i])) return 0;
    return 1;
}

int64_t edgevlm_quantize_rows(int32_t type, const float *src, void *dst, int64_t n_rows,
                              int64_t n_per_row) {
    const ev_type_traits *t = ev_type_get(type);
    if (!t) return -(int64_t)EDGEVLM_ERR_UNSUPPORTED;
    if (!src || !dst || n_rows < 0 || n_per_row <= 0) return -(int64_t)EDGEVLM_ERR_ARGUMENT;
    const int64_t row_bytes = ev_row_bytes(type, n_per_row);   /* 0: misfit or overflow */
    if (row_bytes == 0 || (n_rows > 0 && row_bytes > INT64_MAX / n_rows))
        return -(int64_t)EDGEVLM_ERR_ARGUMENT;
    for (int64_t r = 0; r < n_rows; r++)
        if (!row_is_finite(src + r * n_per_row, n_per_row))
            return -(int64_t)EDGEVLM_ERR_INVALID_INPUT;
    uint8_t *out = dst;
    for (int64_t r = 0; r < n_rows; r++)
        t->from_float(src + r * n_per_row, out + r * row_bytes, n_per_row);
    return n_rows * row_bytes;
}
