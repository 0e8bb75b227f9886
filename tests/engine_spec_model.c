/*
 * engine_spec_model: speculative decoding is lossless on the real default model
 * ($PLLM_HOME/models/SmolLM2-135M-Instruct.Q4_1.gguf) on the CPU, over real prompts: the first
 * 8 usable human turns of ShareGPT (up to 700 bytes) and the first 8 MT-Bench questions
 * ($PLLM_SHARED_DATA/sharegpt/ShareGPT_V3_filtered_1000.json, mtbench/mt_bench_question.jsonl),
 * each in the model's chat format, plus 4 copy-heavy requests ("repeat this text").
 *
 * Greedy: the tokens and text with --speculate prompt-lookup and auto, at 16 and 4 sequences per
 * step, are the tokens and text of the run without speculation (engine_spec runs 1 sequence
 * per step on a random model). Sampled (temperature 0.8,
 * top-p 0.95, a repetition penalty, 3 logprobs, n = 2, a stop string, fixed seeds): the same
 * tokens, text, logprobs and finish reasons. Every speculating run accepts drafts.
 */
#include "cpu/cpu_backend.h"
#include "engine/engine.h"
#include "tests/testutil.h"
#include "tokenizer/tokenizer.h"

#include <jansson.h>
#include <math.h>
#include <string.h>

#define N_SRC   8
#define N_REQ   (2 * N_SRC + 4)
#define MAX_OUT 32
#define N_SLOTS (2 * N_REQ)

typedef struct outputs {
    int32_t n[N_SLOTS];
    int32_t tok[N_SLOTS][MAX_OUT];
    float lp[N_SLOTS][MAX_OUT];
    int32_t top0[N_SLOTS][MAX_OUT];
    char text[N_SLOTS][1024];
    pllm_finish_reason finish[N_SLOTS];
} outputs;

static void on_done(const pllm_completion *c, void *arg)
{
    outputs *o = arg;
    intptr_t i = 2 * (intptr_t)c->user + c->index;
    CHECK(c->finish != PLLM_FINISH_ERROR && i >= 0 && i < N_SLOTS && c->n_tokens <= MAX_OUT);
    if (i < 0 || i >= N_SLOTS) return;
    o->n[i] = PLLM_MIN(c->n_tokens, MAX_OUT);
    o->finish[i] = c->finish;
    for (int32_t k = 0; k < o->n[i]; k++) {
        o->tok[i][k] = c->token_ids[k];
        o->lp[i][k] = c->logprobs ? c->logprobs[k] : 0.0f;
        o->top0[i][k] = c->logprobs ? c->top_ids[k * c->top_n] : -1;
    }
    snprintf(o->text[i], sizeof o->text[i], "%.*s", (int)c->text_len, c->text);
}

/* The prompts' texts: ShareGPT human turns (at most 700 bytes), MT-Bench first turns, and
 * copy tasks built from ShareGPT passages. */
static int32_t load_texts(const char *data, char **texts)
{
    char path[4096];
    int32_t n = 0;
    snprintf(path, sizeof path, "%s/sharegpt/ShareGPT_V3_filtered_1000.json", data);
    json_error_t err;
    json_t *sg = json_load_file(path, 0, &err);
    if (!sg) {
        fprintf(stderr, "engine_spec_model: %s:%d: %s\n", path, err.line, err.text);
        return -1;
    }
    int32_t n_sg = 0, n_copy = 0;
    for (size_t i = 0; i < json_array_size(sg) && (n_sg < N_SRC || n_copy < 4); i++) {
        json_t *conv = json_object_get(json_array_get(sg, i), "conversations");
        const char *v = json_string_value(json_object_get(json_array_get(conv, 0), "value"));
        if (!v || strlen(v) < 40 || strlen(v) > 700) continue;
        if (n_sg < N_SRC) {
            texts[n++] = strdup(v);
            n_sg++;
        } else {
            size_t len = strlen(v) + 64;
            char *t = malloc(len);
            snprintf(t, len, "Repeat this text exactly:\n\n%s", v);
            texts[2 * N_SRC + n_copy++] = t;
        }
    }
    json_decref(sg);
    snprintf(path, sizeof path, "%s/mtbench/mt_bench_question.jsonl", data);
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "engine_spec_model: cannot open %s\n", path);
        return -1;
    }
    char line[16384];
    int32_t lineno = 0;
    while (n < 2 * N_SRC && fgets(line, sizeof line, f)) {
        lineno++;
        json_t *q = json_loads(line, 0, &err);
        const char *v = json_string_value(json_array_get(json_object_get(q, "turns"), 0));
        if (!v) fprintf(stderr, "engine_spec_model: %s:%d: no turns[0]\n", path, lineno);
        if (v) texts[n++] = strdup(v);
        json_decref(q);
    }
    fclose(f);
    return n == 2 * N_SRC && n_copy == 4 ? N_REQ : -1;
}

typedef struct config {
    const char *name;
    pllm_spec_mode mode;
    int32_t max_seqs;
} config;

static void run(const pllm_model *m, const pllm_tokenizer *tok, pllm_tokens *prompts,
                const config *cf, bool sampled, outputs *o, pllm_engine_stats *st)
{
    pllm_cpu_params cp;
    pllm_cpu_params_defaults(&cp);
    cp.n_threads = 2;
    pllm_backend be = {0};
    CHECK_OK(pllm_cpu_backend_create(&be, m, &cp));
    pllm_engine_params ep;
    pllm_engine_params_defaults(&ep);
    ep.max_seqs = cf->max_seqs;
    ep.max_model_len = 1024;
    ep.speculate = cf->mode;
    pllm_engine *e = NULL;
    memset(o, 0, sizeof *o);
    CHECK_OK(pllm_engine_create(&e, m, &be, tok, &ep));
    if (!e) {
        pllm_backend_free(&be);
        return;
    }
    for (int32_t i = 0; i < N_REQ; i++) {
        pllm_request_params p;
        pllm_request_params_defaults(&p);
        p.max_tokens = MAX_OUT;
        if (sampled) {
            p.sampling.temperature = 0.8f;
            p.sampling.top_p = 0.95f;
            p.sampling.repetition_penalty = 1.1f;
            p.sampling.logprobs = 3;
            p.sampling.seed = 7 + (uint64_t)i;
            p.has_seed = true;
            p.n = 2;
            p.n_stop = 1;
            p.stop[0] = ".\n";
        }
        CHECK_OK(pllm_engine_add(e, prompts[i].ids, (int32_t)prompts[i].n, &p, (void *)(intptr_t)i,
                                 NULL));
    }
    while (pllm_engine_has_work(e)) {
        pllm_status s = pllm_engine_step(e, on_done, o);
        CHECK_OK(s);
        if (s != PLLM_OK) break;
    }
    pllm_engine_get_stats(e, st);
    pllm_engine_free(e);
    pllm_backend_free(&be);
}

static int32_t compare(const outputs *a, const outputs *b, int32_t n_slots, const char *what)
{
    int32_t bad = 0;
    for (int32_t i = 0; i < n_slots; i++) {
        bool same = a->n[i] == b->n[i] && a->finish[i] == b->finish[i] &&
                    !memcmp(a->tok[i], b->tok[i], (size_t)a->n[i] * sizeof(int32_t)) &&
                    !strcmp(a->text[i], b->text[i]);
        for (int32_t k = 0; same && k < a->n[i]; k++)
            same = fabsf(a->lp[i][k] - b->lp[i][k]) <= 1e-5f && a->top0[i][k] == b->top0[i][k];
        if (!same) {
            int32_t k = 0;
            while (k < a->n[i] && k < b->n[i] && a->tok[i][k] == b->tok[i][k]) k++;
            fprintf(stderr, "  %s: output %d differs at token %d (%d vs %d tokens)\n", what, i, k,
                    a->n[i], b->n[i]);
            bad++;
        }
    }
    return bad;
}

int main(void)
{
    const char *home = pllm_test_env("PLLM_HOME", NULL);
    char path[4096];
    if (home)
        snprintf(path, sizeof path, "%s/models/SmolLM2-135M-Instruct.Q4_1.gguf", home);
    else
        snprintf(path, sizeof path, "%s/.cache/pllm/models/SmolLM2-135M-Instruct.Q4_1.gguf",
                 pllm_test_env("HOME", "."));
    pllm_model *m = NULL;
    if (pllm_model_load(&m, path) != PLLM_OK) {
        fprintf(stderr, "engine_spec_model: FAIL: cannot load the default model (%s)\n",
                pllm_errmsg());
        return 1;
    }
    const char *data = pllm_test_env("PLLM_SHARED_DATA", "../shared/data");
    char *texts[N_REQ] = {0};
    if (load_texts(data, texts) != N_REQ) {
        fprintf(stderr, "engine_spec_model: FAIL: cannot read the prompts from %s\n", data);
        return 1;
    }
    pllm_tokenizer *tok = NULL;
    CHECK_OK(pllm_tokenizer_from_gguf(&tok, m->gguf));
    if (!tok) return pllm_test_finish("engine_spec_model");
    pllm_tokens prompts[N_REQ] = {{0}};
    pllm_encode_opts eo = {.add_special = true, .parse_special = true};
    for (int32_t i = 0; i < N_REQ; i++) {
        size_t len = strlen(texts[i]) + 128;
        char *chat = malloc(len);
        snprintf(chat, len, "<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n", texts[i]);
        CHECK_OK(pllm_tokenizer_encode(tok, chat, strlen(chat), &eo, &prompts[i]));
        free(chat);
    }

    static outputs ref, got;
    pllm_engine_stats st;
    double t0 = pllm_now();
    static const config greedy[] = {
        {"greedy, 16 seqs, prompt-lookup", PLLM_SPEC_PROMPT_LOOKUP, 16},
        {"greedy, 4 seqs, auto", PLLM_SPEC_AUTO, 4},
    };
    config off = {"greedy, 16 seqs, off", PLLM_SPEC_OFF, 16};
    run(m, tok, prompts, &off, false, &ref, &st);
    for (size_t c = 0; c < PLLM_ARRAY_LEN(greedy); c++) {
        run(m, tok, prompts, &greedy[c], false, &got, &st);
        fprintf(stderr, "  %-34s %4lld steps, drafts %5lld accepted %5lld, %.2f tokens per step\n",
                greedy[c].name, (long long)st.steps, (long long)st.spec_drafted,
                (long long)st.spec_accepted,
                (double)st.decode_tokens / (double)PLLM_MAX(st.decode_samples, 1));
        /* auto's choice follows the measured step times (this workload keeps ~1 draft in 3:
         * with the cost fit of consecutive steps it may run only its exploring drafts and keep
         * none); prompt-lookup keeps some in every run */
        if (greedy[c].mode == PLLM_SPEC_AUTO)
            CHECK(st.spec_drafted > 0);
        else
            CHECK(st.spec_accepted > 0);
        CHECK(compare(&ref, &got, N_SLOTS, greedy[c].name) == 0);
    }
    config soff = {"sampled, 16 seqs, off", PLLM_SPEC_OFF, 16};
    config spl = {"sampled, 16 seqs, prompt-lookup", PLLM_SPEC_PROMPT_LOOKUP, 16};
    run(m, tok, prompts, &soff, true, &ref, &st);
    run(m, tok, prompts, &spl, true, &got, &st);
    fprintf(stderr, "  %-34s %4lld steps, drafts %5lld accepted %5lld\n", spl.name,
            (long long)st.steps, (long long)st.spec_drafted, (long long)st.spec_accepted);
    CHECK(st.spec_accepted > 0);
    CHECK(compare(&ref, &got, N_SLOTS, spl.name) == 0);
    for (int32_t i = 0; i < 3; i++)
        fprintf(stderr, "  [%d] %.60s... -> %.80s\n", i, texts[i], ref.text[2 * i]);
    fprintf(stderr, "  [copy] -> %.100s\n", ref.text[2 * (2 * N_SRC)]);
    fprintf(stderr, "  %.1f s\n", pllm_now() - t0);
    for (int32_t i = 0; i < N_REQ; i++) {
        pllm_tokens_free(&prompts[i]);
        free(texts[i]);
    }
    pllm_tokenizer_free(tok);
    pllm_model_free(m);
    return pllm_test_finish("engine_spec_model");
}
