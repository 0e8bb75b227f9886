#include "tests/testutil.h"

#include <math.h>
#include <time.h>

int pllm_test_failures;

int pllm_test_finish(const char *name)
{
    if (pllm_test_failures) {
        fprintf(stderr, "%s: %d check(s) failed\n", name, pllm_test_failures);
        return 1;
    }
    fprintf(stderr, "%s: all checks passed\n", name);
    return 0;
}

void pllm_test_skip(const char *why)
{
    fprintf(stderr, "SKIPPED: %s\n", why);
    exit(77);
}

uint64_t pllm_test_rand(uint64_t *s)
{
    uint64_t x = *s ? *s : 0x9e3779b97f4a7c15ull;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *s = x;
    return x * 0x2545f4914f6cdd1dull;
}

float pllm_test_randf(uint64_t *s) { return (float)((double)(pllm_test_rand(s) >> 11) / 9007199254740992.0 * 2.0 - 1.0); }

double pllm_test_rel_err(const float *a, const float *b, size_t n, double *max_abs)
{
    double num = 0, den = 0, mx = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * (double)b[i];
        if (fabs(d) > mx || d != d) mx = fabs(d);
    }
    if (max_abs) *max_abs = mx;
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

const char *pllm_test_env(const char *name, const char *def)
{
    const char *v = getenv(name);
    return v && *v ? v : def;
}

double pllm_test_thread_cpu(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
