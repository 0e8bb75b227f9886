/* main.c: the pllm binary: subcommand dispatch. */
#include "cmd/commands.h"

#include <stdio.h>
#include <string.h>

#define PLLM_VERSION "0.1.0"

static void usage(FILE *f)
{
    fprintf(f, "pllm %s: offline batch LLM inference\n\n"
               "usage: pllm COMMAND [OPTIONS]\n\n"
               "commands:\n"
               "  generate PROMPTS.jsonl   generate a completion for every prompt record\n"
               "  version                  print the version\n\n"
               "Run 'pllm COMMAND --help' for a command's options.\n",
            PLLM_VERSION);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "generate") == 0) return cmd_generate(argc - 1, argv + 1);
    if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
        printf("pllm %s\n", PLLM_VERSION);
        return 0;
    }
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "pllm: unknown command '%s'\n\n", cmd);
    usage(stderr);
    return 2;
}
