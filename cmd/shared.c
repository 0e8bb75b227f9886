#include "cmd/shared.h"

#include "cpu/cpu_backend.h"
#include "engine/kv_size.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/resource.h>
#include <time.h>

static void push(cmd_opt *opts, size_t *n, size_t cap, cmd_opt o)
{
    PLLM_ASSERT(*n < cap);
    opts[(*n)++] = o;
}

void cmd_engine_opts_init(cmd_engine_opts *o)
{
    memset(o, 0, sizeof *o);
    o->rt.device = "auto";
    o->rt.gpu_memory_fraction = 0.9f;
    o->dtype = "auto";
    o->rt.weight_dtype = o->rt.kv_dtype = -1;
    o->kv_dtype = "auto";
    o->cpu_math = "auto";
    o->attention = "auto";
    o->thinking = "auto";
    o->eviction = "lru";
    o->speculate = "off";
    o->overlap = "auto";
    pllm_engine_params_defaults(&o->ep);
    snprintf(o->defs[0], sizeof o->defs[0], "%d", o->ep.block_size);
    snprintf(o->defs[1], sizeof o->defs[1], "%d", o->ep.max_batched_tokens);
    snprintf(o->defs[2], sizeof o->defs[2], "%d", o->ep.max_seqs);
    snprintf(o->defs[3], sizeof o->defs[3], "%d", o->ep.max_bypass);
}

void cmd_engine_opts_table(cmd_engine_opts *o, cmd_opt *opts, size_t *n, size_t cap)
{
    push(opts, n, cap,
         (cmd_opt){"model", 'm', CMD_OPT_STR, &o->rt.model, "FILE",
                   "$PLLM_HOME/models/" PLLM_DEFAULT_MODEL_FILE,
                   "model: a GGUF file or a Hugging Face directory", NULL});
    push(opts, n, cap,
         (cmd_opt){"threads", 't', CMD_OPT_INT, &o->rt.threads, "N", "all cores", "CPU threads",
                   NULL});
    push(opts, n, cap,
         (cmd_opt){"device", 0, CMD_OPT_STR, &o->rt.device, "DEV", "auto",
                   "auto (CUDA device 0 when one answers, else the CPU), cpu, cuda or cuda:N; "
                   "generate also takes a list, cuda:0,1,... (a worker per device, one output)",
                   NULL});
    push(opts, n, cap,
         (cmd_opt){"gpu-memory-fraction", 0, CMD_OPT_FLOAT, &o->rt.gpu_memory_fraction, "F", "0.9",
                   "CUDA: share of the device's memory pllm may use (weights, activations, KV "
                   "cache), in (0, 1]; the KV cache gets what the rest leaves",
                   NULL});
    push(opts, n, cap,
         (cmd_opt){"dtype", 0, CMD_OPT_STR, &o->dtype, "T",
                   "auto (bfloat16 and float32 models as they are, others float16)",
                   "CUDA: the weights' dtype on the device and in the GEMMs: auto, float16, "
                   "bfloat16, float32 (the CPU computes on the weights as stored)",
                   NULL});
    push(opts, n, cap,
         (cmd_opt){"kv-cache-dtype", 0, CMD_OPT_STR, &o->kv_dtype, "T",
                   "auto (fp16; fp32 on the CPU with f32 math)",
                   "KV cache dtype: auto, fp16, fp32, int8 (CPU), fp8 (CUDA, E4M3); int8 and fp8 "
                   "keep a scale per token and head: about half the memory of fp16",
                   NULL});
    push(opts, n, cap,
         (cmd_opt){"cpu-math", 0, CMD_OPT_STR, &o->cpu_math, "M",
                   "auto (int8 where the weights are quantized and the CPU has an integer kernel)",
                   "CPU: how quantized weights are multiplied: int8 (activations quantized per "
                   "32-block, llama.cpp's numerics, fast) or f32 (float32 math, exact to float "
                   "rounding, ~2x slower; for parity with float references)",
                   NULL});
    push(opts, n, cap,
         (cmd_opt){"attention-backend", 0, CMD_OPT_STR, &o->attention, "A",
                   "auto (own until FlashInfer is verified on a GPU; docs/cuda.md)",
                   "CUDA: decode attention kernels: own (pllm's) or flashinfer (FlashInfer's "
                   "batched paged decode; F16 weights and KV, head_dim 64 or 128)",
                   NULL});
    push(opts, n, cap,
         (cmd_opt){"thinking", 0, CMD_OPT_STR, &o->thinking, "MODE",
                   "auto (the chat template's default)",
                   "the chat template's thinking switch (Qwen3's enable_thinking): on, off, or "
                   "auto (left undefined)",
                   NULL});
    push(opts, n, cap,
         (cmd_opt){"chat-template", 0, CMD_OPT_STR, &o->rt.chat_template, "FILE",
                   "the model's (GGUF tokenizer.chat_template, tokenizer_config.json)",
                   "a Jinja chat template file that renders messages instead of the model's",
                   NULL});
    push(opts, n, cap,
         (cmd_opt){"system-prompt", 0, CMD_OPT_STR, &o->rt.system_prompt, "TEXT", "none",
                   "a system turn put first in every conversation that has none of its own "
                   "(messages records; raw prompts are left as they are)",
                   NULL});
    push(opts, n, cap,
         (cmd_opt){"seed", 0, CMD_OPT_INT64, &o->seed, "N", "0",
                   "run seed (requests without a seed derive theirs from it)", NULL});
    push(opts, n, cap,
         (cmd_opt){"block-size", 0, CMD_OPT_INT, &o->ep.block_size, "N", o->defs[0],
                   "tokens per KV cache block", NULL});
    push(opts, n, cap,
         (cmd_opt){"num-blocks", 0, CMD_OPT_INT, &o->ep.n_blocks, "N", "from --kv-cache-mb",
                   "KV cache blocks", NULL});
    push(opts, n, cap,
         (cmd_opt){"kv-cache-mb", 0, CMD_OPT_INT, &o->kv_mb, "MB",
                   "min(half the free memory, 4096, max-seqs full-length sequences)",
                   "KV cache budget", NULL});
    push(opts, n, cap,
         (cmd_opt){"max-batched-tokens", 0, CMD_OPT_INT, &o->ep.max_batched_tokens, "N", o->defs[1],
                   "token budget per engine step", NULL});
    push(opts, n, cap,
         (cmd_opt){"max-seqs", 0, CMD_OPT_INT, &o->ep.max_seqs, "N", o->defs[2],
                   "sequences per engine step", NULL});
    push(opts, n, cap,
         (cmd_opt){"max-model-len", 0, CMD_OPT_INT, &o->ep.max_model_len, "N",
                   "the model's context length", "longest context (prompt + output)", NULL});
    push(opts, n, cap,
         (cmd_opt){"max-bypass", 0, CMD_OPT_INT, &o->ep.max_bypass, "N", o->defs[3],
                   "fairness bound: times a waiting request may be overtaken (0: strict FCFS)",
                   NULL});
    push(opts, n, cap,
         (cmd_opt){"eviction", 0, CMD_OPT_STR, &o->eviction, "POLICY", "lru",
                   "which cached block to evict: lru, or future (the one needed farthest ahead by "
                   "queued requests)",
                   NULL});
    push(opts, n, cap,
         (cmd_opt){"overlap", 0, CMD_OPT_STR, &o->overlap, "MODE", "auto",
                   "keep one step in flight, the host's work for step N - 1 and N + 1 hidden "
                   "behind step N: on, off, or auto (on for cuda); the output is the same",
                   NULL});
    push(opts, n, cap,
         (cmd_opt){"speculate", 0, CMD_OPT_STR, &o->speculate, "MODE", "off",
                   "speculative decoding without a draft model: auto (prompt lookup and n-grams, "
                   "where the measured step times say it pays), prompt-lookup (always), off; the "
                   "output is the same",
                   NULL});
    push(opts, n, cap,
         (cmd_opt){"no-prefix-cache", 0, CMD_OPT_FLAG, &o->no_prefix_cache, NULL,
                   "off (prefix caching on)", "disable block-level prefix reuse", NULL});
    push(opts, n, cap,
         (cmd_opt){"no-kv-hybrid", 0, CMD_OPT_FLAG, &o->ep.no_kv_hybrid, NULL,
                   "off (sliding-window layers keep only their window)",
                   "models with sliding-window layers (Gemma 3): keep every layer's K/V for the "
                   "whole context in one pool instead of the sliding layers' own, smaller pool",
                   NULL});
    push(opts, n, cap,
         (cmd_opt){"prefix-cache-dir", 0, CMD_OPT_STR, &o->prefix_cache_dir, "DIR", "none",
                   "persistent prefix cache: full prompt KV blocks are saved there "
                   "(zstd) and later runs, or other shards on this host, load them instead of "
                   "computing them; created if missing",
                   NULL});
    push(opts, n, cap,
         (cmd_opt){"prefix-cache-max-mb", 0, CMD_OPT_INT, &o->prefix_cache_mb, "MB", "4096",
                   "size cap of --prefix-cache-dir (least recently used entries go first)", NULL});
}

int cmd_engine_opts_finish(cmd_engine_opts *o)
{
    if (o->prefix_cache_mb < 0) {
        fprintf(stderr, "pllm: --prefix-cache-max-mb must be >= 0, got %d\n", o->prefix_cache_mb);
        return 2;
    }
    if (o->prefix_cache_dir && o->no_prefix_cache) {
        fprintf(stderr, "pllm: --prefix-cache-dir needs prefix caching (drop --no-prefix-cache)\n");
        return 2;
    }
    if (o->prefix_cache_dir && !o->prefix_cache_dir[0]) {
        fprintf(stderr, "pllm: --prefix-cache-dir is empty\n");
        return 2;
    }
    o->ep.prefix_cache_dir = o->prefix_cache_dir;
    o->ep.prefix_cache_max_bytes = (size_t)o->prefix_cache_mb << 20;
    if (o->kv_mb < 0) {
        fprintf(stderr, "pllm: --kv-cache-mb must be >= 0, got %d\n", o->kv_mb);
        return 2;
    }
    const struct {
        const char *name;
        int32_t v, lo;
    } checks[] = {
        {"--block-size", o->ep.block_size, 1},
        {"--num-blocks", o->ep.n_blocks, 0},
        {"--max-batched-tokens", o->ep.max_batched_tokens, 1},
        {"--max-seqs", o->ep.max_seqs, 1},
        {"--max-model-len", o->ep.max_model_len, 0},
        {"--max-bypass", o->ep.max_bypass, 0},
        {"--threads", o->rt.threads, 0},
    };
    for (size_t i = 0; i < PLLM_ARRAY_LEN(checks); i++)
        if (checks[i].v < checks[i].lo) {
            fprintf(stderr, "pllm: %s must be >= %d, got %d\n", checks[i].name, checks[i].lo,
                    checks[i].v);
            return 2;
        }
    if (o->rt.chat_template && access(o->rt.chat_template, R_OK) != 0) {
        fprintf(stderr, "pllm: --chat-template %s: cannot read it: %s\n", o->rt.chat_template,
                strerror(errno));
        return 2;
    }
    /* more threads than cores only adds contention (the pool spins on every step): refused
     * before the model loads; the limit leaves room for SMT siblings the OS reports offline */
    long n_cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (n_cores > 0 && o->rt.threads > 4 * n_cores && o->rt.threads > 8) {
        fprintf(stderr,
                "pllm: --threads %d is far beyond the %ld cores of this machine (more than 4 "
                "per core only adds contention; 0 uses every core)\n",
                o->rt.threads, n_cores);
        return 2;
    }
    /* !(a && b) also refuses NaN */
    if (!(o->rt.gpu_memory_fraction > 0.0f && o->rt.gpu_memory_fraction <= 1.0f)) {
        fprintf(stderr, "pllm: --gpu-memory-fraction must be in (0, 1], got %g\n",
                (double)o->rt.gpu_memory_fraction);
        return 2;
    }
    static const struct {
        const char *name;
        int32_t dtype;
    } wt[] = {{"auto", -1},
              {"float16", PLLM_DTYPE_F16},
              {"half", PLLM_DTYPE_F16},
              {"bfloat16", PLLM_DTYPE_BF16},
              {"float32", PLLM_DTYPE_F32},
              {"float", PLLM_DTYPE_F32}},
      kt[] = {{"auto", -1},
              {"fp16", PLLM_DTYPE_F16},
              {"fp32", PLLM_DTYPE_F32},
              {"int8", PLLM_KV_DTYPE_I8},
              {"fp8", PLLM_KV_DTYPE_FP8}};
    o->rt.weight_dtype = o->rt.kv_dtype = -2;
    for (size_t i = 0; i < PLLM_ARRAY_LEN(wt); i++)
        if (!strcmp(o->dtype, wt[i].name)) o->rt.weight_dtype = wt[i].dtype;
    for (size_t i = 0; i < PLLM_ARRAY_LEN(kt); i++)
        if (!strcmp(o->kv_dtype, kt[i].name)) o->rt.kv_dtype = kt[i].dtype;
    if (o->rt.weight_dtype == -2) {
        fprintf(stderr,
                "pllm: --dtype '%s' is not one of auto, float16 (half), bfloat16, float32 "
                "(float)\n",
                o->dtype);
        return 2;
    }
    if (!strcmp(o->cpu_math, "auto")) o->rt.cpu_math = PLLM_CPU_MATH_AUTO;
    else if (!strcmp(o->cpu_math, "int8")) o->rt.cpu_math = PLLM_CPU_MATH_INT8;
    else if (!strcmp(o->cpu_math, "f32")) o->rt.cpu_math = PLLM_CPU_MATH_F32;
    else {
        fprintf(stderr, "pllm: --cpu-math '%s' is not one of auto, int8, f32\n", o->cpu_math);
        return 2;
    }
    static const char *const attn[] = {"auto", "own", "flashinfer"};
    o->rt.attention = -1;
    for (size_t i = 0; i < PLLM_ARRAY_LEN(attn); i++)
        if (!strcmp(o->attention, attn[i])) o->rt.attention = (int32_t)i;
    if (o->rt.attention < 0) {
        fprintf(stderr, "pllm: --attention-backend '%s' is not one of auto, own, flashinfer\n",
                o->attention);
        return 2;
    }
    if (cmd_thinking_parse(o->thinking, &o->rt.thinking)) return 2;
    if (o->rt.kv_dtype == -2) {
        fprintf(stderr, "pllm: --kv-cache-dtype '%s' is not one of auto, fp16, fp32, int8, fp8\n",
                o->kv_dtype);
        return 2;
    }
    if (pllm_evict_policy_parse(o->eviction, &o->ep.eviction) != PLLM_OK) {
        fprintf(stderr, "pllm: --eviction: %s\n", pllm_errmsg());
        return 2;
    }
    if (pllm_overlap_mode_parse(o->overlap, &o->ep.overlap) != PLLM_OK) {
        fprintf(stderr, "pllm: --overlap: %s\n", pllm_errmsg());
        return 2;
    }
    if (pllm_spec_mode_parse(o->speculate, &o->ep.speculate) != PLLM_OK) {
        fprintf(stderr, "pllm: --speculate: %s\n", pllm_errmsg());
        return 2;
    }
    o->ep.kv_bytes = (size_t)o->kv_mb << 20;
    o->ep.no_prefix_cache = o->no_prefix_cache;
    o->ep.seed = (uint64_t)o->seed;
    o->rt.step_tokens = o->ep.max_batched_tokens;
    o->rt.step_seqs = o->ep.max_seqs;
    /* the device is checked now: asking for one that cannot run fails before any work (a list
     * is generate's: cmd/devices.c checks each entry) */
    if (strchr(o->rt.device, ',')) return 0;
    cmd_device d;
    return cmd_device_select(&d, o->rt.device);
}

void cmd_plan_stats_json(json_t *report, const pllm_engine_plan_stats *ps)
{
    json_object_set_new(report, "best_prefix_cache_hit_rate", json_real(ps->best_hit_rate));
    json_t *c = json_object_get(report, "counters");
    if (!c) {
        c = json_object();
        json_object_set_new(report, "counters", c);
    }
    json_object_set_new(c, "best_cached_tokens", json_integer(ps->best_cached_tokens));
    json_object_set_new(c, "prompt_blocks_distinct", json_integer(ps->distinct_blocks));
    json_object_set_new(c, "prompt_blocks_shared", json_integer(ps->shared_blocks));
    json_object_set_new(c, "prompt_blocks_computed", json_integer(ps->blocks_computed));
    json_object_set_new(c, "prompt_blocks_recomputed", json_integer(ps->blocks_recomputed));
    json_object_set_new(c, "requests_grouped", json_integer(ps->grouped));
}

int cmd_check_kv_budget(const cmd_runtime *rt, const cmd_engine_opts *o)
{
    if (o->ep.kv_bytes == 0 && o->ep.n_blocks == 0) return 0;
    const pllm_backend *b = &rt->backend;
    size_t avail = 0;
    pllm_kv_layout l;
    memset(&l, 0, sizeof l);
    if (b->iface->kv_available(b->ctx, &avail) != PLLM_OK ||
        b->iface->kv_layout(b->ctx, o->ep.block_size, &l) != PLLM_OK)
        return 0; /* the engine reports it */
    /* the step workspace is allocated at the first step, after the KV cache: leave it free */
    size_t ws = 0;
    int32_t T = o->ep.max_batched_tokens > 0 ? o->ep.max_batched_tokens : 2048;
    int32_t S = (o->ep.max_seqs > 0 ? o->ep.max_seqs : 64) + (o->ep.speculate ? T : 0);
    if (b->iface->workspace_bytes && b->iface->workspace_bytes(b->ctx, T, S, &ws) != PLLM_OK)
        return 0; /* the engine reports it */
    avail = avail > ws ? avail - ws : 0;
    size_t per_block = pllm_kv_block_bytes(&l);
    size_t want = o->ep.n_blocks > 0 ? (size_t)o->ep.n_blocks * per_block : o->ep.kv_bytes;
    if (want <= avail) return 0;
    size_t mb = avail / 10 * 9 >> 20; /* a margin: free memory moves */
    if (o->ep.n_blocks > 0)
        fprintf(
            stderr,
            "pllm: --num-blocks %d needs %.1f GB of KV cache, more than the %.1f GB this machine "
            "can give it now (free memory less the model's weights, the step workspace and a "
            "reserve); the largest "
            "budget that fits is %zu MB: use --num-blocks %zu or fewer (or --kv-cache-mb %zu)\n",
            o->ep.n_blocks, (double)want / 1e9, (double)avail / 1e9, mb,
            per_block ? (mb << 20) / per_block : 0, mb);
    else
        fprintf(stderr,
                "pllm: --kv-cache-mb %d is more than the %.1f GB this machine can give the KV "
                "cache now (free memory less the model's weights, the step workspace and a "
                "reserve); the largest "
                "budget that fits is %zu MB: use --kv-cache-mb %zu or less\n",
                o->kv_mb, (double)avail / 1e9, mb, mb);
    return 3;
}

int cmd_size_kv(const cmd_runtime *rt, cmd_engine_opts *o)
{
    /* the numerics that decide a KV block's bytes (kernels, weight math, KV dtype) */
    o->ep.prefix_cache_tag = rt->kernels;
    if (rt->dev.kind != CMD_DEVICE_CUDA || o->ep.kv_bytes > 0 || o->ep.n_blocks > 0) return 0;
    const pllm_backend *b = &rt->backend;
    size_t avail = 0;
    pllm_kv_layout l;
    memset(&l, 0, sizeof l);
    if (b->iface->kv_available(b->ctx, &avail) != PLLM_OK ||
        b->iface->kv_layout(b->ctx, o->ep.block_size, &l) != PLLM_OK) {
        fprintf(stderr, "pllm: cannot size the KV cache on %s: %s\n", rt->device_name,
                pllm_errmsg());
        return 3;
    }
    size_t per_block = pllm_kv_block_bytes(&l);
    if (per_block == 0 || avail < per_block) {
        fprintf(stderr,
                "pllm: --gpu-memory-fraction %g leaves %zu bytes of %s for the KV cache, less "
                "than one %d-token block (%zu bytes): raise it, or lower --max-batched-tokens / "
                "--max-seqs (their activations are reserved first)\n",
                (double)o->rt.gpu_memory_fraction, avail, rt->device_name, o->ep.block_size,
                per_block);
        return 3;
    }
    /* no more than max_seqs sequences of the longest context can use */
    int32_t len = o->ep.max_model_len > 0 ? o->ep.max_model_len : rt->model->cfg.n_ctx_train;
    o->ep.kv_bytes =
        pllm_kv_blocks_for_budget(avail, per_block, o->ep.block_size, o->ep.max_seqs, len) *
        per_block;
    return 0;
}

void cmd_sampling_opts_init(cmd_sampling_opts *o, int32_t max_tokens,
                            const char *max_tokens_default)
{
    memset(o, 0, sizeof *o);
    o->max_tokens = max_tokens;
    o->max_tokens_default = max_tokens_default;
    o->top_p = 1.0f;
    o->rep_pen = 1.0f;
    o->generation_config = "auto";
    o->n = 1;
}

void cmd_sampling_opts_table(cmd_sampling_opts *o, cmd_opt *opts, size_t *n, size_t cap)
{
    push(opts, n, cap,
         (cmd_opt){"generation-config", 0, CMD_OPT_STR, &o->generation_config, "MODE", "auto",
                   "auto: the model's generation_config.json (GGUF: general.sampling.*) gives "
                   "the defaults marked \"the model's\" below; none: built-in defaults only (the "
                   "model's EOS ids stop generation either way). Precedence, per field: a "
                   "record's field > an option given here > the model's > built-in",
                   NULL});
    push(opts, n, cap,
         (cmd_opt){"max-tokens", 0, CMD_OPT_INT, &o->max_tokens, "N", o->max_tokens_default,
                   "tokens to generate per request at most", &o->seen_max_tokens});
    push(opts, n, cap,
         (cmd_opt){"min-tokens", 0, CMD_OPT_INT, &o->min_tokens, "N", "0",
                   "tokens to generate before EOS/stop may end a request", NULL});
    push(opts, n, cap,
         (cmd_opt){"temperature", 0, CMD_OPT_FLOAT, &o->temperature, "T",
                   "the model's, else 0 (greedy)", "sampling temperature", &o->seen_temperature});
    push(opts, n, cap,
         (cmd_opt){"top-p", 0, CMD_OPT_FLOAT, &o->top_p, "P", "the model's, else 1 (off)",
                   "nucleus sampling threshold", &o->seen_top_p});
    push(opts, n, cap,
         (cmd_opt){"top-k", 0, CMD_OPT_INT, &o->top_k, "K", "the model's, else 0 (off)",
                   "keep the K most likely tokens", &o->seen_top_k});
    push(opts, n, cap,
         (cmd_opt){"min-p", 0, CMD_OPT_FLOAT, &o->min_p, "P", "the model's, else 0 (off)",
                   "drop tokens below P times the top probability", &o->seen_min_p});
    push(opts, n, cap,
         (cmd_opt){"repetition-penalty", 0, CMD_OPT_FLOAT, &o->rep_pen, "R",
                   "the model's, else 1 (off)", "penalise tokens of the prompt and output",
                   &o->seen_rep_pen});
    push(opts, n, cap,
         (cmd_opt){"presence-penalty", 0, CMD_OPT_FLOAT, &o->pres_pen, "X", "0 (off)",
                   "penalise tokens present in the output", NULL});
    push(opts, n, cap,
         (cmd_opt){"frequency-penalty", 0, CMD_OPT_FLOAT, &o->freq_pen, "X", "0 (off)",
                   "penalise tokens by their count in the output", NULL});
    push(opts, n, cap,
         (cmd_opt){"stop", 0, CMD_OPT_STRS, &o->stop, "STR", "none", "stop string (repeatable)",
                   NULL});
    push(opts, n, cap,
         (cmd_opt){"n", 'n', CMD_OPT_INT, &o->n, "N", "1",
                   "completions per prompt (a record's n overrides it)", NULL});
    push(opts, n, cap,
         (cmd_opt){"logprobs", 0, CMD_OPT_INT, &o->logprobs, "K", "0 (none)",
                   "write each generated token's log-probability, its text and the K most likely "
                   "alternatives (0..20; a record's logprobs overrides it)",
                   NULL});
    push(opts, n, cap,
         (cmd_opt){"ignore-eos", 0, CMD_OPT_FLAG, &o->ignore_eos, NULL, "off",
                   "keep generating past EOS (every EOS id of the model's files and tokenizer)",
                   NULL});
}

int cmd_sampling_opts_finish(const cmd_sampling_opts *o, pllm_request_params *p)
{
    pllm_request_params_defaults(p);
    p->max_tokens = o->max_tokens;
    p->min_tokens = o->min_tokens;
    p->ignore_eos = o->ignore_eos;
    p->sampling.temperature = o->temperature;
    p->sampling.top_p = o->top_p;
    p->sampling.top_k = o->top_k;
    p->sampling.min_p = o->min_p;
    p->sampling.repetition_penalty = o->rep_pen;
    p->sampling.presence_penalty = o->pres_pen;
    p->sampling.frequency_penalty = o->freq_pen;
    for (int i = 0; i < o->stop.n; i++) p->stop[i] = o->stop.v[i];
    p->n_stop = o->stop.n;
    p->n = o->n;
    if (o->logprobs < 0 || o->logprobs > 20) {
        fprintf(stderr, "pllm: --logprobs must be in [0, 20], got %d\n", o->logprobs);
        return 2;
    }
    p->sampling.logprobs = o->logprobs;
    if (strcmp(o->generation_config, "auto") && strcmp(o->generation_config, "none")) {
        fprintf(stderr, "pllm: --generation-config '%s' is not one of auto, none\n",
                o->generation_config);
        return 2;
    }
    if (pllm_request_params_validate(p) != PLLM_OK) {
        fprintf(stderr, "pllm: invalid option: %s\n", pllm_errmsg());
        return 2;
    }
    return 0;
}

int cmd_sampling_opts_apply_model(const cmd_sampling_opts *o, const pllm_model *m,
                                  pllm_request_params *p, bool quiet)
{
    if (strcmp(o->generation_config, "auto") != 0) return 0;
    const pllm_generation_defaults *g = &m->gen;
    pllm_sampling_params s = p->sampling;
    pllm_model_apply_generation_defaults(m, &s);
    pllm_buf said = {0};
    /* each field the model gives and the command line does not */
    if (g->has_temperature && !o->seen_temperature) {
        p->sampling.temperature = s.temperature;
        pllm_buf_appendf(&said, ", temperature %g", (double)s.temperature);
    }
    if (g->has_top_p && !o->seen_top_p) {
        p->sampling.top_p = s.top_p;
        pllm_buf_appendf(&said, ", top_p %g", (double)s.top_p);
    }
    if (g->has_top_k && !o->seen_top_k) {
        p->sampling.top_k = s.top_k;
        pllm_buf_appendf(&said, ", top_k %d", s.top_k);
    }
    if (g->has_min_p && !o->seen_min_p) {
        p->sampling.min_p = s.min_p;
        pllm_buf_appendf(&said, ", min_p %g", (double)s.min_p);
    }
    if (g->has_repetition_penalty && !o->seen_rep_pen) {
        p->sampling.repetition_penalty = s.repetition_penalty;
        pllm_buf_appendf(&said, ", repetition_penalty %g", (double)s.repetition_penalty);
    }
    if (g->has_max_new_tokens && !o->seen_max_tokens) {
        p->max_tokens = g->max_new_tokens;
        pllm_buf_appendf(&said, ", max_tokens %d", g->max_new_tokens);
    }
    int rc = 0;
    if (pllm_request_params_validate(p) != PLLM_OK) {
        fprintf(stderr, "pllm: the model's generation defaults (%s) are invalid: %s\n",
                said.n ? said.s + 2 : "", pllm_errmsg());
        rc = 3;
    } else if (said.n && !quiet) {
        fprintf(stderr,
                "pllm: sampling defaults from the model's %s: %s (options and record fields "
                "override them; --generation-config none drops them)\n",
                m->format == PLLM_MODEL_HF ? "generation_config.json" : "general.sampling.* keys",
                said.s + 2);
    }
    pllm_buf_free(&said);
    return rc;
}

/* The flag the handler sets: a signal handler can reach nothing else. This is the only
 * process-wide state, and it lives in cmd/ (the binary), not in a library. */
static volatile sig_atomic_t *volatile g_flag;

static void on_signal(int sig)
{
    volatile sig_atomic_t *flag = g_flag;
    if (flag && !*flag) {
        *flag = 1;
        return;
    }
    signal(sig, SIG_DFL); /* a second signal: stop now */
    raise(sig);
}

void cmd_signals_install(volatile sig_atomic_t *flag)
{
    g_flag = flag;
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0; /* no SA_RESTART: a blocked read of stdin returns, so the run can stop */
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

void cmd_signals_finish(void)
{
    /* The handler stays until the process exits: the default action restored here killed a
     * run whose output was complete when a SIGINT landed between this call and exit (rel_signals
     * met it in CI: "killed by SIGINT" with all 24 records written). A first signal now sets a
     * flag nobody reads, and the run exits with its own code; a second one still kills. */
    static volatile sig_atomic_t late;
    late = 0;
    g_flag = &late;
}

double cmd_peak_rss_mb(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    return (double)ru.ru_maxrss / 1024.0; /* kilobytes on Linux */
}

int64_t cmd_unix_time(void)
{
    return (int64_t)time(NULL);
}

void cmd_prefix_cache_report(const pllm_engine *eng, const char *dir, json_t *report, bool quiet)
{
    pllm_prefix_store_stats ps;
    if (!pllm_engine_get_prefix_store_stats(eng, &ps)) return;
    if (!quiet)
        fprintf(stderr,
                "pllm: prefix cache %s: %lld blocks loaded (%.1f MB read, %.3f s), %lld saved "
                "(%.1f MB, %.3f s), %lld already there, %lld corrupt ignored, %lld evicted, %lld "
                "failed saves\n",
                dir, (long long)ps.hits, (double)ps.bytes_read / 1e6, ps.seconds_read,
                (long long)ps.writes, (double)ps.bytes_written / 1e6, ps.seconds_write,
                (long long)ps.skipped, (long long)ps.corrupt, (long long)ps.evicted,
                (long long)ps.write_errors);
    if (!report) return;
    json_t *j = json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:f, s:f}", "dir",
                          dir, "blocks_loaded", (json_int_t)ps.hits, "blocks_saved",
                          (json_int_t)ps.writes, "blocks_already_there", (json_int_t)ps.skipped,
                          "lookups_missed", (json_int_t)ps.misses, "corrupt_ignored",
                          (json_int_t)ps.corrupt, "mismatched_ignored", (json_int_t)ps.mismatched,
                          "evicted", (json_int_t)ps.evicted, "failed_saves",
                          (json_int_t)ps.write_errors, "bytes_read", (json_int_t)ps.bytes_read,
                          "seconds_read", ps.seconds_read, "seconds_write", ps.seconds_write);
    if (j) json_object_set_new(report, "prefix_cache_dir", j);
}
