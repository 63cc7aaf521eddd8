/* fuzz_base64.c - libFuzzer harness of edgevlm_base64_decode: decodes any bytes with the
 * scalar reference and with the CPU's SIMD decoder into buffers of exactly the decoded size
 * (ASan catches a write past them), and traps unless both agree with an independent
 * bit-by-bit decoder of the strict language on the status, the error offset and the bytes.
 * Built by `make -C native fuzz` (clang, -fsanitize=fuzzer,address,undefined). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "edgevlm.h"
#include "../../native/tests/base64_reference.h"

#define REQUIRE(c) do { if (!(c)) __builtin_trap(); } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    size_t cap = size / 4 * 3;
    if (size % 4 == 0 && size >= 4)
        cap -= data[size - 1] == '=' ? (data[size - 2] == '=' ? 2 : 1) : 0;
    uint8_t *ref = malloc(cap + 1);
    REQUIRE(ref);
    size_t ref_len = 0, ref_bad = 0;
    int ok = reference(data, size, ref, &ref_len, &ref_bad);
    static const int32_t modes[2] = {EDGEVLM_KERNELS_SCALAR, EDGEVLM_KERNELS_BEST};
    for (int m = 0; m < 2; m++) {
        uint8_t *out = malloc(cap ? cap : 1);         /* exactly the decoded size */
        REQUIRE(out);
        size_t len = 0, bad = 0;
        edgevlm_status st = edgevlm_base64_decode((const char *)data, size, out, cap, modes[m],
                                                  &len, &bad);
        if (ok)
            REQUIRE(st == EDGEVLM_OK && len == ref_len && memcmp(out, ref, len) == 0);
        else
            REQUIRE(st == EDGEVLM_ERR_INVALID_INPUT && bad == ref_bad);
        free(out);
    }
    free(ref);
    return 0;
}
