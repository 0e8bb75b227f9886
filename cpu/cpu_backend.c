/*
 * cpu_backend.c: the CPU backend: plan validation, the forward pass (one parallel region per
 * step, operations separated by pool barriers), the KV cache, and sampling.
 *
 * Work split inside a step (nth threads; nothing depends on the split, so results are the same
 * for any thread count):
 *   - matmuls: contiguous ranges of each weight matrix's rows (multiples of 16 rows, so no two
 *     threads write the same cache line of an output row, and whole 16-row panels of the packed
 *     integer-path weights); bias, SwiGLU and residual adds are done by the thread that owns the
 *     rows, with no barrier in between;
 *   - int8 activations of the integer path (cpu/gemm.h), once per matmul input: right after each
 *     RMSNorm by the thread that normed the token; after SwiGLU by the thread that owns those
 *     columns (w_gate/w_up split at multiples of 32, the quantization block); the attention
 *     output by token ranges after attention (one extra barrier); the LM head's input after
 *     the final norm;
 *   - RMSNorm, embedding, the q/k head norms (Qwen3), RoPE and the K/V stores: contiguous
 *     ranges of tokens;
 *   - attention: (sequence, query tile, kv head) items split by their cost (attention.h);
 *   - output projection: rows of the vocabulary, for the sampled tokens only; sampling:
 *     contiguous ranges of samples.
 *   - mixture of experts (model.h): RMSNorm, router logits, routing and the per-expert row
 *     counts by tokens (no barrier in between); then each thread places and gathers its own
 *     tokens' (token, expert) rows, grouped by expert in token order; each expert's matrices
 *     are multiplied over all of its rows at once, as items (expert, chunk of rows) split by
 *     cost (tokens x rows), so every expert weight is read once per step (gate, up, SwiGLU and
 *     down in one item when the items are whole experts); the weighted sum by tokens;
 * Barriers per step: 2 + 7 per layer + 3 (+ 1 per layer on the integer path; + 2 per layer with
 * Gemma 3's post-norms, which need whole rows of the projection before the residual add); a MoE
 * layer has 3 in its FFN instead of the dense 3 (4 when the expert passes are split or with a
 * shared expert), the last of them before the weighted sum, which ends the layer without one:
 * the next layer's first operation reads only the same thread's tokens (+ 1 before the final
 * norm when the last layer is a MoE).
 *
 * PLLM_CPU_MATH=f32 (environment, read at create) keeps every matrix on the float32 kernels (the
 * reference numerics); the default (int8) sends quantized matrices through the integer path when
 * the kernel table has one, packing them into panels at create (same size as the GGUF data for
 * Q4_0/Q4_1/Q8_0; the 5- and 6-bit types take a byte per value) so that the mapped file pages of
 * those matrices are no longer read. The packed copies share one mapping with transparent huge
 * pages, in the order a step reads them (place_packed).
 */
#include "cpu/cpu_backend.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "cpu/attention.h"
#include "cpu/kernels.h"
#include "cpu/ops.h"
#include "cpu/threadpool.h"

/* What kv_available keeps back for everything else: max(1 GiB, 10% of MemAvailable). */
#define KV_MARGIN_MIN ((size_t)1 << 30)

typedef struct cpu_ctx {
    const pllm_model *model;
    pllm_cpu_params params;
    const pllm_cpu_kernels *kern;
    pllm_cpu_pool *pool;
    /* The integer path (cpu/gemm.h): mats[l * 7 + i] for layer l's wq wk wv wo w_gate w_up
     * w_down, mats[n_layer * 7] for the output; use_q where the matrix goes through it. */
    bool int_math;
    const pllm_cpu_kernels *qkern; /* the integer path's table: kern, or the scalar reference */
    struct cpu_mat {
        const pllm_tensor *t;
        pllm_cpu_qweight q;
        bool use_q;
    } *mats;
    pllm_cpu_qact qa; /* [T][n_embd]: the normed inputs of wq/wk/wv, w_gate/w_up, output */
    pllm_cpu_qact qb; /* [T][max(n_head * head_dim, n_ff)]: the inputs of wo and w_down */
    /* Mixture of experts (model.h): mats[moe_base[l]] is layer l's router, then its experts'
     * gate, up and down matrices ([n_expert] each), then (n_ff_shexp > 0) the shared expert's
     * gate, up, down; -1 for dense layers. n_mats in all. */
    int64_t *moe_base;
    int64_t n_mats;
    /* the packed copies of all integer-path matrices, one mapping in the order a step reads
     * them (setup_mats), or NULL */
    uint8_t *packed_arena;
    size_t packed_arena_bytes;
    bool moe_float_in; /* some expert's gate/up takes float inputs (xg is needed) */
    int n_threads;
    double *inv_freq;            /* [rope_dim / 2] */
    double *inv_freq_long;       /* [rope_dim / 2] LONGROPE: positions >= rope_orig_ctx; or NULL */
    double *inv_freq_local;      /* [rope_dim / 2] sliding-window layers' base (Gemma 3); or NULL */

    /* KV cache: for layer l, K at kv_mem + (2l) * layer_bytes, V at (2l + 1) * layer_bytes,
     * each [n_blocks][n_head_kv][block_size][head_dim] of kv.dtype (I8: then its scales,
     * engine/backend.h). */
    pllm_kv_layout kv;
    /* the hybrid layout (kv.n_blocks_sw > 0): the sliding layers' caches hold n_blocks_sw
     * blocks each (kv_sw: kv with n_blocks = n_blocks_sw, what their kernels see), the others
     * n_blocks; kv_off[2l], kv_off[2l + 1]: layer l's K and V offsets in kv_mem */
    pllm_kv_layout kv_sw;
    size_t *kv_off;
    bool kv_ready;
    uint8_t *kv_mem;
    size_t kv_layer_bytes;
    uint64_t
        *slot_bits; /* [ceil(max(n_blocks, n_blocks_sw) * block_size / 64)]: duplicate-slot check */

    /* Workspace for up to cap_tokens tokens and cap_samples samples. */
    int32_t cap_tokens, cap_samples;
    float *x;        /* [T][n_embd] residual stream */
    float *xb;       /* [T][n_embd] normed input / projection output */
    float *q;        /* [T][n_head * head_dim] */
    float *k, *v;    /* [T][n_head_kv * head_dim] */
    float *att;      /* [T][n_head * head_dim] attention output */
    float *hb, *hb2; /* [T][n_ff] gate, up */
    float *rope_cs;  /* [T][rope_dim] cos, sin pairs */
    /* MoE workspace: a step's T tokens make T * n_expert_used (token, expert) rows, grouped by
     * expert (rows eoff[e] .. eoff[e + 1] - 1 are expert e's, in token order) */
    float *rlog;      /* [T][n_expert] router logits */
    int32_t *sel_e;   /* [T][n_expert_used] the chosen experts, by decreasing probability */
    float *sel_w;     /* [T][n_expert_used] their weights */
    int32_t *sel_row; /* [T][n_expert_used] their rows in the grouped arrays */
    /* per thread ith (MOE_HIST_LD(n_expert) apart, whole cache lines): moe_cnt, the thread's
     * rows per expert; moe_cur, where its next row of each expert goes; moe_off (rows
     * MOE_HIST_LD + 16 apart), its copy of the offsets [n_expert + 1] */
    int32_t *moe_cnt, *moe_cur, *moe_off;
    /* MOE_FUSED: the next expert to claim (reset by thread 0 before a MoE FFN's first barrier;
     * claimed only after it), padded to a cache line of its own (the context is calloc'd: no
     * _Alignas) */
    char moe_next_pad0[64];
    _Atomic int64_t moe_next;
    char moe_next_pad1[64];
    float *xg, *yg;       /* [T * n_expert_used][n_embd] grouped inputs, expert outputs */
    float *hg, *hg2;      /* [T * n_expert_used][n_ff_exp] gate, up */
    float *shg;           /* [T] the shared expert's weight sigmoid(shexp_inp . x) */
    float *hs, *hs2;      /* [T][n_ff_shexp] the shared expert's gate, up */
    float *ys;            /* [T][n_embd] its output */
    pllm_cpu_qact qs2;    /* int8 of hs (its down input) */
    pllm_cpu_qact qg;     /* int8 of xg */
    pllm_cpu_qact qg2;    /* int8 of hg (the down input) */
    float *rope_cs_local; /* [T][rope_dim] the sliding layers' (inv_freq_local), or NULL */
    int32_t *tok_seq;  /* [T] sequence index of each token */
    float *xs;       /* [S][n_embd] final-normed hidden state of each sampled token */
    float *logits;   /* [S][n_vocab] */
    int32_t *top_ids;  /* [n_threads][20] */
    float *top_lps;    /* [n_threads][20] */
    float *scratch;  /* [n_threads][scratch_floats] */
    size_t scratch_floats;
    uint8_t *sample_scratch; /* [n_threads][sample_scratch_bytes] */
    size_t sample_scratch_bytes;

    /* The step being run (set by step(), read by the region). */
    const pllm_batch_plan *plan;
    pllm_step_out *out;

    /* submit / wait: the work runs in submit; wait completes it (at most 2 in flight) */
    int32_t in_flight;
    int32_t *prev_tok; /* [n_prev] the last step's sampled ids (token_src resolves to them) */
    int32_t n_prev, cap_prev;
    int32_t *tok_buf; /* [cap_tok_buf] a plan's tokens with token_src resolved */
    int32_t cap_tok_buf;
    pllm_sample_req *samp_buf; /* a plan's samples with pending history entries resolved */
    int32_t cap_samp_buf;
    int32_t *hist_buf; /* [cap_hist_buf] those samples' histories */
    int32_t cap_hist_buf;

    /* PLLM_CPU_PHASE_STATS: per thread, the time spent in each phase of the forward pass
     * working (up to its closing barrier) and waiting in that barrier; printed at destroy */
    struct phase_tstats *phase; /* [n_threads] or NULL */
    int64_t phase_steps, phase_tokens, phase_samples;
} cpu_ctx;

#define MAX_TOP 20 /* sampling.h: logprobs <= 20 */

/* ---- phase statistics (PLLM_CPU_PHASE_STATS) ------------------------------------------------ */

static const char *const g_phase_names[PLLM_CPU_PH_COUNT] = {
    "embed+rope table",    "attn norm+quant", "q/k/v",          "rope+kv store", "attention",
    "o (+quant)+residual", "ffn norm+quant",  "gate/up+swiglu", "down+residual", "moe ffn",
    "final norm+quant",    "lm head",         "sampling"};

const char *pllm_cpu_phase_name(pllm_cpu_phase ph)
{
    return ph >= 0 && ph < PLLM_CPU_PH_COUNT ? g_phase_names[ph] : "?";
}

struct phase_tstats {
    _Alignas(64) double work[PLLM_CPU_PH_COUNT], wait[PLLM_CPU_PH_COUNT];
    double mark; /* when this thread's current phase began */
};

static double phase_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* End phase ph for thread ith: its work since the last mark, then the barrier and its wait. */
static void phase_barrier(cpu_ctx *c, int ith, int ph)
{
    struct phase_tstats *st = c->phase ? &c->phase[ith] : NULL;
    if (!st) {
        pllm_cpu_pool_barrier(c->pool);
        return;
    }
    double t = phase_now();
    st->work[ph] += t - st->mark;
    pllm_cpu_pool_barrier(c->pool);
    st->mark = phase_now();
    st->wait[ph] += st->mark - t;
}

static void phase_end(cpu_ctx *c, int ith, int ph)
{
    struct phase_tstats *st = c->phase ? &c->phase[ith] : NULL;
    if (!st) return;
    double t = phase_now();
    st->work[ph] += t - st->mark;
    st->mark = t;
}

static void phase_collect(const cpu_ctx *c, pllm_cpu_phase_stats *out)
{
    memset(out, 0, sizeof *out);
    out->n_threads = c->n_threads;
    out->steps = c->phase_steps;
    out->tokens = c->phase_tokens;
    out->samples = c->phase_samples;
    for (int i = 0; i < c->n_threads; i++)
        for (int ph = 0; ph < PLLM_CPU_PH_COUNT; ph++) {
            out->work_s[ph] += c->phase[i].work[ph];
            out->wait_s[ph] += c->phase[i].wait[ph];
        }
}

static void phase_report(const pllm_cpu_phase_stats *st)
{
    const int nth = st->n_threads;
    double tot = 0;
    for (int ph = 0; ph < PLLM_CPU_PH_COUNT; ph++) tot += st->work_s[ph] + st->wait_s[ph];
    tot /= nth;
    fprintf(
        stderr,
        "cpu phases (PLLM_CPU_PHASE_STATS): %lld forward passes, %lld tokens, %lld sampled rows, "
        "%.3f s a thread\n  %-20s %9s %6s %11s %11s\n",
        (long long)st->steps, (long long)st->tokens, (long long)st->samples, tot, "phase",
        "ms/pass", "share", "work s", "wait s");
    const double steps = st->steps > 0 ? (double)st->steps : 1;
    for (int ph = 0; ph < PLLM_CPU_PH_COUNT; ph++) {
        const double w = st->work_s[ph] / nth, x = st->wait_s[ph] / nth;
        if (w + x == 0) continue;
        fprintf(stderr, "  %-20s %9.4f %5.1f%% %11.3f %11.3f\n", g_phase_names[ph],
                1e3 * (w + x) / steps, tot > 0 ? 100 * (w + x) / tot : 0, w, x);
    }
}

/* ---- forward pass ------------------------------------------------------------------------ */

enum { M_Q, M_K, M_V, M_O, M_GATE, M_UP, M_DOWN, M_PER_LAYER };
/* matrices of a MoE layer: router, gate/up/down of each expert, the shared expert's 3 */
#define MOE_MATS(ne, ff_shexp) (1 + 3 * (int64_t)(ne) + ((ff_shexp) > 0 ? 3 : 0))
/* int32 per thread of the MoE counters: n_expert rounded up to whole cache lines */
#define MOE_HIST_LD(ne) (((int64_t)(ne) + 15) / 16 * 16)

/* Y = X W^T for this thread's rows of W (contiguous, starting at multiples of align); returns
 * the rows [*r0, *r1). Matrices on the integer path read XQ, the quantized X. */
static void mm(cpu_ctx *c, int ith, int nth, float *Y, int64_t ldy, const float *X, int64_t ldx, const pllm_cpu_qact *XQ,
               const struct cpu_mat *M, int64_t n_tok, int64_t align, int64_t *r0, int64_t *r1)
{
    const pllm_tensor *W = M->t;
    pllm_cpu_split(W->n_rows, align, ith, nth, r0, r1);
    if (*r0 >= *r1 || n_tok <= 0) return;
    if (M->use_q) c->qkern->qmatmul(Y, ldy, XQ, &M->q, n_tok, *r0, *r1);
    else
        c->kern->matmul[W->dtype](Y, ldy, X, ldx, W->data, W->row_bytes, W->n_cols, n_tok, *r0, *r1,
                                  c->scratch + (size_t)ith * c->scratch_floats);
}

/* Quantize tokens [t0, t1) of X (rows of K floats) into A when a consumer needs it. */
static void quant_rows(const cpu_ctx *c, bool need, pllm_cpu_qact *A, const float *X, int64_t K, int64_t t0, int64_t t1)
{
    if (!need) return;
    for (int64_t t = t0; t < t1; t++) c->qkern->quant(A, t, X + t * K, 0, K / 32);
}

/* Y = X W^T for rows [r0, r1) of W (multiples of 16 but for the end), tokens [0, n_tok). */
static void mm_rows(cpu_ctx *c, int ith, float *Y, int64_t ldy, const float *X, int64_t ldx,
                    const pllm_cpu_qact *XQ, const struct cpu_mat *M, int64_t n_tok, int64_t r0,
                    int64_t r1)
{
    const pllm_tensor *W = M->t;
    if (r0 >= r1 || n_tok <= 0) return;
    if (M->use_q)
        c->qkern->qmatmul(Y, ldy, XQ, &M->q, n_tok, r0, r1);
    else
        c->kern->matmul[W->dtype](Y, ldy, X, ldx, W->data, W->row_bytes, W->n_cols, n_tok, r0, r1,
                                  c->scratch + (size_t)ith * c->scratch_floats);
}

/* The int8 activations of rows [t0, ...) of a: a view that starts at row t0. */
static pllm_cpu_qact qact_from(const pllm_cpu_qact *a, int64_t t0)
{
    pllm_cpu_qact v = *a;
    if (!a->qs) return v;
    v.qs += t0 * a->cap_k;
    v.dx += t0 * (a->cap_k / 32);
    v.xs += t0 * (a->cap_k / 32);
    v.sx += t0 * (a->cap_k / 32);
    v.sx16 += t0 * (a->cap_k / 16);
    v.cap_tok -= t0;
    return v;
}

/* Row t of a (K of b's) into row r of b. */
static void qact_copy_row(pllm_cpu_qact *b, int64_t r, const pllm_cpu_qact *a, int64_t t)
{
    const int64_t nb = PLLM_MIN(a->cap_k, b->cap_k) / 32;
    memcpy(b->qs + r * b->cap_k, a->qs + t * a->cap_k, (size_t)nb * 32);
    memcpy(b->dx + r * (b->cap_k / 32), a->dx + t * (a->cap_k / 32), sizeof(float) * (size_t)nb);
    memcpy(b->xs + r * (b->cap_k / 32), a->xs + t * (a->cap_k / 32), sizeof(float) * (size_t)nb);
    memcpy(b->sx + r * (b->cap_k / 32), a->sx + t * (a->cap_k / 32), sizeof(int32_t) * (size_t)nb);
    memcpy(b->sx16 + r * (b->cap_k / 16), a->sx16 + t * (a->cap_k / 16),
           sizeof(int32_t) * 2 * (size_t)nb);
}

/* acc[i] = w * y[i] (first) or acc[i] += w * y[i], i < n: the MoE's weighted sum, 16 floats at a
 * time (GCC/Clang vector extensions; the loop with possibly aliasing float pointers stays
 * scalar at -O2), the same operations per element as the scalar tail. */
static void moe_axpy(float *restrict acc, float w, const float *restrict y, int64_t n, bool first)
{
    typedef float v16 __attribute__((vector_size(64)));
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        v16 a, b;
        memcpy(&b, y + i, sizeof b);
        if (first)
            a = w * b;
        else {
            memcpy(&a, acc + i, sizeof a);
            a += w * b;
        }
        memcpy(acc + i, &a, sizeof a);
    }
    for (; i < n; i++) acc[i] = first ? w * y[i] : acc[i] + w * y[i];
}

/* Router of one token (model.h): softmax of the n logits (float32), the k largest (ties: the
 * lower index), their weights renormalized when norm. */
static void moe_route(const float *logit, int32_t n, int32_t k, bool norm, int32_t *sel, float *w)
{
    float mx = -INFINITY, sum = 0;
    for (int32_t e = 0; e < n; e++) mx = fmaxf(mx, logit[e]);
    for (int32_t e = 0; e < n; e++) sum += expf(logit[e] - mx);
    /* the k largest logits (softmax keeps the order), sorted, in one pass: insertion into the
     * list; a tie keeps the earlier (lower) expert first */
    int32_t m = 0;
    for (int32_t e = 0; e < n; e++) {
        if (m == k && !(logit[e] > logit[sel[k - 1]])) continue;
        int32_t i = m < k ? m++ : k - 1;
        while (i > 0 && logit[e] > logit[sel[i - 1]]) {
            sel[i] = sel[i - 1];
            i--;
        }
        sel[i] = e;
    }
    float tot = 0;
    for (int32_t j = 0; j < k; j++) {
        w[j] = expf(logit[sel[j]] - mx) / sum;
        tot += w[j];
    }
    if (norm)
        for (int32_t j = 0; j < k; j++) w[j] /= tot;
}

/* The expert passes (moe_pass). */
enum { MOE_GATE_UP, MOE_DOWN, MOE_FUSED };

/* Pass over the experts' matrices W[e] (rows of them in chunks), each chunk an item of cost
 * (tokens x rows); thread ith takes the items whose cost midpoint falls in its share, so every
 * weight row is read once per step whatever the number of tokens an expert got. eoff: the
 * grouped rows' offsets (the thread's copy). MOE_GATE_UP: gate and up of the grouped inputs,
 * SwiGLU, the int8 of the down input; MOE_DOWN: down; MOE_FUSED (only when every item is a whole
 * expert, moe_whole_experts): both for each expert the thread claims (c->moe_next), with no
 * barrier between (the down of an expert reads only the gate/up rows the same thread just
 * wrote). */
static void moe_pass(cpu_ctx *c, int ith, int nth, int32_t l, const int32_t *eoff, int pass)
{
    const pllm_model_config *cfg = &c->model->cfg;
    const int64_t E = cfg->n_embd, F = cfg->n_ff_exp, NE = cfg->n_expert;
    const struct cpu_mat *G = c->mats + c->moe_base[l] + 1, *U = G + NE, *D = U + NE;
    const int64_t rows = pass == MOE_DOWN ? E : F, align = pass == MOE_DOWN ? 16 : 32;
    double total = 0, cum = 0;
    int64_t n_act = 0;
    for (int64_t e = 0; e < NE; e++) {
        total += (double)(eoff[e + 1] - eoff[e]) * (double)rows;
        n_act += eoff[e + 1] > eoff[e];
    }
    if (total <= 0) return;
    /* about 4 items per thread: whole experts when enough of them have rows, else pieces */
    const int64_t pieces = (4 * (int64_t)nth + n_act - 1) / n_act,
                  chunk = ((rows + pieces - 1) / pieces + align - 1) / align * align;
    PLLM_ASSERT(pass != MOE_FUSED || chunk >= rows);
    for (int64_t i = 0; i < NE; i++) {
        /* MOE_FUSED: experts are claimed, not assigned, so a thread that is descheduled (on a
         * shared machine) or slower holds up no one's share */
        const int64_t e = pass == MOE_FUSED
                              ? atomic_fetch_add_explicit(&c->moe_next, 1, memory_order_relaxed)
                              : i;
        if (e >= NE) break;
        const int64_t o = eoff[e], n = eoff[e + 1] - o;
        if (!n) continue;
        for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
            const int64_t r1 = PLLM_MIN(rows, r0 + chunk);
            const double cost = (double)n * (double)(r1 - r0), mid = cum + 0.5 * cost;
            cum += cost;
            if (pass != MOE_FUSED && PLLM_MIN((int)(mid * nth / total), nth - 1) != ith) continue;
            if (pass != MOE_DOWN) {
                const pllm_cpu_qact qx = qact_from(&c->qg, o);
                mm_rows(c, ith, c->hg + o * F, F, c->xg + o * E, E, &qx, &G[e], n, r0, r1);
                mm_rows(c, ith, c->hg2 + o * F, F, c->xg + o * E, E, &qx, &U[e], n, r0, r1);
                for (int64_t t = o; t < o + n; t++) {
                    c->kern->swiglu(c->hg + t * F + r0, c->hg2 + t * F + r0, r1 - r0);
                    if (D[e].use_q)
                        c->qkern->quant(&c->qg2, t, c->hg + t * F + r0, r0 / 32, (r1 + 31) / 32);
                }
            }
            if (pass != MOE_GATE_UP) {
                const pllm_cpu_qact qh = qact_from(&c->qg2, o);
                const bool f = pass == MOE_FUSED;
                mm_rows(c, ith, c->yg + o * E, E, c->hg + o * F, F, &qh, &D[e], n, f ? 0 : r0,
                        f ? E : r1);
            }
        }
    }
}

/* Whether moe_pass splits both passes into whole experts (so MOE_FUSED may run): at least 4
 * items per thread come from the active experts alone. */
static bool moe_whole_experts(const cpu_ctx *c, int nth, const int32_t *eoff)
{
    int64_t n_act = 0;
    for (int64_t e = 0; e < c->model->cfg.n_expert; e++) n_act += eoff[e + 1] > eoff[e];
    return n_act >= 4 * (int64_t)nth;
}

/* Layer l's mixture of experts on the residual x, for this thread's tokens [t0, t1): RMSNorm
 * (ffn_norm) and the int8 activations, router and routing of the thread's own tokens (no barrier
 * before them); the (token, expert) rows grouped by expert in token order (each thread counts
 * its tokens' rows per expert; after a barrier every thread derives the offsets from all counts
 * and places and gathers its own tokens' rows); one matmul per expert and matrix over its rows
 * (gate, up, SwiGLU and down of an expert in one item when the items are whole experts); the
 * weighted sum of the thread's tokens added to x. Barriers: 3 (4 when the passes are split or
 * with a shared expert). Ends without a barrier: x of the thread's own tokens is final, which
 * is all the next layer's first operation (its RMSNorm by the same tokens) reads. */
static void moe_ffn(cpu_ctx *c, int ith, int nth, int32_t l, int64_t t0, int64_t t1)
{
    const pllm_model_config *cfg = &c->model->cfg;
    const pllm_layer_weights *lw = &c->model->layers[l];
    const int64_t T = c->plan->n_tokens, E = cfg->n_embd, NE = cfg->n_expert,
                  K = cfg->n_expert_used, ld = MOE_HIST_LD(NE);
    const struct cpu_mat *R = c->mats + c->moe_base[l], *G = R + 1, *U = G + NE;
    int32_t *cnt = c->moe_cnt + ith * ld, *cur = c->moe_cur + ith * ld,
            *eoff = c->moe_off + ith * (ld + 16);
    memset(cnt, 0, sizeof(int32_t) * (size_t)NE);
    if (ith == 0) /* every claim of the previous MoE FFN was before its last barrier */
        atomic_store_explicit(&c->moe_next, 0, memory_order_relaxed);
    for (int64_t t = t0; t < t1; t++) {
        c->kern->rmsnorm(c->xb + t * E, c->x + t * E, lw->ffn_norm, E, cfg->norm_eps);
        quant_rows(c, c->int_math, &c->qa, c->xb, E, t, t + 1);
    }
    if (t1 > t0) { /* the router's logits of the thread's tokens (all experts) */
        const pllm_cpu_qact qx = qact_from(&c->qa, t0);
        mm_rows(c, ith, c->rlog + t0 * NE, NE, c->xb + t0 * E, E, &qx, R, t1 - t0, 0, NE);
    }
    for (int64_t t = t0; t < t1; t++) {
        moe_route(c->rlog + t * NE, (int32_t)NE, (int32_t)K, cfg->moe_norm_topk, c->sel_e + t * K,
                  c->sel_w + t * K);
        for (int64_t j = 0; j < K; j++) cnt[c->sel_e[t * K + j]]++;
        if (lw->shexp_inp) { /* the shared expert's weight: sigmoid of a float32 dot */
            float d = 0;
            for (int64_t i = 0; i < E; i++) d += lw->shexp_inp[i] * c->xb[t * E + i];
            c->shg[t] = 1.0f / (1.0f + expf(-d));
        }
    }
    phase_barrier(c, ith, PLLM_CPU_PH_MOE);
    /* the offsets (this thread's copy) and where this thread's rows of each expert start: the
     * threads' tokens are consecutive ranges in thread order, so the rows of an expert stay in
     * token order */
    eoff[0] = 0;
    for (int64_t e = 0; e < NE; e++) {
        int32_t before = 0, all = 0;
        for (int j = 0; j < nth; j++) {
            const int32_t n = c->moe_cnt[j * ld + e];
            before += j < ith ? n : 0;
            all += n;
        }
        cur[e] = eoff[e] + before;
        eoff[e + 1] = eoff[e] + all;
    }
    /* the grouped rows of the thread's tokens: float inputs for the float matrices, the int8
     * activations already computed (qa, the same for every expert) for the integer path */
    bool need_q = false, need_f = false;
    for (int64_t e = 0; e < NE; e++) {
        need_q = need_q || G[e].use_q || U[e].use_q;
        need_f = need_f || !G[e].use_q || !U[e].use_q;
    }
    PLLM_ASSERT(!need_f || c->moe_float_in);
    for (int64_t t = t0; t < t1; t++)
        for (int64_t j = 0; j < K; j++) {
            const int32_t r = cur[c->sel_e[t * K + j]]++;
            c->sel_row[t * K + j] = r;
            if (need_f) memcpy(c->xg + (int64_t)r * E, c->xb + t * E, sizeof(float) * (size_t)E);
            if (need_q) qact_copy_row(&c->qg, r, &c->qa, t);
        }
    phase_barrier(c, ith, PLLM_CPU_PH_MOE);
    const int64_t FS = cfg->n_ff_shexp;
    const struct cpu_mat *S = R + 1 + 3 * NE; /* the shared expert's gate, up, down */
    const bool fused = moe_whole_experts(c, nth, eoff);
    moe_pass(c, ith, nth, l, eoff, fused ? MOE_FUSED : MOE_GATE_UP);
    int64_t r0, r1;
    if (FS) { /* the shared expert over all tokens: this thread's rows, as the dense MLP */
        mm(c, ith, nth, c->hs, FS, c->xb, E, &c->qa, &S[0], T, 32, &r0, &r1);
        mm(c, ith, nth, c->hs2, FS, c->xb, E, &c->qa, &S[1], T, 32, &r0, &r1);
        for (int64_t t = 0; t < T && r0 < r1; t++) {
            c->kern->swiglu(c->hs + t * FS + r0, c->hs2 + t * FS + r0, r1 - r0);
            if (S[2].use_q)
                c->qkern->quant(&c->qs2, t, c->hs + t * FS + r0, r0 / 32, (r1 + 31) / 32);
        }
    }
    if (!fused || FS) {
        phase_barrier(c, ith, PLLM_CPU_PH_MOE);
        if (!fused) moe_pass(c, ith, nth, l, eoff, MOE_DOWN);
        if (FS) mm(c, ith, nth, c->ys, E, c->hs, FS, &c->qs2, &S[2], T, 16, &r0, &r1);
    }
    phase_barrier(c, ith, PLLM_CPU_PH_MOE);
    for (int64_t t = t0; t < t1; t++) { /* sum over the token's experts, then the residual */
        float *acc = c->xb + t * E;
        for (int64_t j = 0; j < K; j++) {
            const float *y = c->yg + (int64_t)c->sel_row[t * K + j] * E;
            moe_axpy(acc, c->sel_w[t * K + j], y, E, j == 0);
        }
        if (FS) /* plus the shared expert's share */
            moe_axpy(acc, c->shg[t], c->ys + t * E, E, false);
        moe_axpy(c->x + t * E, 1.0f, acc, E, false);
    }
}

static void add_bias(float *Y, int64_t ldy, const float *b, int64_t n_tok, int64_t r0, int64_t r1)
{
    if (!b) return;
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t r = r0; r < r1; r++) Y[t * ldy + r] += b[r];
}

static void *kv_k(const cpu_ctx *c, int32_t l)
{
    return c->kv_mem + c->kv_off[2 * l];
}
static void *kv_v(const cpu_ctx *c, int32_t l)
{
    return c->kv_mem + c->kv_off[2 * l + 1];
}

/* Query positions per attention tile: the GQA group's rows of up to 64 (query, head) pairs,
 * whose q and output rows (2 x 16 KiB at head_dim 64) stay in L1 beside the K/V chunk, within
 * the thread's scratch. Depends only on the model and the KV layout, never on the batch. */
static int32_t attn_tile_tokens(const cpu_ctx *c, int32_t group)
{
    int32_t qt = PLLM_MAX(1, 64 / group);
    while (qt > 1 && pllm_cpu_attn_tile_scratch(qt * group, c->kv.block_size) > c->scratch_floats) qt--;
    PLLM_ASSERT(pllm_cpu_attn_tile_scratch(qt * group, c->kv.block_size) <= c->scratch_floats);
    return qt;
}

/* The relative cost of an attention tile of n queries at positions pos0.. (per kv head), for
 * splitting a step's tiles between threads: a sweep of the K/V positions the tile reads (shared
 * by its rows: loads, block lookups, the online softmax's per-chunk work) plus each row's
 * positions. Counting rows alone made a sequence with many query rows (a verification step's
 * drafts) look ~3.7x dearer than it is beside one-row decode tiles (its K/V loads are shared), so
 * the other thread held up to 3x its work (8 drafts on each of 2 of 16 sequences: 11 vs 35 ms);
 * ATTN_SWEEP_COST (measured: a 17-row tile at context 500 costs 4.7x a 1-row one,
 * bench/spec_step_bench --drafts-uneven) fixes it. Only the split depends on it, never a result. */
#define ATTN_SWEEP_COST 3.5
static double attn_tile_cost(int32_t pos0, int32_t n)
{
    const double span = (double)pos0 + n + 16;
    return ATTN_SWEEP_COST * span + (double)n * (pos0 + 0.5 * (n + 1) + 16);
}

/* The query tile of a sequence of n_new rows in a step of n_items (sequence, query tile, kv head)
 * items: attn_tile_tokens' qt, unless the step has too few items for the threads (one or two
 * sequences' decode rows and their drafts): then a sequence's rows are split in two tiles. The
 * fast tile shares little between its query positions (each sweeps the super-chunk from L2 with
 * its own row group; attention.c), so the split costs little, and one sequence at SmolLM2's 3 KV
 * heads on 2 threads no longer gives one thread 2 of 3 tiles. (Splitting a GQA group's heads
 * instead cost ~1.5x the attention: each head subgroup loads every K/V row again.) A row's result
 * depends on neither its tile nor its thread (attention.h). */
static int32_t attn_seq_tile(int32_t qt, int32_t n_new, int64_t n_items, int nth)
{
    if (n_items >= 4 * (int64_t)nth || n_new < 2) return qt;
    return PLLM_MIN(qt, (n_new + 1) / 2);
}

/* x += xb, where xb holds this thread's rows [r0, r1) of a projection; with a post-norm (Gemma),
 * x += RMSNorm(xb) * post_norm instead, which needs whole rows: a barrier, then this thread's
 * tokens [t0, t1). Ends with the barrier after which x is complete. */
static void post_residual(cpu_ctx *c, int ith, int ph, const float *post_norm, int64_t T,
                          int64_t t0, int64_t t1, int64_t r0, int64_t r1)
{
    const int64_t E = c->model->cfg.n_embd;
    if (!post_norm) {
        for (int64_t t = 0; t < T; t++)
            for (int64_t r = r0; r < r1; r++) c->x[t * E + r] += c->xb[t * E + r];
    } else {
        phase_barrier(c, ith, ph);
        for (int64_t t = t0; t < t1; t++) {
            c->kern->rmsnorm(c->xb + t * E, c->xb + t * E, post_norm, E, c->model->cfg.norm_eps);
            for (int64_t r = 0; r < E; r++) c->x[t * E + r] += c->xb[t * E + r];
        }
    }
    phase_barrier(c, ith, ph);
}

static void forward_region(void *arg, int ith, int nth)
{
    cpu_ctx *c = arg;
    const pllm_model *m = c->model;
    const pllm_model_config *cfg = &m->cfg;
    const pllm_batch_plan *plan = c->plan;
    const int64_t T = plan->n_tokens, S = plan->n_samples;
    const int64_t E = cfg->n_embd, hd = cfg->head_dim, QD = (int64_t)cfg->n_head * hd,
                  KVD = (int64_t)cfg->n_head_kv * hd, F = cfg->n_ff, V = cfg->n_vocab;
    const int32_t group = cfg->n_head / cfg->n_head_kv;
    float *scratch = c->scratch + (size_t)ith * c->scratch_floats;
    int64_t t0, t1, r0, r1;
    if (c->phase) c->phase[ith].mark = phase_now();

    /* embeddings and the rotary table of this thread's tokens */
    pllm_cpu_split(T, 1, ith, nth, &t0, &t1);
    for (int64_t t = t0; t < t1; t++) {
        const pllm_tensor *te = &m->tok_embd;
        pllm_dequantize_row(c->x + t * E, (const uint8_t *)te->data + (size_t)plan->tokens[t] * te->row_bytes,
                            te->dtype, E);
        if (cfg->embd_scale > 0) /* Gemma: times sqrt(n_embd) */
            for (int64_t i = 0; i < E; i++) c->x[t * E + i] *= cfg->embd_scale;
        if (c->inv_freq_local)
            pllm_cpu_rope_table(c->rope_cs_local + t * cfg->rope_dim, plan->positions[t],
                                c->inv_freq_local, cfg->rope_dim / 2);
        if (c->inv_freq_long) /* LongRoPE (model.h): long factors past the original context,
                                 attention factor */
            pllm_cpu_rope_table_scaled(c->rope_cs + t * cfg->rope_dim, plan->positions[t],
                                       plan->positions[t] >= cfg->rope_orig_ctx ? c->inv_freq_long
                                                                                : c->inv_freq,
                                       cfg->rope_dim / 2, (double)cfg->rope_attn_factor);
        else
            pllm_cpu_rope_table(c->rope_cs + t * cfg->rope_dim, plan->positions[t], c->inv_freq,
                                cfg->rope_dim / 2);
    }
    phase_barrier(c, ith, PLLM_CPU_PH_EMBED);

    for (int32_t l = 0; l < cfg->n_layer; l++) {
        const pllm_layer_weights *w = &m->layers[l];
        const struct cpu_mat *M = c->mats + (size_t)l * M_PER_LAYER;

        /* RMSNorm and, in the same pass, the int8 activations of q/k/v */
        for (int64_t t = t0; t < t1; t++) {
            c->kern->rmsnorm(c->xb + t * E, c->x + t * E, w->attn_norm, E, cfg->norm_eps);
            quant_rows(c, M[M_Q].use_q || M[M_K].use_q || M[M_V].use_q, &c->qa, c->xb, E, t, t + 1);
        }
        phase_barrier(c, ith, PLLM_CPU_PH_ATTN_NORM);

        mm(c, ith, nth, c->q, QD, c->xb, E, &c->qa, &M[M_Q], T, 16, &r0, &r1);
        add_bias(c->q, QD, w->bq, T, r0, r1);
        mm(c, ith, nth, c->k, KVD, c->xb, E, &c->qa, &M[M_K], T, 16, &r0, &r1);
        add_bias(c->k, KVD, w->bk, T, r0, r1);
        mm(c, ith, nth, c->v, KVD, c->xb, E, &c->qa, &M[M_V], T, 16, &r0, &r1);
        add_bias(c->v, KVD, w->bv, T, r0, r1);
        phase_barrier(c, ith, PLLM_CPU_PH_QKV);

        /* RoPE on q; RoPE on k fused with the K/V store (one pass per token: the rotated key is
         * written straight into its cache slot) */
        void *kc = kv_k(c, l), *vc = kv_v(c, l);
        /* a sliding layer of the hybrid layout: its own pool, tables and slots */
        const bool in_sw = pllm_kv_layer_in_sw(&c->kv, w->window);
        const pllm_kv_layout *lkv = in_sw ? &c->kv_sw : &c->kv;
        const int32_t *lslots = in_sw ? plan->sw_slots : plan->slots;
        const int32_t *ltables = in_sw ? plan->sw_block_tables : plan->block_tables;
        for (int64_t t = t0; t < t1; t++) {
            const float *cs =
                (w->window && c->rope_cs_local ? c->rope_cs_local : c->rope_cs) + t * cfg->rope_dim;
            if (w->q_norm) /* Qwen3: RMSNorm of each q and k head (in place) before RoPE */
                for (int32_t h = 0; h < cfg->n_head; h++)
                    c->kern->rmsnorm(c->q + t * QD + h * hd, c->q + t * QD + h * hd, w->q_norm, hd,
                                     cfg->norm_eps);
            if (w->k_norm)
                for (int32_t h = 0; h < cfg->n_head_kv; h++)
                    c->kern->rmsnorm(c->k + t * KVD + h * hd, c->k + t * KVD + h * hd, w->k_norm,
                                     hd, cfg->norm_eps);
            for (int32_t h = 0; h < cfg->n_head; h++) pllm_cpu_rope_apply(c->q + t * QD + h * hd, cs, cfg->rope_dim, cfg->rope_mode);
            pllm_cpu_rope_store_kv(kc, vc, lkv, lslots[t], c->k + t * KVD, c->v + t * KVD, cs,
                                   cfg->rope_dim, cfg->rope_mode, c->kern, scratch);
        }
        phase_barrier(c, ith, PLLM_CPU_PH_ROPE_KV);

        /* attention: items (sequence, query tile of up to qt consecutive tokens, fewer in a
         * step of few items: attn_seq_tile; kv head), the
         * query heads of one GQA group together so they share each K/V chunk (attention.h).
         * A tile's cost grows with its positions, and less than in proportion to its rows
         * (attn_tile_cost), so items are split by cost: each thread takes the items whose cost
         * midpoint falls in its share. A row's result depends on neither its
         * tile nor its thread, so the step's result does not either. */
        {
            const int32_t qt = attn_tile_tokens(c, group);
            int64_t n_items = 0;
            for (int32_t s = 0; s < plan->n_seqs; s++)
                n_items += (plan->seqs[s].n_new + qt - 1) / qt * cfg->n_head_kv;
            double total = 0;
            for (int32_t s = 0; s < plan->n_seqs; s++) {
                const pllm_seq_plan *sp = &plan->seqs[s];
                const int32_t sqt = attn_seq_tile(qt, sp->n_new, n_items, nth);
                for (int32_t i0 = 0; i0 < sp->n_new; i0 += sqt)
                    total +=
                        attn_tile_cost(sp->n_ctx - sp->n_new + i0, PLLM_MIN(sqt, sp->n_new - i0)) *
                        cfg->n_head_kv;
            }
            /* each tile is computed once the thread has found its next one and prefetched that
             * one's first positions: a tile over a context in DRAM then starts on rows already
             * on their way (attention.h) */
            double cum = 0;
            bool have = false;
            pllm_cpu_attn_tile cur = {0};
            pllm_cpu_attn_args cur_a = {0};
            for (int32_t s = 0; s < plan->n_seqs; s++) {
                const pllm_seq_plan *sp = &plan->seqs[s];
                pllm_cpu_attn_args a = {.k_cache = kc,
                                        .v_cache = vc,
                                        .kv = lkv,
                                        .block_table = ltables + sp->block_start,
                                        .scale = cfg->attn_scale > 0 ? cfg->attn_scale
                                                                     : 1.0f / sqrtf((float)hd),
                                        .window = w->window};
                const int32_t sqt = attn_seq_tile(qt, sp->n_new, n_items, nth);
                /* a kv head's tiles in turn: a thread's next tile then sweeps K/V rows it has
                 * just read, and the two tiles of a split sequence land on different threads */
                for (int32_t kh = 0; kh < cfg->n_head_kv; kh++)
                    for (int32_t i0 = 0; i0 < sp->n_new; i0 += sqt) {
                        const int32_t n = PLLM_MIN(sqt, sp->n_new - i0),
                                      pos0 = sp->n_ctx - sp->n_new + i0;
                        const double cost = attn_tile_cost(pos0, n);
                        const double mid = cum + 0.5 * cost;
                        cum += cost;
                        if (PLLM_MIN((int)(mid * nth / total), nth - 1) != ith) continue;
                        const int64_t t = sp->token_start + i0, col = (int64_t)kh * group * hd;
                        const pllm_cpu_attn_tile tile = {.out = c->att + t * QD + col, .ld_out = QD,
                                                         .q = c->q + t * QD + col, .ld_q = QD, .pos0 = pos0,
                                                         .n_q = n, .n_group = group, .kv_head = kh};
                        if (have) {
                            pllm_cpu_attn_tile_prefetch(&tile, &a, PLLM_CPU_ATTN_PREFETCH);
                            pllm_cpu_attend_tile(&cur, &cur_a, c->kern, scratch);
                        }
                        cur = tile;
                        cur_a = a;
                        have = true;
                    }
            }
            if (have) pllm_cpu_attend_tile(&cur, &cur_a, c->kern, scratch);
        }
        phase_barrier(c, ith, PLLM_CPU_PH_ATTN);

        /* int8 activations of the attention output (a token's heads come from several threads) */
        if (M[M_O].use_q) {
            quant_rows(c, true, &c->qb, c->att, QD, t0, t1);
            phase_barrier(c, ith, PLLM_CPU_PH_O);
        }

        /* output projection and residual (the thread's own rows) */
        mm(c, ith, nth, c->xb, E, c->att, QD, &c->qb, &M[M_O], T, 16, &r0, &r1);
        post_residual(c, ith, PLLM_CPU_PH_O, w->attn_post_norm, T, t0, t1, r0, r1);

        if (pllm_layer_is_moe(w)) { /* its own RMSNorm; ends without a barrier */
            moe_ffn(c, ith, nth, l, t0, t1);
            continue;
        }
        for (int64_t t = t0; t < t1; t++) {
            c->kern->rmsnorm(c->xb + t * E, c->x + t * E, w->ffn_norm, E, cfg->norm_eps);
            quant_rows(c, M[M_GATE].use_q || M[M_UP].use_q, &c->qa, c->xb, E, t, t + 1);
        }
        phase_barrier(c, ith, PLLM_CPU_PH_FFN_NORM);

        /* gate and up split the same rows (at multiples of 32, the quantization block), so
         * SwiGLU and the int8 activations of w_down need no barrier */
        mm(c, ith, nth, c->hb, F, c->xb, E, &c->qa, &M[M_GATE], T, 32, &r0, &r1);
        mm(c, ith, nth, c->hb2, F, c->xb, E, &c->qa, &M[M_UP], T, 32, &r0, &r1);
        for (int64_t t = 0; t < T; t++) {
            if (cfg->ffn_gelu)
                pllm_cpu_geglu(c->hb + t * F + r0, c->hb2 + t * F + r0, r1 - r0);
            else
                c->kern->swiglu(c->hb + t * F + r0, c->hb2 + t * F + r0, r1 - r0);
            if (M[M_DOWN].use_q && r0 < r1) c->qkern->quant(&c->qb, t, c->hb + t * F + r0, r0 / 32, (r1 + 31) / 32);
        }
        phase_barrier(c, ith, PLLM_CPU_PH_GATE_UP);

        mm(c, ith, nth, c->xb, E, c->hb, F, &c->qb, &M[M_DOWN], T, 16, &r0, &r1);
        post_residual(c, ith, PLLM_CPU_PH_DOWN, w->ffn_post_norm, T, t0, t1, r0, r1);
    }

    /* final norm of the sampled tokens only, then their logits (split by samples: after a MoE
     * layer, which ends without a barrier, x must be complete first) */
    if (cfg->n_layer > 0 && pllm_layer_is_moe(&m->layers[cfg->n_layer - 1]))
        phase_barrier(c, ith, PLLM_CPU_PH_MOE);
    int64_t s0, s1;
    pllm_cpu_split(S, 1, ith, nth, &s0, &s1);
    for (int64_t s = s0; s < s1; s++) {
        const pllm_seq_plan *sp = &plan->seqs[plan->samples[s].seq];
        int64_t t = sp->token_start + sp->n_new - 1 - plan->samples[s].back;
        c->kern->rmsnorm(c->xs + s * E, c->x + t * E, m->output_norm, E, cfg->norm_eps);
    }
    const struct cpu_mat *Mo = c->mats + (size_t)cfg->n_layer * M_PER_LAYER;
    quant_rows(c, Mo->use_q, &c->qa, c->xs, E, s0, s1);
    phase_barrier(c, ith, PLLM_CPU_PH_HEAD_NORM);
    mm(c, ith, nth, c->logits, V, c->xs, E, &c->qa, Mo, S, 16, &r0, &r1);
    phase_barrier(c, ith, PLLM_CPU_PH_HEAD);

    /* sampling */
    pllm_step_out *out = c->out;
    for (int64_t s = s0; s < s1; s++) {
        const pllm_sample_req *req = &plan->samples[s];
        float *lg = c->logits + s * V;
        if (out->logits) memcpy(out->logits + s * V, lg, (size_t)V * sizeof(float));
        pllm_sample_result res = {.top_ids = c->top_ids + (size_t)ith * MAX_TOP,
                                  .top_logprobs = c->top_lps + (size_t)ith * MAX_TOP,
                                  .no_logprob = !out->logprobs};
        pllm_sample(&res, lg, (int32_t)V, req->params, &req->ctx,
                    c->sample_scratch + (size_t)ith * c->sample_scratch_bytes);
        out->tokens[s] = res.token;
        if (out->logprobs) out->logprobs[s] = res.logprob;
        if (out->top_ids && out->top_n > 0) {
            for (int32_t j = 0; j < out->top_n; j++) {
                bool have = j < res.n_top;
                out->top_ids[s * out->top_n + j] = have ? res.top_ids[j] : -1;
                if (out->top_logprobs) out->top_logprobs[s * out->top_n + j] = have ? res.top_logprobs[j] : -INFINITY;
            }
        }
    }
    phase_end(c, ith, PLLM_CPU_PH_SAMPLE);
}

/* ---- workspace --------------------------------------------------------------------------- */

static void free_tokens_ws(cpu_ctx *c)
{
    float **bufs[] = {&c->x,    &c->xb,    &c->q,   &c->k,       &c->v,
                      &c->att,  &c->hb,    &c->hb2, &c->rope_cs, &c->rope_cs_local,
                      &c->rlog, &c->sel_w, &c->xg,  &c->yg,      &c->hg,
                      &c->hg2,  &c->shg,   &c->hs,  &c->hs2,     &c->ys};
    for (size_t i = 0; i < PLLM_ARRAY_LEN(bufs); i++) {
        pllm_aligned_free(*bufs[i]);
        *bufs[i] = NULL;
    }
    int32_t **ibufs[] = {&c->tok_seq, &c->sel_e, &c->sel_row};
    for (size_t i = 0; i < PLLM_ARRAY_LEN(ibufs); i++) {
        free(*ibufs[i]);
        *ibufs[i] = NULL;
    }
    pllm_cpu_qact_free(&c->qg);
    pllm_cpu_qact_free(&c->qg2);
    pllm_cpu_qact_free(&c->qs2);
    c->cap_tokens = 0;
}

static pllm_status alloc_f32(float **p, int64_t a, int64_t b)
{
    size_t n;
    if (!pllm_mul_size((size_t)a, (size_t)b, &n) || !pllm_mul_size(n, sizeof(float), &n))
        return pllm_errorf(PLLM_ERR_NOMEM, "cpu backend: workspace of %lld x %lld floats overflows", (long long)a, (long long)b);
    *p = pllm_aligned_alloc(n ? n : 64);
    return *p ? PLLM_OK : PLLM_ERR_NOMEM;
}

/* The MoE workspace for T tokens. */
static pllm_status reserve_moe(cpu_ctx *c, int32_t T)
{
    const pllm_model_config *cfg = &c->model->cfg;
    const int64_t NE = cfg->n_expert, R = (int64_t)T * cfg->n_expert_used;
    pllm_status st;
    if ((st = alloc_f32(&c->rlog, T, NE)) || (st = alloc_f32(&c->sel_w, R, 1)) ||
        (st = alloc_f32(&c->xg, c->moe_float_in ? R : 1, cfg->n_embd)) ||
        (st = alloc_f32(&c->yg, R, cfg->n_embd)) || (st = alloc_f32(&c->hg, R, cfg->n_ff_exp)) ||
        (st = alloc_f32(&c->hg2, R, cfg->n_ff_exp)))
        return st;
    const int64_t FS = cfg->n_ff_shexp;
    if (FS && ((st = alloc_f32(&c->shg, T, 1)) || (st = alloc_f32(&c->hs, T, FS)) ||
               (st = alloc_f32(&c->hs2, T, FS)) || (st = alloc_f32(&c->ys, T, cfg->n_embd)) ||
               (c->int_math && (st = pllm_cpu_qact_init(&c->qs2, T, (FS + 63) / 64 * 64)))))
        return st;
    if (!(c->sel_e = pllm_malloc(sizeof(int32_t) * (size_t)R)) ||
        !(c->sel_row = pllm_malloc(sizeof(int32_t) * (size_t)R)))
        return PLLM_ERR_NOMEM;
    if (c->int_math &&
        ((st = pllm_cpu_qact_init(&c->qg, R, (cfg->n_embd + 63) / 64 * 64)) ||
         (st = pllm_cpu_qact_init(&c->qg2, R, ((int64_t)cfg->n_ff_exp + 63) / 64 * 64))))
        return st;
    return PLLM_OK;
}

static pllm_status reserve(cpu_ctx *c, int32_t n_tokens, int32_t n_samples)
{
    const pllm_model_config *cfg = &c->model->cfg;
    const int64_t qd = (int64_t)cfg->n_head * cfg->head_dim, kvd = (int64_t)cfg->n_head_kv * cfg->head_dim;
    if (n_tokens > c->cap_tokens) {
        free_tokens_ws(c);
        int32_t T = PLLM_MAX(n_tokens, 16);
        pllm_status st;
        if ((st = alloc_f32(&c->x, T, cfg->n_embd)) || (st = alloc_f32(&c->xb, T, cfg->n_embd)) ||
            (st = alloc_f32(&c->q, T, qd)) || (st = alloc_f32(&c->k, T, kvd)) ||
            (st = alloc_f32(&c->v, T, kvd)) || (st = alloc_f32(&c->att, T, qd)) ||
            (st = alloc_f32(&c->hb, T, cfg->n_ff)) || (st = alloc_f32(&c->hb2, T, cfg->n_ff)) ||
            (st = alloc_f32(&c->rope_cs, T, cfg->rope_dim)) ||
            (c->inv_freq_local && (st = alloc_f32(&c->rope_cs_local, T, cfg->rope_dim))) ||
            !(c->tok_seq = pllm_malloc((size_t)T * sizeof(int32_t))) ||
            (cfg->n_expert && (st = reserve_moe(c, T)))) {
            free_tokens_ws(c);
            return pllm_error_prefix(st ? st : PLLM_ERR_NOMEM, "cpu backend: workspace for %d tokens: ", n_tokens);
        }
        c->cap_tokens = T;
    }
    if (n_samples > c->cap_samples) {
        pllm_aligned_free(c->xs);
        pllm_aligned_free(c->logits);
        c->xs = c->logits = NULL;
        c->cap_samples = 0;
        int32_t S = PLLM_MAX(n_samples, 8);
        pllm_status st;
        if ((st = alloc_f32(&c->xs, S, cfg->n_embd)) || (st = alloc_f32(&c->logits, S, cfg->n_vocab))) {
            pllm_aligned_free(c->xs);
            c->xs = NULL;
            return pllm_error_prefix(st, "cpu backend: workspace for %d samples: ", n_samples);
        }
        c->cap_samples = S;
    }
    /* int8 activations: qa also holds the sampled tokens' final-normed states */
    int64_t qt = PLLM_MAX(c->cap_tokens, c->cap_samples);
    if (c->int_math && c->qa.cap_tok < qt) {
        pllm_cpu_qact_free(&c->qa);
        pllm_cpu_qact_free(&c->qb);
        pllm_status st;
        if ((st = pllm_cpu_qact_init(&c->qa, qt, (cfg->n_embd + 63) / 64 * 64)) ||
            (st = pllm_cpu_qact_init(&c->qb, qt, (PLLM_MAX(qd, (int64_t)cfg->n_ff) + 63) / 64 * 64))) {
            pllm_cpu_qact_free(&c->qa);
            return pllm_error_prefix(st, "cpu backend: int8 activations for %lld tokens: ", (long long)qt);
        }
    }
    return PLLM_OK;
}

/* ---- vtable ------------------------------------------------------------------------------ */

static pllm_status cpu_kv_layout(void *vctx, int32_t block_size, pllm_kv_layout *out)
{
    cpu_ctx *c = vctx;
    if (block_size < 1 || block_size > 65536)
        return pllm_errorf(PLLM_ERR_INVALID, "cpu kv_layout: block_size must be in [1, 65536], got %d", block_size);
    const pllm_model_config *cfg = &c->model->cfg;
    *out = (pllm_kv_layout){.n_layer = cfg->n_layer,
                            .n_head_kv = cfg->n_head_kv,
                            .head_dim = cfg->head_dim,
                            .block_size = block_size,
                            .n_blocks = 0,
                            .dtype = c->params.kv_dtype};
    pllm_kv_layout_sliding(c->model, out);
    return PLLM_OK;
}

static pllm_status cpu_kv_available(void *vctx, size_t *bytes)
{
    cpu_ctx *c = vctx;
    *bytes = 0;
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return pllm_errorf(PLLM_ERR_IO, "cpu kv_available: cannot open /proc/meminfo");
    char line[256];
    unsigned long long kb = 0;
    bool found = false;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
            found = true;
            break;
        }
    fclose(f);
    if (!found) return pllm_errorf(PLLM_ERR_FORMAT, "cpu kv_available: /proc/meminfo has no MemAvailable line");
    /* MemAvailable counts the page cache, which holds the mapped weights: they must stay. */
    size_t avail = (size_t)kb * 1024, margin = PLLM_MAX(KV_MARGIN_MIN, avail / 10);
    size_t keep = margin + c->model->weight_bytes;
    *bytes = avail > keep ? avail - keep : 0;
    return PLLM_OK;
}

/* int8 activations of t rows of k values (cpu/gemm.h pllm_cpu_qact: values, 3 per-32 and 1
 * per-16 sums or scales of 4 bytes). */
static double qact_bytes(double t, int64_t k)
{
    double kk = (double)((k + 63) / 64 * 64);
    return t * (kk + kk / 32 * 12 + kk / 16 * 4);
}

/* What reserve() allocates for a step of n_tokens tokens and n_samples samples (the per-token
 * buffers, the MoE scratch of reserve_moe, the sample buffers, the int8 activations): the
 * engine leaves it out of the KV budget (backend.h workspace_bytes). Keep it in step with
 * reserve() and reserve_moe(); tests/cpu_backend_workspace.c checks it against what they
 * allocate. */
static pllm_status cpu_workspace_bytes(void *vctx, int32_t n_tokens, int32_t n_samples,
                                       size_t *bytes)
{
    cpu_ctx *c = vctx;
    const pllm_model_config *cfg = &c->model->cfg;
    const double T = (double)PLLM_MAX(n_tokens, 16), S = (double)PLLM_MAX(n_samples, 8),
                 f = sizeof(float);
    const double qd = (double)cfg->n_head * cfg->head_dim,
                 kvd = (double)cfg->n_head_kv * cfg->head_dim;
    double b = T * f * (2.0 * cfg->n_embd + 2 * qd + 2 * kvd + 2.0 * cfg->n_ff + cfg->rope_dim);
    if (c->inv_freq_local) b += T * f * cfg->rope_dim;
    b += T * sizeof(int32_t);
    if (cfg->n_expert) {
        const double NE = (double)cfg->n_expert, R = T * cfg->n_expert_used;
        b += f * (T * NE + R + (c->moe_float_in ? R : 1) * cfg->n_embd + R * cfg->n_embd +
                  2 * R * cfg->n_ff_exp);
        if (cfg->n_ff_shexp) {
            b += f * (T + 2 * T * cfg->n_ff_shexp + T * cfg->n_embd);
            if (c->int_math) b += qact_bytes(T, cfg->n_ff_shexp);
        }
        b += 3 * R * sizeof(int32_t);
        if (c->int_math) b += qact_bytes(R, cfg->n_embd) + qact_bytes(R, cfg->n_ff_exp);
    }
    b += S * f * ((double)cfg->n_embd + cfg->n_vocab);
    if (c->int_math) {
        const double qt = PLLM_MAX(T, S);
        b +=
            qact_bytes(qt, cfg->n_embd) + qact_bytes(qt, PLLM_MAX((int64_t)qd, (int64_t)cfg->n_ff));
    }
    *bytes = b >= (double)SIZE_MAX ? SIZE_MAX : (size_t)b;
    return PLLM_OK;
}

static pllm_status cpu_kv_init(void *vctx, const pllm_kv_layout *L)
{
    cpu_ctx *c = vctx;
    const pllm_model_config *cfg = &c->model->cfg;
    if (L->n_layer != cfg->n_layer || L->n_head_kv != cfg->n_head_kv || L->head_dim != cfg->head_dim)
        return pllm_errorf(PLLM_ERR_INVALID,
                           "cpu kv_init: layout (n_layer %d, n_head_kv %d, head_dim %d) does not match the model (%d, %d, %d)",
                           L->n_layer, L->n_head_kv, L->head_dim, cfg->n_layer, cfg->n_head_kv, cfg->head_dim);
    if (L->dtype != PLLM_DTYPE_F32 && L->dtype != PLLM_DTYPE_F16 && L->dtype != PLLM_KV_DTYPE_I8)
        return pllm_errorf(PLLM_ERR_UNSUPPORTED,
                           "cpu kv_init: KV dtype %s is not supported (F32, F16, I8)",
                           pllm_kv_dtype_name(L->dtype));
    if (L->block_size < 1 || L->block_size > 65536 || L->n_blocks < 1)
        return pllm_errorf(PLLM_ERR_INVALID, "cpu kv_init: block_size %d (1..65536) and n_blocks %d (>= 1) are invalid",
                           L->block_size, L->n_blocks);
    if ((int64_t)L->n_blocks * L->block_size > INT32_MAX)
        return pllm_errorf(PLLM_ERR_RANGE, "cpu kv_init: %d blocks of %d tokens exceed the int32 slot range", L->n_blocks,
                           L->block_size);
    PLLM_TRY(pllm_kv_check_sliding("cpu kv_init", L, c->model));
    const size_t blk = (size_t)L->n_head_kv * (size_t)L->block_size * pllm_kv_row_bytes(L);
    size_t layer = 0, layer_sw = 0, total = 0;
    if (!pllm_mul_size((size_t)L->n_blocks, blk, &layer) ||
        !pllm_mul_size((size_t)L->n_blocks_sw, blk, &layer_sw))
        return pllm_errorf(PLLM_ERR_NOMEM, "cpu kv_init: %d blocks overflow the address space", L->n_blocks);
    size_t *off = pllm_malloc(2 * (size_t)L->n_layer * sizeof *off);
    if (!off) return PLLM_ERR_NOMEM;
    for (int32_t l = 0; l < 2 * L->n_layer; l++) {
        const size_t bytes =
            pllm_kv_layer_in_sw(L, c->model->layers[l / 2].window) ? layer_sw : layer;
        off[l] = total;
        if (total > SIZE_MAX - bytes) {
            free(off);
            return pllm_errorf(PLLM_ERR_NOMEM, "cpu kv_init: %d blocks overflow the address space",
                               L->n_blocks);
        }
        total += bytes;
    }

    pllm_aligned_free(c->kv_mem);
    free(c->slot_bits);
    free(c->kv_off);
    c->kv_off = off;
    c->kv_mem = NULL;
    c->slot_bits = NULL;
    c->kv_ready = false;
    c->kv_mem = pllm_aligned_alloc(total);
    c->slot_bits = pllm_calloc(
        ((size_t)PLLM_MAX(L->n_blocks, L->n_blocks_sw) * (size_t)L->block_size + 63) / 64,
        sizeof(uint64_t));
    if (!c->kv_mem || !c->slot_bits) {
        pllm_aligned_free(c->kv_mem);
        free(c->slot_bits);
        c->kv_mem = NULL;
        c->slot_bits = NULL;
        return pllm_errorf(PLLM_ERR_NOMEM, "cpu kv_init: cannot allocate %zu bytes for %d KV blocks", total, L->n_blocks);
    }
    /* scratch per thread: a dequantized row (the widest matrix) and one block of scores, */
    size_t sf = (size_t)PLLM_MAX(PLLM_MAX(PLLM_MAX(cfg->n_embd, cfg->n_ff), cfg->n_ff_exp),
                                 cfg->n_head * cfg->head_dim) +
                (size_t)L->block_size;
    /* and an attention tile of 64 (query, head) rows, or one query's heads if more */
    sf = PLLM_MAX(sf, pllm_cpu_attn_tile_scratch(PLLM_MAX(64, cfg->n_head / cfg->n_head_kv), L->block_size));
    sf = (sf + 15) & ~(size_t)15;
    if (sf > c->scratch_floats) {
        pllm_aligned_free(c->scratch);
        c->scratch = pllm_aligned_alloc(sf * sizeof(float) * (size_t)c->n_threads);
        if (!c->scratch) {
            c->scratch_floats = 0;
            return PLLM_ERR_NOMEM;
        }
        c->scratch_floats = sf;
    }
    c->kv = *L;
    c->kv_sw = *L;
    c->kv_sw.n_blocks = L->n_blocks_sw;
    c->kv_layer_bytes = layer;
    c->kv_ready = true;
    return PLLM_OK;
}

static pllm_status grow_i32(int32_t **p, int32_t *cap, int32_t need)
{
    if (need <= *cap) return PLLM_OK;
    int32_t n = PLLM_MAX(need, 2 * *cap);
    int32_t *q = pllm_realloc(*p, (size_t)n * sizeof *q);
    if (!q) return PLLM_ERR_NOMEM;
    *p = q;
    *cap = n;
    return PLLM_OK;
}

static pllm_status run_step(cpu_ctx *c, const pllm_batch_plan *plan, pllm_step_out *out)
{
    if (c->kv_ready && plan && plan->n_tokens > 0) PLLM_TRY(reserve(c, plan->n_tokens, plan->n_samples));
    PLLM_TRY(pllm_backend_check_plan("cpu", c->kv_ready ? &c->kv : NULL, c->model->cfg.n_vocab,
                                     c->slot_bits, c->tok_seq, plan, out));
    if (plan->n_tokens == 0) return PLLM_OK;
    c->plan = plan;
    c->out = out;
    if (c->phase) {
        c->phase_steps++;
        c->phase_tokens += plan->n_tokens;
        c->phase_samples += plan->n_samples;
    }
    pllm_cpu_pool_run(c->pool, forward_region, c);
    c->plan = NULL;
    c->out = NULL;
    return PLLM_OK;
}

/* Histories read by penalties whose last entry is pending (backend.h): copies with the token
 * (already resolved into p->tokens) in its place. */
static pllm_status resolve_histories(cpu_ctx *c, const pllm_batch_plan *plan, pllm_batch_plan *p)
{
    int32_t need = 0;
    bool any = false;
    for (int32_t s = 0; s < plan->n_samples; s++) {
        const pllm_sample_req *r = &plan->samples[s];
        const pllm_sampling_params *sp = r->params;
        const bool reads = sp && pllm_sampling_reads_history(sp);
        if (reads && pllm_backend_pending_history(plan, s) >= 0) {
            need += r->ctx.n_output;
            any = true;
        }
    }
    if (!any) return PLLM_OK;
    if (plan->n_samples > c->cap_samp_buf) {
        pllm_sample_req *b = pllm_realloc(c->samp_buf, (size_t)plan->n_samples * 2 * sizeof *b);
        if (!b) return PLLM_ERR_NOMEM;
        c->samp_buf = b;
        c->cap_samp_buf = plan->n_samples * 2;
    }
    PLLM_TRY(grow_i32(&c->hist_buf, &c->cap_hist_buf, need));
    memcpy(c->samp_buf, plan->samples, (size_t)plan->n_samples * sizeof *c->samp_buf);
    for (int32_t s = 0, at = 0; s < plan->n_samples; s++) {
        pllm_sample_req *r = &c->samp_buf[s];
        const pllm_sampling_params *sp = r->params;
        const bool reads = sp && pllm_sampling_reads_history(sp);
        const int32_t i = reads ? pllm_backend_pending_history(plan, s) : -1;
        if (i < 0) continue;
        int32_t *h = c->hist_buf + at;
        memcpy(h, r->ctx.output, (size_t)r->ctx.n_output * sizeof *h);
        h[r->ctx.n_output - 1] = p->tokens[i];
        r->ctx.output = h;
        at += r->ctx.n_output;
    }
    p->samples = c->samp_buf;
    return PLLM_OK;
}

/* The work runs here: a plan's token_src is resolved from the previous step's samples. */
static pllm_status cpu_submit(void *vctx, const pllm_batch_plan *plan, pllm_step_out *out)
{
    cpu_ctx *c = vctx;
    if (c->in_flight >= 2)
        return pllm_errorf(
            PLLM_ERR_INVALID,
            "cpu backend: 2 steps are in flight; wait for one before submitting another");
    pllm_batch_plan p = *plan;
    if (plan->token_src) {
        PLLM_TRY(grow_i32(&c->tok_buf, &c->cap_tok_buf, plan->n_tokens));
        PLLM_TRY(pllm_backend_resolve_tokens("cpu", plan, c->prev_tok, c->n_prev, c->tok_buf));
        p.tokens = c->tok_buf; /* token_src stays: the plan check allows pending histories */
        PLLM_TRY(resolve_histories(c, plan, &p));
    }
    PLLM_TRY(run_step(c, &p, out));
    PLLM_TRY(grow_i32(&c->prev_tok, &c->cap_prev, plan->n_samples));
    if (plan->n_samples > 0)
        memcpy(c->prev_tok, out->tokens, (size_t)plan->n_samples * sizeof *c->prev_tok);
    c->n_prev = plan->n_tokens > 0 ? plan->n_samples : 0;
    c->in_flight++;
    return PLLM_OK;
}

static pllm_status cpu_wait(void *vctx)
{
    cpu_ctx *c = vctx;
    if (c->in_flight == 0)
        return pllm_errorf(PLLM_ERR_INVALID, "cpu backend: wait without a submitted step");
    c->in_flight--;
    return PLLM_OK;
}

static pllm_status cpu_step(void *vctx, const pllm_batch_plan *plan, pllm_step_out *out)
{
    PLLM_TRY(cpu_submit(vctx, plan, out));
    return cpu_wait(vctx);
}

static pllm_status cpu_copy_blocks(void *vctx, const int32_t *src, const int32_t *dst, int32_t n)
{
    cpu_ctx *c = vctx;
    PLLM_TRY(pllm_backend_check_copy_blocks("cpu", c->kv_ready ? &c->kv : NULL, src, dst, n));
    if (c->kv.n_blocks_sw > 0)
        return pllm_errorf(PLLM_ERR_UNSUPPORTED,
                           "cpu copy_blocks: not with a sliding pool (the hybrid KV layout)");
    /* one block of one layer's K (or V): its data, and for I8 its scales after all the data */
    const pllm_kv_layout *L = &c->kv;
    const size_t slab = (size_t)L->n_head_kv * (size_t)L->block_size;
    const bool i8 = L->dtype == PLLM_KV_DTYPE_I8;
    const size_t block = i8 ? slab * (size_t)L->head_dim : c->kv_layer_bytes / (size_t)L->n_blocks;
    const size_t scales = i8 ? slab * 2 : 0, data = block * (size_t)L->n_blocks;
    for (int32_t i = 0; i < n; i++) {
        if (src[i] == dst[i]) continue;
        for (int32_t l = 0; l < 2 * c->kv.n_layer; l++) {
            uint8_t *base = c->kv_mem + c->kv_off[l];
            memmove(base + (size_t)dst[i] * block, base + (size_t)src[i] * block, block);
            if (scales)
                memmove(base + data + (size_t)dst[i] * scales,
                        base + data + (size_t)src[i] * scales, scales);
        }
    }
    return PLLM_OK;
}

/* One block of every layer's K and V to or from buf (backend.h's kv_read_block layout). */
static pllm_status cpu_block_io(cpu_ctx *c, int32_t id, uint8_t *buf, const uint8_t *src)
{
    if (!c->kv_ready || id < 0 || id >= c->kv.n_blocks)
        return pllm_errorf(PLLM_ERR_RANGE, "cpu kv block %d: outside [0, %d)%s", id,
                           c->kv_ready ? c->kv.n_blocks : 0,
                           c->kv_ready ? "" : " (before kv_init)");
    if (c->kv.n_blocks_sw > 0)
        return pllm_errorf(PLLM_ERR_UNSUPPORTED,
                           "cpu kv block %d: blocks cannot be read or written with a sliding pool "
                           "(the hybrid KV layout)",
                           id);
    const pllm_kv_layout *L = &c->kv;
    const size_t slab = (size_t)L->n_head_kv * (size_t)L->block_size;
    const bool i8 = L->dtype == PLLM_KV_DTYPE_I8;
    const size_t block = i8 ? slab * (size_t)L->head_dim : c->kv_layer_bytes / (size_t)L->n_blocks;
    const size_t scales = i8 ? slab * 2 : 0, data = block * (size_t)L->n_blocks;
    size_t at = 0;
    for (int32_t l = 0; l < 2 * L->n_layer; l++) {
        uint8_t *base = c->kv_mem + c->kv_off[l];
        uint8_t *parts[2] = {base + (size_t)id * block, base + data + (size_t)id * scales};
        size_t lens[2] = {block, scales};
        for (int k = 0; k < 2; k++) {
            if (src)
                memcpy(parts[k], src + at, lens[k]);
            else
                memcpy(buf + at, parts[k], lens[k]);
            at += lens[k];
        }
    }
    PLLM_ASSERT(at == pllm_kv_block_bytes(L));
    return PLLM_OK;
}

static pllm_status cpu_kv_read_block(void *vctx, int32_t block, void *buf)
{
    return cpu_block_io(vctx, block, buf, NULL);
}

static pllm_status cpu_kv_write_block(void *vctx, int32_t block, const void *buf)
{
    return cpu_block_io(vctx, block, NULL, buf);
}

static void cpu_destroy(void *vctx)
{
    cpu_ctx *c = vctx;
    if (!c) return;
    if (c->phase) {
        pllm_cpu_phase_stats st;
        phase_collect(c, &st);
        phase_report(&st);
    }
    pllm_aligned_free(c->phase);
    pllm_cpu_pool_free(c->pool);
    free_tokens_ws(c);
    pllm_cpu_qact_free(&c->qa);
    pllm_cpu_qact_free(&c->qb);
    if (c->mats)
        for (int64_t i = 0; i < c->n_mats; i++) pllm_cpu_qweight_free(&c->mats[i].q);
    free(c->mats);
    if (c->packed_arena) munmap(c->packed_arena, c->packed_arena_bytes);
    free(c->moe_base);
    pllm_aligned_free(c->moe_cnt);
    pllm_aligned_free(c->moe_cur);
    pllm_aligned_free(c->moe_off);
    pllm_aligned_free(c->xs);
    pllm_aligned_free(c->logits);
    pllm_aligned_free(c->kv_mem);
    pllm_aligned_free(c->scratch);
    pllm_aligned_free(c->sample_scratch);
    free(c->slot_bits);
    free(c->kv_off);
    free(c->prev_tok);
    free(c->tok_buf);
    free(c->samp_buf);
    free(c->hist_buf);
    free(c->top_ids);
    free(c->top_lps);
    free(c->inv_freq);
    free(c->inv_freq_long);
    free(c->inv_freq_local);
    free(c);
}

static const pllm_backend_iface g_cpu_iface = {
    .name = "cpu",
    .kv_layout = cpu_kv_layout,
    .kv_available = cpu_kv_available,
    .workspace_bytes = cpu_workspace_bytes,
    .kv_init = cpu_kv_init,
    .step = cpu_step,
    .submit = cpu_submit,
    .wait = cpu_wait,
    .copy_blocks = cpu_copy_blocks,
    .kv_read_block = cpu_kv_read_block,
    .kv_write_block = cpu_kv_write_block,
    .destroy = cpu_destroy,
};

/* Pack every integer-path matrix, each thread a contiguous range of each matrix's panels. */
static void pack_region(void *arg, int ith, int nth)
{
    cpu_ctx *c = arg;
    for (int64_t i = 0; i < c->n_mats; i++) {
        struct cpu_mat *M = &c->mats[i];
        if (!M->use_q) continue;
        int64_t p0, p1;
        pllm_cpu_split(pllm_cpu_qweight_panels(&M->q), 1, ith, nth, &p0, &p1);
        pllm_cpu_qweight_pack(&M->q, p0, p1);
    }
}

/* The matrices in the order a step reads them: each layer's 7, then its router and experts
 * (expert e's gate and up together, as moe_pass reads them, then the downs, then the shared
 * expert's), the output last. order: [n_mats]. */
static void mats_read_order(const cpu_ctx *c, int64_t *order)
{
    const pllm_model_config *cfg = &c->model->cfg;
    const int64_t NE = cfg->n_expert;
    int64_t n = 0;
    for (int32_t l = 0; l < cfg->n_layer; l++) {
        for (int64_t i = 0; i < M_PER_LAYER; i++) order[n++] = (int64_t)l * M_PER_LAYER + i;
        const int64_t b = c->moe_base[l];
        if (b < 0) continue;
        order[n++] = b;
        for (int64_t e = 0; e < NE; e++) {
            order[n++] = b + 1 + e;
            order[n++] = b + 1 + NE + e;
        }
        for (int64_t e = 0; e < NE; e++) order[n++] = b + 1 + 2 * NE + e;
        for (int64_t k = 1 + 3 * NE; k < MOE_MATS(NE, cfg->n_ff_shexp); k++) order[n++] = b + k;
    }
    order[n++] = (int64_t)cfg->n_layer * M_PER_LAYER;
    PLLM_ASSERT(n == c->n_mats);
}

/* The packed copies of the integer-path matrices in one anonymous mapping, in read order, with
 * transparent huge pages asked for (madvise; the default "madvise" THP mode gives none
 * otherwise): a batched MoE decode step streams every expert's panels from DRAM, and with 4 KiB
 * pages the hardware prefetchers stop at each page boundary and every 4 KiB costs a TLB miss.
 * Measured (one thread, one layer of bench/gen_moe_models.py's 128 Q8_0 experts, 4 rows each,
 * caches flushed between runs): separate 64-byte-aligned allocations per matrix 9.3 GB/s, one
 * mapping in read order with 4 KiB pages 11.6, with huge pages 12.8. */
static pllm_status place_packed(cpu_ctx *c)
{
    int64_t *order = pllm_malloc(sizeof(int64_t) * (size_t)c->n_mats);
    if (!order) return PLLM_ERR_NOMEM;
    mats_read_order(c, order);
    const size_t huge = (size_t)2 << 20;
    size_t total = 0;
    for (int64_t i = 0; i < c->n_mats; i++) {
        const struct cpu_mat *M = &c->mats[i];
        if (M->use_q)
            total += (pllm_cpu_qweight_packed_bytes(M->t->dtype, M->t->n_rows, M->t->n_cols) + 63) &
                     ~(size_t)63;
    }
    pllm_status st = PLLM_OK;
    if (total) {
        /* map 2 MiB more, then trim to a 2 MiB-aligned start so the pages can be huge */
        const size_t len = (total + huge - 1) / huge * huge;
        uint8_t *raw =
            mmap(NULL, len + huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (raw == MAP_FAILED) {
            free(order);
            return pllm_errorf(PLLM_ERR_NOMEM, "cpu: %zu bytes for the packed weights", total);
        }
        uint8_t *base = (uint8_t *)(((uintptr_t)raw + huge - 1) & ~(uintptr_t)(huge - 1));
        if (base > raw) munmap(raw, (size_t)(base - raw));
        if (base + len < raw + len + huge)
            munmap(base + len, (size_t)(raw + len + huge - (base + len)));
        c->packed_arena = base;
        c->packed_arena_bytes = len;
#ifdef MADV_HUGEPAGE
        (void)madvise(base, len, MADV_HUGEPAGE); /* a hint: without THP the pages stay small */
#endif
        size_t off = 0;
        for (int64_t j = 0; j < c->n_mats && st == PLLM_OK; j++) {
            struct cpu_mat *M = &c->mats[order[j]];
            if (!M->use_q) continue;
            st = pllm_cpu_qweight_alloc_in(&M->q, M->t->dtype, M->t->data, M->t->row_bytes,
                                           M->t->n_rows, M->t->n_cols, base + off);
            off += (pllm_cpu_qweight_packed_bytes(M->t->dtype, M->t->n_rows, M->t->n_cols) + 63) &
                   ~(size_t)63;
        }
        PLLM_ASSERT(st != PLLM_OK || off == total);
    }
    free(order);
    return st;
}

/* Which matrices take the integer path (params.math F32 keeps the float32 kernels for all: the
 * reference numerics), and their packed copies for tables that read panels. Packing reads
 * every quantized weight once; afterwards the mapped file pages of those matrices are no longer
 * touched (the embedding table still is, for the rows of the step's tokens). */
static pllm_status setup_mats(cpu_ctx *c)
{
    const pllm_model *m = c->model;
    const int32_t L = m->cfg.n_layer;
    bool f32 = c->params.math == PLLM_CPU_MATH_F32;
    /* qmm_scalar (tests): the integer matmuls and quantizer of the scalar reference table,
     * everything else from the chosen table, to show the optimized ones change nothing */
    c->qkern = c->params.qmm_scalar && c->kern->qmatmul ? &pllm_cpu_kernels_scalar : c->kern;
    c->int_math = c->kern->qmatmul && !f32;
    /* the layers' 7 matrices, the output, then each MoE layer's router and experts */
    const int64_t NE = m->cfg.n_expert;
    c->n_mats = (int64_t)L * M_PER_LAYER + 1;
    if (!(c->moe_base = pllm_malloc(sizeof(int64_t) * (size_t)L))) return PLLM_ERR_NOMEM;
    for (int32_t l = 0; l < L; l++) {
        c->moe_base[l] = pllm_layer_is_moe(&m->layers[l]) ? c->n_mats : -1;
        if (c->moe_base[l] >= 0) c->n_mats += MOE_MATS(NE, m->cfg.n_ff_shexp);
    }
    const size_t hist = sizeof(int32_t) * (size_t)MOE_HIST_LD(NE) * (size_t)c->n_threads;
    if (NE &&
        (!(c->moe_cnt = pllm_aligned_alloc(hist)) || !(c->moe_cur = pllm_aligned_alloc(hist)) ||
         !(c->moe_off = pllm_aligned_alloc(hist + 64 * (size_t)c->n_threads))))
        return PLLM_ERR_NOMEM;
    c->mats = pllm_calloc((size_t)c->n_mats, sizeof *c->mats);
    if (!c->mats) return PLLM_ERR_NOMEM;
    for (int64_t i = 0; i < c->n_mats; i++) {
        struct cpu_mat *M = &c->mats[i];
        if (i < L * M_PER_LAYER) {
            const pllm_layer_weights *w = &m->layers[i / M_PER_LAYER];
            const pllm_tensor *ts[M_PER_LAYER] = {&w->wq, &w->wk, &w->wv, &w->wo, &w->w_gate, &w->w_up, &w->w_down};
            M->t = ts[i % M_PER_LAYER];
        } else if (i == L * M_PER_LAYER) {
            M->t = &m->output;
        } else {
            int32_t l = 0;
            while (l + 1 < L &&
                   (c->moe_base[l] < 0 || c->moe_base[l] + MOE_MATS(NE, m->cfg.n_ff_shexp) <= i))
                l++;
            const pllm_layer_weights *w = &m->layers[l];
            const int64_t k = i - c->moe_base[l];
            const pllm_tensor *sh[3] = {&w->shexp_gate_w, &w->shexp_up, &w->shexp_down};
            M->t = k == 0        ? &w->router
                   : k <= NE     ? &w->exp_gate[k - 1]
                   : k <= 2 * NE ? &w->exp_up[k - 1 - NE]
                   : k <= 3 * NE ? &w->exp_down[k - 1 - 2 * NE]
                                 : sh[k - 1 - 3 * NE];
        }
        M->use_q = c->int_math && pllm_cpu_qdtype(M->t->dtype);
        if (M->use_q && !c->qkern->qpacked)
            PLLM_TRY(pllm_cpu_qweight_alloc(&M->q, M->t->dtype, M->t->data, M->t->row_bytes,
                                            M->t->n_rows, M->t->n_cols, false));
    }
    if (c->int_math && c->qkern->qpacked) PLLM_TRY(place_packed(c));
    for (int32_t l = 0; l < L; l++) /* float inputs for some expert's gate/up: xg is needed */
        for (int64_t k = 1; c->moe_base[l] >= 0 && k <= 2 * NE; k++)
            c->moe_float_in = c->moe_float_in || !c->mats[c->moe_base[l] + k].use_q;
    if (c->int_math && c->qkern->qpacked) pllm_cpu_pool_run(c->pool, pack_region, c);
    /* kv_dtype auto: F16 when quantized matrices take the int8 path (llama.cpp's numerics, whose
     * KV cache is F16 too; half the memory and the bandwidth of batched decode), F32 with
     * float32 math (the exact reference numerics) */
    if (c->params.kv_dtype == PLLM_DTYPE_COUNT) {
        bool any_q = false;
        for (int64_t i = 0; i < c->n_mats; i++) any_q = any_q || c->mats[i].use_q;
        c->params.kv_dtype = any_q ? PLLM_DTYPE_F16 : PLLM_DTYPE_F32;
    }
    return PLLM_OK;
}

pllm_status pllm_cpu_params_defaults(pllm_cpu_params *p)
{
    p->n_threads = 0;
    p->kv_dtype = PLLM_DTYPE_F32;
    p->math = PLLM_CPU_MATH_AUTO;
    p->isa_cap = PLLM_CPU_ISA_COUNT;
    p->qmm_scalar = false;
    p->phase_stats = false;
    /* the environment: defaults for tests and benchmarks, read here only */
    const char *math = getenv("PLLM_CPU_MATH"), *isa = getenv("PLLM_CPU_ISA");
    const char *qmm = getenv("PLLM_CPU_QMM"), *phase = getenv("PLLM_CPU_PHASE_STATS");
    if (math && *math) {
        if (strcmp(math, "f32") == 0)
            p->math = PLLM_CPU_MATH_F32;
        else if (strcmp(math, "int8") == 0)
            p->math = PLLM_CPU_MATH_INT8;
        else
            return pllm_errorf(PLLM_ERR_INVALID,
                               "cpu backend: PLLM_CPU_MATH=%s (expected f32 or int8)", math);
    }
    if (isa && *isa) {
        if ((p->isa_cap = pllm_cpu_isa_from_name(isa)) == PLLM_CPU_ISA_COUNT)
            return pllm_errorf(
                PLLM_ERR_INVALID,
                "cpu backend: PLLM_CPU_ISA=%s (expected scalar, avx2, avx512 or avx512vnni)", isa);
    }
    if (qmm && *qmm) {
        if (strcmp(qmm, "scalar") != 0)
            return pllm_errorf(PLLM_ERR_INVALID, "cpu backend: PLLM_CPU_QMM=%s (expected scalar)",
                               qmm);
        p->qmm_scalar = true;
    }
    if (phase && *phase) {
        if (strcmp(phase, "1") != 0 && strcmp(phase, "0") != 0)
            return pllm_errorf(PLLM_ERR_INVALID,
                               "cpu backend: PLLM_CPU_PHASE_STATS=%s (expected 1 or 0)", phase);
        p->phase_stats = phase[0] == '1';
    }
    return PLLM_OK;
}

pllm_status pllm_cpu_backend_create(pllm_backend *out, const pllm_model *model, const pllm_cpu_params *p)
{
    out->iface = NULL;
    out->ctx = NULL;
    pllm_cpu_params params;
    if (p) params = *p;
    else if (pllm_cpu_params_defaults(&params) != PLLM_OK)
        return PLLM_ERR_INVALID; /* message set */
    if (params.math < PLLM_CPU_MATH_AUTO || params.math > PLLM_CPU_MATH_F32)
        return pllm_errorf(PLLM_ERR_INVALID, "cpu backend: math must be AUTO, INT8 or F32, got %d", (int)params.math);
    if (params.n_threads < 0 || params.n_threads > 1024)
        return pllm_errorf(PLLM_ERR_INVALID, "cpu backend: n_threads must be in [0, 1024] (0: all cores), got %d", params.n_threads);
    if (params.kv_dtype != PLLM_DTYPE_F32 && params.kv_dtype != PLLM_DTYPE_F16 &&
        params.kv_dtype != PLLM_KV_DTYPE_I8 && params.kv_dtype != PLLM_DTYPE_COUNT)
        return pllm_errorf(
            PLLM_ERR_UNSUPPORTED,
            "cpu backend: kv_dtype %s is not supported (F32, F16, I8, or COUNT: auto)",
            params.kv_dtype >= 0 && params.kv_dtype < PLLM_DTYPE_COUNT
                ? pllm_dtype_name(params.kv_dtype)
                : "?");
    const pllm_model_config *cfg = &model->cfg;
    if (params.kv_dtype == PLLM_KV_DTYPE_I8 &&
        (cfg->head_dim % 4 || cfg->head_dim > PLLM_KV_I8_MAX_HEAD_DIM))
        return pllm_errorf(PLLM_ERR_UNSUPPORTED,
                           "cpu backend: model %s: an int8 KV cache needs head_dim a multiple of 4 "
                           "up to %d, got %d",
                           model->name, PLLM_KV_I8_MAX_HEAD_DIM, cfg->head_dim);
    if (cfg->rope_scaling == PLLM_ROPE_SCALING_LLAMA3 && !model->rope_freq_factors)
        return pllm_errorf(PLLM_ERR_INVALID, "cpu backend: model %s: Llama-3 RoPE scaling without rope_freq_factors", model->name);
    if (cfg->n_head_kv < 1 || cfg->n_head % cfg->n_head_kv != 0 || cfg->rope_dim > cfg->head_dim || cfg->rope_dim % 2)
        return pllm_errorf(PLLM_ERR_INVALID, "cpu backend: model %s: inconsistent heads (n_head %d, n_head_kv %d, head_dim %d, rope_dim %d)",
                           model->name, cfg->n_head, cfg->n_head_kv, cfg->head_dim, cfg->rope_dim);

    cpu_ctx *c = pllm_calloc(1, sizeof *c);
    if (!c) return PLLM_ERR_NOMEM;
    pllm_status st;
    c->model = model;
    c->params = params;
    c->kern = pllm_cpu_kernels_best_upto(params.isa_cap);
    c->n_threads = params.n_threads ? params.n_threads : pllm_cpu_online_cores();

    /* every weight matrix must have a kernel */
    const pllm_tensor *mats[] = {&model->tok_embd, &model->output};
    for (size_t i = 0; i < PLLM_ARRAY_LEN(mats); i++)
        if (!c->kern->matmul[mats[i]->dtype]) {
            st = pllm_errorf(PLLM_ERR_UNSUPPORTED, "cpu backend: tensor '%s' has dtype %s, which has no CPU kernel", mats[i]->name,
                             pllm_dtype_name(mats[i]->dtype));
            goto fail;
        }
    for (int32_t l = 0; l < cfg->n_layer; l++) {
        const pllm_layer_weights *w = &model->layers[l];
        const pllm_tensor *lm[] = {&w->wq,           &w->wk,       &w->wv,        &w->wo,
                                   &w->w_gate,       &w->w_up,     &w->w_down,    &w->router,
                                   &w->shexp_gate_w, &w->shexp_up, &w->shexp_down};
        const int64_t ne = pllm_layer_is_moe(w) ? cfg->n_expert : 0;
        for (int64_t i = 0; i < (int64_t)PLLM_ARRAY_LEN(lm) + 3 * ne; i++) {
            const int64_t k = i - (int64_t)PLLM_ARRAY_LEN(lm);
            const pllm_tensor *t = k < 0        ? lm[i]
                                   : k < ne     ? &w->exp_gate[k]
                                   : k < 2 * ne ? &w->exp_up[k - ne]
                                                : &w->exp_down[k - 2 * ne];
            if (t->n_rows && !c->kern->matmul[t->dtype]) {
                st = pllm_errorf(PLLM_ERR_UNSUPPORTED,
                                 "cpu backend: tensor '%s' has dtype %s, which has no CPU kernel",
                                 t->name, pllm_dtype_name(t->dtype));
                goto fail;
            }
        }
    }

    c->inv_freq = pllm_malloc(sizeof(double) * (size_t)PLLM_MAX(cfg->rope_dim / 2, 1));
    c->sample_scratch_bytes = (pllm_sample_scratch_bytes(cfg->n_vocab) + 63) & ~(size_t)63;
    c->sample_scratch = pllm_aligned_alloc(c->sample_scratch_bytes * (size_t)c->n_threads);
    c->top_ids = pllm_malloc(sizeof(int32_t) * MAX_TOP * (size_t)c->n_threads);
    c->top_lps = pllm_malloc(sizeof(float) * MAX_TOP * (size_t)c->n_threads);
    if (!c->inv_freq || !c->sample_scratch || !c->top_ids || !c->top_lps) {
        st = PLLM_ERR_NOMEM;
        goto fail;
    }
    pllm_backend_rope_freqs(c->inv_freq, cfg, model->rope_freq_factors);
    if (cfg->rope_scaling == PLLM_ROPE_SCALING_LONGROPE) {
        if (!model->rope_freq_factors || !model->rope_freq_factors_long) {
            st = pllm_errorf(PLLM_ERR_INVALID,
                             "cpu backend: model %s: LongRoPE without its short and long factors",
                             model->name);
            goto fail;
        }
        if (!(c->inv_freq_long =
                  pllm_malloc(sizeof(double) * (size_t)PLLM_MAX(cfg->rope_dim / 2, 1)))) {
            st = PLLM_ERR_NOMEM;
            goto fail;
        }
        pllm_backend_rope_freqs(c->inv_freq_long, cfg, model->rope_freq_factors_long);
    }
    if (cfg->sliding_window > 0) {
        if (!(c->inv_freq_local =
                  pllm_malloc(sizeof(double) * (size_t)PLLM_MAX(cfg->rope_dim / 2, 1)))) {
            st = PLLM_ERR_NOMEM;
            goto fail;
        }
        pllm_backend_rope_freqs_local(c->inv_freq_local, cfg);
    }
    if ((st = pllm_cpu_pool_create(&c->pool, c->n_threads)) != PLLM_OK) goto fail;
    if ((st = setup_mats(c)) != PLLM_OK) goto fail;
    if (params.phase_stats) {
        c->phase = pllm_aligned_alloc(sizeof *c->phase * (size_t)c->n_threads);
        if (!c->phase) {
            st = PLLM_ERR_NOMEM;
            goto fail;
        }
        memset(c->phase, 0, sizeof *c->phase * (size_t)c->n_threads);
    }

    out->iface = &g_cpu_iface;
    out->ctx = c;
    return PLLM_OK;
fail:
    cpu_destroy(c);
    return st;
}

/* The kernel table and thread count a backend runs with (for reports and benchmarks). */
const char *pllm_cpu_backend_describe(const pllm_backend *b, int *n_threads)
{
    const cpu_ctx *c = b->ctx;
    if (n_threads) *n_threads = c->n_threads;
    return c->kern->name;
}

pllm_dtype pllm_cpu_backend_kv_dtype(const pllm_backend *b)
{
    const cpu_ctx *c = b->ctx;
    return c->params.kv_dtype;
}

bool pllm_cpu_backend_int_math(const pllm_backend *b)
{
    const cpu_ctx *c = b->ctx;
    return c->int_math;
}

bool pllm_cpu_backend_phase_stats(const pllm_backend *b, pllm_cpu_phase_stats *out)
{
    const cpu_ctx *c = b->ctx;
    if (!c || !c->phase) {
        memset(out, 0, sizeof *out);
        return false;
    }
    phase_collect(c, out);
    return true;
}
