/*
 * threadpool.h: a persistent pool of worker threads for the CPU backend, with a cheap barrier.
 *
 * The model's forward pass runs as one parallel region: pllm_cpu_pool_run(pool, fn, arg)
 * calls fn(arg, ith, nth) on every thread of the pool at once (the calling thread is ith 0,
 * the workers 1 .. nth-1) and returns when all of them have returned. Inside fn the threads
 * separate consecutive operations with pllm_cpu_pool_barrier(), which returns once all nth
 * threads have reached it. Every thread must reach the same sequence of barriers.
 *
 * Waiting spins for a short while (a few tens of microseconds, the time one operation of a
 * decode step takes) and then sleeps on a futex, so an idle pool and an oversubscribed machine
 * cost no CPU.
 *
 * Knobs for measurement (read once at create, from the environment): PLLM_POOL_SPIN_US sets the
 * spin time in microseconds (default 50); PLLM_POOL_STATS=1 records, per thread, the time spent in
 * regions and waiting in barriers (pllm_cpu_pool_get_stats; printed to stderr when the pool is
 * freed).
 *
 * Ownership: pllm_cpu_pool_create() returns a pool freed (threads joined) by
 * pllm_cpu_pool_free(). A pool runs one region at a time; run() is not reentrant and must be
 * called from one thread.
 */
#pragma once

#include "model/common.h"

typedef struct pllm_cpu_pool pllm_cpu_pool;

typedef void (*pllm_cpu_pool_fn)(void *arg, int ith, int nth);

/* n_threads >= 1 (the caller counts as one: n_threads - 1 workers are started). */
pllm_status pllm_cpu_pool_create(pllm_cpu_pool **out, int n_threads);
void pllm_cpu_pool_free(pllm_cpu_pool *p);
int pllm_cpu_pool_size(const pllm_cpu_pool *p);

/* Run fn on every thread of the pool; returns when all have returned. */
void pllm_cpu_pool_run(pllm_cpu_pool *p, pllm_cpu_pool_fn fn, void *arg);
/* Inside fn: wait until every thread of the pool has reached this barrier. */
void pllm_cpu_pool_barrier(pllm_cpu_pool *p);

typedef struct pllm_cpu_pool_stats {
    uint64_t regions;   /* regions run */
    uint64_t barriers;  /* barriers passed per thread (the region's closing one excluded) */
    double region_s;    /* seconds inside regions, mean over threads */
    double wait_s;      /* seconds waiting in barriers, mean over threads (sync cost + imbalance) */
} pllm_cpu_pool_stats;

/* The statistics so far; false (and zeros) unless the pool was created with PLLM_POOL_STATS. */
bool pllm_cpu_pool_get_stats(const pllm_cpu_pool *p, pllm_cpu_pool_stats *out);

/* Split [0, n) into nth contiguous parts of sizes that differ by at most `align` (parts start
 * at multiples of align, except that the last part ends at n); part ith is [*lo, *hi). */
void pllm_cpu_split(int64_t n, int64_t align, int ith, int nth, int64_t *lo, int64_t *hi);

/* Number of online cores (at least 1). */
int pllm_cpu_online_cores(void);
