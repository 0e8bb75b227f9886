/*
 * cuda_backend: the CUDA backend's host side on an in-memory random model (llama, 2 layers,
 * GQA, head_dim 24): plan validation (every refusal names its field, as the CPU backend's), KV
 * layout checks, copy_blocks (a sequence read through copied blocks gives the same logits),
 * submit/wait limits, empty steps, CUDA graph replays bitwise equal to eager runs (padded batches
 * of several sizes), kv_available against the memory fraction, F16 range errors, unsupported
 * head shapes.
 *
 * Built twice. Against the emulator (cuda_backend) all of the above runs. Against the real CUDA
 * build (cuda_backend_gpu) on a machine without a GPU it checks what `--device cuda` reports there:
 * pllm_cuda_device_count gives 0 and a reason, and pllm_cuda_backend_create fails with a message
 * naming it; with a GPU it runs the same checks as the emulated build.
 */
#include "cuda/cuda_backend.h"
#include "tests/test_model.h"
#include "tests/testutil.h"

#include <math.h>
#include <string.h>

enum { E = 48, H = 4, HKV = 2, HD = 24, F = 64, V = 97, NL = 2 };

typedef pllm_test_model mem_model;

static uint64_t g_rng = 12345;

static void build_model(mem_model *mm, int32_t head_dim)
{
    const pllm_test_model_shape s = {.n_vocab = V,
                                     .n_embd = E,
                                     .n_layer = NL,
                                     .n_head = H,
                                     .n_head_kv = HKV,
                                     .head_dim = head_dim,
                                     .n_ff = F,
                                     .n_ctx_train = 256,
                                     .s_qk = 0.15f,
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

/* One sequence of plan state: tokens [0, n), blocks. */
typedef struct pseq {
    int32_t toks[64];
    int32_t n_done, n_new;
    int32_t blocks[8];
    int32_t n_blocks;
} pseq;

typedef struct plan_buf {
    int32_t tokens[256], positions[256], slots[256], bt[256];
    pllm_seq_plan seqs[32];
    pllm_sample_req samples[32];
    pllm_batch_plan plan;
} plan_buf;

/* A plan running seqs[i].n_new tokens of each sequence (after n_done), sampling each one. */
static void make_plan(plan_buf *b, pseq *seqs, int32_t n, const pllm_sampling_params *sp,
                      int32_t bs)
{
    int32_t nt = 0, nbt = 0;
    for (int32_t s = 0; s < n; s++) {
        pseq *q = &seqs[s];
        b->seqs[s] = (pllm_seq_plan){.token_start = nt,
                                     .n_new = q->n_new,
                                     .n_ctx = q->n_done + q->n_new,
                                     .block_start = nbt,
                                     .n_blocks = q->n_blocks};
        memcpy(b->bt + nbt, q->blocks, sizeof(int32_t) * (size_t)q->n_blocks);
        nbt += q->n_blocks;
        for (int32_t j = 0; j < q->n_new; j++) {
            int32_t p = q->n_done + j;
            b->tokens[nt] = q->toks[p];
            b->positions[nt] = p;
            b->slots[nt] = q->blocks[p / bs] * bs + p % bs;
            nt++;
        }
        b->samples[s] = (pllm_sample_req){.seq = s, .params = sp};
        if (sp->repetition_penalty != 1.0f) { /* history and a ban: id lists in the plan */
            const int32_t n_all = q->n_done + q->n_new;
            b->samples[s].ctx = (pllm_sample_ctx){.prompt = q->toks,
                                                  .n_prompt = PLLM_MIN(n_all, 3),
                                                  .output = q->toks + 3,
                                                  .n_output = PLLM_MAX(n_all - 3, 0),
                                                  .banned = q->toks + 1,
                                                  .n_banned = 1};
        }
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

static void test_validation(pllm_backend *be, int32_t bs)
{
    pllm_sampling_params sp;
    pllm_sampling_defaults(&sp);
    pseq q = {.n_done = 0, .n_new = 5, .blocks = {3, 1}, .n_blocks = 2};
    for (int i = 0; i < 12; i++) q.toks[i] = i % V;
    plan_buf b;
    int32_t tok[4];
    pllm_step_out out = {.tokens = tok};
    typedef struct bad {
        const char *what, *msg;
        pllm_status st;
    } bad;
    /* each case: corrupt a fresh plan, expect the status and the message */
    for (int k = 0; k < 8; k++) {
        make_plan(&b, &q, 1, &sp, bs);
        pllm_sampling_params sp2 = sp;
        int32_t banned = V + 3;
        bad c;
        switch (k) {
        case 0:
            b.tokens[2] = V;
            c = (bad){"token id", "tokens[2] = 97 is outside the vocabulary", PLLM_ERR_RANGE};
            break;
        case 1:
            b.positions[1] = 7;
            c = (bad){"position", "positions[1] = 7", PLLM_ERR_INVALID};
            break;
        case 2:
            b.slots[3] = 0;
            c = (bad){"slot", "slots[3] = 0", PLLM_ERR_INVALID};
            break;
        case 3:
            b.bt[0] = 1000;
            c = (bad){"block", "is outside the pool", PLLM_ERR_RANGE};
            break;
        case 4:
            b.samples[0].seq = 4;
            c = (bad){"sample seq", "samples[0].seq = 4", PLLM_ERR_RANGE};
            break;
        case 5:
            sp2.top_p = 0;
            b.samples[0].params = &sp2;
            c = (bad){"top_p", "top_p must be in (0, 1]", PLLM_ERR_INVALID};
            break;
        case 6:
            sp2.logprobs = 3;
            b.samples[0].params = &sp2;
            out.top_ids = tok;
            out.top_n = 1;
            c = (bad){"logprobs", "asks for 3 top logprobs but out->top_n = 1", PLLM_ERR_INVALID};
            break;
        case 7:
            b.samples[0].ctx.banned = &banned, b.samples[0].ctx.n_banned = 1;
            c = (bad){"banned id", "ctx.banned[0] = 100 is outside the vocabulary", PLLM_ERR_RANGE};
            break;
        default:
            c = (bad){"banned id", "ctx.banned[0] = 100 is outside the vocabulary", PLLM_ERR_RANGE};
            b.samples[0].ctx.banned = &banned, b.samples[0].ctx.n_banned = 1;
            break;
        }
        pllm_status st = be->iface->step(be->ctx, &b.plan, &out);
        fprintf(stderr, "  bad %-14s -> %s: %s\n", c.what, pllm_status_str(st), pllm_errmsg());
        CHECK(st == c.st);
        CHECK(msg_has(c.msg));
        CHECK(msg_has("cuda step"));
        out.top_ids = NULL, out.top_n = 0;
    }
    /* two sequences whose tables share a block write the same slot */
    pseq two[2] = {{.n_new = 1, .blocks = {6}, .n_blocks = 1},
                   {.n_new = 1, .blocks = {6}, .n_blocks = 1}};
    make_plan(&b, two, 2, &sp, bs);
    pllm_status st = be->iface->step(be->ctx, &b.plan, &out);
    fprintf(stderr, "  bad %-14s -> %s: %s\n", "duplicate slot", pllm_status_str(st),
            pllm_errmsg());
    CHECK(st == PLLM_ERR_INVALID);
    CHECK(msg_has("slot 24 (tokens[1]) is written twice in one step"));
    /* the same plan, intact, runs */
    make_plan(&b, &q, 1, &sp, bs);
    CHECK_OK(be->iface->step(be->ctx, &b.plan, &out));
    CHECK(tok[0] >= 0 && tok[0] < V);
    /* an empty step */
    pllm_batch_plan empty = {0};
    CHECK_OK(be->iface->step(be->ctx, &empty, &out));
}

static void test_copy_and_flight(pllm_backend *be, int32_t bs)
{
    pllm_sampling_params sp;
    pllm_sampling_defaults(&sp);
    /* prefill 9 tokens into blocks 0, 2, 4; copy them to 5, 6, 7; decode one more token through
     * each table: same logits */
    pseq a = {.n_done = 0, .n_new = 9, .blocks = {0, 2, 4}, .n_blocks = 3};
    for (int i = 0; i < 12; i++) a.toks[i] = (7 * i + 3) % V;
    plan_buf b;
    int32_t tok[4];
    float la[V], lb[V];
    pllm_step_out out = {.tokens = tok};
    make_plan(&b, &a, 1, &sp, bs);
    CHECK_OK(be->iface->step(be->ctx, &b.plan, &out));
    a.n_done = 9, a.n_new = 1;
    const int32_t src[3] = {0, 2, 4}, dst[3] = {5, 6, 7};
    CHECK_OK(be->iface->copy_blocks(be->ctx, src, dst, 3));
    pseq c = a;
    memcpy(c.blocks, dst, sizeof dst);
    out.logits = la;
    make_plan(&b, &a, 1, &sp, bs);
    CHECK_OK(be->iface->step(be->ctx, &b.plan, &out));
    out.logits = lb;
    make_plan(&b, &c, 1, &sp, bs);
    CHECK_OK(be->iface->step(be->ctx, &b.plan, &out));
    CHECK(memcmp(la, lb, sizeof la) == 0);
    const int32_t bad_src[1] = {99};
    CHECK(be->iface->copy_blocks(be->ctx, bad_src, dst, 1) == PLLM_ERR_RANGE);
    CHECK(msg_has("copy_blocks: pair 0 (99 -> 5)"));

    /* two steps in flight at most; wait pairs with submit */
    plan_buf b1, b2, b3;
    pseq s1 = c, s2 = a, s3 = a;
    s1.n_done = s2.n_done = s3.n_done = 10, s1.n_new = s2.n_new = s3.n_new = 1;
    s1.toks[10] = s2.toks[10] = s3.toks[10] = 1;
    s2.blocks[2] = 4, s3.blocks[2] = 4;
    make_plan(&b1, &s1, 1, &sp, bs);
    make_plan(&b2, &s2, 1, &sp, bs);
    make_plan(&b3, &s3, 1, &sp, bs);
    int32_t t1[1], t2[1], t3[1];
    pllm_step_out o1 = {.tokens = t1}, o2 = {.tokens = t2}, o3 = {.tokens = t3};
    CHECK(be->iface->wait(be->ctx) == PLLM_ERR_INVALID);
    CHECK_OK(be->iface->submit(be->ctx, &b1.plan, &o1));
    CHECK(be->iface->step(be->ctx, &b2.plan, &o2) == PLLM_ERR_INVALID);
    CHECK(msg_has("in flight"));
    CHECK_OK(be->iface->submit(be->ctx, &b2.plan, &o2));
    CHECK(be->iface->submit(be->ctx, &b3.plan, &o3) == PLLM_ERR_INVALID);
    CHECK(msg_has("2 steps are in flight"));
    CHECK_OK(be->iface->wait(be->ctx));
    CHECK_OK(be->iface->wait(be->ctx));
    CHECK(t1[0] == t2[0]); /* the same context through copied blocks */
    CHECK(be->iface->wait(be->ctx) == PLLM_ERR_INVALID);
}

/* Decode steps of n sequences as graphs and eagerly: bitwise equal logits and tokens (sampled
 * with penalties and a banned id, so the plans carry id lists of varying lengths). */
static void test_graphs(const pllm_model *m, pllm_backend *graphs, pllm_backend *eager, int32_t bs)
{
    pllm_sampling_params sp;
    pllm_sampling_defaults(&sp);
    sp.temperature = 0.9f, sp.repetition_penalty = 1.3f, sp.frequency_penalty = 0.5f, sp.seed = 5,
    sp.top_p = 0.95f;
    static const int32_t sizes[] = {1, 3, 4, 7, 9};
    pllm_cuda_backend_info gi0, gi1;
    pllm_cuda_backend_get_info(graphs, &gi0);
    for (size_t k = 0; k < PLLM_ARRAY_LEN(sizes); k++) {
        const int32_t n = sizes[k];
        pseq seqs[16];
        for (int32_t s = 0; s < n; s++) {
            pseq *q = &seqs[s];
            *q = (pseq){.n_done = 0, .n_new = 3 + s, .n_blocks = 4};
            for (int32_t j = 0; j < 4; j++) q->blocks[j] = 4 * s + j;
            for (int i = 0; i < 12; i++) q->toks[i] = (int32_t)((s * 31 + i * 7) % V);
        }
        plan_buf b;
        int32_t tg[16], te[16];
        float *lg = malloc(sizeof(float) * 16 * V), *le = malloc(sizeof(float) * 16 * V);
        make_plan(&b, seqs, n, &sp, bs); /* prefill: eager on both */
        pllm_step_out og = {.tokens = tg, .logits = lg}, oe = {.tokens = te, .logits = le};
        CHECK_OK(graphs->iface->step(graphs->ctx, &b.plan, &og));
        CHECK_OK(eager->iface->step(eager->ctx, &b.plan, &oe));
        for (int rep = 0; rep < 5; rep++) { /* capture, then replays (block tables grow) */
            for (int32_t s = 0; s < n; s++) {
                seqs[s].n_done += seqs[s].n_new;
                seqs[s].n_new = 1;
                seqs[s].toks[seqs[s].n_done] = tg[s];
            }
            make_plan(&b, seqs, n, &sp, bs);
            CHECK_OK(graphs->iface->step(graphs->ctx, &b.plan, &og));
            CHECK_OK(eager->iface->step(eager->ctx, &b.plan, &oe));
            CHECK(memcmp(tg, te, sizeof(int32_t) * (size_t)n) == 0);
            CHECK(memcmp(lg, le, sizeof(float) * (size_t)n * V) == 0);
        }
        free(lg), free(le);
    }
    pllm_cuda_backend_get_info(graphs, &gi1);
    pllm_cuda_backend_info ei;
    pllm_cuda_backend_get_info(eager, &ei);
    fprintf(stderr,
            "  graphs: %lld of %lld steps replayed %d graphs (batches 1, 3, 4, 7, 9 padded to 1, "
            "4, 4, 8, 16); "
            "eager backend: %lld graph steps\n",
            (long long)(gi1.graph_steps - gi0.graph_steps), (long long)(gi1.steps - gi0.steps),
            gi1.graphs, (long long)ei.graph_steps);
    CHECK(gi1.graph_steps - gi0.graph_steps == 25);
    CHECK(gi1.graphs == 4);
    CHECK(ei.graph_steps == 0);
    (void)m;
}

int main(void)
{
    mem_model mm;
    build_model(&mm, HD);
    char why[256];
    const int n_dev = pllm_cuda_device_count(why, sizeof why);
    fprintf(stderr, "cuda_backend: devices: %s\n", why);
    pllm_backend be = {0};
    if (n_dev == 0) {
        /* what --device cuda says on a machine without a GPU */
        pllm_status st = pllm_cuda_backend_create(&be, &mm.m, NULL);
        fprintf(stderr, "cuda_backend: create without a device: %s: %s\n", pllm_status_str(st),
                pllm_errmsg());
        CHECK(st == PLLM_ERR_NOT_FOUND);
        CHECK(msg_has("cuda backend: CUDA device 0: "));
        CHECK(msg_has(why));
        CHECK(be.iface == NULL);
        pllm_test_model_free(&mm);
        if (pllm_test_failures) return pllm_test_finish("cuda_backend");
        /* the no-device path passed; the device checks did not run: say so (exit 77) */
        pllm_test_skip("no GPU here: only the no-device error path was checked; the rest of the "
                       "checks run in the emulated build (cuda_backend)");
    }
    const int32_t bs = 4;
    pllm_cuda_params cp;
    pllm_cuda_params_defaults(&cp);
    cp.weights = PLLM_CUDA_WEIGHTS_F32;
    cp.reserve_tokens = 64;
    cp.reserve_seqs = 16;
    cp.max_graph_batch = 16;
    CHECK_OK(pllm_cuda_backend_create(&be, &mm.m, &cp));
    if (!be.iface) return pllm_test_finish("cuda_backend");
    pllm_kv_layout L;
    CHECK_OK(be.iface->kv_layout(be.ctx, bs, &L));
    CHECK(L.n_layer == NL && L.n_head_kv == HKV && L.head_dim == HD && L.dtype == PLLM_DTYPE_F16);
    int32_t tok[1];
    pllm_step_out out = {.tokens = tok};
    pllm_batch_plan empty = {0};
    CHECK(be.iface->step(be.ctx, &empty, &out) == PLLM_ERR_INVALID);
    CHECK(msg_has("kv_init was not called"));
    pllm_kv_layout bad = L;
    bad.head_dim = 16, bad.n_blocks = 8;
    CHECK(be.iface->kv_init(be.ctx, &bad) == PLLM_ERR_INVALID);
    CHECK(msg_has("does not match the model"));
    bad = L, bad.dtype = PLLM_DTYPE_BF16, bad.n_blocks = 8;
    CHECK(be.iface->kv_init(be.ctx, &bad) == PLLM_ERR_UNSUPPORTED);
    size_t avail = 0;
    CHECK_OK(be.iface->kv_available(be.ctx, &avail));
    pllm_cuda_backend_info info;
    pllm_cuda_backend_get_info(&be, &info);
    fprintf(stderr, "cuda_backend: %s, %zu MiB total, kv_available %zu MiB at fraction 0.9\n",
            info.device_name, info.total_bytes >> 20, avail >> 20);
    CHECK(avail > 0 && avail <= (size_t)(0.9 * (double)info.total_bytes));
    L.n_blocks = 40;
    CHECK_OK(be.iface->kv_init(be.ctx, &L));
    test_validation(&be, bs);
    test_copy_and_flight(&be, bs);

    /* graphs vs eager, F32 KV */
    pllm_backend eager = {0};
    cp.no_graphs = true;
    CHECK_OK(pllm_cuda_backend_create(&eager, &mm.m, &cp));
    L.dtype = PLLM_DTYPE_F32;
    pllm_backend graphs = {0};
    cp.no_graphs = false;
    cp.kv_dtype = PLLM_DTYPE_F32;
    CHECK_OK(pllm_cuda_backend_create(&graphs, &mm.m, &cp));
    if (eager.iface && graphs.iface) {
        CHECK_OK(eager.iface->kv_init(eager.ctx, &L));
        CHECK_OK(graphs.iface->kv_init(graphs.ctx, &L));
        test_graphs(&mm.m, &graphs, &eager, bs);
    }
    pllm_backend_free(&eager);
    pllm_backend_free(&graphs);
    pllm_backend_free(&be);

    /* the memory fraction bounds kv_available */
    cp = (pllm_cuda_params){0};
    pllm_cuda_params_defaults(&cp);
    cp.gpu_memory_fraction = 0.5f;
    cp.reserve_tokens = 64, cp.reserve_seqs = 16, cp.max_graph_batch = 16;
    CHECK_OK(pllm_cuda_backend_create(&be, &mm.m, &cp));
    size_t half = 0;
    if (be.iface) CHECK_OK(be.iface->kv_available(be.ctx, &half));
    CHECK(half < avail && half <= info.total_bytes / 2);
    pllm_backend_free(&be);

    /* F16 cannot hold 1e5; BF16 can */
    ((float *)mm.layers[1].w_up.data)[5] = 1e5f;
    cp.weights = PLLM_CUDA_WEIGHTS_F16;
    pllm_status st = pllm_cuda_backend_create(&be, &mm.m, &cp);
    CHECK(st == PLLM_ERR_RANGE);
    CHECK(msg_has("'w_up' row 0 column 5: 100000 does not fit in F16"));
    cp.weights = PLLM_CUDA_WEIGHTS_BF16;
    CHECK_OK(pllm_cuda_backend_create(&be, &mm.m, &cp));
    pllm_backend_free(&be);
    pllm_test_model_free(&mm);

    /* head shapes the kernels do not take */
    build_model(&mm, 258);
    st = pllm_cuda_backend_create(&be, &mm.m, NULL);
    CHECK(st == PLLM_ERR_UNSUPPORTED);
    CHECK(msg_has("head_dim 258"));
    pllm_test_model_free(&mm);
    return pllm_test_finish("cuda_backend");
}
