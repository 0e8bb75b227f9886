/*
 * shared.h: the option groups several commands share (model and engine, sampling), the
 * signal handling of long runs, and small helpers (peak RSS, file:line messages).
 *
 * An option group is a struct holding the values plus the text of their defaults; its
 * *_table() appends the group's cmd_opt entries to a command's table, and *_finish() turns the
 * parsed values into the engine's parameter structs (validating them; usage errors exit 2).
 */
#pragma once

#include "cmd/options.h"
#include "cmd/runtime.h"
#include "engine/engine.h"

#include <jansson.h>
#include <signal.h>

#define CMD_MAX_OPTS 64

/* Model, device and engine options (generate, bench). */
typedef struct cmd_engine_opts {
    cmd_runtime_opts rt;
    pllm_engine_params ep;
    int32_t kv_mb;
    int64_t seed;
    bool no_prefix_cache;
    const char *eviction;
    const char *speculate;        /* --speculate */
    const char *overlap;          /* --overlap */
    const char *dtype, *kv_dtype; /* --dtype, --kv-cache-dtype */
    const char *cpu_math;         /* --cpu-math */
    const char *attention;        /* --attention-backend */
    const char *thinking;         /* --thinking */
    const char *prefix_cache_dir; /* --prefix-cache-dir */
    int32_t prefix_cache_mb;      /* --prefix-cache-max-mb */
    char defs[4][32];
} cmd_engine_opts;

void cmd_engine_opts_init(cmd_engine_opts *o);
/* Append the group's options to opts (at *n, capacity cap). */
void cmd_engine_opts_table(cmd_engine_opts *o, cmd_opt *opts, size_t *n, size_t cap);
/* Validate and fill o->ep; 0 or 2 (message printed). */
int cmd_engine_opts_finish(cmd_engine_opts *o);

/* Append the engine's prefix-plan figures (best achievable and achieved hit rate, prompt
 * blocks computed and recomputed, requests grouped) to a report JSON object: top-level
 * best_prefix_cache_hit_rate, and the exact counts under "counters" (created if absent). */
void cmd_plan_stats_json(json_t *report, const pllm_engine_plan_stats *ps);

/* An explicit KV budget (--kv-cache-mb, --num-blocks) larger than the memory the backend may
 * use is refused up front, naming the largest budget that fits (rather than allocating it and
 * being killed later). 0 or 3 (message printed). */
int cmd_check_kv_budget(const cmd_runtime *rt, const cmd_engine_opts *o);

/* On a CUDA device, the KV budget left unset (no --kv-cache-mb, --num-blocks) becomes what
 * --gpu-memory-fraction leaves after the weights and the step workspace (as vLLM sizes its
 * pool), at most max_seqs sequences of the longest context; on the CPU the engine's default
 * stays. 0, or 3 when that leaves no block (message printed). */
int cmd_size_kv(const cmd_runtime *rt, cmd_engine_opts *o);

/*
 * Sampling and generation options (generate).
 *
 * Precedence, per field (as vLLM applies a model's generation_config.json): a record's own
 * field > the command-line option, when given > the model's generation defaults
 * (generation_config.json of a Hugging Face directory, general.sampling.* of a GGUF file;
 * --generation-config auto, the default) > the built-in default. The model's defaults cover
 * temperature, top_p, top_k, min_p, repetition_penalty and max_tokens (max_new_tokens);
 * do_sample is not consulted (a file that sets temperature means it). --generation-config
 * none leaves them out. The model's EOS ids (every eos_token_id of generation_config.json, the
 * tokenizer's EOS and end-of-turn tokens) end generation in both modes (the engine's rule;
 * --ignore-eos or a record's ignore_eos turns them off).
 */
typedef struct cmd_sampling_opts {
    int32_t max_tokens, min_tokens, top_k, n, logprobs;
    float temperature, top_p, min_p, rep_pen, pres_pen, freq_pen;
    bool ignore_eos;
    cmd_strs stop;
    const char *generation_config;  /* "auto" or "none" */
    const char *max_tokens_default; /* text shown in --help */
    /* given on the command line (then the model's default does not apply) */
    bool seen_max_tokens, seen_temperature, seen_top_p, seen_top_k, seen_min_p, seen_rep_pen;
} cmd_sampling_opts;

void cmd_sampling_opts_init(cmd_sampling_opts *o, int32_t max_tokens,
                            const char *max_tokens_default);
void cmd_sampling_opts_table(cmd_sampling_opts *o, cmd_opt *opts, size_t *n, size_t cap);
/* Fill p from the command line and the built-in defaults (stop strings point into argv); 0 or
 * 2 (message printed). */
int cmd_sampling_opts_finish(const cmd_sampling_opts *o, pllm_request_params *p);
/* Once the model is loaded: overlay its generation defaults (--generation-config auto) onto
 * the fields of p the command line did not set, and say on stderr which it applied (unless
 * quiet). 0 or 3 (the result is invalid; message printed). */
int cmd_sampling_opts_apply_model(const cmd_sampling_opts *o, const pllm_model *m,
                                  pllm_request_params *p, bool quiet);

/* SIGINT/SIGTERM: the first sets *flag (the run stops after the current step, writes what
 * finished and exits 130); a second one kills the process at once (default action). */
void cmd_signals_install(volatile sig_atomic_t *flag);
/* The run's work is done and its output closed: the flag given to cmd_signals_install is no
 * longer written. A first signal from here to exit is ignored (the process exits with the run's
 * code); a second one kills it. */
void cmd_signals_finish(void);

/* The persistent prefix cache's counters of a finished run, one line on stderr (nothing when
 * the engine has none); added to report as "prefix_cache_dir" when report is not NULL. */
void cmd_prefix_cache_report(const pllm_engine *eng, const char *dir, json_t *report, bool quiet);

/* Peak resident set size of this process in MiB. */
double cmd_peak_rss_mb(void);

/* Unix time in seconds. */
int64_t cmd_unix_time(void);
