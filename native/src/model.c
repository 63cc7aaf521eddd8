/*
 * model.c - loading a model (the API entry points of edgevlm.h): the text file's
 * general.architecture picks the family (src/models/family.h), whose loader reads the
 * hyperparameters and tensors; freeing, prefaulting the maps and the model info.
 */
#include "model.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "models/family.h"
#include "util.h"

const gguf_file *ev_model_file(const edgevlm_model *model, int which) {
    if (!model) return NULL;
    if (which == 0) return &model->text;
    if (which == 1 && model->info.has_vision) return &model->vision;
    return NULL;
}

/* The family of the text file's general.architecture, or NULL with the message in err. */
static const ev_family *find_family(const gguf_file *f, char *err, size_t err_len,
                                    edgevlm_status *st) {
    gguf_str arch = {NULL, 0};  /* stays NULL when the key is absent or not a string */
    const ev_family *fam = NULL;
    if (gguf_get_str(f, "general.architecture", &arch)) fam = ev_family_find(arch.ptr, arch.len);
    if (fam) return fam;
    char names[128];
    ev_errf(err, err_len, "model file: general.architecture is %s%.*s%s, edgevlm runs %s text "
            "models", arch.ptr ? "\"" : "(missing", arch.ptr ? (int)(arch.len < 64 ? arch.len : 64) : 0,
            arch.ptr ? arch.ptr : "", arch.ptr ? "\"" : ")", ev_family_list(names, sizeof names));
    *st = arch.ptr ? EDGEVLM_ERR_UNSUPPORTED : EDGEVLM_ERR_FORMAT;
    return NULL;
}

void edgevlm_model_free(edgevlm_model *model) {
    if (!model) return;
    if (model->family) model->family->free_weights(model);
    gguf_close(&model->text);
    if (model->info.has_vision || model->vision.base) gguf_close(&model->vision);
    free(model);
}

edgevlm_status edgevlm_model_load(const char *text_path, const char *mmproj_path,
                                  edgevlm_model **out, char *err, size_t err_len) {
    if (err && err_len) err[0] = '\0';
    if (!out || !text_path) {
        ev_errf(err, err_len, "edgevlm_model_load: text_path and out are required");
        return EDGEVLM_ERR_ARGUMENT;
    }
    *out = NULL;
    edgevlm_model *m = calloc(1, sizeof *m);
    if (!m) { ev_errf(err, err_len, "out of memory"); return EDGEVLM_ERR_NOMEM; }
    edgevlm_status st = gguf_open(text_path, &m->text, err, err_len);
    if (st == EDGEVLM_OK) m->family = find_family(&m->text, err, err_len, &st);
    if (st == EDGEVLM_OK) st = m->family->load_text(m, err, err_len);
    if (st == EDGEVLM_OK && mmproj_path) {
        st = gguf_open(mmproj_path, &m->vision, err, err_len);
        if (st == EDGEVLM_OK) st = m->family->load_vision(m, err, err_len);
    }
    if (st != EDGEVLM_OK) {
        edgevlm_model_free(m);
        return st;
    }
    *out = m;
    return EDGEVLM_OK;
}

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22   /* Linux 5.14; older kernels answer EINVAL */
#endif

/* The first page of a map's tensor data: the pages before it hold only metadata. */
static size_t data_page(const gguf_file *f) {
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const size_t off = f->data_offset < f->size ? (size_t)f->data_offset : f->size;
    return off / page * page;
}

/* The tensor data's pages (the metadata's were read by the parser, and are released after
 * the load: edgevlm_model_release_metadata). */
static int64_t prefault_map(const gguf_file *f) {
    if (!f->base || !f->size) return 0;
    const size_t start = data_page(f);
    uint8_t *base = (uint8_t *)f->base + start;
    const size_t len = f->size - start;
    if (len && madvise(base, len, MADV_POPULATE_READ) != 0) {
        const size_t page = (size_t)sysconf(_SC_PAGESIZE);
        const volatile uint8_t *p = base;
        uint8_t sink = 0;
        for (size_t off = 0; off < len; off += page) sink ^= p[off];
        (void)sink;
    }
    return (int64_t)f->size;
}

static void release_metadata(const gguf_file *f) {
    const size_t end = f->base && f->owns_map ? data_page(f) : 0;
    if (end) (void)madvise((void *)f->base, end, MADV_DONTNEED);   /* a hint: errors ignored */
}

void edgevlm_model_release_metadata(const edgevlm_model *model) {
    if (!model) return;
    release_metadata(&model->text);
    if (model->info.has_vision) release_metadata(&model->vision);
}

int64_t edgevlm_model_prefault(const edgevlm_model *model) {
    return edgevlm_model_prefault_file(model, 0) + edgevlm_model_prefault_file(model, 1);
}

int64_t edgevlm_model_prefault_file(const edgevlm_model *model, int which) {
    if (!model || (which != 0 && which != 1)) return 0;
    return prefault_map(which == 0 ? &model->text : &model->vision);
}

void edgevlm_model_get_info(const edgevlm_model *model, edgevlm_model_info *out) {
    if (!model || !out) return;
    *out = model->info;
}
