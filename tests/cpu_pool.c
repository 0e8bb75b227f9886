/*
 * cpu_pool: the thread pool (cpu/threadpool.h): every barrier separates phases (no thread sees a
 * stale value from the previous phase or runs ahead into the next), for 1 to 4 threads (more
 * threads than cores included), with the spinning path and with the futex path forced
 * (PLLM_POOL_SPIN_US=0); the statistics count regions and barriers exactly; pllm_cpu_split tiles
 * [0, n) with aligned contiguous parts.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/threadpool.h"
#include "testutil.h"

#define PHASES 40

typedef struct phase_arg {
    pllm_cpu_pool *pool;
    _Atomic int slots[8];
    _Atomic int errors;
    int round;
} phase_arg;

static void phases_fn(void *varg, int ith, int nth)
{
    phase_arg *a = varg;
    for (int k = 0; k < PHASES; k++) {
        int v = a->round * PHASES + k;
        atomic_store_explicit(&a->slots[ith], v, memory_order_relaxed);
        pllm_cpu_pool_barrier(a->pool);
        for (int j = 0; j < nth; j++)
            if (atomic_load_explicit(&a->slots[j], memory_order_relaxed) != v) atomic_fetch_add(&a->errors, 1);
        pllm_cpu_pool_barrier(a->pool);
    }
}

static void check_pool(int n, int rounds)
{
    pllm_cpu_pool *p = NULL;
    CHECK_OK(pllm_cpu_pool_create(&p, n));
    if (!p) return;
    CHECK(pllm_cpu_pool_size(p) == n);
    phase_arg a = {.pool = p};
    for (int r = 0; r < rounds; r++) {
        a.round = r;
        pllm_cpu_pool_run(p, phases_fn, &a);
    }
    CHECK(atomic_load(&a.errors) == 0);
    pllm_cpu_pool_stats st;
    bool have = pllm_cpu_pool_get_stats(p, &st);
    const char *env = getenv("PLLM_POOL_STATS");
    if (env && strcmp(env, "1") == 0 && n > 1) {
        CHECK(have);
        CHECK(st.regions == (uint64_t)rounds);
        CHECK(st.barriers == (uint64_t)rounds * 2 * PHASES);
        CHECK(st.wait_s >= 0 && st.wait_s <= st.region_s + 1e-3);
    } else if (!env) {
        CHECK(!have && st.barriers == 0);
    }
    pllm_cpu_pool_free(p);
}

int main(void)
{
    for (int n = 1; n <= 4; n++) check_pool(n, 50);
    setenv("PLLM_POOL_SPIN_US", "0", 1); /* every wait sleeps on the futex */
    for (int n = 2; n <= 3; n++) check_pool(n, 20);
    setenv("PLLM_POOL_STATS", "1", 1);
    for (int n = 1; n <= 3; n++) check_pool(n, 10);
    unsetenv("PLLM_POOL_SPIN_US");
    check_pool(2, 10);
    unsetenv("PLLM_POOL_STATS");

    CHECK(pllm_cpu_pool_create(&(pllm_cpu_pool *){NULL}, 0) != PLLM_OK);
    const int64_t ns[] = {0, 1, 15, 16, 17, 1000, 1537};
    for (size_t i = 0; i < PLLM_ARRAY_LEN(ns); i++)
        for (int64_t align = 1; align <= 32; align *= 4)
            for (int nth = 1; nth <= 5; nth++) {
                int64_t next = 0;
                for (int ith = 0; ith < nth; ith++) {
                    int64_t lo, hi;
                    pllm_cpu_split(ns[i], align, ith, nth, &lo, &hi);
                    CHECK(lo == next && hi >= lo && hi <= ns[i]);
                    CHECK(lo % align == 0 || lo == ns[i]);
                    next = hi;
                }
                CHECK(next == ns[i]);
            }
    printf("cpu_pool: 1-4 threads, spin and futex paths, stats, split\n");
    return pllm_test_finish("cpu_pool");
}
