/*
 * cpu_logits_tool.c: runs token sequences through the CPU backend with real batch plans and
 * writes the logits of requested positions, for the Python reference tests.
 *
 *     cpu_logits_tool SPEC.json           run a spec (below); result JSON on stdout
 *     cpu_logits_tool --check-errors MODEL   invalid plans must fail cleanly; copy_blocks works
 *
 * The tool is a small scheduler of its own: each step it takes up to max_step_seqs unfinished
 * sequences (round robin, or strictly one after another with "order": "sequential"), gives each
 * a chunk of new tokens under a budget of max_step_tokens, and asks for a sample only where a
 * chunk ends at a position whose logits are wanted (or at the end of what is known, while
 * generating). So one run mixes prefill chunks of many lengths, decode steps and several
 * sequences per step. KV blocks are handed out from a shuffled free list, so block tables are
 * not contiguous, and block_size need not divide anything.
 *
 * Spec:
 *   {"model": PATH, "threads": 2, "kv_dtype": "f32"|"f16", "block_size": 7,
 *    "max_step_tokens": 24, "max_step_seqs": 3, "order": "interleave"|"sequential",
 *    "shuffle_seed": 5, "isa": "scalar"|"avx2"|"avx512" (optional cap), "out": PATH.npy,
 *    "seqs": [{"tokens": [...], "logits_at": [positions], "generate": N}, ...]}
 * Output: PATH.npy, float32 [rows][n_vocab]: for each sequence in order, first one row per
 * position of logits_at (sorted, deduplicated), then N rows for the generated tokens (the
 * logits each greedy token was drawn from: positions len-1 .. len+N-2). Stdout: JSON
 * {"rows": R, "n_vocab": V, "steps": S, "kernels": "...", "threads": T,
 *  "seqs": [{"positions": [...], "generated": [...]}, ...]}.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_backend.h"
#include "model/model.h"
#include "model/sampling.h"
#include "tests/testutil.h"

typedef struct tseq {
    int32_t *toks;        /* prompt then generated tokens */
    int32_t n_prompt, n_known, cap;
    int32_t *want;        /* sorted unique logits_at positions */
    int32_t n_want;
    int32_t n_gen, gen_done;
    int32_t n_done;       /* tokens whose K/V are in the cache */
    int32_t *blocks;      /* block table */
    int32_t n_blocks;
    int64_t row0;         /* first output row of this sequence */
} tseq;

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static void die(const char *what)
{
    fprintf(stderr, "cpu_logits_tool: %s\n", what);
    exit(2);
}

static void die_st(pllm_status st, const char *what)
{
    fprintf(stderr, "cpu_logits_tool: %s: %s: %s\n", what, pllm_status_str(st), pllm_errmsg());
    exit(2);
}

/* Write a float32 [rows][cols] .npy file. */
static void write_npy(const char *path, const float *data, int64_t rows, int64_t cols)
{
    FILE *f = fopen(path, "wb");
    if (!f) die("cannot open the output file");
    char hdr[128];
    int n = snprintf(hdr, sizeof hdr, "{'descr': '<f4', 'fortran_order': False, 'shape': (%lld, %lld), }",
                     (long long)rows, (long long)cols);
    int total = 10 + n + 1;
    int pad = (64 - total % 64) % 64;
    unsigned short hlen = (unsigned short)(n + pad + 1);
    fwrite("\x93NUMPY\x01\x00", 1, 8, f);
    fputc(hlen & 0xff, f);
    fputc(hlen >> 8, f);
    fwrite(hdr, 1, (size_t)n, f);
    for (int i = 0; i < pad; i++) fputc(' ', f);
    fputc('\n', f);
    if (rows * cols > 0 && fwrite(data, sizeof(float), (size_t)(rows * cols), f) != (size_t)(rows * cols)) die("short write");
    fclose(f);
}

static int32_t json_int(const json_t *o, const char *key, int32_t def)
{
    json_t *v = json_object_get(o, key);
    return json_is_integer(v) ? (int32_t)json_integer_value(v) : def;
}

static const char *json_str(const json_t *o, const char *key, const char *def)
{
    json_t *v = json_object_get(o, key);
    return json_is_string(v) ? json_string_value(v) : def;
}

static int run_spec(const char *spec_path)
{
    json_error_t jerr;
    json_t *spec = json_load_file(spec_path, 0, &jerr);
    if (!spec) die(jerr.text);
    const char *model_path = json_str(spec, "model", NULL), *out_path = json_str(spec, "out", NULL);
    if (!model_path || !out_path) die("spec needs model and out");
    const int32_t bs = json_int(spec, "block_size", 16), max_tok = json_int(spec, "max_step_tokens", 64),
                  max_seqs = json_int(spec, "max_step_seqs", 8);
    const bool sequential = strcmp(json_str(spec, "order", "interleave"), "sequential") == 0;
    uint64_t rng = (uint64_t)json_int(spec, "shuffle_seed", 1) * 0x9E3779B97F4A7C15ull + 1;

    pllm_model *model = NULL;
    pllm_status st = pllm_model_load(&model, model_path);
    if (st) die_st(st, "loading the model");
    const int32_t V = model->cfg.n_vocab;

    /* "isa": cap the kernel table (scalar, avx2, avx512), read by pllm_cpu_kernels_best */
    if (json_str(spec, "isa", NULL)) setenv("PLLM_CPU_ISA", json_str(spec, "isa", NULL), 1);
    pllm_cpu_params cp;
    pllm_cpu_params_defaults(&cp);
    cp.n_threads = json_int(spec, "threads", 1);
    cp.kv_dtype = strcmp(json_str(spec, "kv_dtype", "f32"), "f16") == 0 ? PLLM_DTYPE_F16 : PLLM_DTYPE_F32;
    pllm_backend be = {0};
    if ((st = pllm_cpu_backend_create(&be, model, &cp))) die_st(st, "creating the backend");

    /* sequences */
    json_t *jseqs = json_object_get(spec, "seqs");
    int32_t n_seqs = (int32_t)json_array_size(jseqs);
    tseq *seqs = calloc((size_t)n_seqs, sizeof *seqs);
    int64_t rows = 0, total_blocks = 0;
    for (int32_t s = 0; s < n_seqs; s++) {
        json_t *js = json_array_get(jseqs, (size_t)s), *jt = json_object_get(js, "tokens"), *jw = json_object_get(js, "logits_at");
        tseq *q = &seqs[s];
        q->n_prompt = q->n_known = (int32_t)json_array_size(jt);
        q->n_gen = json_int(js, "generate", 0);
        if (q->n_prompt < 1) die("a sequence needs at least one token");
        q->cap = q->n_prompt + q->n_gen + 1;
        q->toks = calloc((size_t)q->cap, sizeof(int32_t));
        for (int32_t i = 0; i < q->n_prompt; i++) q->toks[i] = (int32_t)json_integer_value(json_array_get(jt, (size_t)i));
        q->want = calloc(json_array_size(jw) + 1, sizeof(int32_t));
        for (size_t i = 0; i < json_array_size(jw); i++) {
            int32_t p = (int32_t)json_integer_value(json_array_get(jw, i));
            if (p < 0 || p >= q->n_prompt) die("logits_at position outside the prompt");
            q->want[q->n_want++] = p;
        }
        qsort(q->want, (size_t)q->n_want, sizeof(int32_t), cmp_i32);
        int32_t u = 0;
        for (int32_t i = 0; i < q->n_want; i++)
            if (u == 0 || q->want[u - 1] != q->want[i]) q->want[u++] = q->want[i];
        q->n_want = u;
        q->row0 = rows;
        rows += q->n_want + q->n_gen;
        q->blocks = calloc((size_t)((q->cap + bs - 1) / bs + 1), sizeof(int32_t));
        total_blocks += (q->cap + bs - 1) / bs;
    }

    /* KV pool: every sequence's blocks plus slack, handed out in shuffled order */
    pllm_kv_layout L;
    if ((st = be.iface->kv_layout(be.ctx, bs, &L))) die_st(st, "kv_layout");
    L.n_blocks = (int32_t)total_blocks + 11;
    if ((st = be.iface->kv_init(be.ctx, &L))) die_st(st, "kv_init");
    int32_t *free_list = malloc(sizeof(int32_t) * (size_t)L.n_blocks), n_free = L.n_blocks;
    for (int32_t i = 0; i < L.n_blocks; i++) free_list[i] = i;
    for (int32_t i = L.n_blocks - 1; i > 0; i--) {
        int32_t j = (int32_t)(pllm_test_rand(&rng) % (uint64_t)(i + 1)), t = free_list[i];
        free_list[i] = free_list[j];
        free_list[j] = t;
    }

    float *out_rows = calloc((size_t)(rows > 0 ? rows : 1) * (size_t)V, sizeof(float));
    int32_t max_tokens_cap = max_tok, *ptok = malloc(sizeof(int32_t) * (size_t)max_tokens_cap),
            *ppos = malloc(sizeof(int32_t) * (size_t)max_tokens_cap), *pslot = malloc(sizeof(int32_t) * (size_t)max_tokens_cap);
    pllm_seq_plan *pseqs = calloc((size_t)max_seqs, sizeof *pseqs);
    pllm_sample_req *psamp = calloc((size_t)max_seqs, sizeof *psamp);
    int32_t *samp_seq = calloc((size_t)max_seqs, sizeof(int32_t)); /* tool sequence of each sample */
    int32_t *btab = malloc(sizeof(int32_t) * (size_t)(total_blocks + n_seqs + 1));
    int32_t *stok = malloc(sizeof(int32_t) * (size_t)max_seqs);
    float *slog = malloc(sizeof(float) * (size_t)max_seqs * (size_t)V);
    pllm_sampling_params greedy;
    pllm_sampling_defaults(&greedy);

    int64_t steps = 0;
    int32_t rr = 0; /* round-robin start */
    for (;;) {
        pllm_batch_plan plan = {.tokens = ptok, .positions = ppos, .slots = pslot, .seqs = pseqs, .block_tables = btab,
                                .samples = psamp};
        int32_t n_bt = 0;
        for (int32_t k = 0; k < n_seqs && plan.n_seqs < max_seqs && plan.n_tokens < max_tok; k++) {
            int32_t s = sequential ? k : (rr + k) % n_seqs;
            tseq *q = &seqs[s];
            bool finished = q->n_done == q->n_known && q->gen_done == q->n_gen;
            if (finished) continue;
            /* the next position that must end a chunk: a wanted one, or the last known token */
            int32_t end = q->n_known - 1;
            for (int32_t i = 0; i < q->n_want; i++)
                if (q->want[i] >= q->n_done) {
                    end = PLLM_MIN(end, q->want[i]);
                    break;
                }
            int32_t n_new = PLLM_MIN(end - q->n_done + 1, max_tok - plan.n_tokens);
            int32_t n_ctx = q->n_done + n_new;
            while (q->n_blocks * bs < n_ctx) {
                if (n_free == 0) die("KV pool exhausted (tool bug)");
                q->blocks[q->n_blocks++] = free_list[--n_free];
            }
            pllm_seq_plan *sp = &pseqs[plan.n_seqs];
            *sp = (pllm_seq_plan){.token_start = plan.n_tokens, .n_new = n_new, .n_ctx = n_ctx, .block_start = n_bt,
                                  .n_blocks = q->n_blocks};
            memcpy(btab + n_bt, q->blocks, sizeof(int32_t) * (size_t)q->n_blocks);
            n_bt += q->n_blocks;
            for (int32_t j = 0; j < n_new; j++) {
                int32_t p = q->n_done + j, i = plan.n_tokens + j;
                ptok[i] = q->toks[p];
                ppos[i] = p;
                pslot[i] = q->blocks[p / bs] * bs + p % bs;
            }
            bool wanted = q->n_want && bsearch(&end, q->want, (size_t)q->n_want, sizeof(int32_t), cmp_i32);
            bool generating = end == q->n_known - 1 && q->gen_done < q->n_gen;
            if (n_ctx - 1 == end && (wanted || generating)) {
                psamp[plan.n_samples] = (pllm_sample_req){.seq = plan.n_seqs, .params = &greedy,
                                                          .ctx = {.prompt = q->toks, .n_prompt = q->n_prompt,
                                                                  .output = q->toks + q->n_prompt, .n_output = q->gen_done}};
                samp_seq[plan.n_samples++] = s;
            }
            plan.n_tokens += n_new;
            plan.n_seqs++;
            q->n_done = n_ctx;
            if (sequential) break;
        }
        if (plan.n_seqs == 0) break;
        rr = (rr + 1) % n_seqs;
        pllm_step_out out = {.tokens = stok, .logits = slog};
        if ((st = be.iface->step(be.ctx, &plan, &out))) die_st(st, "step");
        steps++;
        for (int32_t i = 0; i < plan.n_samples; i++) {
            tseq *q = &seqs[samp_seq[i]];
            int32_t pos = q->n_done - 1;
            const float *lg = slog + (size_t)i * (size_t)V;
            int32_t *hit = q->n_want ? bsearch(&pos, q->want, (size_t)q->n_want, sizeof(int32_t), cmp_i32) : NULL;
            if (hit) memcpy(out_rows + (size_t)(q->row0 + (hit - q->want)) * (size_t)V, lg, sizeof(float) * (size_t)V);
            if (pos == q->n_known - 1 && q->gen_done < q->n_gen) {
                memcpy(out_rows + (size_t)(q->row0 + q->n_want + q->gen_done) * (size_t)V, lg, sizeof(float) * (size_t)V);
                /* the sampled greedy token must be the argmax of the raw logits (lowest id on ties) */
                int32_t am = 0;
                for (int32_t v = 1; v < V; v++)
                    if (lg[v] > lg[am]) am = v;
                if (am != stok[i]) {
                    fprintf(stderr, "cpu_logits_tool: greedy sample %d != argmax %d\n", stok[i], am);
                    exit(1);
                }
                q->toks[q->n_known++] = stok[i];
                q->gen_done++;
            }
        }
    }

    write_npy(out_path, out_rows, rows, V);
    int nthr = 0;
    const char *kname = pllm_cpu_backend_describe(&be, &nthr);
    printf("{\"rows\": %lld, \"n_vocab\": %d, \"steps\": %lld, \"kernels\": \"%s\", \"threads\": %d, \"seqs\": [", (long long)rows, V,
           (long long)steps, kname, nthr);
    for (int32_t s = 0; s < n_seqs; s++) {
        tseq *q = &seqs[s];
        printf("%s{\"positions\": [", s ? ", " : "");
        for (int32_t i = 0; i < q->n_want; i++) printf("%s%d", i ? ", " : "", q->want[i]);
        printf("], \"generated\": [");
        for (int32_t i = 0; i < q->gen_done; i++) printf("%s%d", i ? ", " : "", q->toks[q->n_prompt + i]);
        printf("]}");
        free(q->toks);
        free(q->want);
        free(q->blocks);
    }
    printf("]}\n");
    free(seqs); free(free_list); free(out_rows); free(ptok); free(ppos); free(pslot); free(pseqs); free(psamp);
    free(samp_seq); free(btab); free(stok); free(slog);
    pllm_backend_free(&be);
    pllm_model_free(model);
    json_decref(spec);
    return 0;
}

/* ---- --check-errors ------------------------------------------------------------------------ */

typedef struct eplan {
    int32_t tok[8], pos[8], slot[8], bt[8];
    pllm_seq_plan seq[2];
    pllm_sample_req samp[2];
    pllm_batch_plan plan;
} eplan;

/* A valid plan: one sequence, 5 prompt tokens, blocks {3, 1} of 4 tokens, one greedy sample. */
static void eplan_init(eplan *e, const pllm_sampling_params *sp)
{
    memset(e, 0, sizeof *e);
    e->bt[0] = 3;
    e->bt[1] = 1;
    for (int i = 0; i < 5; i++) {
        e->tok[i] = 10 + i;
        e->pos[i] = i;
        e->slot[i] = e->bt[i / 4] * 4 + i % 4;
    }
    e->seq[0] = (pllm_seq_plan){.token_start = 0, .n_new = 5, .n_ctx = 5, .block_start = 0, .n_blocks = 2};
    e->samp[0] = (pllm_sample_req){.seq = 0, .params = sp};
    e->plan = (pllm_batch_plan){.n_tokens = 5, .tokens = e->tok, .positions = e->pos, .slots = e->slot, .n_seqs = 1,
                                .seqs = e->seq, .block_tables = e->bt, .n_samples = 1, .samples = e->samp};
}

static int check_errors(const char *model_path)
{
    pllm_model *model = NULL;
    pllm_status st = pllm_model_load(&model, model_path);
    if (st) die_st(st, "loading the model");
    const int32_t V = model->cfg.n_vocab;
    pllm_cpu_params cp;
    pllm_cpu_params_defaults(&cp);
    cp.n_threads = 2;
    pllm_backend be = {0};
    CHECK_OK(pllm_cpu_backend_create(&be, model, &cp));
    if (!be.iface) return 1;
    pllm_sampling_params greedy, bad_params;
    pllm_sampling_defaults(&greedy);
    pllm_sampling_defaults(&bad_params);
    bad_params.top_p = 2.0f;
    int32_t tok[2];
    float *lg = malloc(sizeof(float) * 2 * (size_t)V), *lg2 = malloc(sizeof(float) * 2 * (size_t)V);
    pllm_step_out out = {.tokens = tok, .logits = lg};
    eplan e;

    /* before kv_init */
    eplan_init(&e, &greedy);
    st = be.iface->step(be.ctx, &e.plan, &out);
    fprintf(stderr, "  step before kv_init -> %s: %s\n", pllm_status_str(st), pllm_errmsg());
    CHECK(st != PLLM_OK);

    pllm_kv_layout L;
    CHECK_OK(be.iface->kv_layout(be.ctx, 4, &L));
    L.n_blocks = 6;
    CHECK_OK(be.iface->kv_init(be.ctx, &L));
    pllm_kv_layout badL = L;
    badL.head_dim += 2;
    CHECK(be.iface->kv_init(be.ctx, &badL) != PLLM_OK);
    CHECK_OK(be.iface->kv_init(be.ctx, &L)); /* re-init is allowed */
    size_t avail = 0;
    CHECK_OK(be.iface->kv_available(be.ctx, &avail));
    fprintf(stderr, "  kv_available: %.1f GiB\n", (double)avail / (1 << 30));
    CHECK(avail > 0);

    /* each invalid plan, one at a time (written out: no nested functions in C11) */
    const char *names[] = {"token id = n_vocab", "negative token id", "position != n_ctx - n_new + j",
                           "slot not where the block table puts it", "block id outside the pool",
                           "block table too short for n_ctx", "n_new > n_ctx", "seqs do not cover n_tokens",
                           "sample of a sequence that does not exist", "invalid sampling params",
                           "banned id outside the vocabulary", "slot written twice",
                           "negative n_tokens", "NULL out->tokens"};
    for (int c = 0; c < (int)PLLM_ARRAY_LEN(names); c++) {
        eplan_init(&e, &greedy);
        pllm_step_out o = out;
        int32_t banned = V;
        switch (c) {
        case 0: e.tok[2] = V; break;
        case 1: e.tok[0] = -1; break;
        case 2: e.pos[3] = 7; break;
        case 3: e.slot[1] = 3 * 4 + 2; break;
        case 4: e.bt[1] = 6; e.slot[4] = 6 * 4; break;
        case 5: e.seq[0].n_blocks = 1; break;
        case 6: e.seq[0].n_ctx = 4; break;
        case 7: e.plan.n_tokens = 6; break;
        case 8: e.samp[0].seq = 1; break;
        case 9: e.samp[0].params = &bad_params; break;
        case 10: e.samp[0].ctx.banned = &banned; e.samp[0].ctx.n_banned = 1; break;
        case 11: /* a second sequence writing into the first one's slot 0 */
            e.tok[5] = 1; e.pos[5] = 0; e.slot[5] = e.slot[0]; e.bt[2] = 3;
            e.seq[1] = (pllm_seq_plan){.token_start = 5, .n_new = 1, .n_ctx = 1, .block_start = 2, .n_blocks = 1};
            e.plan.n_seqs = 2; e.plan.n_tokens = 6; break;
        case 12: e.plan.n_tokens = -1; break;
        default: o.tokens = NULL; break;
        }
        st = be.iface->step(be.ctx, &e.plan, &o);
        fprintf(stderr, "  %-42s -> %s: %s\n", names[c], pllm_status_str(st), pllm_errmsg());
        CHECK(st != PLLM_OK);
    }

    /* the backend still works: the valid plan, twice, gives the same logits */
    eplan_init(&e, &greedy);
    CHECK_OK(be.iface->step(be.ctx, &e.plan, &out));
    int32_t t1 = tok[0];
    out.logits = lg2;
    CHECK_OK(be.iface->step(be.ctx, &e.plan, &out));
    CHECK(tok[0] == t1 && memcmp(lg, lg2, sizeof(float) * (size_t)V) == 0);

    /* copy_blocks: copy blocks {3, 1} to {0, 5}; one decode step on each copy gives the same logits */
    if (be.iface->copy_blocks) {
        int32_t src[2] = {3, 1}, dst[2] = {0, 5}, badd[1] = {6};
        CHECK_OK(be.iface->copy_blocks(be.ctx, src, dst, 2));
        CHECK(be.iface->copy_blocks(be.ctx, src, badd, 1) != PLLM_OK);
        int32_t ptok[2] = {t1, t1}, ppos[2] = {5, 5}, pslot[2] = {1 * 4 + 1, 5 * 4 + 1}, bt[4] = {3, 1, 0, 5};
        pllm_seq_plan ps[2] = {{.token_start = 0, .n_new = 1, .n_ctx = 6, .block_start = 0, .n_blocks = 2},
                               {.token_start = 1, .n_new = 1, .n_ctx = 6, .block_start = 2, .n_blocks = 2}};
        pllm_sample_req sr[2] = {{.seq = 0, .params = &greedy}, {.seq = 1, .params = &greedy}};
        pllm_batch_plan p = {.n_tokens = 2, .tokens = ptok, .positions = ppos, .slots = pslot, .n_seqs = 2, .seqs = ps,
                             .block_tables = bt, .n_samples = 2, .samples = sr};
        out.logits = lg;
        CHECK_OK(be.iface->step(be.ctx, &p, &out));
        bool same = memcmp(lg, lg + V, sizeof(float) * (size_t)V) == 0;
        fprintf(stderr, "  copy_blocks: decode on the copy %s the original\n", same ? "matches" : "DIFFERS FROM");
        CHECK(same && tok[0] == tok[1]);
    }

    /* logprobs and top logprobs come back when asked */
    {
        pllm_sampling_params lp = greedy;
        lp.logprobs = 3;
        eplan_init(&e, &lp);
        float lps[1], tlp[4];
        int32_t tid[4];
        pllm_step_out o = {.tokens = tok, .logprobs = lps, .top_n = 4, .top_ids = tid, .top_logprobs = tlp};
        CHECK_OK(be.iface->step(be.ctx, &e.plan, &o));
        fprintf(stderr, "  logprobs: token %d logprob %.4f top %d %d %d %d\n", tok[0], lps[0], tid[0], tid[1], tid[2], tid[3]);
        CHECK(tid[0] == tok[0] && fabsf(tlp[0] - lps[0]) < 1e-6f && tid[3] == -1 && lps[0] <= 0);
        o.top_n = 2;
        CHECK(be.iface->step(be.ctx, &e.plan, &o) != PLLM_OK); /* 3 asked, room for 2 */
    }

    free(lg);
    free(lg2);
    pllm_backend_free(&be);
    pllm_model_free(model);
    return pllm_test_finish("cpu_logits_tool --check-errors");
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--check-errors") == 0) return check_errors(argv[2]);
    if (argc == 2) return run_spec(argv[1]);
    fprintf(stderr, "usage: cpu_logits_tool SPEC.json | --check-errors MODEL.gguf\n");
    return 2;
}
