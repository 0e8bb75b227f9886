/*
 * cuda_flashinfer: the CUDA backend's FlashInfer decode path (`--attention-backend flashinfer`)
 * against its own kernels, on in-memory random llama models (F16 weights and KV, head_dim 64 and
 * 128, GQA groups 1, 2 and 3, block sizes 4 and 16 so the last page's length takes every value).
 *
 * Per model: a prefill (own kernels on both backends: FlashInfer takes decode steps only), then
 * decode steps of batches that grow and shrink, run on three backends: own, FlashInfer as CUDA
 * graphs, FlashInfer eagerly. Checked: greedy tokens identical to own; logits within F16 query
 * rounding of own's; graph replays bitwise equal to eager runs; two steps in flight (submit,
 * submit, wait, wait: each plan in its own pinned buffer) equal to the same steps run one by
 * one; a mixed prefill/decode step falls back to own kernels (counted); the shapes and dtypes
 * FlashInfer does not take are refused at create, naming what.
 *
 * Built twice. Against the emulator (cuda_flashinfer) the FlashInfer side is the contract
 * reference (cuda/flashinfer/fi_reference.cu): it proves pllm's side of the contract (paged
 * description, plan per step, query conversion, output placement, graphs). Against the real
 * build (cuda_flashinfer_gpu) it runs FlashInfer's kernels on a GPU and skips (77) without one,
 * or when the build has no FlashInfer.
 */
#include "cuda/cuda_backend.h"
#include "tests/test_model.h"
#include "tests/testutil.h"

#include <math.h>
#include <string.h>

enum { E = 64, F = 96, V = 101, NL = 2, MAXS = 12 };

typedef pllm_test_model mem_model;

static uint64_t g_rng = 777;

/* query/key weights large enough that the softmax is far from uniform */
static void build_model(mem_model *mm, int32_t n_head, int32_t n_head_kv, int32_t head_dim)
{
    const pllm_test_model_shape s = {.n_vocab = V,
                                     .n_embd = E,
                                     .n_layer = NL,
                                     .n_head = n_head,
                                     .n_head_kv = n_head_kv,
                                     .head_dim = head_dim,
                                     .n_ff = F,
                                     .n_ctx_train = 256,
                                     .s_qk = 0.4f,
                                     .s_v = 0.15f,
                                     .s_o = 0.15f,
                                     .s_ffn = 0.15f,
                                     .name = "mem-model"};
    pllm_test_model_build(mm, &s, &g_rng);
}

static bool msg_has(const char *s)
{
    bool ok = strstr(pllm_errmsg(), s) != NULL;
    if (!ok) fprintf(stderr, "  message \"%s\" lacks \"%s\"\n", pllm_errmsg(), s);
    return ok;
}

typedef struct pseq {
    int32_t toks[96];
    int32_t n_done, n_new;
    int32_t blocks[24];
    int32_t n_blocks;
} pseq;

typedef struct plan_buf {
    int32_t tokens[512], positions[512], slots[512], bt[512];
    pllm_seq_plan seqs[MAXS];
    pllm_sample_req samples[MAXS];
    pllm_batch_plan plan;
} plan_buf;

/* A plan of seqs[0..n): each runs its n_new tokens after n_done and is sampled greedily. */
static void make_plan(plan_buf *b, pseq *seqs, int32_t n, const pllm_sampling_params *sp,
                      int32_t bs)
{
    int32_t nt = 0, nbt = 0;
    for (int32_t s = 0; s < n; s++) {
        pseq *q = &seqs[s];
        const int32_t n_ctx = q->n_done + q->n_new;
        q->n_blocks = (n_ctx + bs - 1) / bs;
        b->seqs[s] = (pllm_seq_plan){.token_start = nt,
                                     .n_new = q->n_new,
                                     .n_ctx = n_ctx,
                                     .block_start = nbt,
                                     .n_blocks = q->n_blocks};
        memcpy(b->bt + nbt, q->blocks, sizeof(int32_t) * (size_t)q->n_blocks);
        nbt += q->n_blocks;
        for (int32_t j = 0; j < q->n_new; j++) {
            const int32_t p = q->n_done + j;
            b->tokens[nt] = q->toks[p];
            b->positions[nt] = p;
            b->slots[nt] = q->blocks[p / bs] * bs + p % bs;
            nt++;
        }
        b->samples[s] = (pllm_sample_req){.seq = s, .params = sp};
    }
    b->plan = (pllm_batch_plan){.n_tokens = nt,
                                .tokens = b->tokens,
                                .positions = b->positions,
                                .slots = b->slots,
                                .n_seqs = n,
                                .seqs = b->seqs,
                                .block_tables = b->bt,
                                .n_samples = n,
                                .samples = b->samples};
}

enum { OWN, FI_GRAPH, FI_EAGER, N_BE };

typedef struct run {
    int32_t tok[N_BE][MAXS];
    float *lg[N_BE];
    pllm_step_out out[N_BE];
} run;

static double g_worst; /* the largest logit difference FlashInfer vs own, over max |logit| */
static int g_ties;     /* greedy tokens that differed, own's logits tied within the difference */

/* Run plan b on every backend and compare. */
static void step_all(pllm_backend *be, plan_buf *b, run *r, int32_t n)
{
    for (int k = 0; k < N_BE; k++) {
        r->out[k] = (pllm_step_out){.tokens = r->tok[k], .logits = r->lg[k]};
        CHECK_OK(be[k].iface->step(be[k].ctx, &b->plan, &r->out[k]));
    }
    CHECK(memcmp(r->tok[FI_EAGER], r->tok[FI_GRAPH], sizeof(int32_t) * (size_t)n) == 0);
    CHECK(memcmp(r->lg[FI_EAGER], r->lg[FI_GRAPH], sizeof(float) * (size_t)n * V) == 0);
    for (int32_t s = 0; s < n; s++) {
        const float *a = r->lg[OWN] + (size_t)s * V, *f = r->lg[FI_GRAPH] + (size_t)s * V;
        double diff = 0.0, mag = 0.0;
        for (int32_t i = 0; i < V; i++) {
            diff = fmax(diff, fabs((double)f[i] - a[i]));
            mag = fmax(mag, fabs((double)a[i]));
        }
        const double rel = diff / fmax(mag, 1e-6);
        g_worst = fmax(g_worst, rel);
        if (!(rel < 2e-2)) {
            fprintf(stderr,
                    "  row %d: FlashInfer logits differ from own: max |diff| %.3g, max "
                    "|logit| %.3g\n",
                    s, diff, mag);
            CHECK(rel < 2e-2);
        }
        /* greedy: the same token, unless own's logits hold a tie within the difference */
        const int32_t to = r->tok[OWN][s], tf = r->tok[FI_GRAPH][s];
        if (tf != to) {
            g_ties++;
            CHECK(a[tf] >= a[to] - 2.0 * diff);
        }
    }
}

static void check_model(int32_t n_head, int32_t n_head_kv, int32_t head_dim, int32_t bs)
{
    mem_model mm;
    build_model(&mm, n_head, n_head_kv, head_dim);
    fprintf(stderr, "model: %d query heads, %d KV heads, head_dim %d, block size %d\n", n_head,
            n_head_kv, head_dim, bs);
    pllm_cuda_params cp;
    pllm_cuda_params_defaults(&cp);
    cp.weights = PLLM_CUDA_WEIGHTS_F16;
    cp.reserve_tokens = 256, cp.reserve_seqs = MAXS, cp.max_graph_batch = 16;
    pllm_backend be[N_BE] = {{0}};
    for (int k = 0; k < N_BE; k++) {
        cp.attention = k == OWN ? PLLM_CUDA_ATTN_OWN : PLLM_CUDA_ATTN_FLASHINFER;
        cp.no_graphs = k == FI_EAGER;
        CHECK_OK(pllm_cuda_backend_create(&be[k], &mm.m, &cp));
        if (!be[k].iface) goto out;
        pllm_kv_layout L;
        CHECK_OK(be[k].iface->kv_layout(be[k].ctx, bs, &L));
        L.n_blocks = MAXS * 24;
        CHECK_OK(be[k].iface->kv_init(be[k].ctx, &L));
    }
    pllm_cuda_backend_info gi;
    pllm_cuda_backend_get_info(&be[FI_GRAPH], &gi);
    fprintf(stderr, "  attention: %s\n", gi.attention);
    CHECK(strstr(gi.attention, "flashinfer") != NULL);
    pllm_cuda_backend_get_info(&be[OWN], &gi);
    CHECK(strcmp(gi.attention, "own") == 0);

    pllm_sampling_params sp;
    pllm_sampling_defaults(&sp);
    sp.temperature = 0.0f;
    static pseq seqs[MAXS];
    int32_t next[MAXS]; /* each sequence's next token (own's choice: every backend gets it) */
    for (int32_t s = 0; s < MAXS; s++) {
        pseq *q = &seqs[s];
        *q = (pseq){.n_done = 0, .n_new = 1 + (s * 7) % 13}; /* prompts of 1..13 tokens */
        for (int32_t j = 0; j < 24; j++) q->blocks[j] = s * 24 + (j * 5) % 24; /* scattered */
        for (int i = 0; i < 16; i++) q->toks[i] = (int32_t)((s * 31 + i * 17 + 3) % V);
    }
    static plan_buf b;
    run r;
    for (int k = 0; k < N_BE; k++) r.lg[k] = malloc(sizeof(float) * MAXS * V);
    make_plan(&b, seqs, MAXS, &sp, bs); /* prefill: own kernels everywhere */
    step_all(be, &b, &r, MAXS);
    for (int32_t s = 0; s < MAXS; s++) seqs[s].n_done += seqs[s].n_new, next[s] = r.tok[OWN][s];
    /* decode: batches of 12, 5, 1, 9, 12 sequences, several steps each (graphs replay) */
    static const int32_t batch[] = {12, 12, 12, 5, 5, 1, 1, 1, 9, 9, 12, 12, 12, 12, 12, 12};
    for (size_t st = 0; st < PLLM_ARRAY_LEN(batch); st++) {
        const int32_t n = batch[st];
        for (int32_t s = 0; s < n; s++) seqs[s].toks[seqs[s].n_done] = next[s], seqs[s].n_new = 1;
        make_plan(&b, seqs, n, &sp, bs);
        step_all(be, &b, &r, n);
        for (int32_t s = 0; s < n; s++) seqs[s].n_done++, next[s] = r.tok[OWN][s];
    }
    pllm_cuda_backend_info fg, fe;
    pllm_cuda_backend_get_info(&be[FI_GRAPH], &fg);
    pllm_cuda_backend_get_info(&be[FI_EAGER], &fe);
    fprintf(stderr,
            "  %d decode steps: FlashInfer ran %lld (graph backend: %lld replays of %d graphs; "
            "eager backend %lld); worst logit difference to own %.2e of max |logit|; greedy ties "
            "%d\n",
            (int)PLLM_ARRAY_LEN(batch), (long long)fg.fi_steps, (long long)fg.graph_steps,
            fg.graphs, (long long)fe.fi_steps, g_worst, g_ties);
    CHECK(fg.fi_steps == (int64_t)PLLM_ARRAY_LEN(batch));
    CHECK(fe.fi_steps == (int64_t)PLLM_ARRAY_LEN(batch));
    CHECK(fg.graph_steps == (int64_t)PLLM_ARRAY_LEN(batch) && fe.graph_steps == 0);

    /* two decode steps in flight on the FlashInfer backend: each plan in its own pinned buffer
     * (the second plan is made before the first step ran) */
    {
        static plan_buf b1, b2;
        static pseq a[MAXS], c[MAXS];
        memcpy(a, seqs, sizeof a);
        for (int32_t s = 0; s < MAXS; s++) a[s].toks[a[s].n_done] = next[s], a[s].n_new = 1;
        memcpy(c, a, sizeof c);
        for (int32_t s = 0; s < 4; s++) { /* the second: sequences 0..3 one token further on */
            c[s].n_done += 1;
            c[s].toks[c[s].n_done] = (s * 11 + 2) % V;
        }
        make_plan(&b1, a, 7, &sp, bs);
        make_plan(&b2, c, 4, &sp, bs);
        int32_t t1[MAXS], t2[MAXS], s1[MAXS], s2[MAXS];
        pllm_step_out o1 = {.tokens = t1}, o2 = {.tokens = t2};
        CHECK_OK(be[FI_EAGER].iface->submit(be[FI_EAGER].ctx, &b1.plan, &o1));
        CHECK_OK(be[FI_EAGER].iface->submit(be[FI_EAGER].ctx, &b2.plan, &o2));
        CHECK_OK(be[FI_EAGER].iface->wait(be[FI_EAGER].ctx));
        CHECK_OK(be[FI_EAGER].iface->wait(be[FI_EAGER].ctx));
        pllm_step_out q1 = {.tokens = s1}, q2 = {.tokens = s2};
        CHECK_OK(be[OWN].iface->step(be[OWN].ctx, &b1.plan, &q1));
        CHECK_OK(be[OWN].iface->step(be[OWN].ctx, &b2.plan, &q2));
        CHECK(memcmp(t1, s1, 7 * sizeof(int32_t)) == 0);
        CHECK(memcmp(t2, s2, 4 * sizeof(int32_t)) == 0);
    }

    /* a mixed step (one sequence prefills 3 tokens, the others decode): own kernels */
    {
        for (int32_t s = 0; s < 6; s++) {
            seqs[s].toks[seqs[s].n_done] = next[s];
            seqs[s].n_new = s == 2 ? 3 : 1;
            seqs[s].toks[seqs[s].n_done + 1] = 5, seqs[s].toks[seqs[s].n_done + 2] = 6;
        }
        make_plan(&b, seqs, 6, &sp, bs);
        pllm_cuda_backend_get_info(&be[FI_EAGER], &fe);
        const int64_t before = fe.fi_steps;
        step_all(be, &b, &r, 6);
        pllm_cuda_backend_get_info(&be[FI_EAGER], &fe);
        CHECK(fe.fi_steps == before);
    }
    for (int k = 0; k < N_BE; k++) free(r.lg[k]);
out:
    for (int k = 0; k < N_BE; k++) pllm_backend_free(&be[k]);
    pllm_test_model_free(&mm);
}

/* What FlashInfer does not take is refused at create, naming it. */
static void check_refusals(void)
{
    mem_model mm;
    build_model(&mm, 4, 2, 64);
    pllm_cuda_params cp;
    pllm_cuda_params_defaults(&cp);
    cp.attention = PLLM_CUDA_ATTN_FLASHINFER;
    cp.reserve_tokens = 64, cp.reserve_seqs = 8;
    pllm_backend be = {0};
    cp.kv_dtype = PLLM_DTYPE_F32;
    CHECK(pllm_cuda_backend_create(&be, &mm.m, &cp) == PLLM_ERR_UNSUPPORTED);
    CHECK(msg_has("--attention-backend flashinfer: model mem-model: its KV cache is not F16"));
    cp.kv_dtype = PLLM_DTYPE_F16;
    cp.weights = PLLM_CUDA_WEIGHTS_F32;
    CHECK(pllm_cuda_backend_create(&be, &mm.m, &cp) == PLLM_ERR_UNSUPPORTED);
    CHECK(msg_has("are not F16"));
    pllm_test_model_free(&mm);
    build_model(&mm, 5, 1, 32); /* head_dim 32, group 5 */
    cp.weights = PLLM_CUDA_WEIGHTS_F16;
    CHECK(pllm_cuda_backend_create(&be, &mm.m, &cp) == PLLM_ERR_UNSUPPORTED);
    CHECK(msg_has("head_dim 32 with 5 query heads over 1 KV heads is not instantiated"));
    CHECK(be.iface == NULL);
    /* the names the command line takes */
    pllm_cuda_attention a;
    CHECK(pllm_cuda_attention_parse("flashinfer", &a) && a == PLLM_CUDA_ATTN_FLASHINFER);
    CHECK(pllm_cuda_attention_parse("own", &a) && a == PLLM_CUDA_ATTN_OWN);
    CHECK(!pllm_cuda_attention_parse("flash", &a));
    pllm_test_model_free(&mm);
}

int main(void)
{
    char why[256];
    const int n_dev = pllm_cuda_device_count(why, sizeof why);
    fprintf(stderr, "cuda_flashinfer: devices: %s\n", why);
    if (n_dev == 0) pllm_test_skip("no GPU here: the emulated build (cuda_flashinfer) runs these");
    {
        mem_model mm;
        build_model(&mm, 4, 2, 64);
        pllm_cuda_params cp;
        pllm_cuda_params_defaults(&cp);
        cp.attention = PLLM_CUDA_ATTN_FLASHINFER;
        cp.weights = PLLM_CUDA_WEIGHTS_F16;
        cp.reserve_tokens = 64, cp.reserve_seqs = 8;
        pllm_backend be = {0};
        pllm_status st = pllm_cuda_backend_create(&be, &mm.m, &cp);
        if (st != PLLM_OK && strstr(pllm_errmsg(), "this build has no FlashInfer"))
            pllm_test_skip("this build has no FlashInfer (scripts/setup.sh fetches its headers)");
        CHECK_OK(st);
        pllm_backend_free(&be); /* the backend borrows the model: it goes first */
        pllm_test_model_free(&mm);
    }
    check_refusals();
    check_model(4, 2, 64, 4);   /* GQA 2, the last page 1..4 long */
    check_model(6, 2, 128, 16); /* GQA 3, head_dim 128 */
    check_model(2, 2, 64, 16);  /* MHA */
    return pllm_test_finish("cuda_flashinfer");
}
