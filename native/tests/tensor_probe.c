/* tensor_probe.c - one matrix of a GGUF file through edgevlm's loader and kernels, for the
 * Python tests (tests/native/test_kquant_files.py), which compare with the gguf package and
 * numpy. Built by those tests with the system compiler; not a test_*.c of `make test`.
 *
 *   tensor_probe FILE TENSOR rows OUT
 *       the matrix W[ne1][ne0] through ev_row_to_f32, row by row, as float32 into OUT
 *   tensor_probe FILE TENSOR matmul X N_TOK KERNELS OUT
 *       Y[n_tok][ne1] = X[n_tok][ne0] . W^T by ev_matmul (2 threads), X and Y float32 files;
 *       KERNELS: "scalar" or "best"
 *   tensor_probe quantize TYPE IN N OUT
 *       rows of N float32 values of IN into type TYPE (a ggml id) with the type table's
 *       from_float (the reference quantisers) into OUT
 *
 * The matrix is loaded by ev_load_tensor, as the model loader loads its matrices (type,
 * shape, whole blocks, finite scales). Exit status 0; 3 with "error: <message>" on stdout
 * when the loader refuses the tensor; 2 for a usage or I/O error. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "loader.h"
#include "threadpool.h"
#include "types.h"

/* the whole file into a malloc'd buffer; *len its size; NULL on failure */
static void *read_file(const char *path, long *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    void *buf = NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (*len = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0) {
        buf = malloc((size_t)*len + 1);
        if (buf && fread(buf, 1, (size_t)*len, f) != (size_t)*len) {
            free(buf);
            buf = NULL;
        }
    }
    fclose(f);
    return buf;
}

static int write_file(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    const int ok = fwrite(data, 1, len, f) == len;
    return fclose(f) == 0 && ok;
}

static int usage(void) {
    fprintf(stderr, "usage: tensor_probe FILE TENSOR rows OUT\n"
                    "       tensor_probe FILE TENSOR matmul X N_TOK scalar|best OUT\n"
                    "       tensor_probe quantize TYPE IN N OUT\n");
    return 2;
}

static int quantize(int32_t type, const char *in, int64_t n, const char *out) {
    const ev_type_traits *t = ev_type_get(type);
    long len = 0;
    float *x = read_file(in, &len);
    const int64_t rb = t ? ev_row_bytes(type, n) : 0;
    if (!x || rb <= 0 || len % (long)(n * 4) != 0) return free(x), usage();
    const int64_t rows = len / (n * 4);
    uint8_t *q = malloc((size_t)(rows * rb) + 1);
    for (int64_t r = 0; r < rows; r++) t->from_float(x + r * n, q + r * rb, n);
    const int ok = write_file(out, q, (size_t)(rows * rb));
    free(x);
    free(q);
    return ok ? 0 : 2;
}

static int dump_rows(const ev_tensor *w, const char *out) {
    const int64_t n = w->ne[0], rows = w->ne[1], rb = ev_row_bytes(w->type, n);
    float *y = malloc(sizeof(float) * (size_t)(n * rows));
    for (int64_t r = 0; r < rows; r++)
        ev_row_to_f32(w->type, (const uint8_t *)w->data + r * rb, y + r * n, n);
    const int ok = write_file(out, y, sizeof(float) * (size_t)(n * rows));
    free(y);
    return ok ? 0 : 2;
}

static int matmul(const ev_tensor *w, const char *x_path, int64_t n_tok, const char *kernels,
                  const char *out) {
    const int64_t n_in = w->ne[0], n_out = w->ne[1];
    long len = 0;
    float *x = read_file(x_path, &len);
    const ev_kernels *k = strcmp(kernels, "scalar") == 0 ? ev_kernels_scalar()
                          : strcmp(kernels, "best") == 0 ? ev_kernels_best() : NULL;
    if (!x || !k || n_tok < 1 || len != (long)(n_tok * n_in * 4)) return free(x), usage();
    ev_pool *pool = ev_pool_new(2);
    const size_t sb = ev_matmul_scratch_bytes(w->type, n_in, n_tok, 2);
    void *scratch = aligned_alloc(64, (sb + 63) / 64 * 64 + 64);
    float *y = malloc(sizeof(float) * (size_t)(n_tok * n_out));
    const int st = ev_matmul(pool, k, w->type, w->data, NULL, n_out, n_in, x, n_tok, y, scratch);
    const int ok = st == 0 && write_file(out, y, sizeof(float) * (size_t)(n_tok * n_out));
    ev_pool_free(pool);
    free(scratch);
    free(x);
    free(y);
    return ok ? 0 : 2;
}

int main(int argc, char **argv) {
    if (argc == 6 && strcmp(argv[1], "quantize") == 0)
        return quantize((int32_t)atoi(argv[2]), argv[3], atoll(argv[4]), argv[5]);
    if (argc < 5) return usage();
    gguf_file f;
    char err[512];
    if (gguf_open(argv[1], &f, err, sizeof err) != EDGEVLM_OK) {
        printf("error: %s\n", err);
        return 3;
    }
    const gguf_tensor *t = gguf_find_tensor(&f, argv[2]);
    ev_loader L = {&f, "model", err, sizeof err};
    ev_tensor w;
    int rc;
    if (!t || !ev_load_tensor(&L, &w, argv[2], t->ne[0], t->ne[1], 0)) {
        printf("error: %s\n", t ? err : "no such tensor");
        rc = 3;
    } else if (strcmp(argv[3], "rows") == 0 && argc == 5) {
        rc = dump_rows(&w, argv[4]);
    } else if (strcmp(argv[3], "matmul") == 0 && argc == 8) {
        rc = matmul(&w, argv[4], atoll(argv[5]), argv[6], argv[7]);
    } else {
        rc = usage();
    }
    gguf_close(&f);
    return rc;
}
