/*
 * output.h: the one place where commands decide whether they may write a file, and how.
 * Shared by generate (-o, --stats-json), tokenize (-o) and bench (--stats-json).
 *
 * The rules, checked before any work (a refusal is a usage error, exit 2, naming the file and
 * the option that would allow it):
 *   - an output that is one of the command's inputs is refused, whatever the options: the same
 *     file (device and inode), also through a hard or symbolic link, and through '-' (stdout
 *     redirected into an input file, or stdin read from the output file);
 *   - an existing non-empty output is refused unless the user said what to do with it:
 *     --overwrite (replace it) or, for generate's -o, --resume (continue it). Reports
 *     (--stats-json) may replace an earlier pllm report (a JSON object with "command") without
 *     --overwrite; any other file needs it.
 *
 * Writing: a file written whole (tokenize's output, a report) goes to a temporary file beside
 * the target (".NAME.PID.tmp", ".zst" kept so it compresses alike) that cmd_output_commit()
 * renames over it; a run that dies leaves the old file as it was. generate's output is
 * append-only instead (one flushed line per request, which --resume needs); --overwrite
 * truncates it only once every check has passed.
 *
 * Ownership: cmd_output_open() fills an cmd_output whose writer is closed (and the temporary
 * removed unless committed) by cmd_output_close().
 */
#pragma once

#include "datasets/io.h"

#include <jansson.h>
#include <stdbool.h>

typedef enum cmd_out_mode {
    CMD_OUT_NEW = 0,   /* refuse an existing non-empty file */
    CMD_OUT_OVERWRITE, /* --overwrite: replace it */
    CMD_OUT_RESUME,    /* --resume: append to it */
} cmd_out_mode;

/* The paths a command reads ("-" for stdin), for the same-file check. NULL entries skipped. */
typedef struct cmd_inputs {
    const char *path[4];
    const char *what[4]; /* "the input", "--baseline", ... */
} cmd_inputs;

enum {
    CMD_OUT_REPORT = 1,    /* a report a later run may replace (an earlier pllm report only) */
    CMD_OUT_RESUMABLE = 2, /* --resume exists for this output (named in the refusal) */
};

/* Check out_path ("-": stdout) against the rules above. what names the option in messages
 * ("-o", "--stats-json"); flags: CMD_OUT_*. 0, or 2 with the reason printed to stderr. */
int cmd_output_check(const char *out_path, const char *what, const cmd_inputs *in,
                     cmd_out_mode mode, unsigned flags);

/* Whether path names an existing regular file of at least one byte. */
bool cmd_output_exists(const char *path);

typedef struct cmd_output {
    pllm_writer *w;
    char *target; /* where the file ends up (symbolic links resolved); NULL for stdout */
    char *tmp;    /* the temporary written through, or NULL (stdout, append-only) */
} cmd_output;

/* Open a checked output. atomic: through a temporary renamed at commit; else written in place
 * (append keeps the content: --resume; else truncated: --overwrite or a new file). 0, or 3
 * with the reason printed. */
int cmd_output_open(cmd_output *o, const char *out_path, bool atomic, bool append);
/* Close the writer; rename the temporary over the target. 0, or 3 with the reason printed
 * (the temporary is removed, the target left as it was). */
int cmd_output_commit(cmd_output *o);
/* Close without committing: the temporary is removed. Accepts a zeroed or closed output. */
void cmd_output_close(cmd_output *o);

/* Write a JSON report to path through a temporary renamed over it. 0, or 3 (message printed). */
int cmd_output_write_json(const char *path, const json_t *doc, size_t flags);
/* Write text to path the same way. 0, or 3 (message printed). */
int cmd_output_write_text(const char *path, const char *text, size_t n);
