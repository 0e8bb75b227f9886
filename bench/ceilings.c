/*
 * ceilings.c: what this machine can do at most, so that kernel and end-to-end figures can be
 * given as a fraction of it (not a test; run by hand or by bench/cpu_report.sh).
 *
 *     ceilings [--threads N] [--mb 1024] [--repeat 5] [--json FILE]
 *
 * One line per ceiling on stdout, each measured with 1 thread and with N threads (default: the
 * online cores), best of --repeat runs (on a shared machine the fastest run is the least
 * disturbed one):
 *   read_bw      sustained read bandwidth, GB/s: each thread streams its contiguous slice of a
 *                --mb MiB buffer (far larger than the caches) with the widest vector loads the
 *                CPU has, folding them into independent accumulators (no arithmetic bound);
 *                the best of plain loads and loads with software prefetch 1, 2 and 4 KiB ahead
 *                (what the matmul does; on Zen 4 it streams faster than the hardware prefetcher);
 *   fp32_fma     peak fp32 FMA rate, GFLOP/s (2 per lane): 12 independent register-resident
 *                accumulators (enough to hide the 4-cycle FMA latency on 2 ports);
 *   int8_vnni512 peak int8 dot-product rate of vpdpbusd on 512-bit registers, GOP/s (each
 *                instruction does 64 u8 x s8 products and 64 adds = 128 ops);
 *   int8_avxvnni the same with 256-bit AVX-VNNI (VEX) vpdpbusd (64 ops);
 *   int8_amx     AMX tdpbssd from tile registers (16x64 . 64x16 int8 -> 16x16 int32 = 32768
 *                ops each), after asking the kernel for the tile state (arch_prctl).
 * Everything is chosen at run time (CPUID), so the binary runs on any x86-64; a ceiling the CPU
 * lacks prints "skipped" with the reason. --json FILE also writes the figures as one JSON object
 * {"read_bw_gbs": {"1": x, "N": y}, ...} that other benches read.
 */
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/threadpool.h"
#include "model/common.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#define CEIL_X86 1
#include "bench/vnni_peak.h"
#else
#define CEIL_X86 0
#endif

/* ---- CPU features ----------------------------------------------------------------------- */

typedef struct features {
    bool avx2, avx512, vnni512, avxvnni, amx_int8;
} features;

#if CEIL_X86
static bool os_saves_zmm_and_ymm(uint64_t *xcr0_out)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return false; /* OSXSAVE */
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    *xcr0_out = ((uint64_t)hi << 32) | lo;
    return true;
}
#endif

static features detect(void)
{
    features f = {0};
#if CEIL_X86
    uint64_t xcr0 = 0;
    if (!os_saves_zmm_and_ymm(&xcr0)) return f;
    unsigned a, b, c, d;
    __cpuid_count(7, 0, a, b, c, d);
    bool ymm = (xcr0 & 6) == 6, zmm = (xcr0 & 0xe6) == 0xe6;
    f.avx2 = ymm && (b & (1u << 5)) && __builtin_cpu_supports("fma");
    f.avx512 = zmm && (b & (1u << 16));
    f.vnni512 = f.avx512 && (c & (1u << 11));
    f.amx_int8 = (d & (1u << 24)) && (d & (1u << 25)) &&
                 (xcr0 & (3u << 17)) == (3u << 17); /* XTILECFG/DATA */
    unsigned a1, b1, c1, d1;
    __cpuid_count(7, 1, a1, b1, c1, d1);
    f.avxvnni = ymm && (a1 & (1u << 4));
#endif
    return f;
}

/* ---- threads ------------------------------------------------------------------------------ */

typedef double (*work_fn)(void *arg, int ith, int nth); /* returns the units of work done */

typedef struct run_ctx {
    work_fn fn;
    void *arg;
    double units[64];
    double t_start[64], t_end[64];
} run_ctx;

static void run_region(void *varg, int ith, int nth)
{
    run_ctx *r = varg;
    r->t_start[ith] = pllm_now();
    r->units[ith] = r->fn(r->arg, ith, nth);
    r->t_end[ith] = pllm_now();
}

/* Units per second over all threads: total work / (last end - first start); best of repeat. */
static double measure(pllm_cpu_pool *pool, work_fn fn, void *arg, int repeat)
{
    double best = 0;
    int n = pllm_cpu_pool_size(pool);
    for (int r = 0; r < repeat; r++) {
        run_ctx ctx = {.fn = fn, .arg = arg};
        pllm_cpu_pool_run(pool, run_region, &ctx);
        double t0 = ctx.t_start[0], t1 = ctx.t_end[0], u = 0;
        for (int i = 0; i < n; i++) {
            t0 = PLLM_MIN(t0, ctx.t_start[i]);
            t1 = PLLM_MAX(t1, ctx.t_end[i]);
            u += ctx.units[i];
        }
        if (t1 > t0 && u / (t1 - t0) > best) best = u / (t1 - t0);
    }
    return best;
}

/* ---- read bandwidth ----------------------------------------------------------------------- */

typedef struct bw_arg {
    const uint8_t *buf;
    size_t bytes;
    int isa; /* 2: avx512, 1: avx2, 0: scalar 64-bit */
    int pf;  /* software prefetch this many bytes ahead (0: none) */
    volatile uint64_t sink[64];
} bw_arg;

#if CEIL_X86
__attribute__((target("avx512f"))) static uint64_t read_avx512(const uint8_t *p, size_t n, int pf)
{
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 256 <= n; i += 256) {
        if (pf)
            for (int c = 0; c < 256; c += 64) _mm_prefetch((const char *)(p + i + (size_t)pf + (size_t)c), _MM_HINT_T0);
        a0 = _mm512_xor_si512(a0, _mm512_load_si512((const void *)(p + i)));
        a1 = _mm512_xor_si512(a1, _mm512_load_si512((const void *)(p + i + 64)));
        a2 = _mm512_xor_si512(a2, _mm512_load_si512((const void *)(p + i + 128)));
        a3 = _mm512_xor_si512(a3, _mm512_load_si512((const void *)(p + i + 192)));
    }
    a0 = _mm512_xor_si512(_mm512_xor_si512(a0, a1), _mm512_xor_si512(a2, a3));
    return (uint64_t)_mm512_reduce_or_epi64(a0);
}

__attribute__((target("avx2"))) static uint64_t read_avx2(const uint8_t *p, size_t n, int pf)
{
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 128 <= n; i += 128) {
        if (pf)
            for (int c = 0; c < 128; c += 64) _mm_prefetch((const char *)(p + i + (size_t)pf + (size_t)c), _MM_HINT_T0);
        a0 = _mm256_xor_si256(a0, _mm256_load_si256((const __m256i *)(p + i)));
        a1 = _mm256_xor_si256(a1, _mm256_load_si256((const __m256i *)(p + i + 32)));
        a2 = _mm256_xor_si256(a2, _mm256_load_si256((const __m256i *)(p + i + 64)));
        a3 = _mm256_xor_si256(a3, _mm256_load_si256((const __m256i *)(p + i + 96)));
    }
    a0 = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
    return (uint64_t)_mm256_extract_epi64(a0, 0) ^ (uint64_t)_mm256_extract_epi64(a0, 3);
}
#endif

static uint64_t read_scalar(const uint8_t *p, size_t n)
{
    const uint64_t *q = (const uint64_t *)p;
    uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    for (size_t i = 0; i + 4 <= n / 8; i += 4) {
        a0 ^= q[i];
        a1 ^= q[i + 1];
        a2 ^= q[i + 2];
        a3 ^= q[i + 3];
    }
    return a0 ^ a1 ^ a2 ^ a3;
}

static double bw_work(void *varg, int ith, int nth)
{
    bw_arg *a = varg;
    int64_t lo, hi;
    pllm_cpu_split((int64_t)a->bytes, 4096, ith, nth, &lo, &hi);
    const uint8_t *p = a->buf + lo;
    size_t n = (size_t)(hi - lo);
    uint64_t s;
#if CEIL_X86
    if (a->isa == 2)
        s = read_avx512(p, n, a->pf);
    else if (a->isa == 1)
        s = read_avx2(p, n, a->pf);
    else
        s = read_scalar(p, n);
#else
    s = read_scalar(p, n);
#endif
    a->sink[ith & 63] = s;
    return (double)n;
}

/* ---- compute peaks ------------------------------------------------------------------------ */

typedef struct peak_arg {
    int64_t iters;
} peak_arg;

#define FMA_ACC 12
#if CEIL_X86
/* Each iteration: FMA_ACC vfmadd231ps zmm = FMA_ACC * 16 lanes * 2 flops. */
__attribute__((target("avx512f"))) static double fma512_work(void *varg, int ith, int nth)
{
    (void)ith;
    (void)nth;
    const peak_arg *a = varg;
    const __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-7f);
    __m512 a0 = _mm512_set1_ps((float)0), a1 = _mm512_set1_ps((float)1),
           a2 = _mm512_set1_ps((float)2), a3 = _mm512_set1_ps((float)3),
           a4 = _mm512_set1_ps((float)4), a5 = _mm512_set1_ps((float)5),
           a6 = _mm512_set1_ps((float)6), a7 = _mm512_set1_ps((float)7),
           a8 = _mm512_set1_ps((float)8), a9 = _mm512_set1_ps((float)9),
           a10 = _mm512_set1_ps((float)10), a11 = _mm512_set1_ps((float)11);
    for (int64_t it = 0; it < a->iters; it++) {
        a0 = _mm512_fmadd_ps(a0, x, y);
        a1 = _mm512_fmadd_ps(a1, x, y);
        a2 = _mm512_fmadd_ps(a2, x, y);
        a3 = _mm512_fmadd_ps(a3, x, y);
        a4 = _mm512_fmadd_ps(a4, x, y);
        a5 = _mm512_fmadd_ps(a5, x, y);
        a6 = _mm512_fmadd_ps(a6, x, y);
        a7 = _mm512_fmadd_ps(a7, x, y);
        a8 = _mm512_fmadd_ps(a8, x, y);
        a9 = _mm512_fmadd_ps(a9, x, y);
        a10 = _mm512_fmadd_ps(a10, x, y);
        a11 = _mm512_fmadd_ps(a11, x, y);
        __asm__ volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5));
        __asm__ volatile("" : "+v"(a6), "+v"(a7), "+v"(a8), "+v"(a9), "+v"(a10), "+v"(a11));
    }
    __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                             _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
    s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)));
    volatile float sink = _mm512_reduce_add_ps(s);
    (void)sink;
    return (double)a->iters * FMA_ACC * 16 * 2;
}

__attribute__((target("avx2,fma"))) static double fma256_work(void *varg, int ith, int nth)
{
    (void)ith;
    (void)nth;
    const peak_arg *a = varg;
    const __m256 x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-7f);
    __m256 a0 = _mm256_set1_ps((float)0), a1 = _mm256_set1_ps((float)1),
           a2 = _mm256_set1_ps((float)2), a3 = _mm256_set1_ps((float)3),
           a4 = _mm256_set1_ps((float)4), a5 = _mm256_set1_ps((float)5),
           a6 = _mm256_set1_ps((float)6), a7 = _mm256_set1_ps((float)7),
           a8 = _mm256_set1_ps((float)8), a9 = _mm256_set1_ps((float)9),
           a10 = _mm256_set1_ps((float)10), a11 = _mm256_set1_ps((float)11);
    for (int64_t it = 0; it < a->iters; it++) {
        a0 = _mm256_fmadd_ps(a0, x, y);
        a1 = _mm256_fmadd_ps(a1, x, y);
        a2 = _mm256_fmadd_ps(a2, x, y);
        a3 = _mm256_fmadd_ps(a3, x, y);
        a4 = _mm256_fmadd_ps(a4, x, y);
        a5 = _mm256_fmadd_ps(a5, x, y);
        a6 = _mm256_fmadd_ps(a6, x, y);
        a7 = _mm256_fmadd_ps(a7, x, y);
        a8 = _mm256_fmadd_ps(a8, x, y);
        a9 = _mm256_fmadd_ps(a9, x, y);
        a10 = _mm256_fmadd_ps(a10, x, y);
        a11 = _mm256_fmadd_ps(a11, x, y);
        __asm__ volatile("" : "+x"(a0), "+x"(a1), "+x"(a2), "+x"(a3), "+x"(a4), "+x"(a5));
        __asm__ volatile("" : "+x"(a6), "+x"(a7), "+x"(a8), "+x"(a9), "+x"(a10), "+x"(a11));
    }
    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                             _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
    s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11)));
    float t[8];
    _mm256_storeu_ps(t, s);
    volatile float sink = t[0];
    (void)sink;
    return (double)a->iters * FMA_ACC * 8 * 2;
}

/* vpdpbusd zmm: 64 u8 x s8 products + 64 adds per instruction (the loop in vnni_peak.h). */
static double vnni512_work(void *varg, int ith, int nth)
{
    (void)ith;
    (void)nth;
    return pllm_bench_vnni512_loop(((const peak_arg *)varg)->iters);
}

/* VEX vpdpbusd ymm (AVX-VNNI): 32 products + 32 adds per instruction. */
__attribute__((target("avx2,avxvnni"))) static double avxvnni_work(void *varg, int ith, int nth)
{
    (void)ith;
    (void)nth;
    const peak_arg *a = varg;
    const __m256i x = _mm256_set1_epi8(3), y = _mm256_set1_epi8(-2);
    __m256i a0 = _mm256_set1_epi32(0), a1 = _mm256_set1_epi32(1), a2 = _mm256_set1_epi32(2),
            a3 = _mm256_set1_epi32(3), a4 = _mm256_set1_epi32(4), a5 = _mm256_set1_epi32(5),
            a6 = _mm256_set1_epi32(6), a7 = _mm256_set1_epi32(7), a8 = _mm256_set1_epi32(8),
            a9 = _mm256_set1_epi32(9), a10 = _mm256_set1_epi32(10), a11 = _mm256_set1_epi32(11);
    for (int64_t it = 0; it < a->iters; it++) {
        a0 = _mm256_dpbusd_avx_epi32(a0, x, y);
        a1 = _mm256_dpbusd_avx_epi32(a1, x, y);
        a2 = _mm256_dpbusd_avx_epi32(a2, x, y);
        a3 = _mm256_dpbusd_avx_epi32(a3, x, y);
        a4 = _mm256_dpbusd_avx_epi32(a4, x, y);
        a5 = _mm256_dpbusd_avx_epi32(a5, x, y);
        a6 = _mm256_dpbusd_avx_epi32(a6, x, y);
        a7 = _mm256_dpbusd_avx_epi32(a7, x, y);
        a8 = _mm256_dpbusd_avx_epi32(a8, x, y);
        a9 = _mm256_dpbusd_avx_epi32(a9, x, y);
        a10 = _mm256_dpbusd_avx_epi32(a10, x, y);
        a11 = _mm256_dpbusd_avx_epi32(a11, x, y);
        __asm__ volatile("" : "+x"(a0), "+x"(a1), "+x"(a2), "+x"(a3), "+x"(a4), "+x"(a5));
        __asm__ volatile("" : "+x"(a6), "+x"(a7), "+x"(a8), "+x"(a9), "+x"(a10), "+x"(a11));
    }
    __m256i s =
        _mm256_add_epi32(_mm256_add_epi32(_mm256_add_epi32(a0, a1), _mm256_add_epi32(a2, a3)),
                         _mm256_add_epi32(_mm256_add_epi32(a4, a5), _mm256_add_epi32(a6, a7)));
    s = _mm256_add_epi32(s, _mm256_add_epi32(_mm256_add_epi32(a8, a9), _mm256_add_epi32(a10, a11)));
    volatile int sink = _mm256_extract_epi32(s, 0);
    (void)sink;
    return (double)a->iters * FMA_ACC * 64;
}

/* AMX: the tile configuration (palette 1): tiles 0-3 accumulators (16 rows x 64 bytes), 4-5
 * A (16 x 64 int8), 6-7 B (16 x 64 int8, K/4 rows of 4-byte groups). */
typedef struct tile_cfg {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_cfg;

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA  18

static bool amx_permission(const char **why)
{
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0) {
        *why = "the kernel refused the AMX tile state (arch_prctl ARCH_REQ_XCOMP_PERM)";
        return false;
    }
    return true;
}

__attribute__((target("amx-tile,amx-int8"))) static double amx_work(void *varg, int ith, int nth)
{
    (void)ith;
    (void)nth;
    const peak_arg *a = varg;
    tile_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) {
        cfg.colsb[t] = 64;
        cfg.rows[t] = 16;
    }
    _Alignas(64) int8_t buf[16 * 64];
    for (int i = 0; i < 16 * 64; i++) buf[i] = (int8_t)(i % 7 - 3);
    _Alignas(64) int32_t out[16 * 16];
    _tile_loadconfig(&cfg);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_loadd(4, buf, 64);
    _tile_loadd(5, buf, 64);
    _tile_loadd(6, buf, 64);
    _tile_loadd(7, buf, 64);
    for (int64_t it = 0; it < a->iters; it++) {
        _tile_dpbssd(0, 4, 6);
        _tile_dpbssd(1, 4, 7);
        _tile_dpbssd(2, 5, 6);
        _tile_dpbssd(3, 5, 7);
    }
    _tile_stored(0, out, 64);
    _tile_release();
    volatile int32_t sink = out[0];
    (void)sink;
    return (double)a->iters * 4 * 16 * 16 * 64 * 2;
}
#endif

/* ---- main --------------------------------------------------------------------------------- */

typedef struct ceiling {
    const char *key, *unit, *what;
    double v1, vn; /* 1 thread, N threads; < 0: skipped */
    const char *skip;
} ceiling;

static void print_ceiling(const ceiling *c, int n)
{
    if (c->skip)
        printf("%-14s skipped: %s\n", c->key, c->skip);
    else
        printf("%-14s %9.1f %-7s 1 thread   %9.1f %-7s %d threads   (%s)\n", c->key, c->v1, c->unit,
               c->vn, c->unit, n, c->what);
    fflush(stdout);
}

static double timed_peak(pllm_cpu_pool *pool, work_fn fn, int repeat)
{
    /* calibrate: iterations for ~0.1 s of one thread, then measure */
    peak_arg a = {.iters = 1 << 14};
    double t0 = pllm_now();
    measure(pool, fn, &a, 1);
    double per_iter = (pllm_now() - t0) / (double)a.iters;
    a.iters = (int64_t)PLLM_MAX(1e4, PLLM_MIN(1e9, 0.1 / PLLM_MAX(per_iter, 1e-12)));
    return measure(pool, fn, &a, repeat);
}

int main(int argc, char **argv)
{
    int n_threads = pllm_cpu_online_cores(), repeat = 5;
    size_t mb = 1024;
    const char *json_path = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
            n_threads = atoi(argv[++i]);
        else if (strcmp(argv[i], "--mb") == 0 && i + 1 < argc)
            mb = (size_t)atol(argv[++i]);
        else if (strcmp(argv[i], "--repeat") == 0 && i + 1 < argc)
            repeat = atoi(argv[++i]);
        else if (strcmp(argv[i], "--json") == 0 && i + 1 < argc)
            json_path = argv[++i];
        else {
            fprintf(stderr,
                    "usage: ceilings [--threads N] [--mb MiB] [--repeat N] [--json FILE]\n");
            return 2;
        }
    }
    if (n_threads < 1 || n_threads > 64 || repeat < 1 || mb < 16) {
        fprintf(stderr, "ceilings: --threads must be in [1, 64], --repeat >= 1, --mb >= 16\n");
        return 2;
    }
    features f = detect();
    printf("cpu features: avx2+fma %s, avx512f %s, avx512-vnni %s, avx-vnni %s, amx-int8 %s\n",
           f.avx2 ? "yes" : "no", f.avx512 ? "yes" : "no", f.vnni512 ? "yes" : "no",
           f.avxvnni ? "yes" : "no", f.amx_int8 ? "yes" : "no");

    pllm_cpu_pool *pools[2] = {NULL, NULL};
    if (pllm_cpu_pool_create(&pools[0], 1) || pllm_cpu_pool_create(&pools[1], n_threads)) {
        fprintf(stderr, "ceilings: %s\n", pllm_errmsg());
        pllm_cpu_pool_free(pools[0]);
        return 1;
    }

    ceiling cs[5] = {
        {.key = "read_bw", .unit = "GB/s", .what = "streaming vector reads of a large buffer"},
        {.key = "fp32_fma", .unit = "GFLOP/s", .what = "register-resident FMA, 2 flops per lane"},
        {.key = "int8_vnni512", .unit = "GOP/s", .what = "vpdpbusd zmm, 2 ops per int8 product"},
        {.key = "int8_avxvnni",
         .unit = "GOP/s",
         .what = "vpdpbusd ymm (VEX), 2 ops per int8 product"},
        {.key = "int8_amx",
         .unit = "GOP/s",
         .what = "AMX tdpbssd from tiles, 2 ops per int8 product"},
    };

    /* bandwidth */
    bw_arg *bw = pllm_calloc(1, sizeof *bw);
    bw->bytes = mb << 20;
    bw->buf = pllm_aligned_alloc(bw->bytes);
    if (!bw->buf) {
        fprintf(stderr, "ceilings: cannot allocate %zu MiB\n", mb);
        return 1;
    }
    memset((void *)bw->buf, 1, bw->bytes); /* fault every page in */
    bw->isa = f.avx512 ? 2 : f.avx2 ? 1 : 0;
    /* plain loads, and loads with software prefetch ahead (the integer matmul prefetches its
     * panel stream; on some CPUs, AMD Zen 4 here, that streams faster than the hardware
     * prefetcher alone): the best of both is the ceiling */
    const int pfs[] = {0, 1024, 2048, 4096};
    for (int p = 0; p < 2; p++) {
        double v = 0;
        for (size_t k = 0; k < sizeof pfs / sizeof pfs[0]; k++) {
            bw->pf = bw->isa ? pfs[k] : 0;
            measure(pools[p], bw_work, bw, 1); /* warm-up */
            v = PLLM_MAX(v, measure(pools[p], bw_work, bw, repeat) / 1e9);
        }
        if (p == 0)
            cs[0].v1 = v;
        else
            cs[0].vn = v;
    }
    print_ceiling(&cs[0], n_threads);
    pllm_aligned_free((void *)bw->buf);
    free(bw);

    /* compute peaks */
    work_fn fns[4] = {NULL, NULL, NULL, NULL};
#if CEIL_X86
    fns[0] = f.avx512 ? fma512_work : f.avx2 ? fma256_work : NULL;
    if (f.avx2 && !f.avx512)
        cs[1].what = "register-resident FMA on ymm (no AVX-512), 2 flops per lane";
    fns[1] = f.vnni512 ? vnni512_work : NULL;
    fns[2] = f.avxvnni ? avxvnni_work : NULL;
    const char *amx_why = "the CPU has no AMX-INT8";
    fns[3] = f.amx_int8 && amx_permission(&amx_why) ? amx_work : NULL;
    const char *why[4] = {"the CPU has neither AVX-512 nor AVX2+FMA", "the CPU has no AVX-512 VNNI",
                          "the CPU has no AVX-VNNI", amx_why};
#else
    const char *why[4] = {"not an x86-64 build", "not an x86-64 build", "not an x86-64 build",
                          "not an x86-64 build"};
#endif
    for (int k = 0; k < 4; k++) {
        ceiling *c = &cs[k + 1];
        if (!fns[k]) {
            c->skip = why[k];
        } else {
            c->v1 = timed_peak(pools[0], fns[k], repeat) / 1e9;
            c->vn = timed_peak(pools[1], fns[k], repeat) / 1e9;
        }
        print_ceiling(c, n_threads);
    }

    int rc = 0;
    if (json_path) {
        json_t *root = json_object();
        json_object_set_new(root, "threads", json_integer(n_threads));
        for (int k = 0; k < 5; k++) {
            char key[64];
            snprintf(key, sizeof key, "%s_%s", cs[k].key,
                     k == 0   ? "gbs"
                     : k == 1 ? "gflops"
                              : "gops");
            if (cs[k].skip) {
                json_object_set_new(root, key, json_null());
                continue;
            }
            json_t *v = json_object();
            char nk[16];
            snprintf(nk, sizeof nk, "%d", n_threads);
            json_object_set_new(v, "1", json_real(cs[k].v1));
            json_object_set_new(v, nk, json_real(cs[k].vn));
            json_object_set_new(root, key, v);
        }
        if (json_dump_file(root, json_path, JSON_INDENT(1)) != 0) {
            fprintf(stderr, "ceilings: cannot write %s\n", json_path);
            rc = 1;
        }
        json_decref(root);
    }
    pllm_cpu_pool_free(pools[0]);
    pllm_cpu_pool_free(pools[1]);
    return rc;
}
