/*
 * testutil.h: tiny helpers shared by the C tests: checks that report file and line, random
 * data, error metrics, and the skip convention (exit 77, with the reason printed).
 */
#pragma once

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

extern int pllm_test_failures;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);               \
            pllm_test_failures++;                                                                  \
        }                                                                                          \
    } while (0)

#define CHECK_OK(call)                                                                             \
    do {                                                                                           \
        pllm_status st_ = (call);                                                                  \
        if (st_ != PLLM_OK) {                                                                      \
            fprintf(stderr, "%s:%d: %s failed: %s: %s\n", __FILE__, __LINE__, #call,               \
                    pllm_status_str(st_), pllm_errmsg());                                          \
            pllm_test_failures++;                                                                  \
        }                                                                                          \
    } while (0)

/* Print the verdict and return the process exit code. */
int pllm_test_finish(const char *name);
/* Exit 77 (ctest: skipped) after printing why. */
_Noreturn void pllm_test_skip(const char *why);

/* xorshift-based deterministic RNG for test data. */
uint64_t pllm_test_rand(uint64_t *state);
float pllm_test_randf(uint64_t *state); /* uniform in [-1, 1) */
/* ||a-b|| / ||b|| and max |a-b|. */
double pllm_test_rel_err(const float *a, const float *b, size_t n, double *max_abs);
/* Environment value or a default. */
const char *pllm_test_env(const char *name, const char *def);
/* CPU seconds this thread has run (CLOCK_THREAD_CPUTIME_ID): what tests that compare the cost of
 * n and k*n measure, so that another process sharing the cores does not count (wall time
 * does: a test failed by noise blocks everyone). */
double pllm_test_thread_cpu(void);
