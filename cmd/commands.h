/* commands.h: the subcommands of the pllm binary; each takes argv from the command name on and
 * returns the process exit code (README: 0 ok, 1 some requests failed or a benchmark gate
 * failed, 2 usage, 3 model/input error, 130 interrupted). `pllm CMD --help` prints every
 * option with its default. */
#pragma once

int cmd_generate(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_merge(int argc, char **argv);
