/*
 * kernel_bench.c: every CUDA kernel (and projection GEMM) of one forward step, timed on the
 * device and compared with the device's measured peaks (not a test).
 *
 *     kernel_bench [--dims llama3-8b|smollm2-135m|tiny] [--batch B] [--ctx C] [--prefill P]
 *                  [--reps N] [--json FILE]
 *
 * Peaks are measured first: memory bandwidth (a 1 GiB device-to-device copy: 2 bytes moved per
 * byte copied), the F16 tensor-core GEMM rate (cuBLAS, 8192^3, F32 accumulation) and the F32
 * GEMM rate (4096^3; the CUDA-core bound of the prefill attention). Each kernel then runs on the
 * model's shapes: a decode step of B sequences with C positions of context, and one prefill
 * chunk of P tokens over an empty cache. For each: mean time over N event-timed repetitions
 * (after a warm-up), the bytes it must move and the FLOPs it must do (the formulas of
 * docs/cuda.md), the achieved GB/s or TFLOP/s, its share of the measured peak, and the time the
 * peaks predict (max(bytes / bandwidth, FLOPs / rate)). Inputs are random where values matter
 * (logits, queries, caches).
 *
 * Last, the launch overhead of a whole step (issue 16): the forward pass of a decode step and of
 * a mixed step (B - 1 decode sequences and one 256-token prefill chunk, which the backend runs
 * eagerly: its graphs are for decode-only steps) timed as eager launches and as one captured
 * graph's replay; the difference is what capturing graphs for mixed steps would save.
 *
 * Built against the real CUDA library (kernel_bench) and the emulator (kernel_bench_emu, run
 * by the cuda_kernel_bench_smoke test with --dims tiny so the code stays correct).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/kernels.h"
#include "model/backend.h"

typedef struct dims {
    const char *name;
    int32_t E, H, KVH, hd, F, V, L;
} dims;

static const dims k_dims[] = {
    {"llama3-8b", 4096, 32, 8, 128, 14336, 128256, 32},
    {"smollm2-135m", 576, 9, 3, 64, 1536, 49152, 30},
    {"tiny", 64, 4, 2, 16, 96, 300, 2},
};

typedef struct bench {
    pllm_cuda_dev *dev;
    pllm_cuda_event *e0, *e1;
    int reps;
    double bw, f16_rate, f32_rate; /* measured peaks: bytes/s, FLOP/s */
    FILE *json;
    int n_rows;
    int n_sm;
    const char *phase; /* "decode" or "prefill": the step the rows belong to */
} bench;

#define TRY(call)                                                                                  \
    do {                                                                                           \
        pllm_status st_ = (call);                                                                  \
        if (st_ != PLLM_OK) {                                                                      \
            fprintf(stderr, "kernel_bench: %s:%d: %s: %s\n", __FILE__, __LINE__, #call,            \
                    pllm_errmsg());                                                                \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static void *dalloc(bench *b, size_t bytes)
{
    void *p = NULL;
    TRY(pllm_cuda_alloc(b->dev, &p, bytes ? bytes : 16));
    TRY(pllm_cuda_memset(b->dev, p, 0, bytes ? bytes : 16));
    return p;
}

static void *drandom(bench *b, size_t n_floats, float scale, uint64_t seed)
{
    float *h = malloc(sizeof(float) * n_floats);
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < n_floats; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        h[i] = scale * ((float)(x >> 40) / (float)(1 << 24) * 2.0f - 1.0f);
    }
    void *d = dalloc(b, sizeof(float) * n_floats);
    TRY(pllm_cuda_upload(b->dev, d, h, sizeof(float) * n_floats));
    TRY(pllm_cuda_sync(b->dev));
    free(h);
    return d;
}

/* What a timed body runs. */
typedef pllm_status (*body_fn)(bench *b, void *arg);

static double time_it(bench *b, body_fn f, void *arg, int reps)
{
    TRY(f(b, arg)); /* warm-up (and lazy module loading) */
    TRY(pllm_cuda_sync(b->dev));
    TRY(pllm_cuda_event_record(b->dev, b->e0));
    for (int i = 0; i < reps; i++) TRY(f(b, arg));
    TRY(pllm_cuda_event_record(b->dev, b->e1));
    TRY(pllm_cuda_event_sync(b->e1));
    float ms = 0;
    TRY(pllm_cuda_event_elapsed(b->e0, b->e1, &ms));
    return (double)ms * 1e-3 / reps;
}

static void report(bench *b, const char *name, double t, double bytes, double flops, bool tensor)
{
    const double rate = tensor ? b->f16_rate : b->f32_rate;
    const double t_bw = bytes / b->bw, t_fl = flops / rate, expect = t_bw > t_fl ? t_bw : t_fl;
    const bool mem_bound = t_bw >= t_fl;
    const double achieved = mem_bound ? bytes / t / 1e9 : flops / t / 1e12;
    const double share = mem_bound ? bytes / t / b->bw : flops / t / rate;
    printf("  %-28s %10.1f us  %9.1f MB %10.2f GFLOP  %8.1f %-6s %5.1f%% of peak  (peaks predict "
           "%8.1f us)\n",
           name, t * 1e6, bytes / 1e6, flops / 1e9, achieved, mem_bound ? "GB/s" : "TFLOP/s",
           100 * share, expect * 1e6);
    if (b->json)
        fprintf(b->json,
                "%s{\"step\": \"%s\", \"kernel\": \"%s\", \"us\": %.3f, \"bytes\": %.0f, "
                "\"flops\": %.0f, \"bound\": \"%s\", \"peak_share\": %.4f, \"predicted_us\": %.3f}",
                b->n_rows++ ? ",\n  " : "\n  ", b->phase, name, t * 1e6, bytes, flops,
                mem_bound ? "memory" : (tensor ? "tensor" : "fp32"), share, expect * 1e6);
}

/* ---- peaks -------------------------------------------------------------------------------- */

typedef struct copy_arg {
    void *dst, *src;
    size_t bytes;
} copy_arg;
static pllm_status run_copy(bench *b, void *a)
{
    copy_arg *c = a;
    return pllm_cuda_copy(b->dev, c->dst, c->src, c->bytes);
}

typedef struct gemm_arg {
    pllm_cuda_gemm_args g;
} gemm_arg;
static pllm_status run_gemm(bench *b, void *a)
{
    return pllm_cuda_gemm(b->dev, &((gemm_arg *)a)->g);
}

static gemm_arg square_gemm(bench *b, int32_t n, pllm_dtype in, pllm_dtype out)
{
    size_t ei = pllm_dtype_block_bytes(in), eo = pllm_dtype_block_bytes(out);
    gemm_arg a = {.g = {.m = n,
                        .n = n,
                        .k = n,
                        .batch = 1,
                        .a = dalloc(b, ei * n * n),
                        .a_dtype = in,
                        .lda = n,
                        .b = dalloc(b, ei * n * n),
                        .b_dtype = in,
                        .ldb = n,
                        .trans_b = true,
                        .c = dalloc(b, eo * n * n),
                        .c_dtype = out,
                        .ldc = n,
                        .alpha = 1,
                        .beta = 0}};
    return a;
}

static void measure_peaks(bench *b, bool tiny)
{
    const size_t bytes = tiny ? (1 << 20) : ((size_t)1 << 30);
    copy_arg c = {dalloc(b, bytes), dalloc(b, bytes), bytes};
    double t = time_it(b, run_copy, &c, tiny ? 1 : 10);
    b->bw = 2.0 * (double)bytes / t;
    pllm_cuda_free(b->dev, c.dst), pllm_cuda_free(b->dev, c.src);
    const int32_t n16 = tiny ? 64 : 8192, n32 = tiny ? 64 : 4096;
    gemm_arg g = square_gemm(b, n16, PLLM_DTYPE_F16, PLLM_DTYPE_F16);
    t = time_it(b, run_gemm, &g, tiny ? 1 : 10);
    b->f16_rate = 2.0 * n16 * (double)n16 * n16 / t;
    pllm_cuda_free(b->dev, (void *)g.g.a), pllm_cuda_free(b->dev, (void *)g.g.b),
        pllm_cuda_free(b->dev, g.g.c);
    g = square_gemm(b, n32, PLLM_DTYPE_F32, PLLM_DTYPE_F32);
    t = time_it(b, run_gemm, &g, tiny ? 1 : 5);
    b->f32_rate = 2.0 * n32 * (double)n32 * n32 / t;
    pllm_cuda_free(b->dev, (void *)g.g.a), pllm_cuda_free(b->dev, (void *)g.g.b),
        pllm_cuda_free(b->dev, g.g.c);
    printf("measured peaks: memory %.0f GB/s, F16 GEMM %.1f TFLOP/s, F32 GEMM %.1f TFLOP/s\n",
           b->bw / 1e9, b->f16_rate / 1e12, b->f32_rate / 1e12);
    if (b->json)
        fprintf(b->json,
                "\"peaks\": {\"bytes_per_s\": %.0f, \"f16_flops\": %.0f, \"f32_flops\": "
                "%.0f},\n\"kernels\": [",
                b->bw, b->f16_rate, b->f32_rate);
}

/* ---- the step's kernels -------------------------------------------------------------------- */

typedef struct step {
    const dims *d;
    int32_t T; /* tokens of the step */
    void *x, *proj, *xb, *qkv, *att, *gu, *h, *xs, *logits, *work, *counts, *res, *tok;
    void *w_qkv, *w_o, *w_gu, *w_down, *w_out, *norm, *inv_freq, *table;
    void *kc, *vc, *bt, *positions, *slots, *items, *tiles, *params, *rows, *part, *spart;
    /* the same context in an fp8 (E4M3) cache: data, then one half scale per row
     * (model/backend.h PLLM_KV_DTYPE_FP8); fp8 selects it for qkv_rope and attention */
    void *kc8, *vc8;
    size_t kv8_data;
    bool fp8;
    int32_t n_items, n_tiles, n_splits, split_len, S;
} step;

static pllm_status k_embedding(bench *b, void *a)
{
    step *s = a;
    return pllm_cuda_embedding(b->dev, s->x, s->table, PLLM_DTYPE_F16, s->tok, s->T, s->d->E,
                               s->d->V);
}
static pllm_status k_rmsnorm(bench *b, void *a)
{
    step *s = a;
    return pllm_cuda_rmsnorm_residual(b->dev, s->xb, PLLM_DTYPE_F16, s->x, s->proj, s->norm, s->T,
                                      s->d->E, 1e-5f);
}
static pllm_status proj(bench *b, void *C, pllm_dtype ct, const void *A, const void *W, int32_t m,
                        int32_t n, int32_t k)
{
    pllm_cuda_gemm_args g = {.m = m,
                             .n = n,
                             .k = k,
                             .batch = 1,
                             .a = A,
                             .a_dtype = PLLM_DTYPE_F16,
                             .lda = k,
                             .b = W,
                             .b_dtype = PLLM_DTYPE_F16,
                             .ldb = k,
                             .trans_b = true,
                             .c = C,
                             .c_dtype = ct,
                             .ldc = n,
                             .alpha = 1,
                             .beta = 0};
    return pllm_cuda_gemm(b->dev, &g);
}
static int32_t qkv_cols(const dims *d)
{
    return (d->H + 2 * d->KVH) * d->hd;
}
static pllm_status k_gemm_qkv(bench *b, void *a)
{
    step *s = a;
    return proj(b, s->qkv, PLLM_DTYPE_F32, s->xb, s->w_qkv, s->T, qkv_cols(s->d), s->d->E);
}
static pllm_status k_qkv_rope(bench *b, void *a)
{
    step *s = a;
    const dims *d = s->d;
    pllm_cuda_qkv_rope_args q = {.qkv = s->qkv,
                                 .ld = qkv_cols(d),
                                 .positions = s->positions,
                                 .slots = s->slots,
                                 .inv_freq = s->inv_freq,
                                 .mscale = 1.0,
                                 .k_cache = s->fp8 ? s->kc8 : s->kc,
                                 .v_cache = s->fp8 ? s->vc8 : s->vc,
                                 .k_scales = s->fp8 ? (char *)s->kc8 + s->kv8_data : NULL,
                                 .v_scales = s->fp8 ? (char *)s->vc8 + s->kv8_data : NULL,
                                 .kv_dtype = s->fp8 ? PLLM_KV_DTYPE_FP8 : PLLM_DTYPE_F16,
                                 .n_tokens = s->T,
                                 .n_head = d->H,
                                 .n_head_kv = d->KVH,
                                 .head_dim = d->hd,
                                 .rope_dim = d->hd,
                                 .block_size = 16,
                                 .rope_neox = 0};
    return pllm_cuda_qkv_rope(b->dev, &q);
}
static pllm_cuda_attn_args attn_args(const step *s)
{
    const dims *d = s->d;
    return (pllm_cuda_attn_args){.out = s->att,
                                 .out_dtype = PLLM_DTYPE_F16,
                                 .q = s->qkv,
                                 .q_stride = qkv_cols(d),
                                 .k_cache = s->fp8 ? s->kc8 : s->kc,
                                 .v_cache = s->fp8 ? s->vc8 : s->vc,
                                 .k_scales = s->fp8 ? (char *)s->kc8 + s->kv8_data : NULL,
                                 .v_scales = s->fp8 ? (char *)s->vc8 + s->kv8_data : NULL,
                                 .kv_dtype = s->fp8 ? PLLM_KV_DTYPE_FP8 : PLLM_DTYPE_F16,
                                 .block_tables = s->bt,
                                 .n_head = d->H,
                                 .n_head_kv = d->KVH,
                                 .head_dim = d->hd,
                                 .block_size = 16,
                                 .scale = 1.0f / sqrtf((float)d->hd)};
}
static pllm_status k_attn_decode(bench *b, void *a)
{
    step *s = a;
    pllm_cuda_attn_args aa = attn_args(s);
    return pllm_cuda_attn_decode(b->dev, &aa, s->items, s->n_items, s->n_splits, s->split_len,
                                 s->part);
}
static pllm_status k_attn_prefill(bench *b, void *a)
{
    step *s = a;
    pllm_cuda_attn_args aa = attn_args(s);
    return pllm_cuda_attn_prefill(b->dev, &aa, s->tiles, s->n_tiles);
}
static pllm_status k_gemm_o(bench *b, void *a)
{
    step *s = a;
    return proj(b, s->proj, PLLM_DTYPE_F32, s->att, s->w_o, s->T, s->d->E, s->d->H * s->d->hd);
}
static pllm_status k_gemm_gu(bench *b, void *a)
{
    step *s = a;
    return proj(b, s->gu, PLLM_DTYPE_F16, s->xb, s->w_gu, s->T, 2 * s->d->F, s->d->E);
}
static pllm_status k_swiglu(bench *b, void *a)
{
    step *s = a;
    return pllm_cuda_swiglu(b->dev, s->h, s->gu, PLLM_DTYPE_F16, s->T, s->d->F);
}
static pllm_status k_gemm_down(bench *b, void *a)
{
    step *s = a;
    return proj(b, s->proj, PLLM_DTYPE_F32, s->h, s->w_down, s->T, s->d->E, s->d->F);
}
static pllm_status k_final_norm(bench *b, void *a)
{
    step *s = a;
    return pllm_cuda_rmsnorm_rows(b->dev, s->xs, PLLM_DTYPE_F16, s->x, s->proj, s->rows, s->norm,
                                  s->S, s->d->E, 1e-5f);
}
static pllm_status k_lm_head(bench *b, void *a)
{
    step *s = a;
    return proj(b, s->logits, PLLM_DTYPE_F32, s->xs, s->w_out, s->S, s->d->V, s->d->E);
}
static pllm_status k_sample(bench *b, void *a)
{
    step *s = a;
    pllm_cuda_sample_args sa = {.logits = s->logits,
                                .work = s->work,
                                .counts = s->counts,
                                .params = s->params,
                                .ids = s->tok,
                                .tokens = s->res,
                                .logprobs = (float *)s->res + s->S,
                                .top = NULL,
                                .part = s->spart,
                                .n_parts = pllm_cuda_sample_parts(s->S, s->d->V, b->n_sm),
                                .n_samples = s->S,
                                .n_vocab = s->d->V};
    return pllm_cuda_sample(b->dev, &sa);
}

/* Allocate and fill a step of T tokens: a decode step of B sequences (prefill = 0) with ctx
 * positions each, or one prefill chunk of T tokens. */
static void step_init(bench *b, step *s, const dims *d, int32_t T, int32_t ctx, bool prefill,
                      bool random_sampling)
{
    memset(s, 0, sizeof *s);
    s->d = d;
    s->T = T;
    s->S = prefill ? 1 : T;
    const size_t E = (size_t)d->E, F = (size_t)d->F, V = (size_t)d->V, qc = (size_t)qkv_cols(d),
                 qd = (size_t)d->H * d->hd;
    s->x = drandom(b, (size_t)T * E, 1.0f, 1);
    s->proj = drandom(b, (size_t)T * E, 1.0f, 2);
    s->xb = dalloc(b, 2 * (size_t)T * E);
    s->qkv = drandom(b, (size_t)T * qc, 1.0f, 3);
    s->att = dalloc(b, 2 * (size_t)T * qd);
    s->gu = dalloc(b, 2 * (size_t)T * 2 * F);
    s->h = dalloc(b, 2 * (size_t)T * F);
    s->xs = dalloc(b, 2 * (size_t)s->S * E);
    s->logits = drandom(b, (size_t)s->S * V, 8.0f, 4);
    s->work = dalloc(b, 4 * (size_t)s->S * V);
    s->counts = dalloc(b, 4 * (size_t)s->S * V);
    s->spart = dalloc(b, pllm_cuda_sample_part_bytes(s->S, PLLM_CUDA_SAMPLE_MAX_PARTS));
    s->res = dalloc(b, 8 * (size_t)s->S);
    s->w_qkv = dalloc(b, 2 * qc * E);
    s->w_o = dalloc(b, 2 * E * qd);
    s->w_gu = dalloc(b, 2 * 2 * F * E);
    s->w_down = dalloc(b, 2 * E * F);
    s->w_out = dalloc(b, 2 * V * E);
    s->table = s->w_out;
    s->norm = drandom(b, E, 1.0f, 5);
    /* context: each sequence's blocks are consecutive in the pool */
    const int32_t bs = 16, n_seq = prefill ? 1 : T, per_seq = prefill ? T : ctx;
    const int32_t nb = (per_seq + bs - 1) / bs;
    const size_t cache = (size_t)n_seq * nb * d->KVH * bs * d->hd;
    s->kc = drandom(b, cache / 2 + 1, 1.0f, 6); /* F16 elements: half as many floats */
    s->vc = drandom(b, cache / 2 + 1, 1.0f, 7);
    /* fp8: every byte 0x3c (E4M3 1.5, and a half scale of 1.06: finite values; the times do not
     * depend on them) */
    s->kv8_data = cache;
    const size_t kv8 = cache + 2 * (cache / (size_t)d->hd);
    s->kc8 = dalloc(b, kv8), s->vc8 = dalloc(b, kv8);
    TRY(pllm_cuda_memset(b->dev, s->kc8, 0x3c, kv8));
    TRY(pllm_cuda_memset(b->dev, s->vc8, 0x3c, kv8));
    int32_t *bt = malloc(sizeof(int32_t) * (size_t)n_seq * nb),
            *tok = malloc(sizeof(int32_t) * (size_t)T);
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)T),
            *slots = malloc(sizeof(int32_t) * (size_t)T);
    int32_t *rows = malloc(sizeof(int32_t) * (size_t)s->S);
    for (int32_t i = 0; i < n_seq * nb; i++) bt[i] = i;
    for (int32_t t = 0; t < T; t++) {
        tok[t] = (int32_t)((t * 7919u) % (uint32_t)d->V);
        pos[t] = prefill ? t : ctx - 1;
        slots[t] = prefill ? t : (t * nb) * bs + (ctx - 1);
    }
    for (int32_t i = 0; i < s->S; i++) rows[i] = prefill ? T - 1 : i;
    pllm_cuda_attn_item *items = malloc(sizeof *items * (size_t)T);
    pllm_cuda_attn_tile *tiles = malloc(sizeof *tiles * (size_t)T);
    const int32_t qt = pllm_cuda_attn_prefill_tile_tokens(d->H, d->KVH);
    if (prefill) {
        for (int32_t t = 0; t < T; t += qt)
            tiles[s->n_tiles++] = (pllm_cuda_attn_tile){
                .tok0 = t, .n_q = T - t < qt ? T - t : qt, .pos0 = t, .bt = 0};
    } else {
        for (int32_t t = 0; t < T; t++)
            items[s->n_items++] = (pllm_cuda_attn_item){.tok = t, .n_ctx = ctx, .bt = t * nb};
        /* the backend's rule: split when the grid is narrow (here: always report both) */
        s->split_len = 512;
        s->n_splits = 1;
    }
    pllm_cuda_sample_params *rec = calloc((size_t)s->S, sizeof *rec);
    pllm_sampling_params sp;
    pllm_sampling_defaults(&sp);
    if (random_sampling) sp.temperature = 0.8f, sp.top_k = 50, sp.top_p = 0.9f, sp.seed = 1;
    for (int32_t i = 0; i < s->S; i++) pllm_cuda_sample_fill(&rec[i], &sp, NULL, d->V, NULL, 0);
    double *inv = malloc(sizeof(double) * (size_t)d->hd / 2);
    for (int32_t i = 0; i < d->hd / 2; i++) inv[i] = pow(500000.0, -2.0 * i / d->hd);
#define UP(dst, src, bytes)                                                                        \
    do {                                                                                           \
        dst = dalloc(b, bytes);                                                                    \
        TRY(pllm_cuda_upload(b->dev, dst, src, bytes));                                            \
    } while (0)
    UP(s->bt, bt, sizeof(int32_t) * (size_t)n_seq * nb);
    UP(s->tok, tok, sizeof(int32_t) * (size_t)T);
    UP(s->positions, pos, sizeof(int32_t) * (size_t)T);
    UP(s->slots, slots, sizeof(int32_t) * (size_t)T);
    UP(s->rows, rows, sizeof(int32_t) * (size_t)s->S);
    UP(s->items, items, sizeof *items * (size_t)(s->n_items ? s->n_items : 1));
    UP(s->tiles, tiles, sizeof *tiles * (size_t)(s->n_tiles ? s->n_tiles : 1));
    UP(s->params, rec, sizeof *rec * (size_t)s->S);
    UP(s->inv_freq, inv, sizeof(double) * (size_t)d->hd / 2);
#undef UP
    TRY(pllm_cuda_sync(b->dev));
    free(bt), free(tok), free(pos), free(slots), free(rows), free(items), free(tiles), free(rec),
        free(inv);
}

static void run_step(bench *b, const dims *d, int32_t T, int32_t ctx, bool prefill)
{
    step s;
    b->phase = prefill ? "prefill" : "decode";
    step_init(b, &s, d, T, ctx, prefill, false);
    const double E = d->E, F = d->F, V = d->V, qc = qkv_cols(d), qd = (double)d->H * d->hd, Tn = T,
                 S = s.S;
    const double kvd = (double)d->KVH * d->hd, G = (double)d->H / d->KVH;
    if (prefill)
        printf("\n%s: prefill chunk of %d tokens (one sequence, empty cache), F16 weights and KV\n",
               d->name, T);
    else
        printf(
            "\n%s: decode step of %d sequences, %d positions of context each, F16 weights and KV\n",
            d->name, T, ctx);
    const int R = b->reps;
    report(b, "embedding", time_it(b, k_embedding, &s, R), Tn * E * 2 + Tn * E * 4, 0, false);
    report(b, "rmsnorm+residual", time_it(b, k_rmsnorm, &s, R), Tn * E * (4 + 4 + 4 + 2),
           5 * Tn * E, false);
    report(b, "gemm qkv", time_it(b, k_gemm_qkv, &s, R), qc * E * 2 + Tn * E * 2 + Tn * qc * 4,
           2 * Tn * qc * E, true);
    report(b, "qkv_rope + kv store", time_it(b, k_qkv_rope, &s, R), Tn * qc * 8 + Tn * 2 * kvd * 2,
           6 * Tn * (qd + kvd) / 2, false);
    s.fp8 = true;
    report(b, "qkv_rope + kv store (fp8 KV)", time_it(b, k_qkv_rope, &s, R),
           Tn * qc * 8 + Tn * 2 * (kvd + 2.0 * d->KVH) + Tn * 2 * kvd * 4, 6 * Tn * (qd + kvd) / 2,
           false);
    s.fp8 = false;
    if (prefill) {
        const double keys = Tn * (Tn + 1) / 2; /* causal: query i sees i + 1 keys */
        const double qt = pllm_cuda_attn_prefill_tile_tokens(d->H, d->KVH);
        report(b, "attention prefill", time_it(b, k_attn_prefill, &s, R),
               (keys / qt) * d->KVH * 2 * d->hd * 2 + Tn * qd * 4 + Tn * qd * 2,
               4 * keys * d->H * d->hd, false);
    } else {
        const double bytes = Tn * d->KVH * 2.0 * ctx * d->hd * 2 + Tn * qd * 4 + Tn * qd * 2;
        /* fp8 KV: one byte an element plus a 2-byte scale a row */
        const double bytes8 = Tn * d->KVH * 2.0 * ctx * (d->hd + 2.0) + Tn * qd * 4 + Tn * qd * 2;
        const double flops = 4 * Tn * d->H * (double)ctx * d->hd;
        const double t16 = time_it(b, k_attn_decode, &s, R);
        report(b, "attention decode", t16, bytes, flops, false);
        s.fp8 = true;
        const double t8 = time_it(b, k_attn_decode, &s, R);
        report(b, "attention decode (fp8 KV)", t8, bytes8, flops, false);
        s.fp8 = false;
        const int32_t nat = (ctx + 511) / 512;
        if (nat > 1) {
            s.n_splits = nat;
            s.part = dalloc(b, pllm_cuda_attn_decode_workspace(s.n_items, d->H, d->hd, nat));
            report(b, "attention decode (split)", time_it(b, k_attn_decode, &s, R),
                   bytes + Tn * d->H * nat * (d->hd + 2) * 8.0, flops, false);
            s.fp8 = true;
            report(b, "attention decode (split, fp8 KV)", time_it(b, k_attn_decode, &s, R),
                   bytes8 + Tn * d->H * nat * (d->hd + 2) * 8.0, flops, false);
            s.fp8 = false;
            s.n_splits = 1;
        }
        printf("decode attention fp8 KV / F16 KV: bytes %.3f, time %.3f\n", bytes8 / bytes,
               t8 / t16);
        (void)G;
    }
    report(b, "gemm o", time_it(b, k_gemm_o, &s, R), E * qd * 2 + Tn * qd * 2 + Tn * E * 4,
           2 * Tn * E * qd, true);
    report(b, "rmsnorm+residual (ffn)", time_it(b, k_rmsnorm, &s, R), Tn * E * (4 + 4 + 4 + 2),
           5 * Tn * E, false);
    report(b, "gemm gate/up", time_it(b, k_gemm_gu, &s, R),
           2 * F * E * 2 + Tn * E * 2 + Tn * 2 * F * 2, 2 * Tn * 2 * F * E, true);
    report(b, "swiglu", time_it(b, k_swiglu, &s, R), Tn * 2 * F * 2 + Tn * F * 2, 6 * Tn * F,
           false);
    report(b, "gemm down", time_it(b, k_gemm_down, &s, R), E * F * 2 + Tn * F * 2 + Tn * E * 4,
           2 * Tn * E * F, true);
    report(b, "final rmsnorm (sampled rows)", time_it(b, k_final_norm, &s, R), S * E * (4 + 4 + 2),
           5 * S * E, false);
    report(b, "lm head", time_it(b, k_lm_head, &s, R), V * E * 2 + S * E * 2 + S * V * 4,
           2 * S * V * E, true);
    /* plain greedy: the statistics pass reads each row once; the sampling kernel reads none */
    report(b, "sample (greedy)", time_it(b, k_sample, &s, R), S * V * 4, 0, false);
    step rs;
    step_init(b, &rs, d, T, ctx, prefill, true);
    report(b, "sample (top-k 50, top-p 0.9)", time_it(b, k_sample, &rs, R), S * V * 4 * 12,
           S * V * 40, false);
}

/* ---- launch overhead of a whole step: eager launches against one graph replay ---- */

/* One forward step as the backend launches it (cuda_backend.c enqueue_forward, own attention):
 * per layer rmsnorm, GEMM qkv, qkv_rope, decode attention (when the step has decode items),
 * prefill attention (when it has prefill tiles), GEMM o, rmsnorm, GEMM gate/up, swiglu, GEMM
 * down; then the final norm of the sampled rows, the LM head and sampling. all: the step's
 * tokens (norms, GEMMs, rope); dec / pre: its decode items and prefill tiles (NULL: none);
 * smp: the sampled rows. */
typedef struct fwd {
    step *all, *dec, *pre, *smp;
    int32_t n_layer;
} fwd;

static pllm_status k_forward(bench *b, void *a)
{
    const fwd *f = a;
    PLLM_TRY(k_embedding(b, f->all));
    for (int32_t l = 0; l < f->n_layer; l++) {
        PLLM_TRY(k_rmsnorm(b, f->all));
        PLLM_TRY(k_gemm_qkv(b, f->all));
        PLLM_TRY(k_qkv_rope(b, f->all));
        if (f->dec) PLLM_TRY(k_attn_decode(b, f->dec));
        if (f->pre) PLLM_TRY(k_attn_prefill(b, f->pre));
        PLLM_TRY(k_gemm_o(b, f->all));
        PLLM_TRY(k_rmsnorm(b, f->all));
        PLLM_TRY(k_gemm_gu(b, f->all));
        PLLM_TRY(k_swiglu(b, f->all));
        PLLM_TRY(k_gemm_down(b, f->all));
    }
    PLLM_TRY(k_final_norm(b, f->smp));
    PLLM_TRY(k_lm_head(b, f->smp));
    return k_sample(b, f->smp);
}

static pllm_status k_graph(bench *b, void *a)
{
    return pllm_cuda_graph_launch(b->dev, (pllm_cuda_graph *)a);
}

/* The step launched eagerly and replayed as one captured graph: the difference is what its
 * launches cost (a graph pays one). */
static void launch_overhead(bench *b, const char *what, fwd *f, int32_t n_launches)
{
    const int R = b->reps < 5 ? b->reps : 5;
    const double eager = time_it(b, k_forward, f, R);
    pllm_cuda_graph *g = NULL;
    TRY(pllm_cuda_graph_begin(b->dev));
    TRY(k_forward(b, f));
    TRY(pllm_cuda_graph_end(b->dev, &g));
    const double graph = time_it(b, k_graph, g, R);
    pllm_cuda_graph_free(g);
    printf("  %-44s eager %9.1f us, graph %9.1f us: %d launches cost %8.1f us (%.1f%% of the "
           "eager step)\n",
           what, eager * 1e6, graph * 1e6, n_launches, (eager - graph) * 1e6,
           eager > 0 ? 100.0 * (eager - graph) / eager : 0.0);
    if (b->json)
        fprintf(b->json,
                "%s{\"step\": \"launch\", \"kernel\": \"%s\", \"us\": %.3f, \"graph_us\": "
                "%.3f, \"launches\": %d}",
                b->n_rows++ ? ",\n  " : "\n  ", what, eager * 1e6, graph * 1e6, n_launches);
}

/* Issue 16: decode-only steps run as graphs (cuda_backend.c graph_batch); mixed prefill/decode
 * steps run eagerly. This measures what their launches cost: a decode step of B sequences, and a
 * mixed step of B - 1 decode sequences plus one prefill chunk of P tokens. */
static void run_launch(bench *b, const dims *d, int32_t B, int32_t ctx, int32_t P)
{
    printf("\n%s: launch overhead of a whole step (%d layers), eager vs one graph replay\n",
           d->name, d->L);
    step dec, pre, all;
    step_init(b, &dec, d, B, ctx, false, false);
    fwd f = {.all = &dec, .dec = &dec, .pre = NULL, .smp = &dec, .n_layer = d->L};
    char what[96];
    snprintf(what, sizeof what, "decode, %d sequences x %d context", B, ctx);
    launch_overhead(b, what, &f, 1 + 9 * d->L + 3);
    step_init(b, &pre, d, P, 0, true, false);
    step_init(b, &all, d, B - 1 + P, 0, true, false); /* the mixed step's tokens */
    dec.n_items = B - 1;
    dec.S = B; /* B - 1 decode rows and the chunk's last */
    f = (fwd){.all = &all, .dec = &dec, .pre = &pre, .smp = &dec, .n_layer = d->L};
    snprintf(what, sizeof what, "mixed, %d decode + a %d-token prefill chunk", B - 1, P);
    launch_overhead(b, what, &f, 1 + 10 * d->L + 3);
}

int main(int argc, char **argv)
{
    const dims *d = &k_dims[0];
    int32_t batch = 64, ctx = 1024, prefill = 2048;
    const char *json_path = NULL;
    bench b = {.reps = 20};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(a, "--dims") && ++i) {
            d = NULL;
            for (size_t k = 0; k < sizeof k_dims / sizeof k_dims[0]; k++)
                if (!strcmp(v, k_dims[k].name)) d = &k_dims[k];
            if (!d) {
                fprintf(stderr, "kernel_bench: unknown --dims %s (llama3-8b, smollm2-135m, tiny)\n",
                        v);
                return 2;
            }
        } else if (!strcmp(a, "--batch") && ++i)
            batch = atoi(v);
        else if (!strcmp(a, "--ctx") && ++i)
            ctx = atoi(v);
        else if (!strcmp(a, "--prefill") && ++i)
            prefill = atoi(v);
        else if (!strcmp(a, "--reps") && ++i)
            b.reps = atoi(v);
        else if (!strcmp(a, "--json") && ++i)
            json_path = v;
        else {
            fprintf(stderr, "usage: kernel_bench [--dims llama3-8b|smollm2-135m|tiny] [--batch B] "
                            "[--ctx C] [--prefill P] "
                            "[--reps N] [--json FILE]\n");
            return 2;
        }
    }
    char why[256];
    if (pllm_cuda_dev_count(why, sizeof why) == 0) {
        fprintf(stderr, "SKIPPED: kernel_bench needs a CUDA device: %s\n", why);
        return 77;
    }
    TRY(pllm_cuda_dev_init(&b.dev, 0));
    pllm_cuda_dev_info info;
    TRY(pllm_cuda_dev_info_get(b.dev, &info));
    b.n_sm = info.n_sm;
    TRY(pllm_cuda_event_create(b.dev, &b.e0));
    TRY(pllm_cuda_event_create(b.dev, &b.e1));
    const bool tiny = !strcmp(d->name, "tiny");
    if (tiny)
        batch = batch > 4 ? 4 : batch, ctx = ctx > 40 ? 40 : ctx,
        prefill = prefill > 24 ? 24 : prefill, b.reps = 1;
    printf("device: %s (sm_%d%d, %d SMs, %.1f GiB)%s\n", info.name, info.sm_major, info.sm_minor,
           info.n_sm, (double)info.total_bytes / (1 << 30),
           info.emulated ? " -- EMULATED: times mean nothing" : "");
    if (json_path && !(b.json = fopen(json_path, "w"))) {
        fprintf(stderr, "kernel_bench: cannot write %s\n", json_path);
        return 1;
    }
    if (b.json)
        fprintf(b.json,
                "{\"device\": \"%s\", \"dims\": \"%s\", \"n_layer\": %d, \"batch\": %d, \"ctx\": "
                "%d, \"prefill\": %d,\n",
                info.name, d->name, d->L, batch, ctx, prefill);
    measure_peaks(&b, tiny);
    run_step(&b, d, batch, ctx, false);
    run_step(&b, d, prefill, 0, true);
    run_launch(&b, d, batch, ctx, tiny ? 8 : 256);
    if (b.json) {
        fprintf(b.json, "\n]}\n");
        fclose(b.json);
    }
    pllm_cuda_event_free(b.e0);
    pllm_cuda_event_free(b.e1);
    pllm_cuda_dev_free(b.dev);
    return 0;
}
