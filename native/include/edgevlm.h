/*
 * edgevlm.h - the public C API of the edgevlm inference core (Qwen3-VL on a CPU).
 *
 * Written so that cffi's cdef can read it: no macros in declarations, no includes needed
 * beyond <stddef.h>/<stdint.h>, plain structs and enums.
 *
 * Conventions (sqlite3 / stb style):
 *  - Opaque handles: edgevlm_model (immutable weights, shareable between sessions and threads)
 *    and edgevlm_session (KV cache, scratch buffers, thread pool; one thread at a time, except
 *    edgevlm_session_cancel which any thread may call).
 *  - Every fallible call returns an edgevlm_status; the message of the last failure is
 *    edgevlm_session_error() / the err buffer of edgevlm_model_load().
 *  - Buffers are owned by the caller; shapes are given in the comments, row-major.
 *  - Nothing here exits, aborts or prints. All memory is allocated at load / session creation;
 *    nothing is allocated per generated token.
 *  - Frees accept NULL.
 */
#ifndef EDGEVLM_H
#define EDGEVLM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum edgevlm_status {
    EDGEVLM_OK = 0,
    EDGEVLM_ERR_ARGUMENT = 1,      /* a bad argument: NULL, a size that does not fit, ... */
    EDGEVLM_ERR_IO = 2,            /* a file cannot be opened, read or mapped */
    EDGEVLM_ERR_FORMAT = 3,        /* a malformed or inconsistent model file */
    EDGEVLM_ERR_UNSUPPORTED = 4,   /* a valid file edgevlm cannot run (type, architecture) */
    EDGEVLM_ERR_NOMEM = 5,         /* an allocation failed */
    EDGEVLM_ERR_CONTEXT_FULL = 6,  /* the KV cache has no room for the tokens */
    EDGEVLM_ERR_CANCELLED = 7,     /* edgevlm_session_cancel() stopped the call */
    EDGEVLM_ERR_NO_VISION = 8,     /* an image call on a model loaded without an mmproj file */
    EDGEVLM_ERR_INVALID_INPUT = 9  /* malformed input data (e.g. not strict base64) */
} edgevlm_status;

typedef enum edgevlm_kv_type {
    EDGEVLM_KV_F32 = 0,
    EDGEVLM_KV_F16 = 1
} edgevlm_kv_type;

typedef enum edgevlm_kernel_mode {
    EDGEVLM_KERNELS_BEST = 0,      /* the fastest kernels this CPU supports at full precision:
                                      many-token products within ~1e-5 of float32 */
    EDGEVLM_KERNELS_SCALAR = 1,    /* the scalar reference kernels (for tests) */
    EDGEVLM_KERNELS_FAST = 2       /* BEST, but many-token products (prefill, the ViT) round
                                      their activations as llama.cpp does where that is faster
                                      (AVX-512: Q8_0 for Q8_0/Q4_0 weights, bf16 for BF16;
                                      ARM dot-product: Q8_0 for Q8_0/Q4_0); the same as BEST
                                      elsewhere */
} edgevlm_kernel_mode;

typedef struct edgevlm_model edgevlm_model;
typedef struct edgevlm_session edgevlm_session;

/* Hyperparameters, all read from the files' metadata (or their documented defaults). */
typedef struct edgevlm_model_info {
    /* text decoder */
    int32_t n_vocab;              /* rows of token_embd */
    int32_t n_embd;               /* hidden size d */
    int32_t n_layer;
    int32_t n_head;
    int32_t n_head_kv;
    int32_t head_dim;
    int32_t n_ff;
    int32_t n_ctx_train;
    float rms_eps;
    float rope_theta;
    int32_t rope_sections[4];     /* interleaved MRoPE sections (t, h, w, unused) */
    int32_t n_deepstack;          /* DeepStack layers injected after decoder layers 0..k-1 */
    int32_t tied_output;          /* 1 when the output projection is token_embd */
    int32_t weight_type;          /* ggml type id of the attention/FFN weights */
    int32_t eos_id;               /* -1 when absent */
    int32_t bos_id;               /* -1 when absent */
    /* vision encoder (all zero when no mmproj was loaded) */
    int32_t has_vision;
    int32_t v_n_embd;
    int32_t v_n_layer;
    int32_t v_n_head;
    int32_t v_n_ff;
    int32_t v_patch_size;
    int32_t v_temporal_patch;
    int32_t v_merge;
    int32_t v_pos_side;           /* side of the learned position grid (48 for 2304 rows) */
    float v_eps;
    float v_rope_theta;
    int32_t v_deepstack_layers[4];/* ViT block index of each DeepStack tap, -1 unused */
    float v_image_mean[3];
    float v_image_std[3];
    int32_t v_weight_type;
} edgevlm_model_info;

typedef struct edgevlm_session_params {
    int32_t n_ctx;                /* KV cache capacity in tokens */
    int32_t n_batch;              /* most tokens one prefill call may take */
    int32_t n_threads;            /* worker threads of this session (>= 1) */
    int32_t kv_type;              /* edgevlm_kv_type */
    int32_t max_patches;          /* most ViT patches one encode call may take (0: no vision) */
} edgevlm_session_params;

typedef struct edgevlm_sampling {
    float temperature;            /* <= 0: greedy */
    int32_t top_k;                /* <= 0: off */
    float top_p;                  /* >= 1: off */
    float repetition_penalty;     /* 1: off (HF semantics: divide positive logits, multiply negative) */
} edgevlm_sampling;

/* ---- model ---------------------------------------------------------------------------- */

/* Loads a text model GGUF and, optionally (mmproj_path may be NULL), its vision GGUF.
 * Tensors are memory-mapped and used in place. On failure *out is NULL and err (if not NULL)
 * holds a NUL-terminated message of at most err_len bytes. */
edgevlm_status edgevlm_model_load(const char *text_path, const char *mmproj_path,
                                  edgevlm_model **out, char *err, size_t err_len);
void edgevlm_model_free(edgevlm_model *model);
void edgevlm_model_get_info(const edgevlm_model *model, edgevlm_model_info *out);
/* Maps every page of both files into the process now (madvise MADV_POPULATE_READ, or one read
 * per page on kernels without it), reading from disk what the page cache lacks, so the first
 * answer and the first image do not pay ~10^5 page faults. Optional; thread-safe (the model
 * must outlive the call: the engine's thread holds a reference). Returns the
 * bytes mapped. */
int64_t edgevlm_model_prefault(const edgevlm_model *model);
/* The same for one file: the text file (which==0) or the mmproj file (which==1; 0 bytes when
 * the model has none). The Python engine runs the text file's, then the mmproj file's, on a
 * thread of its own beside the tokenizer's construction and the first answer, so a text
 * answer right after a cold start follows the read and never waits for the vision tower. */
int64_t edgevlm_model_prefault_file(const edgevlm_model *model, int which);
/* Returns to the page cache both files' pages that hold only their metadata (the key/values
 * before the tensor data; for Qwen's 151k-token tokenizer ~15 MiB of the text file), which
 * loading read once and nothing needs after it: they leave the process's resident memory
 * (madvise MADV_DONTNEED on the read-only private maps). A later metadata read maps them
 * again. Thread-safe like the prefault calls, which leave these pages alone. */
void edgevlm_model_release_metadata(const edgevlm_model *model);

/* Metadata of the text file (which==0) or the mmproj file (which==1), by key.
 * Strings: copies at most buf_len bytes (NUL-terminated) and returns the full length, or -1
 * when the key is absent or not a string. */
int64_t edgevlm_model_meta_str(const edgevlm_model *model, int32_t which, const char *key,
                               char *buf, size_t buf_len);
/* Arrays of strings (e.g. tokenizer.ggml.tokens): element count, or -1. */
int64_t edgevlm_model_meta_arr_len(const edgevlm_model *model, int32_t which, const char *key);
/* One element of a string array; same return convention as edgevlm_model_meta_str. */
int64_t edgevlm_model_meta_arr_str(const edgevlm_model *model, int32_t which, const char *key,
                                   int64_t index, char *buf, size_t buf_len);
/* Integer scalars and integer arrays (copies at most n values): count, or -1. */
int64_t edgevlm_model_meta_ints(const edgevlm_model *model, int32_t which, const char *key,
                                int64_t *out, int64_t n);

/* A float (or integer) scalar as double: 1 when found, 0 when absent or not a number. */
int32_t edgevlm_model_meta_f64(const edgevlm_model *model, int32_t which, const char *key,
                               double *out);

/* ---- session -------------------------------------------------------------------------- */

edgevlm_status edgevlm_session_new(const edgevlm_model *model,
                                   const edgevlm_session_params *params,
                                   edgevlm_session **out, char *err, size_t err_len);
void edgevlm_session_free(edgevlm_session *session);
const char *edgevlm_session_error(const edgevlm_session *session);
/* Requests that the running call of this session stop; safe from any thread. */
void edgevlm_session_cancel(edgevlm_session *session);
/* Selects the kernels, an edgevlm_kernel_mode (BEST at creation; FAST trades precision of
 * the many-token products for speed; tests compare SCALAR with the others). */
edgevlm_status edgevlm_session_set_kernels(edgevlm_session *session, int32_t mode);
/* Seeds the session's random generator (sampling with temperature > 0 is then reproducible). */
void edgevlm_session_set_seed(edgevlm_session *session, uint64_t seed);
/* Forgets every cached token (the next prefill starts at sequence index 0). */
void edgevlm_session_reset(edgevlm_session *session);
/* Tokens in the KV cache. */
int32_t edgevlm_session_n_past(const edgevlm_session *session);
/* Forgets the cached tokens from sequence index n_past on: the next prefill or decode
 * continues there (scoring several continuations of one prompt). EDGEVLM_ERR_ARGUMENT unless
 * 0 <= n_past <= edgevlm_session_n_past(session). */
edgevlm_status edgevlm_session_rollback(edgevlm_session *session, int32_t n_past);

/* ---- vision --------------------------------------------------------------------------- */

/* Encodes one image (grid_t == 1) or one video (grid_t = frames / temporal_patch).
 *   pixel_values   float32 [n_patches, 3 * temporal_patch * patch * patch], merge-block order
 *   n_patches      grid_t * grid_h * grid_w (grid_h, grid_w in patches, multiples of merge)
 *   out_embeds     float32 [n_patches / merge^2, n_embd]
 *   out_deepstack  float32 [n_deepstack, n_patches / merge^2, n_embd], or NULL to skip
 *   out_vit        float32 [n_patches, v_n_embd] pre-merger ViT output, or NULL (tests) */
edgevlm_status edgevlm_encode_vision(edgevlm_session *session, const float *pixel_values,
                                     int64_t n_patches, int32_t grid_t, int32_t grid_h,
                                     int32_t grid_w, float *out_embeds, float *out_deepstack,
                                     float *out_vit);

/* ---- text ----------------------------------------------------------------------------- */

/* Appends n_tokens to the KV cache.
 *   tokens         int32 [n_tokens] token ids
 *   positions      int32 [3, n_tokens] MRoPE positions (t row, h row, w row)
 *   vision_index   int32 [n_tokens] or NULL: -1 for a text token, else the row of
 *                  vision_rows that replaces its embedding
 *   vision_rows    float32 [n_vision, n_embd]
 *   deepstack_rows float32 [n_ds, n_vision, n_embd] or NULL (n_ds <= n_deepstack; layer l < n_ds
 *                  adds deepstack_rows[l] to the vision rows after decoder layer l)
 *   logits_out     float32 [n_logits, n_vocab]: the logits of the last n_logits tokens
 *                  (1 for generation; n_tokens for tests); may be NULL when n_logits == 0 */
edgevlm_status edgevlm_prefill(edgevlm_session *session, const int32_t *tokens,
                               int64_t n_tokens, const int32_t *positions,
                               const int32_t *vision_index, const float *vision_rows,
                               int64_t n_vision, const float *deepstack_rows, int32_t n_ds,
                               float *logits_out, int64_t n_logits);

/* One generated token at MRoPE position `position` on all three axes.
 *   logits_out     float32 [n_vocab] */
edgevlm_status edgevlm_decode(edgevlm_session *session, int32_t token, int32_t position,
                              float *logits_out);

/* Samples a token from logits (modified in place by penalties and temperature), in
 * transformers' order: repetition penalty, temperature, top-k, top-p. Greedy (argmax, the
 * first of equal maxima) when temperature <= 0.
 *   logits         float32 [n_vocab]
 *   history        int32 [n_history] tokens for the repetition penalty (may be NULL) */
edgevlm_status edgevlm_sample(edgevlm_session *session, float *logits,
                              const edgevlm_sampling *params, const int32_t *history,
                              int64_t n_history, int32_t *out_token);

/* ---- quantisation (for converters) ----------------------------------------------------- */

/* Quantises n_rows rows of n_per_row float32 values into rows of `type` (a ggml type id of
 * edgevlm's weight table: F32, F16, BF16, Q8_0, Q4_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL,
 * IQ4_XS) with the type's reference quantiser, llama.cpp's quantize_row_*_ref /
 * quantize_iq4_* as llama-quantize runs them without an importance matrix. Thread-safe, no
 * allocation.
 *   src            float32 [n_rows, n_per_row], every value finite
 *   dst            [n_rows, row bytes of n_per_row values of `type`]
 * Returns the bytes written (n_rows * row bytes), or a negative edgevlm_status:
 *   -EDGEVLM_ERR_UNSUPPORTED    a type the table does not have
 *   -EDGEVLM_ERR_ARGUMENT       a NULL, n_rows < 0, n_per_row <= 0 or not a multiple of the
 *                               type's block size (32 or 256 values), a size overflow
 *   -EDGEVLM_ERR_INVALID_INPUT  a NaN or infinite value in src (nothing is written) */
int64_t edgevlm_quantize_rows(int32_t type, const float *src, void *dst, int64_t n_rows,
                              int64_t n_per_row);

/* ---- base64 --------------------------------------------------------------------------- */

/* Decodes strict base64: the standard alphabet (A-Z a-z 0-9 + /), a length that is a multiple
 * of 4, '=' only as the last character after 3 data characters of its group or as the last two
 * after 2; no whitespace, no URL-safe alphabet. Exactly what CPython's
 * binascii.a2b_base64(strict_mode=True) accepts on such lengths, with the same bytes: the
 * unused low bits of the last data character are ignored, as there. No allocation,
 * thread-safe; out holds garbage after a failure.
 *   text           char [text_len] (need not be NUL-terminated; NULL when text_len == 0)
 *   out            uint8 [out_cap]; *out_len = the decoded length
 *   kernels        edgevlm_kernel_mode: the CPU's best SIMD decoder (BEST or FAST), or the
 *                  scalar reference (SCALAR)
 * EDGEVLM_ERR_INVALID_INPUT: not strict base64; *error_offset = the offset of the first
 *   character that cannot be where it is (text_len when the length is not a multiple of 4).
 * EDGEVLM_ERR_ARGUMENT: a NULL, an unknown mode, or out_cap too small (*out_len = the room
 *   needed). */
edgevlm_status edgevlm_base64_decode(const char *text, size_t text_len, uint8_t *out,
                                     size_t out_cap, int32_t kernels, size_t *out_len,
                                     size_t *error_offset);
/* The decoder edgevlm_base64_decode runs in mode `kernels`: "scalar", "avx2" or "neon". */
const char *edgevlm_base64_kernels(int32_t kernels);

/* A short static description of the build: version, SIMD paths compiled in. */
const char *edgevlm_build_info(void);
/* The name of the kernel set a mode selects on this CPU ("avx512-vnni", "avx2", "scalar",
 * ...; FAST names the same set as BEST where the CPU has no faster rounding), NULL for an
 * unknown mode. */
const char *edgevlm_kernels_name(int32_t mode);

#ifdef __cplusplus
}
#endif

#endif /* EDGEVLM_H */
