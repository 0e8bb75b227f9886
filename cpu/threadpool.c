#include "cpu/threadpool.h"

#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

/* How long a waiting thread spins before it sleeps. */
#define SPIN_SECONDS 50e-6

typedef struct worker_arg {
    pllm_cpu_pool *pool;
    int ith;
} worker_arg;

/* Per-thread wait statistics (PLLM_POOL_STATS), one cache line each. */
typedef struct pool_tstats {
    _Alignas(64) double wait_s; /* time spent waiting in barriers */
    double region_s;            /* time inside regions */
    uint64_t barriers;
} pool_tstats;

/* Layout: the words written at every barrier (bar_count by each arrival, bar_gen by the last)
 * live on cache lines of their own, apart from the region's start (job_gen with fn and arg, one
 * line: one transfer per region) and from the read-mostly fields, so an arrival does not
 * invalidate the line the others spin on (2 threads: ~300 -> ~250 ns per barrier). */
struct pllm_cpu_pool {
    int n;                      /* threads, the caller included */
    pthread_t *threads;         /* [n - 1] */
    worker_arg *args;           /* [n - 1] */
    int n_started;
    pool_tstats *stats;         /* [n] when PLLM_POOL_STATS is set, else NULL */
    double spin_s;              /* how long a waiter spins before it sleeps */
    /* the region's start: written together by run(), read together by each worker */
    _Alignas(64) _Atomic uint32_t job_gen; /* bumped to start a region (futex word) */
    _Atomic int quit;
    pllm_cpu_pool_fn fn;        /* the current region */
    void *arg;
    _Alignas(64) _Atomic uint32_t bar_count; /* threads arrived at the current barrier */
    _Alignas(64) _Atomic uint32_t bar_gen;   /* bumped when a barrier opens (futex word) */
    _Alignas(64) _Atomic uint32_t sleepers;  /* threads sleeping (or about to) on a futex word */
};

static void futex_wait(_Atomic uint32_t *word, uint32_t old)
{
#ifdef __linux__
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_PRIVATE, old, NULL, NULL, 0);
#else
    (void)word; (void)old;
    sched_yield();
#endif
}

static void futex_wake_all(_Atomic uint32_t *word)
{
#ifdef __linux__
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
#else
    (void)word;
#endif
}

/* Wait until *word != old: spin first, then sleep. */
static void wait_while_eq(pllm_cpu_pool *p, _Atomic uint32_t *word, uint32_t old)
{
    double t0 = 0;
    for (uint32_t i = 0;; i++) {
        if (atomic_load_explicit(word, memory_order_acquire) != old) return;
        cpu_relax();
        if ((i & 63) == 63) {
            double t = pllm_now();
            if (t0 == 0) t0 = t;
            else if (t - t0 > p->spin_s) break;
        }
    }
    while (atomic_load(word) == old) {
        /* seq_cst: either the waker sees sleepers > 0, or the kernel sees the new value. */
        atomic_fetch_add(&p->sleepers, 1);
        futex_wait(word, old);
        atomic_fetch_sub(&p->sleepers, 1);
    }
}

/* Bump *word and wake whoever sleeps on it. */
static void bump_and_wake(pllm_cpu_pool *p, _Atomic uint32_t *word)
{
    atomic_fetch_add(word, 1);
    if (atomic_load(&p->sleepers) > 0) futex_wake_all(word);
}

static void barrier_wait(pllm_cpu_pool *p)
{
    uint32_t gen = atomic_load(&p->bar_gen);
    if (atomic_fetch_add(&p->bar_count, 1) == (uint32_t)p->n - 1) {
        atomic_store(&p->bar_count, 0);
        bump_and_wake(p, &p->bar_gen);
    } else {
        wait_while_eq(p, &p->bar_gen, gen);
    }
}

/* The barrier with its wait time recorded for thread ith (stats on). */
static void barrier_timed(pllm_cpu_pool *p, int ith)
{
    double t0 = pllm_now();
    barrier_wait(p);
    p->stats[ith].wait_s += pllm_now() - t0;
    p->stats[ith].barriers++;
}

static _Thread_local int tl_ith; /* the calling thread's index in the region it runs (stats) */

void pllm_cpu_pool_barrier(pllm_cpu_pool *p)
{
    if (p->n == 1) return;
    if (p->stats) barrier_timed(p, tl_ith);
    else barrier_wait(p);
}

static void run_fn(pllm_cpu_pool *p, int ith)
{
    if (!p->stats) {
        p->fn(p->arg, ith, p->n);
        return;
    }
    tl_ith = ith;
    double t0 = pllm_now();
    p->fn(p->arg, ith, p->n);
    p->stats[ith].region_s += pllm_now() - t0;
}

static void *worker_main(void *varg)
{
    worker_arg *wa = varg;
    pllm_cpu_pool *p = wa->pool;
    uint32_t seen = 0;
    for (;;) {
        wait_while_eq(p, &p->job_gen, seen);
        seen = atomic_load(&p->job_gen);
        if (atomic_load(&p->quit)) break;
        run_fn(p, wa->ith);
        barrier_wait(p);
    }
    return NULL;
}

void pllm_cpu_pool_run(pllm_cpu_pool *p, pllm_cpu_pool_fn fn, void *arg)
{
    if (p->n == 1) {
        fn(arg, 0, 1);
        return;
    }
    p->fn = fn;
    p->arg = arg;
    bump_and_wake(p, &p->job_gen); /* seq_cst: fn and arg are visible to the workers */
    run_fn(p, 0);
    barrier_wait(p);
}

int pllm_cpu_online_cores(void)
{
#ifdef __linux__
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n > 0) return n;
    }
#endif
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

pllm_status pllm_cpu_pool_create(pllm_cpu_pool **out, int n_threads)
{
    *out = NULL;
    if (n_threads < 1 || n_threads > 4096)
        return pllm_errorf(PLLM_ERR_INVALID, "thread pool: n_threads must be in [1, 4096], got %d", n_threads);
    pllm_cpu_pool *p = pllm_aligned_alloc(sizeof *p); /* 64-byte aligned: the layout above */
    if (!p) return PLLM_ERR_NOMEM;
    memset(p, 0, sizeof *p);
    p->n = n_threads;
    p->spin_s = SPIN_SECONDS;
    const char *spin = getenv("PLLM_POOL_SPIN_US");
    if (spin && *spin) p->spin_s = atof(spin) * 1e-6;
    const char *stats = getenv("PLLM_POOL_STATS");
    if (stats && *stats && strcmp(stats, "0") != 0) {
        p->stats = pllm_aligned_alloc(sizeof(pool_tstats) * (size_t)n_threads);
        if (!p->stats) {
            pllm_aligned_free(p);
            return PLLM_ERR_NOMEM;
        }
        memset(p->stats, 0, sizeof(pool_tstats) * (size_t)n_threads);
    }
    if (n_threads > 1) {
        p->threads = pllm_calloc((size_t)n_threads - 1, sizeof *p->threads);
        p->args = pllm_calloc((size_t)n_threads - 1, sizeof *p->args);
        if (!p->threads || !p->args) {
            pllm_cpu_pool_free(p);
            return PLLM_ERR_NOMEM;
        }
    }
    for (int i = 1; i < n_threads; i++) {
        p->args[i - 1] = (worker_arg){.pool = p, .ith = i};
        int rc = pthread_create(&p->threads[i - 1], NULL, worker_main, &p->args[i - 1]);
        if (rc != 0) {
            pllm_cpu_pool_free(p);
            return pllm_errorf(PLLM_ERR_NOMEM, "thread pool: pthread_create failed for thread %d of %d: %s", i,
                               n_threads, strerror(rc));
        }
        p->n_started++;
    }
    *out = p;
    return PLLM_OK;
}

void pllm_cpu_pool_free(pllm_cpu_pool *p)
{
    if (!p) return;
    if (p->stats && p->n > 1) {
        pllm_cpu_pool_stats st;
        pllm_cpu_pool_get_stats(p, &st);
        fprintf(stderr, "thread pool (%d threads): %llu regions, %llu barriers per thread, %.3f s in regions, %.1f%% of it "
                        "waiting in barriers (%.2f us per barrier)\n",
                p->n, (unsigned long long)st.regions, (unsigned long long)st.barriers, st.region_s,
                st.region_s > 0 ? 100 * st.wait_s / st.region_s : 0, st.barriers ? 1e6 * st.wait_s / (double)st.barriers : 0);
    }
    atomic_store(&p->quit, 1);
    bump_and_wake(p, &p->job_gen);
    for (int i = 0; i < p->n_started; i++) pthread_join(p->threads[i], NULL);
    pllm_aligned_free(p->stats);
    free(p->threads);
    free(p->args);
    pllm_aligned_free(p);
}

int pllm_cpu_pool_size(const pllm_cpu_pool *p) { return p->n; }

bool pllm_cpu_pool_get_stats(const pllm_cpu_pool *p, pllm_cpu_pool_stats *out)
{
    memset(out, 0, sizeof *out);
    if (!p->stats) return false;
    for (int i = 0; i < p->n; i++) {
        out->wait_s += p->stats[i].wait_s / p->n;
        out->region_s += p->stats[i].region_s / p->n;
        out->barriers += p->stats[i].barriers;
    }
    out->barriers /= (uint64_t)p->n;
    out->regions = atomic_load(&p->job_gen);
    return true;
}

void pllm_cpu_split(int64_t n, int64_t align, int ith, int nth, int64_t *lo, int64_t *hi)
{
    if (align < 1) align = 1;
    int64_t units = (n + align - 1) / align;
    int64_t a = units * ith / nth, b = units * (ith + 1) / nth;
    *lo = PLLM_MIN(a * align, n);
    *hi = PLLM_MIN(b * align, n);
}
