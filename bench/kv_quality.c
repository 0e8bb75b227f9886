/*
 * kv_quality: what an int8 KV cache (engine/backend.h, PLLM_KV_DTYPE_I8) costs in output quality,
 * against the fp16 cache, on a real model and real prompts.
 *
 *   build/bench/kv_quality [--model PATH] [--data PATH] [--prompts 100] [--tokens 128]
 *                          [--max-prompt 1024] [--batch 25] [--threads N] [--no-fp32]
 *
 * Prompts: the first human turn of the first --prompts ShareGPT conversations (as
 * engine_model_bench a), truncated to --max-prompt tokens. Each runs --tokens greedy steps
 * (ignore_eos) on several CPU backends of the same model (default int8 math), fed the same way:
 *   - fp16: the reference; its greedy tokens drive the teacher-forced backends;
 *   - int8 (teacher-forced): fed the fp16 tokens, so every position compares logits on the same
 *     context: mean |logit error| (over the vocabulary and positions), max |logit error|, and
 *     top-1 agreement (its argmax equals the fp16 greedy token);
 *   - int8 (free-running): greedy on its own tokens: position-wise agreement with the fp16 stream,
 *     sequences identical over all --tokens, mean position of the first divergence;
 *   - fp32 (teacher-forced, unless --no-fp32): the same figures for an fp32 cache, the scale of
 *     the fp16 cache's own rounding.
 * Each backend gets its own KV pool; batches of --batch sequences: each prompt prefilled in one
 * step, then the batch decodes together.
 */
#include "cpu/cpu_backend.h"
#include "engine/engine.h"
#include "tokenizer/tokenizer.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef PLLM_DEFAULT_SHARED_DATA
#define PLLM_DEFAULT_SHARED_DATA "../shared/data"
#endif

enum { B_REF, B_I8_TF, B_I8_FREE, B_F32_TF, B_COUNT };
static const char *const g_names[B_COUNT] = {"fp16", "int8 (teacher-forced)", "int8 (free-running)",
                                             "fp32 (teacher-forced)"};

typedef struct tf_stats {
    double sum_mean_err, max_err, sum_abs_logit;
    int64_t n_pos, n_top1;
} tf_stats;

typedef struct free_stats {
    int64_t n_pos, n_agree, n_same_seq, n_seq;
    double sum_first_div;
} free_stats;

static void die(const char *what)
{
    fprintf(stderr, "kv_quality: %s: %s\n", what, pllm_errmsg());
    exit(1);
}

static int32_t argmax(const float *x, int32_t n)
{
    int32_t a = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[a]) a = i;
    return a;
}

int main(int argc, char **argv)
{
    const char *model_path = NULL, *data_path = NULL;
    int32_t n_prompts = 100, n_tok = 128, max_prompt = 1024, batch = 25, threads = 0;
    bool with_f32 = true;
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        if (!strcmp(s, "--no-fp32"))
            with_f32 = false;
        else if (i + 1 < argc && !strcmp(s, "--model"))
            model_path = argv[++i];
        else if (i + 1 < argc && !strcmp(s, "--data"))
            data_path = argv[++i];
        else if (i + 1 < argc && !strcmp(s, "--prompts"))
            n_prompts = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(s, "--tokens"))
            n_tok = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(s, "--max-prompt"))
            max_prompt = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(s, "--batch"))
            batch = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(s, "--threads"))
            threads = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: kv_quality [--model PATH] [--data PATH] [--prompts N] "
                            "[--tokens N] [--max-prompt N] "
                            "[--batch N] [--threads N] [--no-fp32]\n");
            return 2;
        }
    }
    if (n_prompts < 1 || n_tok < 1 || max_prompt < 1 || batch < 1) {
        fprintf(stderr, "kv_quality: bad option value\n");
        return 2;
    }
    char mp[4096], dp[4096];
    if (!model_path) {
        const char *home = getenv("PLLM_HOME");
        if (home)
            snprintf(mp, sizeof mp, "%s/models/SmolLM2-135M-Instruct.Q4_1.gguf", home);
        else
            snprintf(mp, sizeof mp, "%s/.cache/pllm/models/SmolLM2-135M-Instruct.Q4_1.gguf",
                     getenv("HOME") ? getenv("HOME") : ".");
        model_path = mp;
    }
    if (!data_path) {
        const char *sd = getenv("PLLM_SHARED_DATA");
        snprintf(dp, sizeof dp, "%s/sharegpt/ShareGPT_V3_filtered_1000.json",
                 sd ? sd : PLLM_DEFAULT_SHARED_DATA);
        data_path = dp;
    }
    pllm_model *m = NULL;
    if (pllm_model_load(&m, model_path) != PLLM_OK) die(model_path);
    pllm_tokenizer *tok = NULL;
    if (pllm_tokenizer_from_gguf(&tok, m->gguf) != PLLM_OK) die("tokenizer");
    json_error_t jerr;
    json_t *j = json_load_file(data_path, 0, &jerr);
    if (!j || !json_is_array(j)) {
        fprintf(stderr, "kv_quality: %s: %s\n", data_path, j ? "not a JSON array" : jerr.text);
        return 1;
    }

    /* prompts */
    pllm_tokens *pr = calloc((size_t)n_prompts, sizeof *pr);
    int32_t n = 0;
    int64_t n_prompt_tok = 0;
    max_prompt = PLLM_MIN(max_prompt, m->cfg.n_ctx_train - n_tok);
    for (size_t i = 0; i < json_array_size(j) && n < n_prompts; i++) {
        json_t *t0 = json_array_get(json_object_get(json_array_get(j, i), "conversations"), 0);
        const char *from = json_string_value(json_object_get(t0, "from")),
                   *text = json_string_value(json_object_get(t0, "value"));
        if (!from || strcmp(from, "human") || !text || !text[0]) continue;
        pllm_encode_opts eo = {.add_special = true, .parse_special = false};
        if (pllm_tokenizer_encode(tok, text, strlen(text), &eo, &pr[n]) != PLLM_OK) die("encode");
        if (pr[n].n == 0) continue;
        if ((int32_t)pr[n].n > max_prompt) pr[n].n = (size_t)max_prompt;
        n_prompt_tok += (int64_t)pr[n].n;
        n++;
    }
    n_prompts = n;
    const int32_t V = m->cfg.n_vocab, bs = 16, nbps = (max_prompt + n_tok + bs - 1) / bs;

    /* backends */
    const int n_back = with_f32 ? B_COUNT : B_F32_TF;
    const pllm_dtype dts[B_COUNT] = {PLLM_DTYPE_F16, PLLM_KV_DTYPE_I8, PLLM_KV_DTYPE_I8,
                                     PLLM_DTYPE_F32};
    pllm_backend be[B_COUNT] = {0};
    for (int b = 0; b < n_back; b++) {
        pllm_cpu_params cp;
        pllm_cpu_params_defaults(&cp);
        cp.n_threads = threads;
        cp.kv_dtype = dts[b];
        if (pllm_cpu_backend_create(&be[b], m, &cp) != PLLM_OK) die("backend");
        pllm_kv_layout L;
        if (be[b].iface->kv_layout(be[b].ctx, bs, &L) != PLLM_OK) die("kv_layout");
        L.n_blocks = batch * nbps;
        if (be[b].iface->kv_init(be[b].ctx, &L) != PLLM_OK) die("kv_init");
    }
    int nt = 0;
    const char *isa = pllm_cpu_backend_describe(&be[0], &nt);
    printf("kv_quality: %s, %d prompts (%lld prompt tokens, at most %d each), %d greedy tokens "
           "each; CPU backend %s kernels, "
           "%s math, %d threads\n",
           model_path, n_prompts, (long long)n_prompt_tok, max_prompt, n_tok, isa,
           pllm_cpu_backend_int_math(&be[0]) ? "int8" : "f32", nt);
    fflush(stdout);

    /* per batch: tokens of each stream [batch][max_prompt + n_tok] (stream 0: fp16, drives TF) */
    const int32_t cap = max_prompt + n_tok;
    int32_t *toks[2] = {malloc(sizeof(int32_t) * (size_t)batch * (size_t)cap),
                        malloc(sizeof(int32_t) * (size_t)batch * (size_t)cap)};
    int32_t *ptok = malloc(sizeof(int32_t) * (size_t)PLLM_MAX(max_prompt, batch)),
            *ppos = malloc(sizeof(int32_t) * (size_t)PLLM_MAX(max_prompt, batch)),
            *pslot = malloc(sizeof(int32_t) * (size_t)PLLM_MAX(max_prompt, batch)),
            *btab = malloc(sizeof(int32_t) * (size_t)batch * (size_t)nbps);
    pllm_seq_plan *pseq = calloc((size_t)batch, sizeof *pseq);
    pllm_sample_req *psamp = calloc((size_t)batch, sizeof *psamp);
    int32_t *stok = malloc(sizeof(int32_t) * (size_t)batch);
    float *lg[B_COUNT];
    for (int b = 0; b < B_COUNT; b++) lg[b] = malloc(sizeof(float) * (size_t)batch * (size_t)V);
    for (int32_t i = 0; i < batch * nbps; i++) btab[i] = i;
    pllm_sampling_params greedy;
    pllm_sampling_defaults(&greedy);
    tf_stats tf[B_COUNT] = {0};
    free_stats fr = {0};
    const double t0 = (double)clock() / CLOCKS_PER_SEC;

    for (int32_t s0 = 0; s0 < n_prompts; s0 += batch) {
        const int32_t nb = PLLM_MIN(batch, n_prompts - s0);
        int32_t *first_div = calloc((size_t)nb, sizeof(int32_t));
        for (int32_t k = 0; k < nb; k++) {
            first_div[k] = n_tok;
            for (int st = 0; st < 2; st++)
                memcpy(toks[st] + (size_t)k * cap, pr[s0 + k].ids, sizeof(int32_t) * pr[s0 + k].n);
        }
        /* step 0: each prompt's prefill (one sequence a step); steps 1..n_tok-1: the batch decodes
         */
        for (int32_t t = 0; t < n_tok; t++) {
            for (int32_t k0 = 0; k0 < nb; k0 += (t == 0 ? 1 : nb)) {
                const int32_t kn = t == 0 ? 1 : nb;
                for (int b = 0; b < n_back; b++) {
                    const int st =
                        b == B_I8_FREE ? 1 : 0; /* which token stream this backend reads */
                    pllm_batch_plan plan = {.tokens = ptok,
                                            .positions = ppos,
                                            .slots = pslot,
                                            .seqs = pseq,
                                            .block_tables = btab,
                                            .samples = psamp};
                    for (int32_t k = k0; k < k0 + kn; k++) {
                        const int32_t np = (int32_t)pr[s0 + k].n, n_ctx = np + t,
                                      n_new = t == 0 ? np : 1;
                        pseq[plan.n_seqs] = (pllm_seq_plan){.token_start = plan.n_tokens,
                                                            .n_new = n_new,
                                                            .n_ctx = n_ctx,
                                                            .block_start = k * nbps,
                                                            .n_blocks = nbps};
                        for (int32_t jj = 0; jj < n_new; jj++) {
                            const int32_t p = n_ctx - n_new + jj;
                            ptok[plan.n_tokens] = toks[st][(size_t)k * cap + (size_t)p];
                            ppos[plan.n_tokens] = p;
                            pslot[plan.n_tokens] = (k * nbps + p / bs) * bs + p % bs;
                            plan.n_tokens++;
                        }
                        psamp[plan.n_samples++] =
                            (pllm_sample_req){.seq = plan.n_seqs,
                                              .params = &greedy,
                                              .ctx = {.prompt = toks[st] + (size_t)k * cap,
                                                      .n_prompt = np,
                                                      .output = toks[st] + (size_t)k * cap + np,
                                                      .n_output = t}};
                        plan.n_seqs++;
                    }
                    pllm_step_out out = {.tokens = stok, .logits = lg[b]};
                    if (be[b].iface->step(be[b].ctx, &plan, &out) != PLLM_OK) die("step");
                    if (b == B_REF || b == B_I8_FREE)
                        for (int32_t i = 0; i < kn; i++) {
                            const int32_t k = k0 + i;
                            toks[st][(size_t)k * cap + pr[s0 + k].n + (size_t)t] =
                                argmax(lg[b] + (size_t)i * V, V);
                        }
                }
                /* compare */
                for (int32_t i = 0; i < kn; i++) {
                    const int32_t k = k0 + i;
                    const float *r = lg[B_REF] + (size_t)i * V;
                    const int32_t ref_tok = toks[0][(size_t)k * cap + pr[s0 + k].n + (size_t)t];
                    for (int b = B_I8_TF; b < n_back; b++) {
                        if (b == B_I8_FREE) continue;
                        const float *x = lg[b] + (size_t)i * V;
                        double se = 0, mx = 0, sa = 0;
                        for (int32_t v = 0; v < V; v++) {
                            const double d = fabs((double)x[v] - (double)r[v]);
                            se += d;
                            mx = PLLM_MAX(mx, d);
                            sa += fabs((double)r[v]);
                        }
                        tf[b].sum_mean_err += se / V;
                        tf[b].sum_abs_logit += sa / V;
                        tf[b].max_err = PLLM_MAX(tf[b].max_err, mx);
                        tf[b].n_top1 += argmax(x, V) == ref_tok;
                        tf[b].n_pos++;
                    }
                    const int32_t ft = toks[1][(size_t)k * cap + pr[s0 + k].n + (size_t)t];
                    fr.n_pos++;
                    fr.n_agree += ft == ref_tok;
                    if (ft != ref_tok && first_div[k] == n_tok) first_div[k] = t;
                }
            }
        }
        for (int32_t k = 0; k < nb; k++) {
            fr.n_seq++;
            fr.n_same_seq += first_div[k] == n_tok;
            fr.sum_first_div += first_div[k];
        }
        free(first_div);
        fprintf(stderr, "kv_quality: %d / %d prompts (%.0f s CPU)\n", s0 + nb, n_prompts,
                (double)clock() / CLOCKS_PER_SEC - t0);
    }

    printf("  mean |logit| of the fp16 reference: %.3f\n",
           tf[B_I8_TF].sum_abs_logit / (double)tf[B_I8_TF].n_pos);
    for (int b = B_I8_TF; b < n_back; b++) {
        if (b == B_I8_FREE) continue;
        printf("  %-24s vs fp16: top-1 agreement %.4f (%lld / %lld positions), mean |logit error| "
               "%.4f, max |logit error| %.3f\n",
               g_names[b], (double)tf[b].n_top1 / (double)tf[b].n_pos, (long long)tf[b].n_top1,
               (long long)tf[b].n_pos, tf[b].sum_mean_err / (double)tf[b].n_pos, tf[b].max_err);
    }
    printf("  %-24s vs fp16: position-wise agreement %.4f, identical %d-token outputs %lld / %lld, "
           "mean first divergence at "
           "token %.1f\n",
           g_names[B_I8_FREE], (double)fr.n_agree / (double)fr.n_pos, n_tok,
           (long long)fr.n_same_seq, (long long)fr.n_seq, fr.sum_first_div / (double)fr.n_seq);

    for (int b = 0; b < B_COUNT; b++) {
        pllm_backend_free(&be[b]);
        free(lg[b]);
    }
    for (int32_t i = 0; i < n_prompts; i++) pllm_tokens_free(&pr[i]);
    free(pr);
    free(toks[0]);
    free(toks[1]);
    free(ptok);
    free(ppos);
    free(pslot);
    free(btab);
    free(pseq);
    free(psamp);
    free(stok);
    json_decref(j);
    pllm_tokenizer_free(tok);
    pllm_model_free(m);
    return 0;
}
