/* test_base64.c - edgevlm_base64_decode: the scalar reference and the CPU's SIMD decoder
 * against an independent bit-by-bit decoder of the same strict language, on random round
 * trips of every length up to 1 KiB and beyond, every byte value at every position of short
 * texts, bad bytes deep inside long ones, the named malformed cases, the argument checks. Every
 * decode writes into a buffer of exactly the decoded size followed by guard bytes. */
#include <stdint.h>

#include "edgevlm.h"
#include "base64_reference.h"
#include "test_util.h"

static const char ALPHABET[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
static const int32_t MODES[2] = {EDGEVLM_KERNELS_SCALAR, EDGEVLM_KERNELS_BEST};
#define GUARD 32

static size_t encode(const uint8_t *src, size_t n, char *dst) {
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)src[i] << 16;
        if (i + 1 < n) v |= (uint32_t)src[i + 1] << 8;
        if (i + 2 < n) v |= src[i + 2];
        dst[o++] = ALPHABET[v >> 18];
        dst[o++] = ALPHABET[(v >> 12) & 63];
        dst[o++] = i + 1 < n ? ALPHABET[(v >> 6) & 63] : '=';
        dst[o++] = i + 2 < n ? ALPHABET[v & 63] : '=';
    }
    return o;
}

static uint8_t *ref_buf, *got_buf;

/* Decodes t in both modes and checks each against the reference; returns the failures. */
static int check_text(const uint8_t *t, size_t n) {
    size_t ref_len = 0, ref_bad = 0;
    int ref_ok = reference(t, n, ref_buf, &ref_len, &ref_bad);
    size_t cap = n / 4 * 3;
    if (n % 4 == 0 && n >= 4) cap -= t[n - 1] == '=' ? (t[n - 2] == '=' ? 2 : 1) : 0;
    int failures = 0;
    for (int m = 0; m < 2; m++) {
        memset(got_buf, 0xa5, cap + GUARD);
        size_t len = 12345, bad = 12345;
        edgevlm_status st = edgevlm_base64_decode((const char *)t, n, got_buf, cap, MODES[m],
                                                  &len, &bad);
        int ok = ref_ok ? st == EDGEVLM_OK && len == ref_len && !memcmp(got_buf, ref_buf, len)
                        : st == EDGEVLM_ERR_INVALID_INPUT && bad == ref_bad;
        for (size_t g = 0; g < GUARD; g++) ok &= got_buf[cap + g] == 0xa5;
        if (!ok && failures++ < 1)
            fprintf(stderr, "  mode %s, n=%zu: status %d len %zu bad %zu; reference %s len %zu "
                    "bad %zu\n", edgevlm_base64_kernels(MODES[m]), n, (int)st, len, bad,
                    ref_ok ? "ok" : "invalid", ref_len, ref_bad);
    }
    return failures;
}

#define NAMED(text, ok, bad, bytes) {text, sizeof(text) - 1, ok, bad, bytes}

static void test_named_cases(void) {
    static const struct {
        const char *text;
        size_t n;
        int ok;
        size_t bad;
        const char *bytes;
    } cases[] = {
        NAMED("", 1, 0, ""),
        NAMED("QQ==", 1, 0, "A"),
        NAMED("QR==", 1, 0, "A"),         /* non-zero unused bits: accepted, as by binascii */
        NAMED("QUI=", 1, 0, "AB"),
        NAMED("QUJ=", 1, 0, "AB"),
        NAMED("QUJD", 1, 0, "ABC"),
        NAMED("+/+/", 1, 0, "\xfb\xff\xbf"),
        NAMED("A", 0, 1, NULL),            /* length not a multiple of 4 */
        NAMED("AA", 0, 2, NULL),
        NAMED("AAA", 0, 3, NULL),
        NAMED("AAAA=", 0, 5, NULL),
        NAMED("QQ=", 0, 3, NULL),
        NAMED("====", 0, 0, NULL),         /* leading padding */
        NAMED("A===", 0, 1, NULL),         /* three '=' */
        NAMED("AAAA====", 0, 4, NULL),     /* a group of padding only */
        NAMED("AA=A", 0, 2, NULL),         /* data after padding */
        NAMED("AA==AAAA", 0, 2, NULL),     /* padding in the middle */
        NAMED("AAA=AAAA", 0, 3, NULL),
        NAMED(" AAA", 0, 0, NULL),         /* whitespace */
        NAMED("AAA\n", 0, 3, NULL),
        NAMED("AA\r\nAAAA", 0, 2, NULL),
        NAMED("AA\tA", 0, 2, NULL),
        NAMED("-_AA", 0, 0, NULL),         /* URL-safe alphabet */
        NAMED("AA_A", 0, 2, NULL),
        NAMED("\xc3\xa9" "AA", 0, 0, NULL), /* UTF-8 of an accented letter */
        NAMED("AA\0A", 0, 2, NULL),        /* NUL */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *t = cases[i].text;
        for (int m = 0; m < 2; m++) {
            uint8_t out[8];
            size_t len = 99, bad = 99;
            edgevlm_status st = edgevlm_base64_decode(t, cases[i].n, out, sizeof out, MODES[m],
                                                      &len, &bad);
            if (cases[i].ok)
                CHECK_MSG(st == EDGEVLM_OK && len == strlen(cases[i].bytes) &&
                          !memcmp(out, cases[i].bytes, len), "case %zu '%s'", i, t);
            else
                CHECK_MSG(st == EDGEVLM_ERR_INVALID_INPUT && bad == cases[i].bad,
                          "case %zu '%s': status %d offset %zu, want offset %zu", i, t, (int)st,
                          bad, cases[i].bad);
        }
        CHECK_MSG(check_text((const uint8_t *)t, cases[i].n) == 0, "case %zu vs the reference",
                  i);
    }
}

static void test_random_round_trips(void) {
    unsigned long long seed = 0x5eed;
    static uint8_t src[1 << 20];
    static char text[(1 << 20) / 3 * 4 + 8];
    int failures = 0;
    for (size_t n = 0; n <= 1024; n++) {           /* every length: all block boundaries */
        for (size_t i = 0; i < n; i++) src[i] = (uint8_t)tu_rand_u64(&seed);
        size_t tn = encode(src, n, text);
        failures += check_text((const uint8_t *)text, tn);
        for (int m = 0; m < 2; m++) {
            size_t len = 0, bad = 0;
            edgevlm_status st = edgevlm_base64_decode(text, tn, got_buf, n, MODES[m], &len, &bad);
            failures += st != EDGEVLM_OK || len != n || memcmp(got_buf, src, n) != 0;
        }
    }
    for (int r = 0; r < 8; r++) {                  /* long texts of random length */
        size_t n = (1 << 20) - (size_t)(tu_rand_u64(&seed) % 4096);
        for (size_t i = 0; i < n; i++) src[i] = (uint8_t)tu_rand_u64(&seed);
        size_t tn = encode(src, n, text);
        failures += check_text((const uint8_t *)text, tn);
        failures += memcmp(ref_buf, src, n) != 0;
    }
    CHECK_MSG(failures == 0, "%d round trips failed", failures);
}

/* Every byte value at every position of valid texts of every length up to 96 characters and
 * some longer ones (past the SIMD block sizes), ending in data, "=" or "==": each
 * substitution is compared with the reference. */
static void test_every_byte_at_every_position(void) {
    unsigned long long seed = 0xb64;
    uint8_t src[200];
    char text[272];
    int failures = 0;
    long decodes = 0;
    static const size_t longer[] = {90, 94, 95, 96, 97, 143, 145, 146, 195};
    for (size_t k = 0; k < 72 + sizeof longer / sizeof longer[0]; k++) {
        size_t n = k < 72 ? k : longer[k - 72];
        for (size_t i = 0; i < n; i++) src[i] = (uint8_t)tu_rand_u64(&seed);
        size_t tn = encode(src, n, text);
        for (size_t pos = 0; pos < tn; pos++) {
            uint8_t keep = (uint8_t)text[pos];
            for (int c = 0; c < 256; c++) {
                text[pos] = (char)c;
                failures += check_text((const uint8_t *)text, tn);
                decodes++;
            }
            text[pos] = (char)keep;
        }
    }
    CHECK_MSG(failures == 0, "%d of %ld substituted texts decode unlike the reference", failures,
              decodes);
}

/* One bad byte deep inside a long text: the SIMD block holding it falls back to the scalar
 * decoder, which must report the exact offset; also two bad bytes (the first wins). */
static void test_bad_byte_deep_inside(void) {
    unsigned long long seed = 0xdeeb;
    static uint8_t src[300000];
    static char text[400008];
    for (size_t i = 0; i < sizeof src; i++) src[i] = (uint8_t)tu_rand_u64(&seed);
    size_t tn = encode(src, sizeof src - 1, text);
    static const uint8_t bad_bytes[] = {'=', ' ', '\n', '-', '_', '.', 0, 0x7f, 0x80, 0xc3, 0xff,
                                        '@', '[', '`', '{', ':', '*', ','};
    int failures = 0;
    for (size_t b = 0; b < sizeof bad_bytes; b++) {
        for (int r = 0; r < 40; r++) {
            size_t pos = (size_t)(tu_rand_u64(&seed) % tn);
            size_t pos2 = pos + 1 + (size_t)(tu_rand_u64(&seed) % 97);
            char keep = text[pos], keep2 = pos2 < tn ? text[pos2] : 0;
            text[pos] = (char)bad_bytes[b];
            if (pos2 < tn) text[pos2] = '!';
            failures += check_text((const uint8_t *)text, tn);
            size_t len, bad = 0;
            edgevlm_status st = edgevlm_base64_decode(text, tn, got_buf, sizeof src,
                                                      EDGEVLM_KERNELS_BEST, &len, &bad);
            int pad_ok = bad_bytes[b] == '=' && pos >= tn - 2;
            failures += !pad_ok && (st != EDGEVLM_ERR_INVALID_INPUT || bad != pos);
            text[pos] = keep;
            if (pos2 < tn) text[pos2] = keep2;
        }
    }
    CHECK_MSG(failures == 0, "%d deep bad bytes misreported", failures);
}

static void test_arguments(void) {
    uint8_t out[8];
    size_t len = 0, bad = 0;
    CHECK(edgevlm_base64_decode("QUJD", 4, out, 2, EDGEVLM_KERNELS_BEST, &len, &bad) ==
          EDGEVLM_ERR_ARGUMENT && len == 3);
    CHECK(edgevlm_base64_decode("QUI=", 4, out, 2, EDGEVLM_KERNELS_BEST, &len, &bad) ==
          EDGEVLM_OK && len == 2);
    CHECK(edgevlm_base64_decode("QUJD", 4, NULL, 0, EDGEVLM_KERNELS_BEST, &len, &bad) ==
          EDGEVLM_ERR_ARGUMENT && len == 3);
    CHECK(edgevlm_base64_decode(NULL, 4, out, 8, EDGEVLM_KERNELS_BEST, &len, &bad) ==
          EDGEVLM_ERR_ARGUMENT);
    CHECK(edgevlm_base64_decode("QUJD", 4, out, 8, EDGEVLM_KERNELS_BEST, NULL, &bad) ==
          EDGEVLM_ERR_ARGUMENT);
    CHECK(edgevlm_base64_decode("QUJD", 4, out, 8, EDGEVLM_KERNELS_BEST, &len, NULL) ==
          EDGEVLM_ERR_ARGUMENT);
    CHECK(edgevlm_base64_decode("QUJD", 4, out, 8, 7, &len, &bad) == EDGEVLM_ERR_ARGUMENT);
    CHECK(edgevlm_base64_decode(NULL, 0, NULL, 0, EDGEVLM_KERNELS_SCALAR, &len, &bad) ==
          EDGEVLM_OK && len == 0);
    CHECK(strcmp(edgevlm_base64_kernels(EDGEVLM_KERNELS_SCALAR), "scalar") == 0);
#if defined(__x86_64__)
    __builtin_cpu_init();
    CHECK(strcmp(edgevlm_base64_kernels(EDGEVLM_KERNELS_BEST),
                 __builtin_cpu_supports("avx2") ? "avx2" : "scalar") == 0);
#elif defined(__aarch64__)
    CHECK(strcmp(edgevlm_base64_kernels(EDGEVLM_KERNELS_BEST), "neon") == 0);
#endif
}

int main(void) {
    ref_buf = malloc(1 << 20);
    got_buf = malloc((1 << 20) + GUARD);
    if (!ref_buf || !got_buf) return 1;
    printf("base64 decoders: scalar and %s\n", edgevlm_base64_kernels(EDGEVLM_KERNELS_BEST));
    test_named_cases();
    test_random_round_trips();
    test_every_byte_at_every_position();
    test_bad_byte_deep_inside();
    test_arguments();
    free(ref_buf);
    free(got_buf);
    return tu_report("test_base64");
}
