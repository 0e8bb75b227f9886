/*
 * cpu_attn: the tiled paged attention (cpu/attention.h) against the per-token reference
 * pllm_cpu_attend (ops.h, run with the scalar kernel table) on fresh random caches.
 *
 * Cases: head_dim 64, 128, 48, 80; GQA groups 1, 3, 8; block sizes 1, 16, 32; F32 and F16 caches;
 * contexts that are not multiples of the block size; block tables that are random permutations
 * of a larger pool (the unused blocks and the unwritten tail of the last block hold NaN, so any
 * read outside the sequence or past the context poisons the result); query tiles that start in
 * the middle of the context (a prefill chunk after cached positions) and single decode tokens;
 * contexts of several 128-position super-chunks (the fast tile's unit) for each row-group shape.
 * Checks, per case:
 *   - every row within tolerance of the reference (max abs error and max relative error printed);
 *   - tiling invariance: the same rows computed as random sub-tiles (including one query at a
 *     time) are bitwise equal to the whole tile (the engine's determinism rests on this);
 *   - block-size invariance: the same K/V in blocks of 1, 5, 16 and 32 give bitwise equal rows
 *     (AVX-512 tile; the per-row fallback follows the kernel table, which works per block);
 *   - RoPE + K/V store (pllm_cpu_rope_store_kv) writes exactly what rope_apply + copy writes.
 */
#include <math.h>
#include <string.h>
#include <time.h>

#include "cpu/attention.h"
#include "model/dtype.h"
#include "testutil.h"

typedef struct attn_case {
    int32_t hd, group, bs, n_ctx, pos0;
    pllm_dtype dt;
} attn_case;

static double g_max_abs, g_max_rel;

static void run_case(const attn_case *cs, const pllm_cpu_kernels *tiled, const pllm_cpu_kernels *ref, uint64_t *rng)
{
    const int32_t hd = cs->hd, G = cs->group, bs = cs->bs, n_kv = 2, n_head = G * n_kv;
    const int32_t n_seq_blocks = (cs->n_ctx + bs - 1) / bs, n_pool = 2 * n_seq_blocks + 3;
    const bool f16 = cs->dt == PLLM_DTYPE_F16;
    const size_t esz = f16 ? 2 : 4, n_el = (size_t)n_pool * n_kv * (size_t)bs * (size_t)hd;
    void *kc = malloc(n_el * esz), *vc = malloc(n_el * esz);
    int32_t *pool = malloc(sizeof(int32_t) * (size_t)n_pool), *bt = malloc(sizeof(int32_t) * (size_t)n_seq_blocks);

    /* every element NaN, then the sequence's positions [0, n_ctx) random */
    for (size_t e = 0; e < n_el; e++) {
        if (f16) ((uint16_t *)kc)[e] = ((uint16_t *)vc)[e] = 0x7e00;
        else ((float *)kc)[e] = ((float *)vc)[e] = NAN;
    }
    for (int32_t i = 0; i < n_pool; i++) pool[i] = i;
    for (int32_t i = n_pool - 1; i > 0; i--) {
        int32_t j = (int32_t)(pllm_test_rand(rng) % (uint64_t)(i + 1)), x = pool[i];
        pool[i] = pool[j];
        pool[j] = x;
    }
    memcpy(bt, pool, sizeof(int32_t) * (size_t)n_seq_blocks);
    for (int32_t p = 0; p < cs->n_ctx; p++)
        for (int32_t h = 0; h < n_kv; h++) {
            size_t idx = (((size_t)bt[p / bs] * n_kv + (size_t)h) * (size_t)bs + (size_t)(p % bs)) * (size_t)hd;
            for (int32_t e = 0; e < hd; e++) {
                /* keys scaled so that the softmax is neither flat nor one-hot */
                float k = 2.0f * pllm_test_randf(rng), v = pllm_test_randf(rng);
                if (f16) {
                    ((uint16_t *)kc)[idx + e] = pllm_fp32_to_fp16(k);
                    ((uint16_t *)vc)[idx + e] = pllm_fp32_to_fp16(v);
                } else {
                    ((float *)kc)[idx + e] = k;
                    ((float *)vc)[idx + e] = v;
                }
            }
        }

    const int32_t n_q = cs->n_ctx - cs->pos0;
    const int64_t ld = (int64_t)n_head * hd;
    float *q = malloc(sizeof(float) * (size_t)n_q * (size_t)ld), *out = malloc(sizeof(float) * (size_t)n_q * (size_t)ld),
          *out2 = malloc(sizeof(float) * (size_t)n_q * (size_t)ld), *ref_out = malloc(sizeof(float) * (size_t)hd);
    for (size_t e = 0; e < (size_t)n_q * (size_t)ld; e++) q[e] = pllm_test_randf(rng);
    pllm_kv_layout L = {.n_layer = 1, .n_head_kv = n_kv, .head_dim = hd, .block_size = bs, .n_blocks = n_pool, .dtype = cs->dt};
    pllm_cpu_attn_args a = {.k_cache = kc, .v_cache = vc, .kv = &L, .block_table = bt, .scale = 1.0f / sqrtf((float)hd)};
    size_t sf = pllm_cpu_attn_tile_scratch(n_q * G, bs);
    float *scratch = malloc(sizeof(float) * PLLM_MAX(sf, (size_t)bs));

    bool bitwise = true;
    double case_abs = 0, case_rel = 0;
    for (int32_t kh = 0; kh < n_kv; kh++) {
        pllm_cpu_attn_tile t = {.out = out + (int64_t)kh * G * hd, .ld_out = ld, .q = q + (int64_t)kh * G * hd, .ld_q = ld,
                                .pos0 = cs->pos0, .n_q = n_q, .n_group = G, .kv_head = kh};
        pllm_cpu_attend_tile(&t, &a, tiled, scratch);
        /* the same rows in random sub-tiles */
        for (int32_t i0 = 0; i0 < n_q;) {
            int32_t n = 1 + (int32_t)(pllm_test_rand(rng) % 7);
            n = PLLM_MIN(n, n_q - i0);
            pllm_cpu_attn_tile st = t;
            st.out = out2 + (int64_t)i0 * ld + (int64_t)kh * G * hd;
            st.q = t.q + (int64_t)i0 * ld;
            st.pos0 = cs->pos0 + i0;
            st.n_q = n;
            pllm_cpu_attend_tile(&st, &a, tiled, scratch);
            i0 += n;
        }
        for (int32_t i = 0; i < n_q; i++)
            for (int32_t g = 0; g < G; g++) {
                int64_t off = (int64_t)i * ld + (int64_t)(kh * G + g) * hd;
                pllm_cpu_attn_args ra = a;
                ra.n_pos = cs->pos0 + i + 1;
                pllm_cpu_attend(ref_out, q + off, kh, &ra, ref, scratch);
                double ref_max = 0;
                for (int32_t e = 0; e < hd; e++) ref_max = PLLM_MAX(ref_max, fabs((double)ref_out[e]));
                for (int32_t e = 0; e < hd; e++) {
                    double d = fabs((double)out[off + e] - (double)ref_out[e]);
                    if (!(d <= case_abs)) case_abs = isnan(d) ? INFINITY : PLLM_MAX(case_abs, d);
                    case_rel = PLLM_MAX(case_rel, isnan(d) ? INFINITY : d / PLLM_MAX(ref_max, 1e-6));
                }
                if (memcmp(out + off, out2 + off, sizeof(float) * (size_t)hd) != 0) bitwise = false;
            }
    }
    g_max_abs = PLLM_MAX(g_max_abs, case_abs);
    g_max_rel = PLLM_MAX(g_max_rel, case_rel);
    /* F16 caches: both paths read the same halves, so only float rounding separates them */
    const double tol = 2e-5;
    if (!(case_rel <= tol) || !bitwise)
        fprintf(stderr, "case hd %d group %d bs %d n_ctx %d pos0 %d %s: max abs %.3g rel %.3g (tol %.0e), sub-tiles %s\n", hd, G,
                bs, cs->n_ctx, cs->pos0, pllm_dtype_name(cs->dt), case_abs, case_rel, tol, bitwise ? "bitwise" : "DIFFER");
    CHECK(case_rel <= tol);
    CHECK(bitwise);
    free(kc);
    free(vc);
    free(pool);
    free(bt);
    free(q);
    free(out);
    free(out2);
    free(ref_out);
    free(scratch);
}

/* The same K/V stored with different block sizes (and reversed block tables) gives bitwise the
 * same attention: the softmax chunks are fixed in position space, not in blocks. */
static void check_block_size_invariance(const pllm_cpu_kernels *kern, uint64_t *rng)
{
    const int32_t hd = 80, G = 3, n_kv = 2, n_ctx = 71, pos0 = 20, n_q = n_ctx - pos0;
    const int32_t bss[] = {1, 5, 16, 32};
    const int64_t ld = (int64_t)G * n_kv * hd;
    float *kv_src = malloc(sizeof(float) * 2 * n_kv * n_ctx * hd), *q = malloc(sizeof(float) * (size_t)(n_q * ld));
    float *outs[4];
    for (int i = 0; i < 2 * n_kv * n_ctx * hd; i++) kv_src[i] = pllm_test_randf(rng);
    for (int64_t i = 0; i < n_q * ld; i++) q[i] = pllm_test_randf(rng);
    for (int b = 0; b < 4; b++) {
        const int32_t bs = bss[b], nb = (n_ctx + bs - 1) / bs;
        float *kc = calloc((size_t)nb * n_kv * bs * hd, sizeof(float)), *vc = calloc((size_t)nb * n_kv * bs * hd, sizeof(float));
        int32_t *bt = malloc(sizeof(int32_t) * (size_t)nb);
        for (int32_t i = 0; i < nb; i++) bt[i] = nb - 1 - i;
        for (int32_t h = 0; h < n_kv; h++)
            for (int32_t p = 0; p < n_ctx; p++) {
                size_t idx = (((size_t)bt[p / bs] * n_kv + (size_t)h) * (size_t)bs + (size_t)(p % bs)) * hd;
                memcpy(kc + idx, kv_src + ((size_t)h * n_ctx + p) * hd, sizeof(float) * hd);
                memcpy(vc + idx, kv_src + ((size_t)(n_kv + h) * n_ctx + p) * hd, sizeof(float) * hd);
            }
        pllm_kv_layout L = {.n_layer = 1, .n_head_kv = n_kv, .head_dim = hd, .block_size = bs, .n_blocks = nb,
                            .dtype = PLLM_DTYPE_F32};
        pllm_cpu_attn_args a = {.k_cache = kc, .v_cache = vc, .kv = &L, .block_table = bt, .scale = 0.125f};
        float *scratch = malloc(sizeof(float) * pllm_cpu_attn_tile_scratch(n_q * G, bs));
        outs[b] = malloc(sizeof(float) * (size_t)(n_q * ld));
        for (int32_t h = 0; h < n_kv; h++) {
            pllm_cpu_attn_tile t = {.out = outs[b] + (int64_t)h * G * hd, .ld_out = ld, .q = q + (int64_t)h * G * hd, .ld_q = ld,
                                    .pos0 = pos0, .n_q = n_q, .n_group = G, .kv_head = h};
            pllm_cpu_attend_tile(&t, &a, kern, scratch);
        }
        if (b > 0) CHECK(memcmp(outs[b], outs[0], sizeof(float) * (size_t)(n_q * ld)) == 0);
        free(kc);
        free(vc);
        free(bt);
        free(scratch);
    }
    for (int b = 0; b < 4; b++) free(outs[b]);
    free(kv_src);
    free(q);
}

static void check_rope_store(const pllm_cpu_kernels *kern, uint64_t *rng)
{
    for (int dti = 0; dti < 2; dti++)
        for (int mode = 0; mode < 2; mode++) {
            const int32_t hd = 48, n_kv = 3, bs = 16, rope_dim = 32, slot = 37;
            pllm_kv_layout L = {.n_layer = 1, .n_head_kv = n_kv, .head_dim = hd, .block_size = bs, .n_blocks = 4,
                                .dtype = dti ? PLLM_DTYPE_F16 : PLLM_DTYPE_F32};
            const size_t n_el = 4 * n_kv * bs * hd, esz = dti ? 2 : 4;
            uint8_t *k1 = calloc(n_el, esz), *v1 = calloc(n_el, esz), *k2 = calloc(n_el, esz), *v2 = calloc(n_el, esz);
            float k[3 * 48], v[3 * 48], cs[32], tmp[48];
            for (int i = 0; i < n_kv * hd; i++) {
                k[i] = pllm_test_randf(rng);
                v[i] = pllm_test_randf(rng);
            }
            for (int i = 0; i < rope_dim / 2; i++) {
                float ang = 3.0f * pllm_test_randf(rng);
                cs[2 * i] = cosf(ang);
                cs[2 * i + 1] = sinf(ang);
            }
            pllm_rope_mode rm = mode ? PLLM_ROPE_NEOX : PLLM_ROPE_NORM;
            pllm_cpu_rope_store_kv(k1, v1, &L, slot, k, v, cs, rope_dim, rm, kern, tmp);
            /* the unfused reference: rotate a copy, then store both */
            for (int32_t h = 0; h < n_kv; h++) {
                float kr[48];
                memcpy(kr, k + h * hd, sizeof kr);
                pllm_cpu_rope_apply(kr, cs, rope_dim, rm);
                size_t idx = (((size_t)(slot / bs) * n_kv + (size_t)h) * bs + (size_t)(slot % bs)) * hd;
                for (int e = 0; e < hd; e++) {
                    if (dti) {
                        ((uint16_t *)k2)[idx + e] = pllm_fp32_to_fp16(kr[e]);
                        ((uint16_t *)v2)[idx + e] = pllm_fp32_to_fp16(v[h * hd + e]);
                    } else {
                        ((float *)k2)[idx + e] = kr[e];
                        ((float *)v2)[idx + e] = v[h * hd + e];
                    }
                }
            }
            CHECK(memcmp(k1, k2, n_el * esz) == 0);
            CHECK(memcmp(v1, v2, n_el * esz) == 0);
            free(k1);
            free(v1);
            free(k2);
            free(v2);
        }
}

int main(void)
{
    const pllm_cpu_kernels *ref = pllm_cpu_kernels_get(PLLM_CPU_ISA_SCALAR), *best = pllm_cpu_kernels_best();
    uint64_t rng = 0x5eed0a77e27ull ^ (uint64_t)time(NULL);
    printf("cpu_attn: tiled path with the %s table (%s), reference: per-token pllm_cpu_attend on the scalar table; seed %llu\n",
           best->name, best->isa >= PLLM_CPU_ISA_AVX512 ? "AVX-512 tile" : "per-row fallback", (unsigned long long)rng);
    const int32_t hds[] = {64, 128, 48, 80}, groups[] = {1, 3, 8}, bss[] = {1, 16, 32};
    int n_cases = 0;
    for (size_t a = 0; a < PLLM_ARRAY_LEN(hds); a++)
        for (size_t b = 0; b < PLLM_ARRAY_LEN(groups); b++)
            for (size_t c = 0; c < PLLM_ARRAY_LEN(bss); c++)
                for (int d = 0; d < 2; d++)
                    for (int kind = 0; kind < 3; kind++) {
                        attn_case cs = {.hd = hds[a], .group = groups[b], .bs = bss[c], .dt = d ? PLLM_DTYPE_F16 : PLLM_DTYPE_F32};
                        /* kind 0: whole prompt from position 0; 1: a chunk after cached positions; 2: decode */
                        cs.n_ctx = 1 + (int32_t)(pllm_test_rand(&rng) % 90);
                        if (cs.n_ctx % cs.bs == 0 && cs.bs > 1) cs.n_ctx++;
                        cs.pos0 = kind == 0 ? 0 : kind == 1 ? (int32_t)(pllm_test_rand(&rng) % (uint64_t)cs.n_ctx) : cs.n_ctx - 1;
                        run_case(&cs, best, ref, &rng);
                        n_cases++;
                    }
    /* one long context, and the fallback (per-row) path must equal the reference exactly */
    attn_case big = {.hd = 64, .group = 3, .bs = 16, .n_ctx = 613, .pos0 = 500, .dt = PLLM_DTYPE_F32};
    run_case(&big, best, ref, &rng);
    big.dt = PLLM_DTYPE_F16;
    run_case(&big, best, ref, &rng);
    /* more than one 128-position super-chunk of the fast tile, with every row-group shape: head
     * dim 128 (one head per group), group 8 at head dim 64 (groups of 3, 3, 2), MHA */
    const attn_case longer[] = {{.hd = 128, .group = 8, .bs = 32, .n_ctx = 300, .pos0 = 250, .dt = PLLM_DTYPE_F16},
                                {.hd = 64, .group = 8, .bs = 16, .n_ctx = 290, .pos0 = 289, .dt = PLLM_DTYPE_F32},
                                {.hd = 64, .group = 1, .bs = 1, .n_ctx = 260, .pos0 = 100, .dt = PLLM_DTYPE_F32},
                                {.hd = 48, .group = 4, .bs = 16, .n_ctx = 257, .pos0 = 0, .dt = PLLM_DTYPE_F16}};
    for (size_t i = 0; i < PLLM_ARRAY_LEN(longer); i++) run_case(&longer[i], best, ref, &rng);
    attn_case fb = {.hd = 80, .group = 8, .bs = 16, .n_ctx = 77, .pos0 = 30, .dt = PLLM_DTYPE_F32};
    double save_abs = g_max_abs, save_rel = g_max_rel;
    g_max_abs = 0;
    run_case(&fb, ref, ref, &rng);
    CHECK(g_max_abs == 0);
    g_max_abs = PLLM_MAX(save_abs, g_max_abs);
    g_max_rel = PLLM_MAX(save_rel, g_max_rel);
    check_rope_store(best, &rng);
    if (best->isa >= PLLM_CPU_ISA_AVX512) check_block_size_invariance(best, &rng);
    printf("cpu_attn: %d cases + 7: max abs error %.3g, max relative error (per row, against its largest element) %.3g\n",
           n_cases, g_max_abs, g_max_rel);
    return pllm_test_finish("cpu_attn");
}
