/*
 * moe_bench: a mixture-of-experts model against a dense model of the same active parameter count
 * on the CPU backend, batched, in one invocation (bench/moe_bench.sh writes the two models with
 * bench/gen_moe_models.py and runs this).
 *
 *   build/bench/moe_bench MOE.gguf DENSE.gguf [--seqs 64] [--prompt 32] [--tokens 32]
 *                         [--rounds 3] [--threads N] [--max-seqs 64]
 *
 * Each round runs the same workload through a fresh engine on each model, after a warm-up pass of
 * the same shape on other prompts in that engine (first touch of the workspace), alternating (MoE,
 * dense, MoE, dense, ...) so that load from other processes hits both: --seqs sequences of
 * --prompt random token ids (the same ids for both models), --tokens greedy output tokens each
 * (ignore_eos), the engine's defaults (continuous batching, 2048 tokens a step) with --max-seqs
 * sequences a step (64, the engine's default). Reported per
 * model: tokens processed (prompt + output) per second of wall time, the active parameters (the
 * weights one token is multiplied by: attention, the router and n_expert_used experts or the
 * dense MLP, the output head; not the embedding lookup), and tokens/s x active parameters (the
 * weight work done per second). The figure of merit is the MoE/dense ratio of that product
 * (target >= 0.75: within 25%), from the sums over the rounds; the same ratio per CPU second of
 * the process is printed too (on a shared machine the wall figure also counts the time the
 * threads were descheduled, which a barrier-heavy step suffers more).
 */
#include "cpu/cpu_backend.h"
#include "engine/engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int64_t elems(const pllm_tensor *t)
{
    return t->data ? t->n_rows * t->n_cols : 0;
}

static int64_t active_params(const pllm_model *m)
{
    const pllm_model_config *c = &m->cfg;
    int64_t n = elems(&m->output);
    for (int32_t l = 0; l < c->n_layer; l++) {
        const pllm_layer_weights *w = &m->layers[l];
        n += elems(&w->wq) + elems(&w->wk) + elems(&w->wv) + elems(&w->wo) + elems(&w->w_gate) +
             elems(&w->w_up) + elems(&w->w_down);
        if (pllm_layer_is_moe(w))
            n += elems(&w->router) +
                 (int64_t)c->n_expert_used *
                     (elems(&w->exp_gate[0]) + elems(&w->exp_up[0]) + elems(&w->exp_down[0]));
    }
    return n;
}

typedef struct {
    int64_t finished, errors;
} done_count;

static void on_done(const pllm_completion *c, void *arg)
{
    done_count *d = arg;
    d->finished++;
    if (c->finish == PLLM_FINISH_ERROR) {
        fprintf(stderr, "moe_bench: a request failed: %s\n", c->error);
        d->errors++;
    }
}

static double cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One run: seconds of wall time for the workload, or < 0 on error; *cpu: the process's CPU
 * seconds in it. */
static double run(const pllm_model *m, int32_t threads, const int32_t *ids, int32_t seqs,
                  int32_t prompt, int32_t tokens, int32_t max_seqs, double *cpu)
{
    pllm_cpu_params cp;
    if (pllm_cpu_params_defaults(&cp) != PLLM_OK) return -1;
    cp.n_threads = threads;
    cp.kv_dtype = PLLM_DTYPE_COUNT; /* auto, as pllm generate runs */
    pllm_engine_params ep;
    pllm_engine_params_defaults(&ep);
    ep.max_seqs = max_seqs;
    pllm_backend be = {0};
    pllm_engine *e = NULL;
    if (pllm_cpu_backend_create(&be, m, &cp) != PLLM_OK ||
        pllm_engine_create(&e, m, &be, NULL, &ep) != PLLM_OK) {
        fprintf(stderr, "moe_bench: %s\n", pllm_errmsg());
        pllm_backend_free(&be);
        return -1;
    }
    done_count d = {0};
    double t0 = 0, c0 = 0, secs = -1;
    /* a warm-up pass of the same shape on other prompts (no prefix cache hits): the workspace's
     * first touch (page faults) and the caches are not measured */
    for (int pass = 0; pass < 2; pass++) {
        d.finished = d.errors = 0;
        t0 = pllm_now();
        c0 = cpu_seconds();
        for (int32_t i = 0; i < seqs; i++) {
            pllm_request_params p;
            pllm_request_params_defaults(&p);
            p.max_tokens = tokens;
            p.ignore_eos = true;
            const int32_t *pr = ids + ((size_t)pass * (size_t)seqs + (size_t)i) * (size_t)prompt;
            if (pllm_engine_add(e, pr, prompt, &p, NULL, NULL) != PLLM_OK) {
                fprintf(stderr, "moe_bench: add: %s\n", pllm_errmsg());
                goto out;
            }
        }
        while (pllm_engine_has_work(e))
            if (pllm_engine_step(e, on_done, &d) != PLLM_OK) {
                fprintf(stderr, "moe_bench: step: %s\n", pllm_errmsg());
                goto out;
            }
        if (d.errors || d.finished != seqs) goto out;
    }
    secs = pllm_now() - t0;
    *cpu = cpu_seconds() - c0;
out:
    pllm_engine_free(e);
    pllm_backend_free(&be);
    return secs;
}

int main(int argc, char **argv)
{
    int32_t seqs = 64, prompt = 32, tokens = 32, rounds = 3, threads = 0, max_seqs = 64;
    const char *paths[2] = {NULL, NULL};
    int np = 0;
    for (int i = 1; i < argc; i++) {
        int32_t *dst = strcmp(argv[i], "--seqs") == 0       ? &seqs
                       : strcmp(argv[i], "--prompt") == 0   ? &prompt
                       : strcmp(argv[i], "--tokens") == 0   ? &tokens
                       : strcmp(argv[i], "--rounds") == 0   ? &rounds
                       : strcmp(argv[i], "--threads") == 0  ? &threads
                       : strcmp(argv[i], "--max-seqs") == 0 ? &max_seqs
                                                            : NULL;
        if (dst && i + 1 < argc) {
            *dst = atoi(argv[++i]);
        } else if (!dst && argv[i][0] != '-' && np < 2) {
            paths[np++] = argv[i];
        } else {
            fprintf(stderr, "usage: moe_bench MOE.gguf DENSE.gguf [--seqs N] [--prompt N] "
                            "[--tokens N] [--rounds N] [--threads N] [--max-seqs N]\n");
            return 2;
        }
    }
    if (np != 2 || seqs < 1 || prompt < 1 || tokens < 1 || rounds < 1 || threads < 0 ||
        max_seqs < 1) {
        fprintf(stderr, "moe_bench: two model files and positive sizes are needed\n");
        return 2;
    }
    pllm_model *m[2] = {NULL, NULL};
    for (int k = 0; k < 2; k++)
        if (pllm_model_load(&m[k], paths[k]) != PLLM_OK) {
            fprintf(stderr, "moe_bench: %s\n", pllm_errmsg());
            return 1;
        }
    if (!m[0]->cfg.n_expert || m[1]->cfg.n_expert || m[0]->cfg.n_vocab != m[1]->cfg.n_vocab) {
        fprintf(stderr, "moe_bench: the first model must have experts, the second none, and both "
                        "the same vocabulary\n");
        return 1;
    }
    int32_t *ids = malloc(sizeof(int32_t) * 2 * (size_t)seqs * (size_t)prompt); /* warm-up, run */
    if (!ids) return 1;
    uint64_t s = 12345;
    for (size_t i = 0; i < 2 * (size_t)seqs * (size_t)prompt; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = (int32_t)((s >> 33) % (uint64_t)m[0]->cfg.n_vocab);
    }
    const char *name[2] = {"moe", "dense"};
    int64_t act[2] = {active_params(m[0]), active_params(m[1])};
    double total[2] = {0, 0}, total_cpu[2] = {0, 0};
    const double work = (double)seqs * (prompt + tokens);
    printf("moe_bench: %d sequences x (%d prompt + %d output) tokens, %d rounds, threads %d, "
           "max %d sequences a step\n",
           seqs, prompt, tokens, rounds, threads, max_seqs);
    printf("  moe:   %d experts, %d per token, expert FFN %d; %.2fM active parameters\n",
           m[0]->cfg.n_expert, m[0]->cfg.n_expert_used, m[0]->cfg.n_ff_exp, act[0] / 1e6);
    printf("  dense: FFN %d; %.2fM active parameters\n", m[1]->cfg.n_ff, act[1] / 1e6);
    for (int32_t r = 0; r < rounds; r++)
        for (int k = 0; k < 2; k++) {
            double cpu = 0, t = run(m[k], threads, ids, seqs, prompt, tokens, max_seqs, &cpu);
            if (t < 0) return 1;
            total[k] += t;
            total_cpu[k] += cpu;
            printf("  round %d %-5s %.3f s, %.1f tok/s (%.3f CPU s)\n", r, name[k], t, work / t,
                   cpu);
            fflush(stdout);
        }
    double tps[2], prod[2];
    for (int k = 0; k < 2; k++) {
        tps[k] = work * rounds / total[k];
        prod[k] = tps[k] * (double)act[k];
        printf("%-5s: %.1f tok/s, %.2fM active parameters, %.3g active-parameter tokens/s\n",
               name[k], tps[k], act[k] / 1e6, prod[k]);
    }
    printf("ratio moe/dense: tok/s %.3f, tok/s x active parameters %.3f (target >= 0.75)\n",
           tps[0] / tps[1], prod[0] / prod[1]);
    /* the same per CPU second (the process's user + system time, barrier spinning included):
     * on a shared machine, time the threads spent descheduled drops out */
    printf("per CPU second: tok/s x active parameters ratio %.3f\n",
           (total_cpu[1] * (double)act[0]) / (total_cpu[0] * (double)act[1]));
    free(ids);
    pllm_model_free(m[0]);
    pllm_model_free(m[1]);
    return 0;
}
