/*
 * registry.c - the model families edgevlm runs (family.h): one row per family, keyed by
 * GGUF general.architecture. A new family is a folder src/models/<family>/ and a row here.
 */
#include "family.h"

#include <string.h>

#include "qwen3vl/qwen3vl.h"
#include "util.h"

static const ev_family *const FAMILIES[] = {
    &ev_family_qwen3vl,
};
#define N_FAMILIES (sizeof FAMILIES / sizeof FAMILIES[0])

const ev_family *ev_family_find(const char *arch, size_t len) {
    for (size_t i = 0; arch && i < N_FAMILIES; i++)
        if (strlen(FAMILIES[i]->arch) == len && memcmp(FAMILIES[i]->arch, arch, len) == 0)
            return FAMILIES[i];
    return NULL;
}

const char *ev_family_list(char *buf, size_t len) {
    if (!buf || !len) return buf;
    buf[0] = '\0';
    for (size_t i = 0, used = 0; i < N_FAMILIES; i++) {
        used = ev_append(buf, len, used, ", ", "\"");
        used = ev_append(buf, len, ev_append(buf, len, used, "", FAMILIES[i]->arch), "", "\"");
    }
    return buf;
}
