/* main.c: the pllm binary: subcommand dispatch and the top-level help. */
#include "cmd/commands.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

#define PLLM_VERSION "0.1.0"

typedef struct command {
    const char *name, *args, *what;
    int (*run)(int argc, char **argv);
} command;

static const command COMMANDS[] = {
    {"generate", "INPUT",
     "generate a completion for every prompt record (pllm, OpenAI batch, ShareGPT)", cmd_generate},
    {"bench", "",
     "benchmark throughput and latency (sharegpt, random, prefix or a file); CI regression gate",
     cmd_bench},
    {"tokenize", "[INPUT]", "token ids and counts of every prompt record, plus a total",
     cmd_tokenize},
    {"merge", "OUTPUT...",
     "join shard outputs (generate --shard K/N): every record once, statistics merged", cmd_merge},
    {"info", "[MODEL]", "describe a model: architecture, sizes, dtypes, tokenizer, chat template",
     cmd_info},
};

static void usage(FILE *f)
{
    fprintf(f,
            "pllm %s: offline batch LLM inference\n\nusage: pllm COMMAND [OPTIONS]\n\ncommands:\n",
            PLLM_VERSION);
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++) {
        char left[40];
        snprintf(left, sizeof left, "%s %s", COMMANDS[i].name, COMMANDS[i].args);
        fprintf(f, "  %-20s %s\n", left, COMMANDS[i].what);
    }
    fprintf(f, "  %-20s %s\n", "version", "print the version");
    fprintf(
        f,
        "\nexit codes: 0 ok, 1 some requests failed (or a benchmark gate failed), 2 usage error,\n"
        "            3 model or input error, 130 interrupted (rerun with --resume)\n");
}

int main(int argc, char **argv)
{
    /* A file size limit (ulimit -f) must be a write error the run reports, not a kill. */
    signal(SIGXFSZ, SIG_IGN);
    if (argc < 2) {
        usage(stderr);
        fprintf(stderr, "\nRun 'pllm --help' for every command's options.\n");
        return 2;
    }
    const char *cmd = argv[1];
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++)
        if (strcmp(cmd, COMMANDS[i].name) == 0) return COMMANDS[i].run(argc - 1, argv + 1);
    if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
        printf("pllm %s\n", PLLM_VERSION);
        return 0;
    }
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        if (argc >= 3) { /* pllm help CMD */
            for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++)
                if (strcmp(argv[2], COMMANDS[i].name) == 0) {
                    char *a[] = {(char *)COMMANDS[i].name, "--help", NULL};
                    return COMMANDS[i].run(2, a);
                }
        }
        usage(stdout);
        /* every command's options, each with its default */
        for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++) {
            printf("\n---- pllm %s ----\n", COMMANDS[i].name);
            fflush(stdout);
            char *a[] = {(char *)COMMANDS[i].name, "--help", NULL};
            COMMANDS[i].run(2, a);
        }
        return 0;
    }
    fprintf(stderr, "pllm: unknown command '%s'\n\n", cmd);
    usage(stderr);
    return 2;
}
