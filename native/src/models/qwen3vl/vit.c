/*
 * vit.c - the Qwen3-VL vision encoder (spec section 4): patch embedding of both temporal
 * slices, bilinearly interpolated learned position embedding, 2-D rotary attention inside each
 * image / temporal group, LayerNorm + tanh-GELU MLP blocks, DeepStack mergers at the tapped
 * blocks, and the final 2x2 merger.
 *
 * Patches arrive in transformers' merge-block order (4 consecutive rows = one 2x2 block), so
 * the 2x2 concatenation of the mergers is a free reshape of [N, C] into [N/4, 4C].
 */
#include <math.h>
#include <string.h>

#include "qwen3vl.h"
#include "util.h"

size_t ev_vit_matmul_scratch_bytes(const edgevlm_model *model, int64_t n, int threads) {
    const edgevlm_model_info *in = &model->info;
    const ev_qwen3vl *m = ev_qwen3vl_of(model);
    if (!in->has_vision || n <= 0) return 0;
    const int64_t c = in->v_n_embd, pp3 = 3LL * in->v_patch_size * in->v_patch_size;
    size_t best = 0, b;
#define CONSIDER(type, n_in, n_tok) \
    do { b = ev_matmul_scratch_bytes((type), (n_in), (n_tok), threads); if (b > best) best = b; } while (0)
    CONSIDER(m->patch_w[0].type, pp3, n);
    CONSIDER(m->patch_w[1].type, pp3, n);
    for (int l = 0; l < in->v_n_layer; l++) {
        const ev_vit_layer *L = &m->vlayers[l];
        CONSIDER(L->qkv_w.type, c, n);
        CONSIDER(L->out_w.type, c, n);
        CONSIDER(L->up_w.type, c, n);
        CONSIDER(L->down_w.type, in->v_n_ff, n);
    }
    for (int j = 0; j <= in->n_deepstack; j++) {
        const ev_merger *mg = j < in->n_deepstack ? &m->deepstack[j] : &m->merger;
        CONSIDER(mg->fc1_w.type, 4 * c, n / 4);
        CONSIDER(mg->fc2_w.type, 4 * c, n / 4);
    }
#undef CONSIDER
    return best;
}

/* Patch coordinates (full-resolution row/col) of every row, merge-block order, per group. */
static void patch_coords(ev_vit_scratch *v, int32_t gt, int32_t gh, int32_t gw) {
    const int64_t per_group = (int64_t)gh * gw;
    const int32_t blocks_w = gw / 2;
    for (int64_t r = 0; r < gt * per_group; r++) {
        int64_t local = r % per_group, block = local / 4, within = local % 4;
        v->pos_row[r] = (int32_t)((block / blocks_w) * 2 + within / 2);
        v->pos_col[r] = (int32_t)((block % blocks_w) * 2 + within % 2);
    }
}

/* h[r] += bilinear(pos_embd, row, col) with align_corners=True, computed in float32. */
static void add_position_embedding(const edgevlm_model_info *in, const ev_qwen3vl *m,
                                   ev_vit_scratch *v, int64_t n, int32_t gh, int32_t gw) {
    const int64_t c = in->v_n_embd, side = in->v_pos_side;
    const float *table = m->pos_embd.data;
    for (int64_t r = 0; r < n; r++) {
        float sr = gh > 1 ? (float)v->pos_row[r] * (float)(side - 1) / (float)(gh - 1) : 0.0f;
        float sc = gw > 1 ? (float)v->pos_col[r] * (float)(side - 1) / (float)(gw - 1) : 0.0f;
        int64_t r0 = (int64_t)floorf(sr), c0 = (int64_t)floorf(sc);
        int64_t r1 = r0 + 1 < side ? r0 + 1 : side - 1, c1 = c0 + 1 < side ? c0 + 1 : side - 1;
        float dr = sr - (float)r0, dc = sc - (float)c0;
        float w00 = (1 - dr) * (1 - dc), w01 = (1 - dr) * dc, w10 = dr * (1 - dc), w11 = dr * dc;
        const float *t00 = table + (r0 * side + c0) * c, *t01 = table + (r0 * side + c1) * c;
        const float *t10 = table + (r1 * side + c0) * c, *t11 = table + (r1 * side + c1) * c;
        float *h = v->h + r * c;
        for (int64_t k = 0; k < c; k++)
            h[k] += w00 * t00[k] + w01 * t01[k] + w10 * t10[k] + w11 * t11[k];
    }
}

/* cos/sin [n, hd/2]: first hd/4 frequencies rotate by the patch row, the next hd/4 by the
 * column (theta from the file, 10000 by default). */
static void vit_rope_tables(const edgevlm_model_info *in, ev_vit_scratch *v, int64_t n) {
    const int hd = in->v_n_embd / in->v_n_head, half = hd / 2, q4 = hd / 4;
    for (int64_t r = 0; r < n; r++) {
        for (int i = 0; i < half; i++) {
            int j = i < q4 ? i : i - q4;
            float inv = 1.0f / powf(in->v_rope_theta, (float)(2 * j) / (float)half);
            float angle = (float)(i < q4 ? v->pos_row[r] : v->pos_col[r]) * inv;
            v->rope_cos[r * half + i] = cosf(angle);
            v->rope_sin[r * half + i] = sinf(angle);
        }
    }
}

typedef struct vit_attn_job {
    edgevlm_session *s;
    int64_t segment;               /* patches per attention segment (one temporal group) */
} vit_attn_job;

/* One (segment, head) per item: the head's K^T [hd][S] and V [S][hd] are gathered into the
 * thread's buffer, then for each block of up to EV_VIT_ATT_QB queries
 *   P = softmax(Q K^T * scale)  [qb][S]      (sgemm, then exp_sum per row)
 *   out = P V / rowsum           [qb][hd]    (sgemm into the head's columns of att)
 * so both products run as register-tiled matrix products over contiguous rows. */
static void vit_attn_task(void *ctx, int64_t start, int64_t end, int tid) {
    const vit_attn_job *job = ctx;
    edgevlm_session *s = job->s;
    const edgevlm_model_info *in = &s->model->info;
    const int64_t c = in->v_n_embd, heads = in->v_n_head, hd = c / heads, S = job->segment;
    const float scale = 1.0f / sqrtf((float)hd);
    const ev_kernels *k = s->kernels;
    const ev_vit_scratch *vs = ev_vit_scratch_of(s);
    float *kt = vs->attn + (int64_t)tid * ev_vit_attn_floats(hd, vs->max_patches);
    float *vh = kt + hd * S;                          /* [S][hd] */
    float *p = vh + S * hd;                           /* [EV_VIT_ATT_QB][S] */
    float inv[EV_VIT_ATT_QB];
    for (int64_t item = start; item < end; item++) {
        const int64_t seg0 = (item / heads) * S, h = item % heads;
        const float *q = vs->qkv + seg0 * 3 * c + h * hd;    /* rows 3c apart */
        for (int64_t t = 0; t < S; t++) {
            const float *kr = q + t * 3 * c + c, *vr = kr + c;
            for (int64_t d = 0; d < hd; d++) kt[d * S + t] = kr[d];
            memcpy(vh + t * hd, vr, sizeof(float) * (size_t)hd);
        }
        for (int64_t q0 = 0; q0 < S; q0 += EV_VIT_ATT_QB) {
            const int64_t qb = S - q0 < EV_VIT_ATT_QB ? S - q0 : EV_VIT_ATT_QB;
            k->sgemm_f32(qb, S, hd, scale, q + q0 * 3 * c, 3 * c, kt, S, p, S);
            for (int64_t i = 0; i < qb; i++) {
                float *row = p + i * S;
                inv[i] = 1.0f / k->exp_sum_f32(row, S, ev_row_max(row, S));
            }
            float *out = vs->att + (seg0 + q0) * c + h * hd;
            k->sgemm_f32(qb, hd, S, 1.0f, p, S, vh, hd, out, c);
            for (int64_t i = 0; i < qb; i++)
                for (int64_t d = 0; d < hd; d++) out[i * c + d] *= inv[i];
        }
    }
}

/* ---- row operations split across the pool ---------------------------------------------- */

typedef struct vit_rows_job {
    float *out;
    const float *x, *w, *b;
    int64_t n;                     /* row length */
    float eps;
    const ev_kernels *k;
} vit_rows_job;

static void layernorm_task(void *ctx, int64_t r0, int64_t r1, int tid) {
    (void)tid;
    const vit_rows_job *j = ctx;
    ev_layernorm(j->out + r0 * j->n, j->x + r0 * j->n, j->w, j->b, r1 - r0, j->n, j->eps);
}

static void vit_layernorm(edgevlm_session *s, float *out, const float *x, const ev_tensor *w,
                          const ev_tensor *b, int64_t rows, int64_t n) {
    vit_rows_job j = {out, x, w->data, b->data, n, s->model->info.v_eps, s->kernels};
    ev_pool_for(s->pool, rows, 1, layernorm_task, &j);
}

static void gelu_tanh_task(void *ctx, int64_t r0, int64_t r1, int tid) {
    (void)tid;
    const vit_rows_job *j = ctx;
    j->k->gelu_tanh_f32(j->out + r0 * j->n, (r1 - r0) * j->n);
}

static void gelu_erf_task(void *ctx, int64_t r0, int64_t r1, int tid) {
    (void)tid;
    const vit_rows_job *j = ctx;
    ev_gelu_erf(j->out + r0 * j->n, (r1 - r0) * j->n);
}

static void vit_gelu(edgevlm_session *s, ev_task_fn task, float *x, int64_t rows, int64_t n) {
    vit_rows_job j = {x, NULL, NULL, NULL, n, 0.0f, s->kernels};
    ev_pool_for(s->pool, rows, 1, task, &j);
}

/* A merger: [N, C] rows -> [N/4, n_embd]. The DeepStack form normalises after the 2x2
 * concat (over 4C), the final form before it (over C). */
static void run_merger(edgevlm_session *s, const ev_merger *mg, const float *h, int64_t n,
                       float *out) {
    const edgevlm_model_info *in = &s->model->info;
    const int64_t c = in->v_n_embd;
    ev_vit_scratch *v = ev_vit_scratch_of(s);
    if (mg->post_shuffle_norm)
        vit_layernorm(s, v->merge_in, h, &mg->norm_w, &mg->norm_b, n / 4, 4 * c);
    else
        vit_layernorm(s, v->merge_in, h, &mg->norm_w, &mg->norm_b, n, c);
    ev_linear(s, &mg->fc1_w, &mg->fc1_b, v->merge_in, n / 4, v->mlp);
    vit_gelu(s, gelu_erf_task, v->mlp, n / 4, mg->fc1_w.ne[1]);
    ev_linear(s, &mg->fc2_w, &mg->fc2_b, v->mlp, n / 4, out);
}

static void patch_embed(edgevlm_session *s, const float *pixels, int64_t n) {
    const ev_qwen3vl *m = ev_qwen3vl_of(s->model);
    const int64_t pp = (int64_t)s->model->info.v_patch_size * s->model->info.v_patch_size;
    const int64_t c = s->model->info.v_n_embd;
    ev_vit_scratch *v = ev_vit_scratch_of(s);
    /* pixel columns are (channel, t, py, px): gather each temporal slice as (channel, py, px) */
    for (int64_t r = 0; r < n; r++) {
        const float *src = pixels + r * 6 * pp;
        for (int ch = 0; ch < 3; ch++) {
            memcpy(v->y + r * 3 * pp + ch * pp, src + (2 * ch + 0) * pp, sizeof(float) * (size_t)pp);
            memcpy(v->y2 + r * 3 * pp + ch * pp, src + (2 * ch + 1) * pp, sizeof(float) * (size_t)pp);
        }
    }
    ev_linear(s, &m->patch_w[0], &m->patch_b, v->y, n, v->h);
    ev_linear(s, &m->patch_w[1], NULL, v->y2, n, v->att);
    ev_add(v->h, v->att, n * c);
}

edgevlm_status ev_vision_forward(edgevlm_session *s, const float *pixel_values, int64_t n,
                                 int32_t gt, int32_t gh, int32_t gw, float *out_embeds,
                                 float *out_deepstack, float *out_vit) {
    const edgevlm_model_info *in = &s->model->info;
    const ev_qwen3vl *m = ev_qwen3vl_of(s->model);
    const int64_t c = in->v_n_embd, d = in->n_embd;
    ev_vit_scratch *v = ev_vit_scratch_of(s);

    patch_embed(s, pixel_values, n);
    patch_coords(v, gt, gh, gw);
    add_position_embedding(in, m, v, n, gh, gw);
    vit_rope_tables(in, v, n);

    int tap = 0;
    for (int l = 0; l < in->v_n_layer; l++) {
        if (atomic_load(&s->cancel)) return ev_fail(s, EDGEVLM_ERR_CANCELLED, "cancelled");
        const ev_vit_layer *L = &m->vlayers[l];
        vit_layernorm(s, v->y, v->h, &L->ln1_w, &L->ln1_b, n, c);
        ev_linear(s, &L->qkv_w, &L->qkv_b, v->y, n, v->qkv);
        ev_rows_rope(s, v->qkv, 3 * c, in->v_n_head, v->qkv + c, 3 * c, in->v_n_head,
                     (int)(c / in->v_n_head), n, v->rope_cos, v->rope_sin);   /* rows [q|k|v] */
        vit_attn_job job = {s, (int64_t)gh * gw};
        ev_pool_for(s->pool, n / job.segment * in->v_n_head, 1, vit_attn_task, &job);
        ev_linear(s, &L->out_w, &L->out_b, v->att, n, v->y);
        ev_rows_add(s, v->h, v->y, n, c);
        vit_layernorm(s, v->y, v->h, &L->ln2_w, &L->ln2_b, n, c);
        ev_linear(s, &L->up_w, &L->up_b, v->y, n, v->mlp);
        vit_gelu(s, gelu_tanh_task, v->mlp, n, in->v_n_ff);
        ev_linear(s, &L->down_w, &L->down_b, v->mlp, n, v->y);
        ev_rows_add(s, v->h, v->y, n, c);
        if (tap < in->n_deepstack && in->v_deepstack_layers[tap] == l) {
            if (out_deepstack)
                run_merger(s, &m->deepstack[tap], v->h, n, out_deepstack + (int64_t)tap * (n / 4) * d);
            tap++;
        }
    }
    if (out_vit) memcpy(out_vit, v->h, sizeof(float) * (size_t)(n * c));
    run_merger(s, &m->merger, v->h, n, out_embeds);
    return EDGEVLM_OK;
}
