/*
 * options.h: a table-driven command-line parser. Each command declares its options once (name,
 * kind, destination, default as text, help); the same table drives parsing and `--help`, so
 * the help always lists every option with its default.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum cmd_opt_kind {
    CMD_OPT_FLAG,  /* bool, no value */
    CMD_OPT_INT,   /* int32_t */
    CMD_OPT_INT64, /* int64_t */
    CMD_OPT_FLOAT, /* float */
    CMD_OPT_STR,   /* const char * (points into argv) */
    CMD_OPT_STRS,  /* cmd_strs: repeatable string option */
} cmd_opt_kind;

typedef struct cmd_strs {
    const char *v[16];
    int n;
} cmd_strs;

typedef struct cmd_opt {
    const char *name; /* long name without "--" */
    char short_name;  /* 0 for none */
    cmd_opt_kind kind;
    void *dst;
    const char *metavar; /* "N", "FILE", ... (NULL for flags) */
    const char *defval;  /* default shown in --help (NULL: none) */
    const char *help;
    bool *seen; /* optional: set when the option was given */
} cmd_opt;

typedef struct cmd_spec {
    const char *usage;   /* "pllm generate [OPTIONS] PROMPTS.jsonl" */
    const char *summary; /* one paragraph */
    const cmd_opt *opts;
    size_t n_opts;
    int min_pos, max_pos; /* positional arguments */
    const char *missing;  /* what a missing positional argument is ("INPUT: ..."), or NULL */
} cmd_spec;

/* Parse argv (argv[0] is the command name). Returns 0 on success, 1 when --help was printed,
 * 2 on a usage error (message printed to stderr naming the option). */
int cmd_parse(const cmd_spec *spec, int argc, char **argv, const char **pos, int *n_pos);
void cmd_print_help(const cmd_spec *spec, FILE *f);
/* The option name closest to name[0..len) (edit distance, or a prefix of it), or NULL when
 * none is close. */
const char *cmd_closest_option(const cmd_spec *spec, const char *name, size_t len);
