/*
 * cuda_vs_cpu: the CUDA backend end to end against the CPU backend on one model (run through the
 * emulator in the cuda_* tests, on the device in the _gpu twins).
 *
 *     cuda_vs_cpu MODEL [--weights auto|f16|bf16|f32] [--kv f16|f32] [--no-graphs]
 *                 [--split LEN] [--prompts N] [--len MIN:MAX] [--gen G] [--text] [--engine]
 *                 [--sample] [--block-size B] [--budget T] [--seed S] [--tol X]
 *
 * Part 1, teacher forced: both backends run the same batch plans (this tool's own small
 * scheduler: prefill chunks under a token budget mixed with decode steps, block tables drawn
 * from a shuffled pool with spare blocks, so tables have holes; once every prompt is in, the
 * decode steps are pure and run as CUDA graphs); every sampled row's logits are compared (relative
 * error, norm-wise) and the CUDA backend's greedy token with the CPU's argmax. The CPU's token
 * is fed to both, so the sequences stay identical. A differing token counts as ambiguous when
 * the CPU's top two logits are within --tol (relative to the largest magnitude) of each other,
 * and fails otherwise. Every other step submits two independent halves of the batch before
 * waiting for either (the vtable's submit/wait).
 * With --sample, each sequence samples instead (its own temperature, top_k, top_p, min_p,
 * repetition/presence/frequency penalties, seed, two banned ids, 3 top logprobs): the tokens,
 * their logprobs (to 1e-4) and the top-logprob ids must be the CPU's (with F32 weights the
 * logits differ by ~1e-7, far from any sampling threshold); the CPU's token is fed to both.
 * Part 2 (--engine): the engine (pllm_engine) generates greedily with each backend; the token
 * sequences must be identical, except after a divergence at a position part 1 found ambiguous.
 *
 * Prompts are random ids, or with --text short English/code prompts tokenized with the model's
 * tokenizer. Exit 0 when all checks pass, 1 otherwise, 77 when no CUDA device answers
 * (`cuda_vs_cpu --probe` only asks that).
 */
#include "cpu/cpu_backend.h"
#include "cuda/cuda_backend.h"
#include "engine/engine.h"
#include "tests/testutil.h"
#include "tokenizer/tokenizer.h"

#include <math.h>
#include <string.h>

static const char *k_texts[] = {
    "The capital of France is",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "Q: What is 12 times 7?\nA:",
    "Printing changed how knowledge spread across Europe. The history of the printing press begins "
    "in",
    "Once upon a time, in a small village by the sea,",
    "<|im_start|>user\nName three primary colors.<|im_end|>\n<|im_start|>assistant\n",
};

typedef struct opts {
    const char *model;
    pllm_cuda_weights weights;
    pllm_dtype kv;
    bool graphs, text, engine, sample;
    int32_t split, n_prompts, len_min, len_max, gen, block_size, budget;
    uint64_t seed;
    double tol;
} opts;

typedef struct tseq {
    int32_t *toks; /* prompt, then generated (CPU's) tokens */
    int32_t n_prompt, n_known, n_done, n_gen_done;
    int32_t *blocks, n_blocks;
    bool *ambiguous; /* [gen]: generated token g was a near tie for the CPU */
} tseq;

static uint64_t g_rng;

static int32_t rnd(int32_t n)
{
    return (int32_t)(pllm_test_rand(&g_rng) % (uint64_t)n);
}

static void usage(void)
{
    fprintf(stderr, "usage: cuda_vs_cpu MODEL [--weights auto|f16|bf16|f32] [--kv f16|f32] "
                    "[--no-graphs] [--split LEN]\n"
                    "       [--prompts N] [--len MIN:MAX] [--gen G] [--text] [--engine] [--sample] "
                    "[--block-size B]\n"
                    "       [--budget T]"
                    "       [--seed S] [--tol X]\n");
    exit(2);
}

static void parse(opts *o, int argc, char **argv)
{
    *o = (opts){.weights = PLLM_CUDA_WEIGHTS_AUTO,
                .kv = PLLM_DTYPE_F16,
                .graphs = true,
                .n_prompts = 4,
                .len_min = 1,
                .len_max = 40,
                .gen = 6,
                .block_size = 7,
                .budget = 24,
                .seed = 1,
                .tol = 1e-3};
    if (argc < 2) usage();
    o->model = argv[1];
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--no-graphs"))
            o->graphs = false;
        else if (!strcmp(a, "--text"))
            o->text = true;
        else if (!strcmp(a, "--engine"))
            o->engine = true;
        else if (!strcmp(a, "--sample"))
            o->sample = true;
        else if (!v)
            usage();
        else if (!strcmp(a, "--weights") && ++i)
            o->weights = !strcmp(v, "f16")    ? PLLM_CUDA_WEIGHTS_F16
                         : !strcmp(v, "bf16") ? PLLM_CUDA_WEIGHTS_BF16
                         : !strcmp(v, "f32")  ? PLLM_CUDA_WEIGHTS_F32
                                              : PLLM_CUDA_WEIGHTS_AUTO;
        else if (!strcmp(a, "--kv") && ++i)
            o->kv = !strcmp(v, "f32") ? PLLM_DTYPE_F32 : PLLM_DTYPE_F16;
        else if (!strcmp(a, "--split") && ++i)
            o->split = atoi(v);
        else if (!strcmp(a, "--prompts") && ++i)
            o->n_prompts = atoi(v);
        else if (!strcmp(a, "--len") && ++i) {
            if (sscanf(v, "%d:%d", &o->len_min, &o->len_max) != 2) usage();
        } else if (!strcmp(a, "--gen") && ++i)
            o->gen = atoi(v);
        else if (!strcmp(a, "--block-size") && ++i)
            o->block_size = atoi(v);
        else if (!strcmp(a, "--budget") && ++i)
            o->budget = atoi(v);
        else if (!strcmp(a, "--seed") && ++i)
            o->seed = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--tol") && ++i)
            o->tol = atof(v);
        else
            usage();
    }
}

static pllm_status make_cuda(pllm_backend *b, const pllm_model *m, const opts *o)
{
    pllm_cuda_params cp;
    pllm_cuda_params_defaults(&cp);
    cp.weights = o->weights;
    cp.kv_dtype = o->kv;
    cp.no_graphs = !o->graphs;
    cp.reserve_tokens = 128;
    cp.reserve_seqs = 8;
    cp.max_graph_batch = 16;
    if (o->split) { /* split every decode step's attention into o->split-position ranges */
        cp.attn_split_len = o->split;
        cp.attn_split_blocks = 1 << 30;
    }
    return pllm_cuda_backend_create(b, m, &cp);
}

/* The largest and second largest of row [n], and the largest magnitude. */
static int32_t top2(const float *row, int32_t n, float *gap, float *mag)
{
    int32_t b = 0;
    float m2 = -INFINITY, mx = 0;
    for (int32_t i = 1; i < n; i++)
        if (row[i] > row[b]) b = i;
    for (int32_t i = 0; i < n; i++) {
        if (i != b && row[i] > m2) m2 = row[i];
        mx = fmaxf(mx, fabsf(row[i]));
    }
    *gap = row[b] - m2;
    *mag = mx;
    return b;
}

typedef struct stats {
    int64_t rows, agree, ambiguous, wrong, top_wrong;
    double max_rel, sum_rel, lp_err;
} stats;

/* Part 1: teacher-forced comparison of the two backends. */
static void part1(const pllm_model *m, pllm_backend *cpu, pllm_backend *gpu, tseq *seqs,
                  const opts *o, stats *st)
{
    const int32_t V = m->cfg.n_vocab, bs = o->block_size, N = o->n_prompts;
    int32_t need = 0;
    for (int32_t s = 0; s < N; s++) need += (seqs[s].n_prompt + o->gen + bs - 1) / bs;
    pllm_kv_layout L;
    CHECK_OK(cpu->iface->kv_layout(cpu->ctx, bs, &L));
    L.dtype = o->kv;
    L.n_blocks = need + need / 3 + 2;
    CHECK_OK(cpu->iface->kv_init(cpu->ctx, &L));
    CHECK_OK(gpu->iface->kv_init(gpu->ctx, &L));
    int32_t *pool = malloc(sizeof(int32_t) * (size_t)L.n_blocks);
    for (int32_t i = 0; i < L.n_blocks; i++) pool[i] = i;
    for (int32_t i = L.n_blocks - 1; i > 0; i--) {
        int32_t j = rnd(i + 1), t = pool[i];
        pool[i] = pool[j], pool[j] = t;
    }
    int32_t pool_at = 0;
    for (int32_t s = 0; s < N; s++) {
        int32_t nb = (seqs[s].n_prompt + o->gen + bs - 1) / bs;
        seqs[s].blocks = malloc(sizeof(int32_t) * (size_t)nb);
        for (int32_t b = 0; b < nb; b++) seqs[s].blocks[b] = pool[pool_at++];
        seqs[s].n_blocks = nb;
        pool_at += rnd(2); /* leave holes */
    }
    const int32_t cap = o->budget + N;
    int32_t *tokens = malloc(sizeof(int32_t) * (size_t)cap),
            *pos = malloc(sizeof(int32_t) * (size_t)cap),
            *slots = malloc(sizeof(int32_t) * (size_t)cap),
            *bts = malloc(sizeof(int32_t) * (size_t)(pool_at + 1));
    pllm_seq_plan *sp = malloc(sizeof *sp * (size_t)N);
    pllm_sample_req *sr = malloc(sizeof *sr * (size_t)N);
    int32_t *sample_seq = malloc(sizeof(int32_t) * (size_t)N),
            *sched = malloc(sizeof(int32_t) * (size_t)N);
    int32_t *ct = malloc(sizeof(int32_t) * (size_t)N), *gt = malloc(sizeof(int32_t) * (size_t)N);
    float *cl = malloc(sizeof(float) * (size_t)N * V), *gl = malloc(sizeof(float) * (size_t)N * V);
    pllm_sampling_params greedy;
    pllm_sampling_defaults(&greedy);
    pllm_sampling_params *sparams = malloc(sizeof *sparams * (size_t)N);
    int32_t *banned = malloc(sizeof(int32_t) * 2 * (size_t)N);
    for (int32_t s = 0; s < N; s++) {
        pllm_sampling_params *q = &sparams[s];
        *q = greedy;
        if (o->sample) {
            q->temperature = 0.5f + 0.25f * (float)(s % 4);
            q->top_k = s % 3 == 0 ? 0 : 5 + 7 * s;
            q->top_p = s % 2 ? 0.9f : 1.0f;
            q->min_p = s % 3 == 1 ? 0.02f : 0.0f;
            q->repetition_penalty = s % 2 ? 1.15f : 1.0f;
            q->presence_penalty = s % 3 == 2 ? 0.4f : 0.0f;
            q->frequency_penalty = s % 4 == 1 ? 0.3f : 0.0f;
            q->seed = 1000 + (uint64_t)s;
            q->logprobs = 3;
        }
        banned[2 * s] = rnd(V), banned[2 * s + 1] = rnd(V);
    }
    int32_t *c_top = malloc(sizeof(int32_t) * 3 * (size_t)N),
            *g_top = malloc(sizeof(int32_t) * 3 * (size_t)N);
    float *c_lp = malloc(sizeof(float) * (size_t)N), *g_lp = malloc(sizeof(float) * (size_t)N);
    float *c_tlp = malloc(sizeof(float) * 3 * (size_t)N),
          *g_tlp = malloc(sizeof(float) * 3 * (size_t)N);
    int64_t steps = 0;
    for (;;) {
        /* schedule: every unfinished sequence, round robin from a rotating start, under the budget
         */
        int32_t nt = 0, ns = 0, nsamp = 0, nbt = 0;
        for (int32_t k = 0; k < N; k++) {
            int32_t s = (int32_t)((k + steps) % N);
            tseq *q = &seqs[s];
            if (q->n_gen_done >= o->gen) continue;
            int32_t want = q->n_known - q->n_done;
            int32_t take = PLLM_MIN(want, o->budget - nt);
            if (take <= 0) continue;
            sp[ns] = (pllm_seq_plan){.token_start = nt,
                                     .n_new = take,
                                     .n_ctx = q->n_done + take,
                                     .block_start = nbt,
                                     .n_blocks = q->n_blocks};
            memcpy(bts + nbt, q->blocks, sizeof(int32_t) * (size_t)q->n_blocks);
            nbt += q->n_blocks;
            for (int32_t j = 0; j < take; j++) {
                int32_t p = q->n_done + j;
                tokens[nt + j] = q->toks[p];
                pos[nt + j] = p;
                slots[nt + j] = q->blocks[p / bs] * bs + p % bs;
            }
            if (q->n_done + take == q->n_known) {
                sr[nsamp] = (pllm_sample_req){.seq = ns,
                                              .params = &sparams[s],
                                              .ctx = {.prompt = q->toks,
                                                      .n_prompt = q->n_prompt,
                                                      .output = q->toks + q->n_prompt,
                                                      .n_output = q->n_gen_done,
                                                      .banned = o->sample ? banned + 2 * s : NULL,
                                                      .n_banned = o->sample ? 2 : 0}};
                sample_seq[nsamp++] = s;
            }
            nt += take;
            sched[ns++] = s;
        }
        if (ns == 0) break;
        pllm_batch_plan plan = {.n_tokens = nt,
                                .tokens = tokens,
                                .positions = pos,
                                .slots = slots,
                                .n_seqs = ns,
                                .seqs = sp,
                                .block_tables = bts,
                                .n_samples = nsamp,
                                .samples = sr};
        pllm_step_out co = {.tokens = ct, .logits = cl}, go = {.tokens = gt, .logits = gl};
        if (o->sample) {
            co.logprobs = c_lp, co.top_n = 3, co.top_ids = c_top, co.top_logprobs = c_tlp;
            go.logprobs = g_lp, go.top_n = 3, go.top_ids = g_top, go.top_logprobs = g_tlp;
        }
        CHECK_OK(cpu->iface->step(cpu->ctx, &plan, &co));
        if (steps % 2 == 1 && ns >= 2 && nsamp == ns) {
            /* two independent halves in flight at once */
            int32_t h = ns / 2, t_h = sp[h].token_start;
            pllm_seq_plan *sp2 = malloc(sizeof *sp2 * (size_t)(ns - h));
            pllm_sample_req *sr2 = malloc(sizeof *sr2 * (size_t)(ns - h));
            for (int32_t i = h; i < ns; i++) {
                sp2[i - h] = sp[i];
                sp2[i - h].token_start -= t_h;
                sr2[i - h] = sr[i];
                sr2[i - h].seq = i - h;
            }
            pllm_batch_plan a = plan, b = plan;
            a.n_tokens = t_h, a.n_seqs = h, a.n_samples = h;
            b.n_tokens = nt - t_h, b.tokens += t_h, b.positions += t_h, b.slots += t_h,
            b.n_seqs = ns - h;
            b.seqs = sp2, b.n_samples = ns - h, b.samples = sr2;
            pllm_step_out ga = go, gb = go;
            gb.tokens += h, gb.logits += (size_t)h * V;
            if (o->sample) gb.logprobs += h, gb.top_ids += 3 * h, gb.top_logprobs += 3 * h;
            CHECK_OK(gpu->iface->submit(gpu->ctx, &a, &ga));
            CHECK_OK(gpu->iface->submit(gpu->ctx, &b, &gb));
            CHECK_OK(gpu->iface->wait(gpu->ctx));
            CHECK_OK(gpu->iface->wait(gpu->ctx));
            free(sp2), free(sr2);
        } else {
            CHECK_OK(gpu->iface->step(gpu->ctx, &plan, &go));
        }
        steps++;
        for (int32_t k = 0; k < nsamp; k++) {
            tseq *q = &seqs[sample_seq[k]];
            const float *c = cl + (size_t)k * V, *g = gl + (size_t)k * V;
            double mx, rel = pllm_test_rel_err(g, c, (size_t)V, &mx);
            st->rows++;
            st->max_rel = fmax(st->max_rel, rel);
            st->sum_rel += rel;
            float gap, mag;
            int32_t am = top2(c, V, &gap, &mag);
            bool amb = gap <= o->tol * fmaxf(mag, 1e-30f);
            if (o->sample) {
                amb = false; /* sampled: the same draw from logits 1e-7 apart */
                st->lp_err = fmax(st->lp_err, fabs((double)g_lp[k] - c_lp[k]));
                for (int32_t j = 0; j < 3; j++) {
                    st->lp_err =
                        fmax(st->lp_err, fabs((double)g_tlp[3 * k + j] - c_tlp[3 * k + j]));
                    if (g_top[3 * k + j] != c_top[3 * k + j]) st->top_wrong++;
                }
            } else {
                CHECK(am == ct[k]);
            }
            if (gt[k] == ct[k])
                st->agree++;
            else if (amb)
                st->ambiguous++;
            else {
                st->wrong++;
                fprintf(stderr,
                        "  seq %d gen %d: cuda token %d, cpu %d (cpu gap %.3g of %.3g; logits rel "
                        "err %.2g)\n",
                        sample_seq[k], q->n_gen_done, gt[k], ct[k], (double)gap, (double)mag, rel);
            }
            q->ambiguous[q->n_gen_done] = amb;
            q->toks[q->n_known++] = ct[k]; /* teacher forcing: the CPU's token for both */
            q->n_gen_done++;
        }
        for (int32_t i = 0; i < ns; i++) seqs[sched[i]].n_done = sp[i].n_ctx;
    }
    free(pool), free(tokens), free(pos), free(slots), free(bts), free(sp), free(sr),
        free(sample_seq), free(sched), free(ct), free(gt);
    free(cl), free(gl), free(sparams), free(banned), free(c_top), free(g_top), free(c_lp),
        free(g_lp), free(c_tlp);
    free(g_tlp);
}

typedef struct gen_out {
    int32_t **toks;
    int32_t *n;
} gen_out;

static void on_done(const pllm_completion *c, void *arg)
{
    gen_out *g = arg;
    intptr_t i = (intptr_t)c->user;
    CHECK(c->finish != PLLM_FINISH_ERROR);
    g->n[i] = c->n_tokens;
    g->toks[i] = malloc(sizeof(int32_t) * (size_t)(c->n_tokens + 1));
    memcpy(g->toks[i], c->token_ids, sizeof(int32_t) * (size_t)c->n_tokens);
}

static void run_engine(const pllm_model *m, pllm_backend *b, const pllm_tokenizer *tok, tseq *seqs,
                       const opts *o, gen_out *g)
{
    pllm_engine_params ep;
    pllm_engine_params_defaults(&ep);
    ep.block_size = 16;
    ep.n_blocks = 64 + 4 * o->n_prompts;
    ep.max_batched_tokens = 32;
    ep.max_seqs = 8;
    ep.max_model_len = 512;
    pllm_engine *e = NULL;
    CHECK_OK(pllm_engine_create(&e, m, b, tok, &ep));
    if (!e) return;
    pllm_request_params rp;
    pllm_request_params_defaults(&rp);
    rp.max_tokens = o->gen;
    rp.ignore_eos = true;
    for (int32_t s = 0; s < o->n_prompts; s++)
        CHECK_OK(
            pllm_engine_add(e, seqs[s].toks, seqs[s].n_prompt, &rp, (void *)(intptr_t)s, NULL));
    while (pllm_engine_has_work(e)) {
        pllm_status st = pllm_engine_step(e, on_done, g);
        CHECK_OK(st);
        if (st != PLLM_OK) break;
    }
    pllm_engine_free(e);
}

int main(int argc, char **argv)
{
    opts o;
    parse(&o, argc, argv);
    g_rng = o.seed;
    char why[256];
    if (pllm_cuda_device_count(why, sizeof why) == 0) {
        char msg[400];
        snprintf(msg, sizeof msg, "needs a CUDA device: %s (the emulated build runs these checks)",
                 why);
        pllm_test_skip(msg);
    }
    if (!strcmp(o.model, "--probe")) return 0; /* a device answers */
    pllm_model *m = NULL;
    if (pllm_model_load(&m, o.model) != PLLM_OK) {
        fprintf(stderr, "cuda_vs_cpu: FAIL: cannot load %s: %s\n", o.model, pllm_errmsg());
        return 1;
    }
    pllm_tokenizer *tok = NULL;
    if (o.text) {
        CHECK_OK(pllm_tokenizer_from_gguf(&tok, m->gguf));
        if (!tok) return pllm_test_finish("cuda_vs_cpu");
        o.n_prompts = PLLM_MIN(o.n_prompts, (int32_t)PLLM_ARRAY_LEN(k_texts));
    }
    const int32_t V = m->cfg.n_vocab;
    tseq *seqs = calloc((size_t)o.n_prompts, sizeof *seqs);
    for (int32_t s = 0; s < o.n_prompts; s++) {
        tseq *q = &seqs[s];
        pllm_tokens t = {0};
        if (o.text) {
            CHECK_OK(pllm_tokenizer_encode(tok, k_texts[s], strlen(k_texts[s]), NULL, &t));
        } else {
            int32_t n = o.len_min + rnd(o.len_max - o.len_min + 1);
            for (int32_t i = 0; i < n; i++) pllm_tokens_push(&t, rnd(V));
        }
        q->n_prompt = q->n_known = (int32_t)t.n;
        q->toks = malloc(sizeof(int32_t) * (size_t)(q->n_prompt + o.gen + 1));
        memcpy(q->toks, t.ids, sizeof(int32_t) * t.n);
        q->ambiguous = calloc((size_t)o.gen + 1, 1);
        pllm_tokens_free(&t);
    }

    pllm_cpu_params cp;
    pllm_cpu_params_defaults(&cp);
    cp.n_threads = 2;
    pllm_backend cpu = {0}, gpu = {0};
    CHECK_OK(pllm_cpu_backend_create(&cpu, m, &cp));
    double t0 = pllm_now();
    CHECK_OK(make_cuda(&gpu, m, &o));
    if (!cpu.iface || !gpu.iface) return pllm_test_finish("cuda_vs_cpu");
    pllm_cuda_backend_info info;
    pllm_cuda_backend_get_info(&gpu, &info);
    fprintf(stderr, "cuda_vs_cpu %s: %s: %.1f MiB of %s weights converted and uploaded in %.2f s\n",
            m->name, info.device_name, (double)info.weight_bytes / (1 << 20),
            pllm_dtype_name(info.weight_dtype), info.load_seconds);

    stats st = {0};
    part1(m, &cpu, &gpu, seqs, &o, &st);
    pllm_cuda_backend_get_info(&gpu, &info);
    const double tol_rel = info.weight_dtype == PLLM_DTYPE_F32   ? 1e-5
                           : info.weight_dtype == PLLM_DTYPE_F16 ? 1e-2
                                                                 : 3e-2;
    fprintf(stderr,
            "cuda_vs_cpu %s: weights %s kv %s: %lld rows, logits rel err max %.2g mean %.2g (tol "
            "%.0e); tokens: %lld "
            "identical, %lld near-ties, %lld wrong; %lld steps, %lld as graphs (%d captured), %lld "
            "split; %.2f s\n",
            m->name, pllm_dtype_name(info.weight_dtype), pllm_dtype_name(o.kv), (long long)st.rows,
            st.max_rel, st.rows ? st.sum_rel / (double)st.rows : 0.0, tol_rel, (long long)st.agree,
            (long long)st.ambiguous, (long long)st.wrong, (long long)info.steps,
            (long long)info.graph_steps, info.graphs, (long long)info.split_steps, pllm_now() - t0);
    if (o.sample) {
        fprintf(stderr,
                "cuda_vs_cpu %s: sampled: logprob max abs err %.2g, %lld top-logprob ids differ\n",
                m->name, st.lp_err, (long long)st.top_wrong);
        CHECK(st.lp_err <= 1e-4);
        CHECK(st.top_wrong == 0);
    }
    CHECK(st.rows == (int64_t)o.n_prompts * o.gen);
    CHECK(st.wrong == 0);
    CHECK(st.max_rel <= tol_rel);
    if (o.graphs && o.n_prompts <= 16) CHECK(info.graph_steps > 0);
    if (o.split && o.len_min > o.split) CHECK(info.split_steps > 0);

    if (o.engine) {
        gen_out a = {calloc((size_t)o.n_prompts, sizeof(int32_t *)),
                     calloc((size_t)o.n_prompts, sizeof(int32_t))};
        gen_out b = {calloc((size_t)o.n_prompts, sizeof(int32_t *)),
                     calloc((size_t)o.n_prompts, sizeof(int32_t))};
        /* the same backends: the engine's kv_init re-sizes their caches */
        const int64_t steps0 = info.steps, graph0 = info.graph_steps;
        run_engine(m, &cpu, tok, seqs, &o, &a);
        run_engine(m, &gpu, tok, seqs, &o, &b);
        int32_t same = 0, amb = 0;
        for (int32_t s = 0; s < o.n_prompts; s++) {
            if (!a.toks[s] || !b.toks[s]) continue;
            int32_t k = 0;
            while (k < a.n[s] && k < b.n[s] && a.toks[s][k] == b.toks[s][k]) k++;
            if (k == a.n[s] && a.n[s] == b.n[s])
                same++;
            else if (k < o.gen && seqs[s].ambiguous[k])
                amb++;
            else {
                fprintf(stderr,
                        "  engine: prompt %d diverges at token %d (cpu %d, cuda %d) where part 1 "
                        "saw no near-tie\n",
                        s, k, k < a.n[s] ? a.toks[s][k] : -1, k < b.n[s] ? b.toks[s][k] : -1);
                CHECK(!"engine outputs differ");
            }
            if (o.text && s < 3) {
                pllm_buf ta = {0};
                pllm_tokenizer_decode(tok, a.toks[s], (size_t)a.n[s], false, &ta);
                fprintf(stderr, "  prompt %d -> \"%s\"\n", s, ta.s ? ta.s : "");
                pllm_buf_free(&ta);
            }
            free(a.toks[s]), free(b.toks[s]);
        }
        pllm_cuda_backend_get_info(&gpu, &info);
        fprintf(stderr,
                "cuda_vs_cpu %s: engine: %d of %d generations identical, %d diverge at a near-tie; "
                "%lld steps, %lld as graphs\n",
                m->name, same, o.n_prompts, amb, (long long)(info.steps - steps0),
                (long long)(info.graph_steps - graph0));
        CHECK(same + amb == o.n_prompts);
        free(a.toks), free(a.n), free(b.toks), free(b.n);
    }
    for (int32_t s = 0; s < o.n_prompts; s++)
        free(seqs[s].toks), free(seqs[s].blocks), free(seqs[s].ambiguous);
    free(seqs);
    pllm_backend_free(&cpu);
    pllm_backend_free(&gpu);
    pllm_tokenizer_free(tok);
    pllm_model_free(m);
    return pllm_test_finish("cuda_vs_cpu");
}
