/*
 * decode_bench.c: CPU backend speed on one sequence (not a test).
 *
 *     decode_bench [MODEL.gguf] [--threads 1,2] [--decode 128] [--prefill 512] [--repeat 3]
 *                  [--kv f32|f16] [--math int8,f32]
 *
 * --math runs one backend per listed matmul numerics (pllm_cpu_params.math: int8 = the integer
 * path where weights are quantized, f32 = float32 throughout) with the runs interleaved (repeat 1
 * of each, repeat 2 of each, ...) so that a shared machine's load hits them alike, and prints the
 * ratios of the first to the others.
 * For each thread count: prefill tokens/s for a --prefill-token prompt run in one step, and
 * decode tokens/s for --decode greedy steps of one sequence after a 32-token prompt.
 * Each figure is the best of --repeat runs. CPU seconds of the process are printed beside wall
 * time (the machine may be shared). The model defaults to
 * $PLLM_HOME/models/SmolLM2-135M-Instruct.Q4_1.gguf (PLLM_HOME defaults to
 * ~/.cache/pllm). Prompt token ids are fixed pseudo-random ids, so runs are comparable.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu/cpu_backend.h"
#include "model/model.h"
#include "model/sampling.h"

typedef struct bench_seq {
    int32_t *blocks;
    int32_t n_blocks, n_ctx, block_size;
} bench_seq;

/* Run n tokens of one sequence (at positions n_ctx .. n_ctx + n - 1) in one step; sample the last. */
static pllm_status run_step(pllm_backend *be, bench_seq *s, const int32_t *toks, int32_t n, const pllm_sampling_params *sp,
                            int32_t *next)
{
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)n), *slot = malloc(sizeof(int32_t) * (size_t)n);
    for (int32_t i = 0; i < n; i++) {
        int32_t p = s->n_ctx + i;
        pos[i] = p;
        slot[i] = s->blocks[p / s->block_size] * s->block_size + p % s->block_size;
    }
    pllm_seq_plan seq = {.token_start = 0, .n_new = n, .n_ctx = s->n_ctx + n, .block_start = 0, .n_blocks = s->n_blocks};
    pllm_sample_req req = {.seq = 0, .params = sp};
    pllm_batch_plan plan = {.n_tokens = n, .tokens = toks, .positions = pos, .slots = slot, .n_seqs = 1, .seqs = &seq,
                            .block_tables = s->blocks, .n_samples = 1, .samples = &req};
    pllm_step_out out = {.tokens = next};
    pllm_status st = be->iface->step(be->ctx, &plan, &out);
    free(pos);
    free(slot);
    if (st == PLLM_OK) s->n_ctx += n;
    return st;
}

/* CPU seconds used by the whole process (all threads): on a shared machine, wall time counts
 * the time other processes held the cores; CPU time does not. */
static double cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int fail(pllm_status st, const char *what)
{
    fprintf(stderr, "decode_bench: %s: %s: %s\n", what, pllm_status_str(st), pllm_errmsg());
    return 1;
}

int main(int argc, char **argv)
{
    char def_path[1024];
    const char *home = getenv("PLLM_HOME");
    if (home && *home) snprintf(def_path, sizeof def_path, "%s/models/SmolLM2-135M-Instruct.Q4_1.gguf", home);
    else snprintf(def_path, sizeof def_path, "%s/.cache/pllm/models/SmolLM2-135M-Instruct.Q4_1.gguf", getenv("HOME") ? getenv("HOME") : ".");
    const char *model_path = def_path, *threads_arg = "1,2", *math_arg = "";
    int n_decode = 128, n_prefill = 512, n_repeat = 3;
    pllm_dtype kv = PLLM_DTYPE_F32;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) threads_arg = argv[++i];
        else if (strcmp(argv[i], "--decode") == 0 && i + 1 < argc) n_decode = atoi(argv[++i]);
        else if (strcmp(argv[i], "--prefill") == 0 && i + 1 < argc) n_prefill = atoi(argv[++i]);
        else if (strcmp(argv[i], "--repeat") == 0 && i + 1 < argc) n_repeat = atoi(argv[++i]);
        else if (strcmp(argv[i], "--math") == 0 && i + 1 < argc) math_arg = argv[++i];
        else if (strcmp(argv[i], "--kv") == 0 && i + 1 < argc) kv = strcmp(argv[++i], "f16") == 0 ? PLLM_DTYPE_F16 : PLLM_DTYPE_F32;
        else if (argv[i][0] != '-') model_path = argv[i];
        else {
            fprintf(stderr, "usage: decode_bench [MODEL.gguf] [--threads 1,2] [--decode N] [--prefill N] [--repeat N] [--kv f32|f16] [--math int8,f32]\n");
            return 2;
        }
    }
    if (n_decode < 1 || n_prefill < 1 || n_repeat < 1)
        return fail(PLLM_ERR_INVALID, "--decode, --prefill and --repeat must be >= 1");

    pllm_model *model = NULL;
    pllm_status st = pllm_model_load(&model, model_path);
    if (st) return fail(st, "loading the model (run scripts/setup.sh to fetch the default one)");
    const pllm_model_config *c = &model->cfg;
    fprintf(stderr, "model %s: %d layers, n_embd %d, n_ff %d, vocab %d, %.1f MB of weights\n", model->name, c->n_layer,
            c->n_embd, c->n_ff, c->n_vocab, (double)model->weight_bytes / 1e6);

    const int32_t prompt_len = 32, bs = 16;
    int32_t max_ctx = PLLM_MAX(prompt_len + n_decode + 1, n_prefill);
    int32_t *toks = malloc(sizeof(int32_t) * (size_t)max_ctx);
    uint64_t x = 88172645463325252ull;
    for (int32_t i = 0; i < max_ctx; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        toks[i] = (int32_t)(x % (uint64_t)(c->n_vocab - 1000)) + 500;
    }
    pllm_sampling_params greedy;
    pllm_sampling_defaults(&greedy);

    for (const char *tp = threads_arg; *tp;) {
        int n_threads = atoi(tp);
        while (*tp && *tp != ',') tp++;
        if (*tp == ',') tp++;
        /* one backend per numerics in --math (or the default one) */
        enum { MAX_MATH = 4 };
        char maths[MAX_MATH][16] = {{0}};
        int n_math = 0;
        for (const char *mp = math_arg; *mp && n_math < MAX_MATH;) {
            int len = 0;
            while (mp[len] && mp[len] != ',') len++;
            snprintf(maths[n_math++], sizeof maths[0], "%.*s", len, mp);
            mp += len + (mp[len] == ',');
        }
        if (n_math == 0) n_math = 1;
        pllm_backend be[MAX_MATH] = {{0}};
        int32_t *blocks = NULL;
        pllm_kv_layout L;
        for (int mi = 0; mi < n_math; mi++) {
            pllm_cpu_params cp;
            if ((st = pllm_cpu_params_defaults(&cp)))
                return fail(st, "reading PLLM_CPU_* from the environment");
            if (maths[mi][0]) {
                if (strcmp(maths[mi], "f32") == 0)
                    cp.math = PLLM_CPU_MATH_F32;
                else if (strcmp(maths[mi], "int8") == 0)
                    cp.math = PLLM_CPU_MATH_INT8;
                else
                    return fail(
                        pllm_errorf(PLLM_ERR_INVALID, "--math %s: expected f32 or int8", maths[mi]),
                        "options");
            }
            cp.n_threads = n_threads;
            cp.kv_dtype = kv;
            double t_create = pllm_now();
            if ((st = pllm_cpu_backend_create(&be[mi], model, &cp))) return fail(st, "creating the backend");
            t_create = pllm_now() - t_create;
            be[mi].iface->kv_layout(be[mi].ctx, bs, &L);
            L.n_blocks = 2 * ((max_ctx + bs - 1) / bs);
            if ((st = be[mi].iface->kv_init(be[mi].ctx, &L))) return fail(st, "kv_init");
            fprintf(stderr, "backend %s: created in %.3f s\n", maths[mi][0] ? maths[mi] : "default", t_create);
        }
        blocks = malloc(sizeof(int32_t) * (size_t)L.n_blocks);
        for (int32_t i = 0; i < L.n_blocks; i++) blocks[i] = i;

        /* best of n_repeat: on a shared machine the fastest run is the one least disturbed */
        double t_prefill[MAX_MATH], c_prefill[MAX_MATH] = {0}, t_decode[MAX_MATH], c_decode[MAX_MATH] = {0};
        for (int mi = 0; mi < n_math; mi++) t_prefill[mi] = t_decode[mi] = 1e30;
        int32_t next;
        for (int rep = 0; rep < n_repeat; rep++)
            for (int mi = 0; mi < n_math; mi++) {
                pllm_backend *b = &be[mi];
                /* prefill: one step of n_prefill tokens (after a short warm-up on other blocks) */
                bench_seq s = {.blocks = blocks, .n_blocks = L.n_blocks / 2, .block_size = bs};
                if ((st = run_step(b, &s, toks, PLLM_MIN(n_prefill, 64), &greedy, &next))) return fail(st, "warm-up");
                s = (bench_seq){.blocks = blocks + L.n_blocks / 2, .n_blocks = L.n_blocks / 2, .block_size = bs};
                double t0 = pllm_now(), c0 = cpu_seconds();
                if ((st = run_step(b, &s, toks, n_prefill, &greedy, &next))) return fail(st, "prefill");
                if (pllm_now() - t0 < t_prefill[mi]) {
                    t_prefill[mi] = pllm_now() - t0;
                    c_prefill[mi] = cpu_seconds() - c0;
                }

                /* decode: a 32-token prompt, then n_decode single-token steps */
                s = (bench_seq){.blocks = blocks, .n_blocks = L.n_blocks / 2, .block_size = bs};
                if ((st = run_step(b, &s, toks, prompt_len, &greedy, &next))) return fail(st, "prompt");
                t0 = pllm_now();
                c0 = cpu_seconds();
                for (int i = 0; i < n_decode; i++) {
                    int32_t tok = next;
                    if ((st = run_step(b, &s, &tok, 1, &greedy, &next))) return fail(st, "decode");
                }
                if (pllm_now() - t0 < t_decode[mi]) {
                    t_decode[mi] = pllm_now() - t0;
                    c_decode[mi] = cpu_seconds() - c0;
                }
            }
        for (int mi = 0; mi < n_math; mi++) {
            int nthr = 0;
            const char *kern = pllm_cpu_backend_describe(&be[mi], &nthr);
            printf("threads %d (%s kernels, math %s, KV %s): prefill %d tokens: %.1f tok/s (%.3f s, %.3f CPU s)   "
                   "decode %d tokens after %d: %.1f tok/s (%.2f ms/token, %.2f CPU ms/token)\n",
                   nthr, kern, maths[mi][0] ? maths[mi] : "default", pllm_dtype_name(kv), n_prefill, n_prefill / t_prefill[mi],
                   t_prefill[mi], c_prefill[mi], n_decode, prompt_len, n_decode / t_decode[mi], 1e3 * t_decode[mi] / n_decode,
                   1e3 * c_decode[mi] / n_decode);
        }
        for (int mi = 1; mi < n_math; mi++)
            printf("threads %d: %s / %s: prefill %.2fx (CPU time %.2fx), decode %.2fx (CPU time %.2fx)\n", n_threads, maths[0],
                   maths[mi], t_prefill[mi] / t_prefill[0], c_prefill[mi] / c_prefill[0], t_decode[mi] / t_decode[0],
                   c_decode[mi] / c_decode[0]);
        fflush(stdout);
        free(blocks);
        for (int mi = 0; mi < n_math; mi++) pllm_backend_free(&be[mi]);
    }
    free(toks);
    pllm_model_free(model);
    return 0;
}
