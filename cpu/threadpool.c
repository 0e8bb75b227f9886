#include "cpu/threadpool.h"

#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
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

struct pllm_cpu_pool {
    int n;                      /* threads, the caller included */
    pthread_t *threads;         /* [n - 1] */
    worker_arg *args;           /* [n - 1] */
    int n_started;
    pllm_cpu_pool_fn fn;        /* the current region */
    void *arg;
    _Atomic uint32_t job_gen;   /* bumped to start a region (futex word) */
    _Atomic int quit;
    _Atomic uint32_t bar_count; /* threads arrived at the current barrier */
    _Atomic uint32_t bar_gen;   /* bumped when a barrier opens (futex word) */
    _Atomic uint32_t sleepers;  /* threads sleeping (or about to) on a futex word */
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
            else if (t - t0 > SPIN_SECONDS) break;
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

void pllm_cpu_pool_barrier(pllm_cpu_pool *p)
{
    if (p->n == 1) return;
    uint32_t gen = atomic_load(&p->bar_gen);
    if (atomic_fetch_add(&p->bar_count, 1) == (uint32_t)p->n - 1) {
        atomic_store(&p->bar_count, 0);
        bump_and_wake(p, &p->bar_gen);
    } else {
        wait_while_eq(p, &p->bar_gen, gen);
    }
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
        p->fn(p->arg, wa->ith, p->n);
        pllm_cpu_pool_barrier(p);
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
    fn(arg, 0, p->n);
    pllm_cpu_pool_barrier(p);
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
    pllm_cpu_pool *p = pllm_calloc(1, sizeof *p);
    if (!p) return PLLM_ERR_NOMEM;
    p->n = n_threads;
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
    atomic_store(&p->quit, 1);
    bump_and_wake(p, &p->job_gen);
    for (int i = 0; i < p->n_started; i++) pthread_join(p->threads[i], NULL);
    free(p->threads);
    free(p->args);
    free(p);
}

int pllm_cpu_pool_size(const pllm_cpu_pool *p) { return p->n; }

void pllm_cpu_split(int64_t n, int64_t align, int ith, int nth, int64_t *lo, int64_t *hi)
{
    if (align < 1) align = 1;
    int64_t units = (n + align - 1) / align;
    int64_t a = units * ith / nth, b = units * (ith + 1) / nth;
    *lo = PLLM_MIN(a * align, n);
    *hi = PLLM_MIN(b * align, n);
}
