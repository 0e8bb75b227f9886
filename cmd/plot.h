/*
 * plot.h: a picture of a run (`generate --plot FILE.svg`, `bench --plot FILE.svg`), drawn from
 * what the run records anyway, as one self-contained SVG file (no script, no external font or
 * stylesheet, no library): six panels,
 *
 *   output throughput over time   tokens sampled per second (from every completion's token
 *                                 times), in up to PLOT_BUCKETS time buckets;
 *   KV cache use over time        blocks held by requests after each engine step (the bucket's
 *                                 highest), against the cache's size;
 *   prefix cache hit rate         cached / prompt tokens of the requests finished so far, over
 *                                 time, beside the best achievable rate for the input (dashed);
 *   TTFT, TPOT, E2E latency       histograms of the completions' values (ms), with the median
 *                                 and p99 marked.
 *
 * Every series is an SVG element with an id (throughput, kv_used, kv_total, hit_rate,
 * hit_best, ttft_hist, tpot_hist, e2e_hist) and data-n (its number of points or bars), so
 * tests and scripts can find them. Memory is bounded whatever the run's length: time buckets
 * merge pairwise when the run outgrows them, and each latency series keeps a uniform sample of
 * at most PLOT_SAMPLES values.
 */
#pragma once

#include "engine/engine.h"

#include <stdbool.h>
#include <stdint.h>

#define PLOT_BUCKETS 240
#define PLOT_SAMPLES 65536

typedef struct cmd_plot_sample {
    double *v;
    int64_t n, seen; /* kept, offered */
    uint64_t rng;
} cmd_plot_sample;

typedef struct cmd_plot {
    bool on;
    double t0, width;                /* run start; seconds per bucket */
    double tokens[PLOT_BUCKETS];     /* tokens sampled in each bucket */
    int32_t kv[PLOT_BUCKETS];        /* most KV blocks in use within each bucket (-1: none) */
    double prompt[PLOT_BUCKETS];     /* prompt tokens of the requests finished in each bucket */
    double cached[PLOT_BUCKETS];     /* their cached prompt tokens */
    double t_last;                   /* the latest time seen */
    int32_t n_blocks;                /* KV cache size */
    int64_t n_steps;                 /* engine steps seen */
    double best_hit_rate;            /* -1: unknown */
    cmd_plot_sample ttft, tpot, e2e; /* milliseconds */
} cmd_plot;

/* Whether path holds a picture pllm drew (a rerun may replace it without --overwrite). */
bool cmd_plot_is_ours(const char *path);
/* on false: every call is a no-op (no --plot). */
void cmd_plot_init(cmd_plot *p, bool on, double t0);
void cmd_plot_free(cmd_plot *p);
/* After each engine step: the KV blocks in use now. */
void cmd_plot_step(cmd_plot *p, double now, const pllm_engine_stats *es);
/* Every finished completion (ok ones add to the latency series). */
void cmd_plot_completion(cmd_plot *p, const pllm_completion *c);
/* Write the SVG (through a temporary renamed over path). title: the first line of the
 * picture; subtitle: a second (device, model, ...). 0, or 3 with the reason printed. */
int cmd_plot_write(const cmd_plot *p, const char *path, const char *title, const char *subtitle);
