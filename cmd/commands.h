/* commands.h: the subcommands of the pllm binary; each returns the process exit code
 * (README: 0 ok, 1 some requests failed, 2 usage, 3 model/input error, 130 interrupted). */
#pragma once

int cmd_generate(int argc, char **argv);
