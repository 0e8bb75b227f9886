/*
 * cuda_ops: the CUDA backend's layer kernels (qkv_rope, decode and prefill attention, swiglu,
 * the gathered final rmsnorm) against the CPU backend's reference ops (cpu/ops.h) on fresh
 * random inputs of several shapes: ragged batches, GQA groups of 1..9 heads, head sizes that
 * are not powers of two, partial rotary dims, both RoPE modes, F32 and F16 KV caches, block
 * tables in random order with holes (blocks no sequence uses hold garbage that must not be
 * read), contexts that are not a multiple of the block size, and decode attention split over
 * the context. Prints the max abs/rel error of each case.
 *
 * Tolerances (relative, norm-wise): F32 outputs 2e-6 (only float summation order differs from
 * the reference), F16 outputs 2e-3, BF16 1e-2; the RoPE'd q/k and the stored K/V must equal the
 * reference bitwise (same cos/sin, same un-fused float operations, same F16 rounding).
 *
 * Built twice: against the emulator (cuda_ops) and the real CUDA build (cuda_ops_gpu, which
 * skips when no GPU answers).
 */
#include "cpu/ops.h"
#include "cuda/kernels.h"
#ifdef PLLM_CUDA_EMU
#include "cuda/emu/cuemu.h"
#endif
#include "tests/testutil.h"

#include <math.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static uint64_t g_rng;

static int rnd(int n)
{
    return (int)(pllm_test_rand(&g_rng) % (uint64_t)n);
}

static float get(const void *p, pllm_dtype t, size_t i)
{
    if (t == PLLM_DTYPE_F16) return pllm_fp16_to_fp32(((const uint16_t *)p)[i]);
    if (t == PLLM_DTYPE_BF16) return pllm_bf16_to_fp32(((const uint16_t *)p)[i]);
    return ((const float *)p)[i];
}

static void put(void *p, pllm_dtype t, size_t i, float v)
{
    if (t == PLLM_DTYPE_F16)
        ((uint16_t *)p)[i] = pllm_fp32_to_fp16(v);
    else if (t == PLLM_DTYPE_BF16)
        ((uint16_t *)p)[i] = pllm_fp32_to_bf16(v);
    else
        ((float *)p)[i] = v;
}

static double tol_of(pllm_dtype t)
{
    return t == PLLM_DTYPE_F32 ? 2e-6 : t == PLLM_DTYPE_F16 ? 2e-3 : 1e-2;
}

/* A device copy of a host array. */
static void *dup_dev(pllm_cuda_dev *dev, const void *src, size_t bytes)
{
    void *d = NULL;
    CHECK_OK(pllm_cuda_alloc(dev, &d, bytes ? bytes : 4));
    if (bytes) CHECK_OK(pllm_cuda_upload(dev, d, src, bytes));
    return d;
}

static void fetch(pllm_cuda_dev *dev, void *dst, const void *src, size_t bytes)
{
    CHECK_OK(pllm_cuda_download(dev, dst, src, bytes));
    CHECK_OK(pllm_cuda_sync(dev));
}

/* ---- qkv_rope ------------------------------------------------------------------------------ */

typedef struct rope_case {
    int n_tok, n_head, n_head_kv, hd, rope_dim, bs, n_blocks;
    pllm_rope_mode mode;
    bool bias;
    pllm_dtype kv;
    pllm_rope_scaling scaling;
} rope_case;

static void test_qkv_rope(pllm_cuda_dev *dev, const rope_case *c)
{
    const int qd = c->n_head * c->hd, kvd = c->n_head_kv * c->hd, ld = qd + 2 * kvd + 3;
    const size_t n_row = (size_t)c->n_tok * ld, esz = pllm_dtype_block_bytes(c->kv);
    const size_t cache_n = (size_t)c->n_blocks * c->n_head_kv * c->bs * c->hd;
    float *qkv = malloc(n_row * 4), *ref = malloc(n_row * 4), *got = malloc(n_row * 4);
    float *bias = malloc((size_t)(qd + 2 * kvd) * 4);
    int32_t *pos = malloc((size_t)c->n_tok * 4), *slots = malloc((size_t)c->n_tok * 4);
    void *kc = malloc(cache_n * esz), *vc = malloc(cache_n * esz), *kref = malloc(cache_n * esz),
         *vref = malloc(cache_n * esz), *kgot = malloc(cache_n * esz),
         *vgot = malloc(cache_n * esz);
    for (size_t i = 0; i < n_row; i++) qkv[i] = 3.0f * pllm_test_randf(&g_rng);
    for (int i = 0; i < qd + 2 * kvd; i++) bias[i] = 0.5f * pllm_test_randf(&g_rng);
    for (size_t i = 0; i < cache_n; i++) {
        put(kc, c->kv, i, pllm_test_randf(&g_rng));
        put(vc, c->kv, i, pllm_test_randf(&g_rng));
    }
    memcpy(kref, kc, cache_n * esz);
    memcpy(vref, vc, cache_n * esz);
    /* distinct slots (a random sample of the pool); one token in 7 is padding (slot -1) */
    const int n_slots = c->n_blocks * c->bs;
    int32_t *perm = malloc((size_t)n_slots * 4);
    for (int i = 0; i < n_slots; i++) perm[i] = i;
    for (int i = n_slots - 1; i > 0; i--) {
        int j = rnd(i + 1), t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    for (int t = 0; t < c->n_tok; t++) {
        pos[t] = rnd(4096);
        slots[t] = t % 7 == 5 ? -1 : perm[t];
    }
    /* reference: bias, then the CPU's RoPE, then the CPU's store rule */
    pllm_model_config cfg = {.rope_theta = 10000.0f,
                             .rope_dim = c->rope_dim,
                             .rope_scaling = c->scaling,
                             .rope_factor = 4.0f};
    double *inv_freq = malloc(sizeof(double) * (size_t)(c->rope_dim / 2 + 1));
    float *factors = malloc(sizeof(float) * (size_t)(c->rope_dim / 2 + 1)); /* LLAMA3: per-pair */
    for (int i = 0; i < c->rope_dim / 2; i++)
        factors[i] = 1.0f + 7.0f * (pllm_test_randf(&g_rng) + 1.0f) / 2.0f;
    pllm_cpu_rope_freqs(inv_freq, &cfg, c->scaling == PLLM_ROPE_SCALING_LLAMA3 ? factors : NULL);
    float *cs = malloc(sizeof(float) * (size_t)(c->rope_dim + 2));
    memcpy(ref, qkv, n_row * 4);
    for (int t = 0; t < c->n_tok; t++) {
        float *row = ref + (size_t)t * ld;
        if (c->bias)
            for (int i = 0; i < qd + 2 * kvd; i++) row[i] += bias[i];
        pllm_cpu_rope_table(cs, pos[t], inv_freq, c->rope_dim / 2);
        for (int h = 0; h < c->n_head + c->n_head_kv; h++)
            pllm_cpu_rope_apply(row + h * c->hd, cs, c->rope_dim, c->mode);
        if (slots[t] < 0) continue;
        for (int h = 0; h < c->n_head_kv; h++) {
            size_t at =
                (((size_t)(slots[t] / c->bs) * c->n_head_kv + h) * c->bs + slots[t] % c->bs) *
                c->hd;
            for (int d = 0; d < c->hd; d++) {
                put(kref, c->kv, at + d, row[qd + h * c->hd + d]);
                put(vref, c->kv, at + d, row[qd + kvd + h * c->hd + d]);
            }
        }
    }
    void *d_qkv = dup_dev(dev, qkv, n_row * 4),
         *d_bias = dup_dev(dev, bias, (size_t)(qd + 2 * kvd) * 4);
    void *d_pos = dup_dev(dev, pos, (size_t)c->n_tok * 4),
         *d_slots = dup_dev(dev, slots, (size_t)c->n_tok * 4);
    void *d_freq = dup_dev(dev, inv_freq, sizeof(double) * (size_t)(c->rope_dim / 2 + 1));
    void *d_k = dup_dev(dev, kc, cache_n * esz), *d_v = dup_dev(dev, vc, cache_n * esz);
    pllm_cuda_qkv_rope_args a = {.qkv = d_qkv,
                                 .ld = ld,
                                 .bias = c->bias ? d_bias : NULL,
                                 .positions = d_pos,
                                 .slots = d_slots,
                                 .inv_freq = d_freq,
                                 .mscale = 1.0,
                                 .k_cache = d_k,
                                 .v_cache = d_v,
                                 .kv_dtype = c->kv,
                                 .n_tokens = c->n_tok,
                                 .n_head = c->n_head,
                                 .n_head_kv = c->n_head_kv,
                                 .head_dim = c->hd,
                                 .rope_dim = c->rope_dim,
                                 .block_size = c->bs,
                                 .rope_neox = c->mode == PLLM_ROPE_NEOX};
    CHECK_OK(pllm_cuda_qkv_rope(dev, &a));
    fetch(dev, got, d_qkv, n_row * 4);
    fetch(dev, kgot, d_k, cache_n * esz);
    fetch(dev, vgot, d_v, cache_n * esz);
    size_t bad = 0, bad_cache = 0;
    for (size_t i = 0; i < n_row; i++) bad += memcmp(&got[i], &ref[i], 4) != 0;
    bad_cache += memcmp(kgot, kref, cache_n * esz) != 0;
    bad_cache += memcmp(vgot, vref, cache_n * esz) != 0;
    double mx, rel = pllm_test_rel_err(got, ref, n_row, &mx);
    fprintf(stderr,
            "  qkv_rope tok=%-3d heads=%d/%d hd=%-3d rope=%-3d %s bias=%d kv=%s scale=%d: %zu of "
            "%zu q/k/v values differ "
            "(max abs %.2g, rel %.2g), caches %s\n",
            c->n_tok, c->n_head, c->n_head_kv, c->hd, c->rope_dim,
            c->mode == PLLM_ROPE_NEOX ? "neox" : "norm", c->bias, pllm_dtype_name(c->kv),
            (int)c->scaling, bad, n_row, mx, rel, bad_cache ? "DIFFER" : "identical");
    CHECK(bad == 0);
    CHECK(bad_cache == 0);
    pllm_cuda_free(dev, d_qkv), pllm_cuda_free(dev, d_bias), pllm_cuda_free(dev, d_pos),
        pllm_cuda_free(dev, d_slots);
    pllm_cuda_free(dev, d_freq), pllm_cuda_free(dev, d_k), pllm_cuda_free(dev, d_v);
    free(qkv), free(ref), free(got), free(bias), free(pos), free(slots), free(kc), free(vc),
        free(kref), free(vref);
    free(kgot), free(vgot), free(perm), free(inv_freq), free(factors), free(cs);
}

/* ---- attention ---------------------------------------------------------------------------- */

typedef struct attn_case {
    int n_seqs, n_head, n_head_kv, hd, bs;
    pllm_dtype kv, out;
    int max_ctx;   /* contexts drawn in [1, max_ctx] */
    int max_new;   /* new tokens per sequence in [1, max_new] (1: decode only) */
    int split_len; /* decode split length; 0: no split */
} attn_case;

static void test_attention(pllm_cuda_dev *dev, const attn_case *c)
{
    const int qd = c->n_head * c->hd, q_stride = qd + 2 * c->n_head_kv * c->hd;
    const size_t esz = pllm_dtype_block_bytes(c->kv), osz = pllm_dtype_block_bytes(c->out);
    /* sequences: contexts and new-token counts; block tables drawn without replacement from a
     * pool with 25% spare blocks (holes) */
    int *n_ctx = malloc(sizeof(int) * (size_t)c->n_seqs),
        *n_new = malloc(sizeof(int) * (size_t)c->n_seqs);
    int total_blocks = 0, n_tok = 0;
    for (int s = 0; s < c->n_seqs; s++) {
        n_ctx[s] = 1 + rnd(c->max_ctx);
        n_new[s] = PLLM_MIN(n_ctx[s], 1 + rnd(c->max_new));
        total_blocks += (n_ctx[s] + c->bs - 1) / c->bs;
        n_tok += n_new[s];
    }
    const int pool = total_blocks + total_blocks / 4 + 1;
    int32_t *perm = malloc(sizeof(int32_t) * (size_t)pool),
            *bt = malloc(sizeof(int32_t) * (size_t)total_blocks);
    int *bt_off = malloc(sizeof(int) * (size_t)c->n_seqs);
    for (int i = 0; i < pool; i++) perm[i] = i;
    for (int i = pool - 1; i > 0; i--) {
        int j = rnd(i + 1), t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    for (int s = 0, k = 0; s < c->n_seqs; s++) {
        bt_off[s] = k;
        for (int b = 0; b < (n_ctx[s] + c->bs - 1) / c->bs; b++, k++) bt[k] = perm[k];
    }
    const size_t cache_n = (size_t)pool * c->n_head_kv * c->bs * c->hd;
    void *kc = malloc(cache_n * esz), *vc = malloc(cache_n * esz);
    for (size_t i = 0; i < cache_n; i++) {
        put(kc, c->kv, i, pllm_test_randf(&g_rng));
        put(vc, c->kv, i, pllm_test_randf(&g_rng));
    }
    float *q = malloc(sizeof(float) * (size_t)n_tok * q_stride);
    for (size_t i = 0; i < (size_t)n_tok * q_stride; i++) q[i] = 2.0f * pllm_test_randf(&g_rng);

    /* work lists: sequences with one new token are decode items, the rest prefill tiles */
    const int qt = pllm_cuda_attn_prefill_tile_tokens(c->n_head, c->n_head_kv);
    pllm_cuda_attn_item *items = malloc(sizeof *items * (size_t)n_tok);
    pllm_cuda_attn_tile *tiles = malloc(sizeof *tiles * (size_t)n_tok);
    int *tok_pos = malloc(sizeof(int) * (size_t)n_tok),
        *tok_seq = malloc(sizeof(int) * (size_t)n_tok);
    int n_items = 0, n_tiles = 0, max_dec_ctx = 0;
    for (int s = 0, t = 0; s < c->n_seqs; s++) {
        for (int j = 0; j < n_new[s]; j++)
            tok_pos[t + j] = n_ctx[s] - n_new[s] + j, tok_seq[t + j] = s;
        if (n_new[s] == 1) {
            items[n_items++] = (pllm_cuda_attn_item){.tok = t, .n_ctx = n_ctx[s], .bt = bt_off[s]};
            max_dec_ctx = PLLM_MAX(max_dec_ctx, n_ctx[s]);
        } else {
            for (int j = 0; j < n_new[s]; j += qt)
                tiles[n_tiles++] = (pllm_cuda_attn_tile){.tok0 = t + j,
                                                         .n_q = PLLM_MIN(qt, n_new[s] - j),
                                                         .pos0 = n_ctx[s] - n_new[s] + j,
                                                         .bt = bt_off[s]};
        }
        t += n_new[s];
    }
    int n_splits = 1, split_len = 64;
    if (c->split_len) {
        split_len = c->split_len;
        n_splits = PLLM_MAX(1, (max_dec_ctx + split_len - 1) / split_len);
    }

    /* reference: the CPU backend's attention, per token and head */
    const pllm_cpu_kernels *kern = pllm_cpu_kernels_get(PLLM_CPU_ISA_SCALAR);
    pllm_kv_layout L = {.n_layer = 1,
                        .n_head_kv = c->n_head_kv,
                        .head_dim = c->hd,
                        .block_size = c->bs,
                        .n_blocks = pool,
                        .dtype = c->kv};
    float *ref = malloc(sizeof(float) * (size_t)n_tok * qd),
          *got = malloc(sizeof(float) * (size_t)n_tok * qd);
    float *scores = malloc(sizeof(float) * (size_t)c->bs);
    const float scale = 1.0f / sqrtf((float)c->hd);
    const int group = c->n_head / c->n_head_kv;
    for (int t = 0; t < n_tok; t++)
        for (int h = 0; h < c->n_head; h++) {
            pllm_cpu_attn_args ca = {.k_cache = kc,
                                     .v_cache = vc,
                                     .kv = &L,
                                     .block_table = bt + bt_off[tok_seq[t]],
                                     .n_pos = tok_pos[t] + 1,
                                     .scale = scale};
            pllm_cpu_attend(ref + (size_t)t * qd + h * c->hd, q + (size_t)t * q_stride + h * c->hd,
                            h / group, &ca, kern, scores);
        }

    void *d_q = dup_dev(dev, q, sizeof(float) * (size_t)n_tok * q_stride);
    void *d_k = dup_dev(dev, kc, cache_n * esz), *d_v = dup_dev(dev, vc, cache_n * esz);
    void *d_bt = dup_dev(dev, bt, sizeof(int32_t) * (size_t)total_blocks);
    void *d_items = dup_dev(dev, items, sizeof *items * (size_t)PLLM_MAX(n_items, 1));
    void *d_tiles = dup_dev(dev, tiles, sizeof *tiles * (size_t)PLLM_MAX(n_tiles, 1));
    void *d_out = NULL, *d_ws = NULL;
    CHECK_OK(pllm_cuda_alloc(dev, &d_out, osz * (size_t)n_tok * qd));
    size_t ws = pllm_cuda_attn_decode_workspace(n_items, c->n_head, c->hd, n_splits);
    if (ws) CHECK_OK(pllm_cuda_alloc(dev, &d_ws, ws));
    pllm_cuda_attn_args a = {.out = d_out,
                             .out_dtype = c->out,
                             .q = d_q,
                             .q_stride = q_stride,
                             .k_cache = d_k,
                             .v_cache = d_v,
                             .kv_dtype = c->kv,
                             .block_tables = d_bt,
                             .n_head = c->n_head,
                             .n_head_kv = c->n_head_kv,
                             .head_dim = c->hd,
                             .block_size = c->bs,
                             .scale = scale};
    CHECK_OK(pllm_cuda_attn_decode(dev, &a, d_items, n_items, n_splits, split_len, d_ws));
    CHECK_OK(pllm_cuda_attn_prefill(dev, &a, d_tiles, n_tiles));
    void *out_h = malloc(osz * (size_t)n_tok * qd);
    fetch(dev, out_h, d_out, osz * (size_t)n_tok * qd);
    for (size_t i = 0; i < (size_t)n_tok * qd; i++) got[i] = get(out_h, c->out, i);
    double mx, rel = pllm_test_rel_err(got, ref, (size_t)n_tok * qd, &mx);
    /* also per token: the worst single token */
    double worst = 0;
    for (int t = 0; t < n_tok; t++) {
        double m2,
            r = pllm_test_rel_err(got + (size_t)t * qd, ref + (size_t)t * qd, (size_t)qd, &m2);
        worst = r > worst ? r : worst;
    }
    const double tol = tol_of(c->out);
    fprintf(stderr,
            "  attention seqs=%-2d tokens=%-3d (decode %d, %d tiles of <= %d) heads=%d/%d hd=%-3d "
            "bs=%-2d kv=%s out=%-4s "
            "splits=%d: max abs err %.2g, rel err %.2g, worst token %.2g (tol %.0e)\n",
            c->n_seqs, n_tok, n_items, n_tiles, qt, c->n_head, c->n_head_kv, c->hd, c->bs,
            pllm_dtype_name(c->kv), pllm_dtype_name(c->out), n_splits, mx, rel, worst, tol);
    CHECK(worst <= tol);
    pllm_cuda_free(dev, d_q), pllm_cuda_free(dev, d_k), pllm_cuda_free(dev, d_v),
        pllm_cuda_free(dev, d_bt);
    pllm_cuda_free(dev, d_items), pllm_cuda_free(dev, d_tiles), pllm_cuda_free(dev, d_out),
        pllm_cuda_free(dev, d_ws);
    free(n_ctx), free(n_new), free(perm), free(bt), free(bt_off), free(kc), free(vc), free(q),
        free(items);
    free(tiles), free(tok_pos), free(tok_seq), free(ref), free(got), free(scores), free(out_h);
}

/* ---- swiglu and the gathered rmsnorm ------------------------------------------------------ */

static void test_swiglu(pllm_cuda_dev *dev, int n_tok, int n_ff, pllm_dtype t)
{
    const size_t esz = pllm_dtype_block_bytes(t), n_in = (size_t)n_tok * 2 * n_ff,
                 n_out = (size_t)n_tok * n_ff;
    void *gu = malloc(n_in * esz), *out_h = malloc(n_out * esz);
    float *gate = malloc(n_out * 4), *up = malloc(n_out * 4), *got = malloc(n_out * 4);
    for (size_t i = 0; i < n_in; i++) put(gu, t, i, 6.0f * pllm_test_randf(&g_rng));
    for (int r = 0; r < n_tok; r++)
        for (int i = 0; i < n_ff; i++) {
            gate[(size_t)r * n_ff + i] = get(gu, t, (size_t)r * 2 * n_ff + i);
            up[(size_t)r * n_ff + i] = get(gu, t, (size_t)r * 2 * n_ff + n_ff + i);
        }
    pllm_cpu_swiglu(gate, up, (int64_t)n_out);
    void *d_gu = dup_dev(dev, gu, n_in * esz), *d_out = NULL;
    CHECK_OK(pllm_cuda_alloc(dev, &d_out, n_out * esz));
    CHECK_OK(pllm_cuda_swiglu(dev, d_out, d_gu, t, n_tok, n_ff));
    fetch(dev, out_h, d_out, n_out * esz);
    for (size_t i = 0; i < n_out; i++) got[i] = get(out_h, t, i);
    double mx, rel = pllm_test_rel_err(got, gate, n_out, &mx);
    fprintf(stderr,
            "  swiglu tokens=%-3d n_ff=%-5d %-4s: max abs err %.2g, rel err %.2g (tol %.0e)\n",
            n_tok, n_ff, pllm_dtype_name(t), mx, rel, tol_of(t));
    CHECK(rel <= tol_of(t));
    pllm_cuda_free(dev, d_gu), pllm_cuda_free(dev, d_out);
    free(gu), free(out_h), free(gate), free(up), free(got);
}

static void test_rmsnorm_rows(pllm_cuda_dev *dev, int n_rows_in, int n_out, int dim, pllm_dtype t,
                              bool with_x)
{
    const size_t esz = pllm_dtype_block_bytes(t);
    float *res = malloc((size_t)n_rows_in * dim * 4), *x = malloc((size_t)n_rows_in * dim * 4);
    float *w = malloc((size_t)dim * 4), *ref = malloc((size_t)n_out * dim * 4),
          *got = malloc((size_t)n_out * dim * 4);
    float *sum = malloc((size_t)dim * 4);
    int32_t *rows = malloc((size_t)n_out * 4);
    void *out_h = malloc((size_t)n_out * dim * esz);
    for (size_t i = 0; i < (size_t)n_rows_in * dim; i++)
        res[i] = 4.0f * pllm_test_randf(&g_rng), x[i] = pllm_test_randf(&g_rng);
    for (int i = 0; i < dim; i++) w[i] = 1.0f + 0.3f * pllm_test_randf(&g_rng);
    for (int r = 0; r < n_out; r++) rows[r] = rnd(n_rows_in);
    const float eps = 1e-6f;
    for (int r = 0; r < n_out; r++) {
        for (int i = 0; i < dim; i++)
            sum[i] =
                res[(size_t)rows[r] * dim + i] + (with_x ? x[(size_t)rows[r] * dim + i] : 0.0f);
        pllm_cpu_rmsnorm(ref + (size_t)r * dim, sum, w, dim, eps);
    }
    void *d_res = dup_dev(dev, res, (size_t)n_rows_in * dim * 4),
         *d_x = dup_dev(dev, x, (size_t)n_rows_in * dim * 4);
    void *d_w = dup_dev(dev, w, (size_t)dim * 4), *d_rows = dup_dev(dev, rows, (size_t)n_out * 4),
         *d_out = NULL;
    CHECK_OK(pllm_cuda_alloc(dev, &d_out, (size_t)n_out * dim * esz));
    CHECK_OK(pllm_cuda_rmsnorm_rows(dev, d_out, t, d_res, with_x ? d_x : NULL, d_rows, d_w, n_out,
                                    dim, eps));
    fetch(dev, out_h, d_out, (size_t)n_out * dim * esz);
    float *res_after = malloc((size_t)n_rows_in * dim * 4);
    fetch(dev, res_after, d_res, (size_t)n_rows_in * dim * 4);
    for (size_t i = 0; i < (size_t)n_out * dim; i++) got[i] = get(out_h, t, i);
    double mx, rel = pllm_test_rel_err(got, ref, (size_t)n_out * dim, &mx);
    bool untouched = memcmp(res_after, res, (size_t)n_rows_in * dim * 4) == 0;
    fprintf(stderr,
            "  rmsnorm_rows in=%-3d out=%-3d dim=%-4d %-4s x=%d: max abs err %.2g, rel err %.2g "
            "(tol %.0e), input %s\n",
            n_rows_in, n_out, dim, pllm_dtype_name(t), with_x, mx, rel, tol_of(t) * 5,
            untouched ? "untouched" : "MODIFIED");
    CHECK(rel <= tol_of(t) * 5); /* the reference sums squares in double, the kernel in float */
    CHECK(untouched);
    pllm_cuda_free(dev, d_res), pllm_cuda_free(dev, d_x), pllm_cuda_free(dev, d_w),
        pllm_cuda_free(dev, d_rows);
    pllm_cuda_free(dev, d_out);
    free(res), free(x), free(w), free(ref), free(got), free(sum), free(rows), free(out_h),
        free(res_after);
}

int main(void)
{
    uint64_t seed = strtoull(pllm_test_env("PLLM_TEST_SEED", "0"), NULL, 10);
    if (!seed) seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    fprintf(stderr, "cuda_ops: seed %llu (PLLM_TEST_SEED to repeat)\n", (unsigned long long)seed);
    g_rng = seed;
    char why[256];
    if (pllm_cuda_dev_count(why, sizeof why) == 0) {
        char msg[400];
        snprintf(msg, sizeof msg, "needs a CUDA device: %s (the emulated build runs these checks)",
                 why);
        pllm_test_skip(msg);
    }
    pllm_cuda_dev *dev = NULL;
    CHECK_OK(pllm_cuda_dev_init(&dev, 0));
    if (!dev) return pllm_test_finish("cuda_ops");
    double t0 = pllm_now();

    static const rope_case ropes[] = {
        {5, 4, 4, 16, 16, 4, 4, PLLM_ROPE_NORM, false, PLLM_DTYPE_F32, PLLM_ROPE_SCALING_NONE},
        {9, 6, 2, 16, 16, 7, 3, PLLM_ROPE_NEOX, true, PLLM_DTYPE_F16, PLLM_ROPE_SCALING_LINEAR},
        {13, 4, 2, 24, 16, 5, 5, PLLM_ROPE_NORM, true, PLLM_DTYPE_F32, PLLM_ROPE_SCALING_LLAMA3},
        {7, 9, 3, 64, 64, 16, 2, PLLM_ROPE_NEOX, false, PLLM_DTYPE_F16, PLLM_ROPE_SCALING_NONE},
        {3, 8, 1, 128, 96, 16, 1, PLLM_ROPE_NORM, true, PLLM_DTYPE_F16, PLLM_ROPE_SCALING_NONE},
    };
    for (size_t i = 0; i < PLLM_ARRAY_LEN(ropes); i++) test_qkv_rope(dev, &ropes[i]);

    static const attn_case attns[] = {
        /* seqs heads kvh hd bs kv out max_ctx max_new split */
        {5, 4, 4, 16, 4, PLLM_DTYPE_F32, PLLM_DTYPE_F32, 40, 1, 0},
        {6, 6, 2, 16, 7, PLLM_DTYPE_F32, PLLM_DTYPE_F32, 90, 1, 64},
        {4, 4, 2, 24, 5, PLLM_DTYPE_F16, PLLM_DTYPE_F32, 70, 12, 0},
        {3, 9, 3, 64, 16, PLLM_DTYPE_F16, PLLM_DTYPE_F16, 150, 20, 64},
        {3, 8, 1, 32, 3, PLLM_DTYPE_F32, PLLM_DTYPE_BF16, 60, 9, 0},
        {2, 18, 1, 16, 8, PLLM_DTYPE_F32, PLLM_DTYPE_F32, 50, 6, 0},  /* G = 18: two head chunks */
        {3, 4, 4, 256, 16, PLLM_DTYPE_F16, PLLM_DTYPE_F32, 45, 5, 0}, /* opt-in shared memory */
        {4, 2, 1, 128, 16, PLLM_DTYPE_F16, PLLM_DTYPE_F16, 300, 1, 128}, /* long decode, split */
        /* long decode, not split: n_splits 1 covers each whole context, past split_len (64) */
        {8, 9, 3, 64, 16, PLLM_DTYPE_F16, PLLM_DTYPE_F32, 700, 1, 0},
        /* decode lane layouts: pairs where 16-byte vectors do not fit the row (hd 10 F16, hd 6
         * F32), two vectors a lane (hd 256 F32), one head a block (MHA), two 4-head blocks per
         * kv head (G = 8) */
        {4, 10, 5, 10, 6, PLLM_DTYPE_F16, PLLM_DTYPE_F32, 80, 1, 64},
        {3, 6, 2, 6, 4, PLLM_DTYPE_F32, PLLM_DTYPE_F32, 70, 1, 0},
        {2, 2, 1, 256, 8, PLLM_DTYPE_F32, PLLM_DTYPE_F32, 100, 1, 64},
        {3, 4, 4, 128, 16, PLLM_DTYPE_F16, PLLM_DTYPE_F16, 130, 1, 0},
        {3, 8, 1, 128, 16, PLLM_DTYPE_F16, PLLM_DTYPE_BF16, 200, 1, 64},
    };
    for (size_t i = 0; i < PLLM_ARRAY_LEN(attns); i++) test_attention(dev, &attns[i]);

    static const pllm_dtype dts[] = {PLLM_DTYPE_F32, PLLM_DTYPE_F16, PLLM_DTYPE_BF16};
    for (int i = 0; i < 3; i++) test_swiglu(dev, 1 + 5 * i, (int[]){7, 160, 1000}[i], dts[i]);
    for (int i = 0; i < 3; i++)
        test_rmsnorm_rows(dev, 9, 1 + 2 * i, (int[]){64, 96, 577}[i], dts[i], i != 1);

#ifdef PLLM_CUDA_EMU
    pllm_cuemu_stats s;
    pllm_cuemu_get_stats(&s);
    fprintf(stderr, "cuda_ops: %llu launches, %llu blocks, %llu threads, %llu switches in %.2f s\n",
            (unsigned long long)s.launches, (unsigned long long)s.blocks,
            (unsigned long long)s.threads, (unsigned long long)s.switches, pllm_now() - t0);
#else
    fprintf(stderr, "cuda_ops: %.2f s on the device\n", pllm_now() - t0);
#endif
    pllm_cuda_dev_free(dev);
    return pllm_test_finish("cuda_ops");
}
