/*
 * gemm_lab.c: the kernel lab for the CPU matmul (not a test; run by hand).
 *
 *     gemm_lab [--quick] [--head] [--dtype Q4_1,Q8_0] [--variants vnni,rolled,nt6] [--tok 16,512] [--ms 300]
 *
 * Every variant is first checked against the scalar reference on random data with odd shapes
 * (K per dtype block size, n_tok 1 3 7 16 33 512, row ranges not multiples of the 16-row panel;
 * the integer variants must be bitwise equal, the float kernels within float rounding); then the
 * chosen variants (default: vnni and rolled) are timed on one thread on the SmolLM2-135M matrix
 * shapes (gate/up 576 -> 1536, down 1536 -> 576, q/o 576 -> 576, k/v 576 -> 192; --quick: the
 * first two), TinyLlama-1.1B gate/up, and with --head the 135M LM head (576 -> 49152, Q8_0 only),
 * for n_tok 1 16 64 128 512 (--quick: without 128). Variants:
 *   f32        the float kernels (cpu/kernels_avx512.c: blocks expanded to float32, FMAs)
 *   vnni       the production integer kernel (cpu/gemm_avx512.c: 16-row panels, 8-token tiles,
 *              64-token blocks, loops unrolled)
 *   the same file rebuilt with one tuning macro changed (bench/cpu.cmake):
 *   rolled     GEMM_UNROLL=0 GEMM_EMBED_BCAST=0: loops left to GCC (the kernel before 2026-11-26)
 *   embed      GEMM_EMBED_BCAST=1: vpdpbusd with a {1to16} memory operand (inline asm)
 *   nt6 nt10 nt12          tokens per tile
 *   tb32 tb128 notb        tokens per outer block (notb: all tokens per panel)
 *   nopf pf512 pf2048      software prefetch distance in the panel stream
 *   avx2-int   the AVX2 integer kernel (cpu/gemm_avx2.c: vpmaddubsw, 8-row halves, 4-token tiles)
 * GOP/s counts 2 * rows * K * n_tok operations (multiply and add) per call, and is also given as
 * a fraction of this thread's vpdpbusd peak measured at the start; the integer variants' time
 * includes quantizing the activations. Times are thread CPU time (the machine is shared), the best
 * of the repetitions within --ms. Only winners go into cpu/.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <immintrin.h>

#include "cpu/gemm.h"
#include "cpu/kernels.h"
#include "bench/vnni_peak.h"
#include "tests/cpu_gemm_rand.h"

/* lab variants: cpu/gemm_avx512.c compiled again with other tuning macros (bench/cpu.cmake) */
#define LAB_PROTO(NAME)                                                                                                \
    void lab_##NAME##_qmm(float *restrict Y, int64_t ldy, const pllm_cpu_qact *A, const pllm_cpu_qweight *W,         \
                          int64_t n_tok, int64_t r0, int64_t r1);
LAB_PROTO(rolled)
LAB_PROTO(embed)
LAB_PROTO(nt6)
LAB_PROTO(nt10)
LAB_PROTO(nt12)
LAB_PROTO(tb32)
LAB_PROTO(tb128)
LAB_PROTO(notb)
LAB_PROTO(nopf)
LAB_PROTO(pf512)
LAB_PROTO(pf2048)

typedef struct variant {
    const char *name;
    pllm_cpu_qmatmul_fn fn; /* NULL: the float kernels */
    bool dflt;              /* timed without --variants */
} variant;

static const variant g_variants[] = {
    {"f32", NULL, false},
    {"vnni", pllm_cpu_qmatmul_avx512vnni, true},
    {"rolled", lab_rolled_qmm, true},
    {"embed", lab_embed_qmm, false},
    {"nt6", lab_nt6_qmm, false},
    {"nt10", lab_nt10_qmm, false},
    {"nt12", lab_nt12_qmm, false},
    {"tb32", lab_tb32_qmm, false},
    {"tb128", lab_tb128_qmm, false},
    {"notb", lab_notb_qmm, false},
    {"nopf", lab_nopf_qmm, false},
    {"pf512", lab_pf512_qmm, false},
    {"pf2048", lab_pf2048_qmm, false},
    {"avx2-int", pllm_cpu_qmatmul_avx2, false}};

static const pllm_dtype g_types[] = {PLLM_DTYPE_Q4_0, PLLM_DTYPE_Q4_1, PLLM_DTYPE_Q5_0, PLLM_DTYPE_Q5_1,
                                     PLLM_DTYPE_Q8_0, PLLM_DTYPE_Q4_K, PLLM_DTYPE_Q5_K, PLLM_DTYPE_Q6_K};

static uint64_t g_rng = 42;

typedef struct problem {
    pllm_dtype dt;
    int64_t K, rows, n_tok;
    uint8_t *W;
    size_t rb;
    float *X, *Y, *scratch;
    pllm_cpu_qweight qw;
    pllm_cpu_qact qa;
} problem;

static void problem_init(problem *p, pllm_dtype dt, int64_t K, int64_t rows, int64_t n_tok)
{
    memset(p, 0, sizeof *p);
    *p = (problem){.dt = dt, .K = K, .rows = rows, .n_tok = n_tok, .rb = pllm_dtype_row_bytes(dt, K)};
    p->W = pllm_aligned_alloc(p->rb * (size_t)rows);
    p->X = malloc(sizeof(float) * (size_t)(n_tok * K));
    p->Y = malloc(sizeof(float) * (size_t)(n_tok * rows));
    p->scratch = malloc(sizeof(float) * (size_t)K);
    for (int64_t r = 0; r < rows; r++) pllm_test_random_row(p->W + (size_t)r * p->rb, dt, K, &g_rng);
    for (int64_t i = 0; i < n_tok * K; i++) p->X[i] = pllm_test_randf(&g_rng);
    if (pllm_cpu_qweight_init(&p->qw, dt, p->W, p->rb, rows, K, true) ||
        pllm_cpu_qact_init(&p->qa, n_tok, (K + 63) / 64 * 64)) {
        fprintf(stderr, "gemm_lab: %s\n", pllm_errmsg());
        exit(1);
    }
}

static void problem_free(problem *p)
{
    pllm_aligned_free(p->W);
    free(p->X);
    free(p->Y);
    free(p->scratch);
    pllm_cpu_qweight_free(&p->qw);
    pllm_cpu_qact_free(&p->qa);
}

static void run(const variant *v, problem *p, int64_t r0, int64_t r1)
{
    if (!v->fn) {
        pllm_cpu_kernels_get(PLLM_CPU_ISA_AVX512)->matmul[p->dt](p->Y, p->rows, p->X, p->K, p->W, p->rb, p->K, p->n_tok, r0,
                                                                  r1, p->scratch);
        return;
    }
    for (int64_t t = 0; t < p->n_tok; t++) pllm_cpu_quant_avx512(&p->qa, t, p->X + t * p->K, 0, p->K / 32);
    v->fn(p->Y, p->rows, &p->qa, &p->qw, p->n_tok, r0, r1);
}

/* Variant v against the scalar reference on one odd shape; returns the number of bad outputs. */
static int check(const variant *v, pllm_dtype dt, int64_t K, int64_t rows, int64_t n_tok)
{
    problem p;
    problem_init(&p, dt, K, rows, n_tok);
    const int64_t r0 = 3, r1 = rows - 5;
    float *ref = malloc(sizeof(float) * (size_t)(n_tok * rows));
    int bad = 0;
    if (v->fn) {
        for (int64_t t = 0; t < n_tok; t++) pllm_cpu_quant_ref(&p.qa, t, p.X + t * K, 0, K / 32);
        pllm_cpu_qmatmul_ref(ref, rows, &p.qa, &p.qw, n_tok, r0, r1);
    } else {
        pllm_cpu_kernels_scalar.matmul[dt](ref, rows, p.X, K, p.W, p.rb, K, n_tok, r0, r1, p.scratch);
    }
    run(v, &p, r0, r1);
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t r = r0; r < r1; r++) {
            float a = p.Y[t * rows + r], b = ref[t * rows + r];
            if (v->fn ? memcmp(&a, &b, 4) != 0 : !(fabsf(a - b) <= 1e-4f * (1 + fabsf(b)))) bad++;
        }
    free(ref);
    problem_free(&p);
    return bad;
}

/* Thread CPU time: the machine is shared, and a call preempted by another process would count
 * the time it waited in wall time. */
static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Whether name is in the comma-separated list (NULL: the default). */
static bool in_list(const char *list, const char *name, bool dflt)
{
    if (!list) return dflt;
    const size_t n = strlen(name);
    for (const char *c = list; *c;) {
        const char *e = strchr(c, ',');
        const size_t len = e ? (size_t)(e - c) : strlen(c);
        if (len == n && strncmp(c, name, n) == 0) return true;
        c += len + (e ? 1 : 0);
    }
    return false;
}

/* This thread's register-resident vpdpbusd zmm rate, GOP/s (as bench/ceilings: 12 independent
 * accumulators, 128 ops per instruction), over `budget` seconds of thread CPU time. */
static double vnni_peak(double budget)
{
    double best = 0;
    for (double t_end = now() + budget; now() < t_end;) {
        const double t0 = now(), ops = pllm_bench_vnni512_loop(100000);
        best = fmax(best, ops / (now() - t0) / 1e9);
    }
    return best;
}

int main(int argc, char **argv)
{
    const char *only = NULL, *vlist = NULL, *tlist = NULL;
    double budget = 0.3;
    bool quick = false, head = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--dtype") == 0 && i + 1 < argc) only = argv[++i];
        else if (strcmp(argv[i], "--variants") == 0 && i + 1 < argc) vlist = argv[++i];
        else if (strcmp(argv[i], "--tok") == 0 && i + 1 < argc) tlist = argv[++i];
        else if (strcmp(argv[i], "--ms") == 0 && i + 1 < argc) budget = atof(argv[++i]) / 1e3;
        else if (strcmp(argv[i], "--quick") == 0) quick = true;
        else if (strcmp(argv[i], "--head") == 0) head = true;
        else {
            fprintf(stderr, "usage: gemm_lab [--quick] [--head] [--dtype Q4_1,Q8_0] [--variants vnni,nt6] "
                            "[--tok 16,64,512] [--ms 300]\n");
            return 2;
        }
    }
    if (!pllm_cpu_isa_available(PLLM_CPU_ISA_AVX512VNNI)) {
        fprintf(stderr, "gemm_lab: this machine has no AVX-512 VNNI; nothing to compare\n");
        return 0;
    }
    const double peak = vnni_peak(0.2);
    printf("int8 peak (vpdpbusd zmm, registers, this thread): %.1f GOP/s; each figure below: GOP/s (%% of that)\n",
           peak);
    static const int64_t check_toks[] = {1, 3, 7, 16, 33, 512};
    static const struct { int64_t K, rows; const char *what; bool quick; } shapes[] = {
        {576, 1536, "135M gate/up", true}, {1536, 576, "135M down", true}, {576, 576, "135M q/o", false},
        {576, 192, "135M k/v", false},     {2048, 5632, "1.1B gate/up", false}};
    static const int64_t time_toks[] = {1, 16, 64, 128, 512};
    int total_bad = 0;
    for (size_t d = 0; d < PLLM_ARRAY_LEN(g_types); d++) {
        pllm_dtype dt = g_types[d];
        if (!in_list(only, pllm_dtype_name(dt), true)) continue;
        const bool kq = pllm_dtype_block_elems(dt) == PLLM_QK_K;
        /* correctness on odd shapes: every variant, timed or not */
        int dt_bad = 0;
        for (size_t v = 0; v < PLLM_ARRAY_LEN(g_variants); v++) {
            int bad = 0;
            for (size_t i = 0; i < PLLM_ARRAY_LEN(check_toks); i++)
                bad += check(&g_variants[v], dt, kq ? 256 * (int64_t)(1 + i % 3) : 32 * (int64_t)(1 + 2 * i),
                             16 * (int64_t)(i % 3) + 29, check_toks[i]);
            if (bad) printf("%-5s %-10s check vs scalar reference: FAIL (%d outputs)\n", pllm_dtype_name(dt), g_variants[v].name, bad);
            dt_bad += bad;
        }
        printf("%-5s check vs scalar reference (n_tok 1..512, odd shapes): %s\n", pllm_dtype_name(dt),
               dt_bad ? "FAIL" : "every integer variant bitwise equal, f32 within 1e-4");
        total_bad += dt_bad;
        /* timing */
        const size_t n_shapes = head && dt == PLLM_DTYPE_Q8_0 ? PLLM_ARRAY_LEN(shapes) + 1 : PLLM_ARRAY_LEN(shapes);
        for (size_t s = 0; s < n_shapes; s++) {
            const bool lm = s == PLLM_ARRAY_LEN(shapes); /* the 135M LM head: 49152 rows, Q8_0 */
            if (!lm && quick && !shapes[s].quick) continue;
            for (size_t ti = 0; ti < PLLM_ARRAY_LEN(time_toks); ti++) {
                const int64_t nt = time_toks[ti];
                char tn[16];
                snprintf(tn, sizeof tn, "%lld", (long long)nt);
                if (!in_list(tlist, tn, !quick || nt != 128)) continue;
                problem p;
                const int64_t be = pllm_dtype_block_elems(dt); /* K-quants: 576 -> 768 */
                const int64_t K0 = lm ? 576 : shapes[s].K, rows = lm ? 49152 : shapes[s].rows;
                problem_init(&p, dt, (K0 + be - 1) / be * be, rows, nt);
                printf("%-5s %-13s K=%-5lld rows=%-5lld tok=%-3lld", pllm_dtype_name(dt), lm ? "135M LM head" : shapes[s].what,
                       (long long)p.K, (long long)p.rows, (long long)nt);
                for (size_t v = 0; v < PLLM_ARRAY_LEN(g_variants); v++) {
                    if (!in_list(vlist, g_variants[v].name, g_variants[v].dflt)) continue;
                    run(&g_variants[v], &p, 0, p.rows); /* warm-up */
                    double best = 1e30, t_end = now() + budget;
                    int reps = 0;
                    while (now() < t_end || reps < 3) {
                        double t0 = now();
                        run(&g_variants[v], &p, 0, p.rows);
                        best = fmin(best, now() - t0);
                        reps++;
                    }
                    const double gops = 2.0 * (double)p.rows * (double)p.K * (double)nt / best / 1e9;
                    printf("  %s %6.1f (%2.0f%%)", g_variants[v].name, gops, 100 * gops / peak);
                }
                printf("\n");
                fflush(stdout);
                problem_free(&p);
            }
        }
    }
    return total_bad ? 1 : 0;
}
