/*
 * pool_bench.c: the CPU thread pool's synchronisation costs (not a test).
 *
 *     pool_bench [--threads N] [--barriers 200000] [--regions 20000] [--repeat 5]
 *
 * Prints, best of --repeat runs: barriers per second (and ns per barrier) of N threads doing
 * nothing but barriers inside one region, and empty regions per second (a region's start, wake-up
 * and closing barrier). With PLLM_POOL_SPIN_US the spin time before sleeping can be varied.
 * Multiply ns per barrier by the barriers of a step (cpu_backend.c: about 8 per layer) for the
 * synchronisation floor of a decode step.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/threadpool.h"

typedef struct bar_arg {
    pllm_cpu_pool *pool;
    int n;
} bar_arg;

static void barriers_fn(void *varg, int ith, int nth)
{
    (void)ith; (void)nth;
    bar_arg *a = varg;
    for (int i = 0; i < a->n; i++) pllm_cpu_pool_barrier(a->pool);
}

static void empty_fn(void *varg, int ith, int nth) { (void)varg; (void)ith; (void)nth; }

int main(int argc, char **argv)
{
    int n_threads = pllm_cpu_online_cores(), n_bar = 200000, n_reg = 20000, repeat = 5;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) n_threads = atoi(argv[++i]);
        else if (strcmp(argv[i], "--barriers") == 0 && i + 1 < argc) n_bar = atoi(argv[++i]);
        else if (strcmp(argv[i], "--regions") == 0 && i + 1 < argc) n_reg = atoi(argv[++i]);
        else if (strcmp(argv[i], "--repeat") == 0 && i + 1 < argc) repeat = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: pool_bench [--threads N] [--barriers N] [--regions N] [--repeat N]\n");
            return 2;
        }
    }
    pllm_cpu_pool *pool = NULL;
    if (n_threads < 1 || n_bar < 1 || n_reg < 1 || repeat < 1 || pllm_cpu_pool_create(&pool, n_threads) != PLLM_OK) {
        fprintf(stderr, "pool_bench: bad arguments or %s\n", pllm_errmsg());
        return 1;
    }
    double best_bar = 1e30, best_reg = 1e30;
    for (int r = 0; r < repeat; r++) {
        bar_arg a = {.pool = pool, .n = n_bar};
        double t0 = pllm_now();
        pllm_cpu_pool_run(pool, barriers_fn, &a);
        double t1 = pllm_now();
        for (int i = 0; i < n_reg; i++) pllm_cpu_pool_run(pool, empty_fn, NULL);
        double t2 = pllm_now();
        best_bar = PLLM_MIN(best_bar, t1 - t0);
        best_reg = PLLM_MIN(best_reg, t2 - t1);
    }
    printf("pool %d threads: %.2f M barriers/s (%.0f ns each), %.2f M empty regions/s (%.0f ns each)\n", n_threads,
           n_bar / best_bar / 1e6, 1e9 * best_bar / n_bar, n_reg / best_reg / 1e6, 1e9 * best_reg / n_reg);
    pllm_cpu_pool_free(pool);
    return 0;
}
