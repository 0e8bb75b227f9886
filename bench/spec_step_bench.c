/*
 * spec_step_bench.c: what a speculative verification step costs on the CPU backend (not a test).
 *
 *     spec_step_bench [MODEL.gguf] [--threads 2] [--seqs 16] [--ctx 512] [--drafts 0,1,2,4,6,10]
 *                     [--repeat 5] [--rows all|last] [--drafts-uneven K] [--kv auto|f32|f16]
 *
 * --seqs sequences, each with a --ctx-token context (pseudo-random ids, prefilled first), run
 * steps of (1 + k) new tokens per sequence for each k of --drafts (the runs interleaved: repeat
 * 1 of every k, repeat 2, ...; a shared machine's load hits them alike). --rows all samples
 * every new token's row greedily (what verification does: k + 1 rows per sequence), last only
 * the last (a prefill-like step: the difference is the LM head and the sampler on the draft
 * rows). Prints per k: tokens, best and median wall ms, CPU ms (process, all threads), and the
 * least-squares fit t = a + b T over the medians (uniform runs only).
 * --drafts-uneven K: for each k > 0 also run a step with the same total (seqs x k drafts) given
 * unevenly, K drafts to each of the first sequences and 0 to the rest (what prompt lookup does in
 * the engine: a few sequences copying, the others plain decode), interleaved with the uniform one.
 * --kv: the KV cache's type; auto (the default) is what `pllm generate` and `pllm bench` run: F16
 * with the int8 matmuls of a quantized model. (This bench used the backend's F32 default before:
 * a sequence row then streams twice the K/V bytes, which made draft rows look cheap against
 * sequence rows: 0.68 vs 1.95 ms at 16 sequences, where the engine's F16 steps cost 0.8 vs 1.07.)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu/cpu_backend.h"
#include "model/model.h"
#include "model/sampling.h"

static double cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int fail(pllm_status st, const char *what)
{
    fprintf(stderr, "spec_step_bench: %s: %s: %s\n", what, pllm_status_str(st), pllm_errmsg());
    return 1;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

enum { MAX_K = 32, MAX_CFG = 2 * MAX_K, MAX_REP = 64 };

int main(int argc, char **argv)
{
    char def_path[1024];
    const char *home = getenv("PLLM_HOME");
    if (home && *home)
        snprintf(def_path, sizeof def_path, "%s/models/SmolLM2-135M-Instruct.Q4_1.gguf", home);
    else
        snprintf(def_path, sizeof def_path, "%s/.cache/pllm/models/SmolLM2-135M-Instruct.Q4_1.gguf",
                 getenv("HOME") ? getenv("HOME") : ".");
    const char *model_path = def_path, *drafts_arg = "0,1,2,4,6,10";
    int n_threads = 2, n_seqs = 16, ctx = 512, n_repeat = 5, all_rows = 1, uneven = 0;
    pllm_dtype kv_dtype = PLLM_DTYPE_COUNT; /* auto, as the CLI */
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
            n_threads = atoi(argv[++i]);
        else if (strcmp(argv[i], "--seqs") == 0 && i + 1 < argc)
            n_seqs = atoi(argv[++i]);
        else if (strcmp(argv[i], "--ctx") == 0 && i + 1 < argc)
            ctx = atoi(argv[++i]);
        else if (strcmp(argv[i], "--drafts") == 0 && i + 1 < argc)
            drafts_arg = argv[++i];
        else if (strcmp(argv[i], "--repeat") == 0 && i + 1 < argc)
            n_repeat = atoi(argv[++i]);
        else if (strcmp(argv[i], "--drafts-uneven") == 0 && i + 1 < argc)
            uneven = atoi(argv[++i]);
        else if (strcmp(argv[i], "--rows") == 0 && i + 1 < argc)
            all_rows = strcmp(argv[++i], "last") != 0;
        else if (strcmp(argv[i], "--kv") == 0 && i + 1 < argc) {
            const char *v = argv[++i];
            if (strcmp(v, "auto") == 0)
                kv_dtype = PLLM_DTYPE_COUNT;
            else if (strcmp(v, "f32") == 0)
                kv_dtype = PLLM_DTYPE_F32;
            else if (strcmp(v, "f16") == 0)
                kv_dtype = PLLM_DTYPE_F16;
            else
                return fail(
                    pllm_errorf(PLLM_ERR_INVALID, "--kv must be auto, f32 or f16, got '%s'", v),
                    "arguments");
        } else if (argv[i][0] != '-')
            model_path = argv[i];
        else {
            fprintf(stderr,
                    "usage: spec_step_bench [MODEL.gguf] [--threads N] [--seqs N] [--ctx "
                    "N] [--drafts 0,1,...] "
                    "[--repeat N] [--rows all|last] [--drafts-uneven K] [--kv auto|f32|f16]\n");
            return 2;
        }
    }
    int ks[MAX_K], n_k = 0, k_max = 0;
    for (const char *p = drafts_arg; *p && n_k < MAX_K;) {
        ks[n_k] = atoi(p);
        if (ks[n_k] < 0) return fail(PLLM_ERR_INVALID, "--drafts: negative");
        k_max = PLLM_MAX(k_max, ks[n_k]);
        n_k++;
        while (*p && *p != ',') p++;
        if (*p == ',') p++;
    }
    if (n_seqs < 1 || ctx < 1 || n_repeat < 1 || n_repeat > MAX_REP || n_k == 0 || uneven < 0)
        return fail(
            PLLM_ERR_INVALID,
            "--seqs, --ctx >= 1, --repeat in [1, 64], --drafts not empty, --drafts-uneven >= 0");
    /* configurations: per k the uniform one, then (--drafts-uneven) the uneven one */
    int cfg_k[MAX_CFG], cfg_uneven[MAX_CFG], n_cfg = 0;
    for (int ki = 0; ki < n_k; ki++) {
        cfg_k[n_cfg] = ks[ki];
        cfg_uneven[n_cfg++] = 0;
        if (uneven > 0 && ks[ki] > 0) {
            cfg_k[n_cfg] = ks[ki];
            cfg_uneven[n_cfg++] = 1;
        }
    }
    k_max = PLLM_MAX(k_max, uneven);

    pllm_model *model = NULL;
    pllm_status st = pllm_model_load(&model, model_path);
    if (st) return fail(st, "loading the model");
    const pllm_model_config *c = &model->cfg;

    pllm_cpu_params cp;
    if ((st = pllm_cpu_params_defaults(&cp))) return fail(st, "PLLM_CPU_*");
    cp.n_threads = n_threads;
    cp.kv_dtype = kv_dtype;
    pllm_backend be = {0};
    if ((st = pllm_cpu_backend_create(&be, model, &cp))) return fail(st, "creating the backend");
    const int32_t bs = 16, per_seq = (ctx + k_max + 1 + bs - 1) / bs;
    pllm_kv_layout L;
    be.iface->kv_layout(be.ctx, bs, &L);
    L.n_blocks = per_seq * n_seqs;
    if ((st = be.iface->kv_init(be.ctx, &L))) return fail(st, "kv_init");
    int32_t *blocks = malloc(sizeof(int32_t) * (size_t)L.n_blocks);
    for (int32_t i = 0; i < L.n_blocks; i++) blocks[i] = i;

    const int32_t T_max = PLLM_MAX(ctx, n_seqs * (k_max + 1));
    int32_t *toks = malloc(sizeof(int32_t) * (size_t)T_max),
            *pos = malloc(sizeof(int32_t) * (size_t)T_max),
            *slot = malloc(sizeof(int32_t) * (size_t)T_max),
            *next = malloc(sizeof(int32_t) * (size_t)T_max);
    pllm_seq_plan *seqs = calloc((size_t)n_seqs, sizeof *seqs);
    pllm_sample_req *reqs = calloc((size_t)T_max, sizeof *reqs);
    pllm_sampling_params greedy;
    pllm_sampling_defaults(&greedy);
    uint64_t x = 88172645463325252ull;
    for (int32_t i = 0; i < T_max; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        toks[i] = (int32_t)(x % (uint64_t)(c->n_vocab - 1000)) + 500;
    }
    /* prefill each sequence's context in its own step */
    for (int s = 0; s < n_seqs; s++) {
        for (int32_t i = 0; i < ctx; i++) {
            pos[i] = i;
            slot[i] = blocks[s * per_seq + i / bs] * bs + i % bs;
        }
        pllm_seq_plan sp = {.token_start = 0,
                            .n_new = ctx,
                            .n_ctx = ctx,
                            .block_start = s * per_seq,
                            .n_blocks = per_seq};
        pllm_sample_req rq = {.seq = 0, .params = &greedy};
        pllm_batch_plan plan = {.n_tokens = ctx,
                                .tokens = toks,
                                .positions = pos,
                                .slots = slot,
                                .n_seqs = 1,
                                .seqs = &sp,
                                .block_tables = blocks,
                                .n_samples = 1,
                                .samples = &rq};
        pllm_step_out out = {.tokens = next};
        if ((st = be.iface->step(be.ctx, &plan, &out))) return fail(st, "prefill");
    }

    static double wall[MAX_CFG][MAX_REP], cpu[MAX_CFG][MAX_REP];
    int32_t cfg_T[MAX_CFG] = {0};
    for (int rep = -1; rep < n_repeat; rep++) /* rep -1: warm-up */
        for (int ki = 0; ki < n_cfg; ki++) {
            int32_t T = 0, S = 0, left = n_seqs * cfg_k[ki];
            for (int s = 0; s < n_seqs; s++) {
                const int k = cfg_uneven[ki] ? PLLM_MIN(uneven, left) : cfg_k[ki];
                left -= k;
                seqs[s] = (pllm_seq_plan){.token_start = T,
                                          .n_new = k + 1,
                                          .n_ctx = ctx + k + 1,
                                          .block_start = s * per_seq,
                                          .n_blocks = per_seq};
                for (int j = 0; j <= k; j++, T++) {
                    pos[T] = ctx + j;
                    slot[T] = blocks[s * per_seq + (ctx + j) / bs] * bs + (ctx + j) % bs;
                    if (all_rows || j == k)
                        reqs[S++] = (pllm_sample_req){.seq = s, .back = k - j, .params = &greedy};
                }
            }
            cfg_T[ki] = T;
            pllm_batch_plan plan = {.n_tokens = T,
                                    .tokens = toks,
                                    .positions = pos,
                                    .slots = slot,
                                    .n_seqs = n_seqs,
                                    .seqs = seqs,
                                    .block_tables = blocks,
                                    .n_samples = S,
                                    .samples = reqs};
            pllm_step_out out = {.tokens = next};
            double t0 = pllm_now(), c0 = cpu_seconds();
            if ((st = be.iface->step(be.ctx, &plan, &out))) return fail(st, "step");
            if (rep >= 0) {
                wall[ki][rep] = pllm_now() - t0;
                cpu[ki][rep] = cpu_seconds() - c0;
            }
        }
    printf("%d seqs x (1 + k) tokens, context %d, %d threads, %s rows sampled, %d repeats, %s KV "
           "cache\n",
           n_seqs, ctx, n_threads, all_rows ? "all" : "last", n_repeat,
           pllm_dtype_name(pllm_cpu_backend_kv_dtype(&be)));
    if (uneven)
        printf("uneven: the same seqs x k drafts as %d drafts on the first sequences\n", uneven);
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    int n_fit = 0;
    for (int ki = 0; ki < n_cfg; ki++) {
        double best = 1e30;
        for (int r = 0; r < n_repeat; r++) best = PLLM_MIN(best, wall[ki][r]);
        qsort(wall[ki], (size_t)n_repeat, sizeof(double), cmp_d);
        qsort(cpu[ki], (size_t)n_repeat, sizeof(double), cmp_d);
        const double med = wall[ki][n_repeat / 2], cmed = cpu[ki][n_repeat / 2];
        const int T = cfg_T[ki];
        printf("  k %2d%s: %4d tokens: wall best %7.2f ms, median %7.2f ms (%.3f ms/token); CPU "
               "median %7.2f ms\n",
               cfg_k[ki], cfg_uneven[ki] ? " uneven" : "", T, 1e3 * best, 1e3 * med, 1e3 * med / T,
               1e3 * cmed);
        if (cfg_uneven[ki]) continue;
        n_fit++;
        sx += T;
        sy += med;
        sxx += (double)T * T;
        sxy += T * med;
    }
    const double b = (n_fit * sxy - sx * sy) / PLLM_MAX(1e-12, n_fit * sxx - sx * sx),
                 a = (sy - b * sx) / n_fit;
    printf("  fit over the medians: t = %.2f ms + %.3f ms x tokens\n", 1e3 * a, 1e3 * b);
    free(toks);
    free(pos);
    free(slot);
    free(next);
    free(seqs);
    free(reqs);
    free(blocks);
    pllm_backend_free(&be);
    pllm_model_free(model);
    return 0;
}
