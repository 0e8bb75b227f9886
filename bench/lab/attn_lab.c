/*
 * attn_lab.c: timing of the CPU attention tile (cpu/attention.h; not a test, run by hand).
 *
 *     attn_lab [--ms 300]
 *
 * Correctness is tests/cpu_attn's job (every head dim, group, block size, tiling); this times
 * pllm_cpu_attend_tile, one thread, on the shapes the engine runs, with the AVX-512 tile and with
 * the per-row path (pllm_cpu_attend on the same kernel table) as a second variant:
 *   decode   one query of each of 64 sequences, context 300 (the batched ShareGPT decode step)
 *   L2       the same for 4 sequences (300 KB of K/V, in L2: the tile's compute rate)
 *   DRAM     the same over 30 times as many sequences: a step's KV over all 30 layers of the
 *            135M model (150-300 MB), which does not fit the caches, as in the engine
 *   prefill  a 21-query tile (the engine's tile at GQA group 3) at the end of a 175-token prompt
 *   long     one decode query at context 4096
 * for SmolLM2-135M (head_dim 64, group 3) and TinyLlama-1.1B (head_dim 64, group 8) and a
 * head_dim-128 model (group 4), F32 and F16 caches, block size 16. GFLOP/s counts 4 * head_dim
 * flops per (query head, position): q.k and p.v, a multiply and an add each. Times are the
 * thread's CPU time (the machine is shared: wall time would count other processes' turns).
 * Compare two builds by linking this file against each (the tile's API has not changed).
 * LAB_ONLY=substring times only the shapes whose name holds it. cpu/attention.c's prefetch
 * distance and hint can be set when compiling it for the lab: -DATTN_PF=0|16|32|..,
 * -DATTN_PF_HINT=_MM_HINT_T1.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu/attention.h"
#include "model/dtype.h"
#include "tests/testutil.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct shape {
    const char *name;
    int32_t hd, group, n_seq, n_ctx, n_q;
} shape;

static double g_sink;
static int32_t lab_next_pf; /* LAB_NEXT_PF=N: prefetch the next tile's first N positions */

/* Time one shape: n_seq sequences each with its own blocks, n_q queries at the end. */
static void run(const shape *sh, pllm_dtype dt, bool tiled, const pllm_cpu_kernels *kern, double ms, uint64_t *rng)
{
    const int32_t hd = sh->hd, G = sh->group, bs = 16, n_kv = 1;
    const int32_t nb = (sh->n_ctx + bs - 1) / bs, n_blocks = nb * sh->n_seq;
    const size_t esz = dt == PLLM_DTYPE_F16 ? 2 : 4, n_el = (size_t)n_blocks * (size_t)bs * (size_t)hd;
    uint8_t *kc = malloc(n_el * esz), *vc = malloc(n_el * esz);
    for (size_t e = 0; e < n_el; e++) {
        float k = 2.0f * pllm_test_randf(rng), v = pllm_test_randf(rng);
        if (esz == 2) {
            ((uint16_t *)kc)[e] = pllm_fp32_to_fp16(k);
            ((uint16_t *)vc)[e] = pllm_fp32_to_fp16(v);
        } else {
            ((float *)kc)[e] = k;
            ((float *)vc)[e] = v;
        }
    }
    int32_t *bt = malloc(sizeof(int32_t) * (size_t)n_blocks);
    for (int32_t i = 0; i < n_blocks; i++) bt[i] = i;
    for (int32_t i = n_blocks - 1; i > 0; i--) { /* scattered blocks, as in a real cache */
        int32_t j = (int32_t)(pllm_test_rand(rng) % (uint64_t)(i + 1)), x = bt[i];
        bt[i] = bt[j];
        bt[j] = x;
    }
    const int64_t ld = (int64_t)G * hd;
    float *q = malloc(sizeof(float) * (size_t)(sh->n_seq * sh->n_q) * (size_t)ld);
    float *out = malloc(sizeof(float) * (size_t)(sh->n_seq * sh->n_q) * (size_t)ld);
    for (int64_t e = 0; e < (int64_t)sh->n_seq * sh->n_q * ld; e++) q[e] = pllm_test_randf(rng);
    pllm_kv_layout L = {.n_layer = 1, .n_head_kv = n_kv, .head_dim = hd, .block_size = bs, .n_blocks = n_blocks, .dtype = dt};
    float *scratch = malloc(sizeof(float) * (pllm_cpu_attn_tile_scratch(sh->n_q * G, bs) + 4096));

    int iters = 0;
    double t0 = now(), t1;
    do {
        for (int32_t s = 0; s < sh->n_seq; s++) {
            pllm_cpu_attn_args a = {.k_cache = kc, .v_cache = vc, .kv = &L, .block_table = bt + (size_t)s * nb,
                                    .scale = 1.0f / sqrtf((float)hd)};
            const int64_t row = (int64_t)s * sh->n_q * ld;
            if (tiled) {
                pllm_cpu_attn_tile t = {.out = out + row, .ld_out = ld, .q = q + row, .ld_q = ld,
                                        .pos0 = sh->n_ctx - sh->n_q, .n_q = sh->n_q, .n_group = G, .kv_head = 0};
                if (lab_next_pf && s + 1 < sh->n_seq) {
                    pllm_cpu_attn_args an = a;
                    an.block_table = bt + (size_t)(s + 1) * nb;
                    pllm_cpu_attn_tile_prefetch(&t, &an, lab_next_pf);
                }
                pllm_cpu_attend_tile(&t, &a, kern, scratch);
            } else {
                for (int32_t i = 0; i < sh->n_q; i++) {
                    a.n_pos = sh->n_ctx - sh->n_q + i + 1;
                    for (int32_t g = 0; g < G; g++)
                        pllm_cpu_attend(out + row + i * ld + g * hd, q + row + i * ld + g * hd, 0, &a, kern, scratch);
                }
            }
        }
        iters++;
        t1 = now();
    } while ((t1 - t0) * 1e3 < ms);
    double flops = 0;
    for (int32_t i = 0; i < sh->n_q; i++) flops += 4.0 * hd * G * (sh->n_ctx - sh->n_q + i + 1);
    flops *= sh->n_seq;
    g_sink += out[0];
    printf("  %-34s %-3s %-8s %8.3f ms/call  %6.2f GFLOP/s\n", sh->name, dt == PLLM_DTYPE_F16 ? "f16" : "f32",
           tiled ? "tile" : "per-row", (t1 - t0) * 1e3 / iters, flops * iters / (t1 - t0) * 1e-9);
    free(kc);
    free(vc);
    free(bt);
    free(q);
    free(out);
    free(scratch);
}

int main(int argc, char **argv)
{
    double ms = 300;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--ms") && i + 1 < argc) ms = atof(argv[++i]);
        else {
            fprintf(stderr, "usage: attn_lab [--ms MS]\n");
            return 2;
        }
    }
    const pllm_cpu_kernels *kern = pllm_cpu_kernels_best();
    uint64_t rng = 0xa77e1ab;
    printf("attn_lab: %s kernel table, 1 thread, block size 16, %.0f ms per figure\n", kern->name, ms);
    const shape shapes[] = {
        {"135M decode (64 seqs x ctx 300)", 64, 3, 64, 300, 1},
        {"135M decode, L2 (4 seqs x ctx 300)", 64, 3, 4, 300, 1},
        {"135M decode, DRAM (64x30 seqs x 300)", 64, 3, 64 * 30, 300, 1},
        {"135M prefill (21-query tile, 175)", 64, 3, 16, 175, 21},
        {"135M decode, ctx 4096", 64, 3, 1, 4096, 1},
        /* speculative decoding at one sequence (bench/spec_bench.py copy1): a step's tiles over
         * the 30 layers' K/V (3.5 MB, in L3), the token's row and k drafts split in two tiles */
        {"135M spec 1 row (30 x ctx 455)", 64, 3, 30, 455, 1},
        {"135M spec 2 rows (30 x ctx 455)", 64, 3, 30, 455, 2},
        {"135M spec 4 rows (30 x ctx 455)", 64, 3, 30, 455, 4},
        {"135M spec 8 rows (30 x ctx 455)", 64, 3, 30, 455, 8},
        /* the same from DRAM: in the engine a step's 66 MB of weights evict the K/V */
        {"135M spec 1 row, DRAM (300 x ctx 455)", 64, 3, 300, 455, 1},
        {"135M spec 8 rows, DRAM (300 x ctx 455)", 64, 3, 300, 455, 8},
        {"1.1B decode (64 seqs x ctx 300)", 64, 8, 64, 300, 1},
        {"hd128 decode (64 seqs x ctx 300)", 128, 4, 64, 300, 1},
        {"hd128 prefill (16-query tile, 512)", 128, 4, 4, 512, 16},
    };
    if (getenv("LAB_NEXT_PF")) lab_next_pf = atoi(getenv("LAB_NEXT_PF"));
    const char *only = getenv("LAB_ONLY"); /* a substring of the shapes to time */
    for (size_t s = 0; s < PLLM_ARRAY_LEN(shapes); s++) {
        if (only && !strstr(shapes[s].name, only)) continue;
        for (int d = 0; d < 2; d++)
            for (int tiled = 1; tiled >= 0; tiled--)
                run(&shapes[s], d ? PLLM_DTYPE_F16 : PLLM_DTYPE_F32, tiled, kern, ms, &rng);
    }
    return g_sink == 12345.0;
}
