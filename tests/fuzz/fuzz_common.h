/*
 * fuzz_common.h: what every fuzz harness in tests/fuzz/ shares.
 *
 * A harness defines LLVMFuzzerTestOneInput (and optionally LLVMFuzzerInitialize). It is built
 * twice: with libFuzzer under ASan+UBSan when PLLM_FUZZ=ON (clang; tests/fuzz.cmake), and in
 * every build with replay_main.c, a plain main() that runs the harness once on each file of
 * the corpora it is given, so the saved regression corpus is replayed by ctest everywhere
 * (also in the asan preset, and with gcc).
 *
 * FUZZ_CHECK states a property the code under test promises (an error has a message, what
 * parse() accepted is in bounds, decode(encode(x)) == x, ...). A violation prints the
 * property and aborts, which libFuzzer reports as a crash and saves the input.
 */
#pragma once

#include "model/common.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define FUZZ_CHECK(cond, ...)                                                                      \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: fuzz property failed: %s: ", __FILE__, __LINE__, #cond);       \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* A failed call must leave a message; returns st for chaining. */
#define FUZZ_ERR_HAS_MSG(st)                                                                       \
    FUZZ_CHECK((st) == PLLM_OK || pllm_errmsg()[0] != 0, "status %d without a message", (int)(st))

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* Read-only touch of every byte of [p, p + n): under ASan an out-of-bounds view is caught. */
static inline unsigned fuzz_touch(const void *p, size_t n)
{
    const volatile uint8_t *b = p;
    unsigned x = 0;
    for (size_t i = 0; i < n; i++) x += b[i];
    return x;
}

/* The default model's path ($PLLM_HOME/models/..., default ~/.cache/pllm); caller frees. */
char *fuzz_default_model_path(void);
/* A private scratch directory for harnesses that need files (/dev/shm when it exists, else
 * $TMPDIR or /tmp), created once per process and removed at exit. */
const char *fuzz_scratch_dir(void);
/* Write data to dir/name (replacing it); aborts on I/O errors (they are not findings). */
void fuzz_write_file(const char *dir, const char *name, const void *data, size_t size);
void fuzz_remove_file(const char *dir, const char *name);
/* With FUZZ_VERBOSE=1 in the environment, print what a stage returned (to check that seeds
 * reach the deep paths: `FUZZ_VERBOSE=1 fuzz_replay_gguf seeds/`). */
void fuzz_note(const char *stage, pllm_status st);
