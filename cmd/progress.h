/*
 * progress.h: progress on stderr for long runs.
 *
 *   a terminal:      one line redrawn in place at most 4 times a second
 *                    "[pllm] 1234/~56000 req 2.2% | 456.7 tok/s | ETA 12m03s | cache hit 45.6% | 3
 * failed" not a terminal:  a log line every --log-interval seconds (default 10)
 *   --quiet:         nothing
 *
 * The total is exact when known (bench; generate once the input is read to its end) and
 * otherwise estimated from the bytes read so far ("~"); stdin has no estimate ("?").
 * tok/s counts generated tokens; ETA = remaining requests / request rate so far.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef struct cmd_progress {
    bool enabled, tty;
    double interval; /* seconds between log lines (not a terminal) */
    double t_start, t_last;
    bool line_open;   /* a terminal line is drawn and must be cleared before other output */
    const char *what; /* "generate", "bench", "warmup" */
} cmd_progress;

typedef struct cmd_progress_state {
    int64_t done, failed;
    int64_t total;        /* -1: unknown */
    bool total_estimated; /* total is an estimate */
    int64_t output_tokens, prompt_tokens, cached_tokens;
} cmd_progress_state;

void cmd_progress_init(cmd_progress *p, bool quiet, double log_interval, const char *what,
                       double t_start);
/* Draw or log when it is time (force: now). */
void cmd_progress_update(cmd_progress *p, const cmd_progress_state *s, bool force);
/* Clear the terminal line before other stderr output (no-op otherwise). */
void cmd_progress_clear(cmd_progress *p);
/* Final state: a last line (terminal: left on screen, then a newline). */
void cmd_progress_finish(cmd_progress *p, const cmd_progress_state *s);
