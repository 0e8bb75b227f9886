/* main.c: the pllm binary: subcommand dispatch. */
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "pllm: not wired yet\n");
    return 2;
}
