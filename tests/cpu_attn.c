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
 * int8 caches (PLLM_KV_DTYPE_I8): the same cases (block sizes 1, 5, 16, 32, 48: in-place and
 * staged chunks) against the scalar reference, a float64 evaluation of the int8 numerics and
 * float32 attention on the unquantized values (tolerances at I8_TOL_*), sub-tile and block-size
 * invariance, and the row store (error bound, scale, untouched neighbours); and sliding-window
 * int8 cases (the blocks wholly before the first query's window poisoned, as the hybrid KV layout
 * releases them), whose rows must also be the same in any sub-tile.
 */
#include <math.h>
#include <string.h>
#include <time.h>

#include "cpu/attention.h"
#include "model/backend.h"
#include "model/dtype.h"
#include "testutil.h"

typedef struct attn_case {
    int32_t hd, group, bs, n_ctx, pos0;
    pllm_dtype dt;
    int32_t
        window; /* > 0 (int8 cases): a sliding-window layer; blocks wholly before the first
                   query's window point at poisoned blocks (the hybrid KV layout releases them) */
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

/* noinline: inlined, its arrays joined main's frame, which under ASan with
 * detect_stack_use_after_return=1 (scripts/ci-extra.sh) lives on ASan's fake stack; that runtime
 * does not align large fake frames to the 64 bytes GCC assumes for AVX-512 stores to them
 * (llvm-project #152889), and a vmovdqa64 to kr[] faulted on every run (on an AVX-512 machine
 * with gcc 12). Its own frame is small and aligned. */
__attribute__((noinline)) static void check_rope_store(const pllm_cpu_kernels *kern, uint64_t *rng)
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

/* ---- int8 KV cache (PLLM_KV_DTYPE_I8, engine/backend.h) ---------------------------------- */

/* Tolerances of the int8 cache, per row against the row's largest element:
 *   - the tile (VNNI or the per-row fallback) against the scalar reference pllm_cpu_attend_i8:
 *     the integer scores are exact on both, so only the exp polynomial and the sum order differ;
 *   - the scalar reference against a float64 evaluation of the same numerics (int8 q, int8 K/V
 *     with their scales): float32 rounding;
 *   - the int8 result against float32 attention over the unquantized q, K, V: the quantization
 *     error itself (per-row int8 keeps ~7 bits of each row's largest element; K has outlier
 *     channels 8x the others here, as real keys do, which costs the other channels 3 bits; and
 *     the output, an average of many V rows, is small against V, which inflates this ratio). */
#define I8_TOL_TILE  2e-5
#define I8_TOL_DEF   2e-5
#define I8_TOL_QUANT 1.5e-1 /* observed 0.054 to 0.081 over 8 seeds */
static double g_i8_tile, g_i8_def, g_i8_quant;

static double row_err(const float *x, const double *ref, int32_t n)
{
    double mx = 0, e = 0;
    for (int32_t i = 0; i < n; i++) mx = PLLM_MAX(mx, fabs(ref[i]));
    for (int32_t i = 0; i < n; i++) {
        double d = fabs((double)x[i] - ref[i]);
        e = isnan(d) ? INFINITY : PLLM_MAX(e, d / PLLM_MAX(mx, 1e-6));
    }
    return e;
}

/* An int8 cache of n_pool blocks (poisoned: random bytes, NaN scales) holding kf/vf
 * ([n_kv][n_ctx][hd] floats) at the positions of block table bt. */
static void i8_fill(void **kc, void **vc, pllm_kv_layout *L, const int32_t *bt, const float *kf,
                    const float *vf, int32_t n_ctx, uint64_t *rng)
{
    const size_t data =
        (size_t)L->n_blocks * (size_t)L->n_head_kv * (size_t)L->block_size * (size_t)L->head_dim;
    const size_t total =
        data + 2 * (size_t)L->n_blocks * (size_t)L->n_head_kv * (size_t)L->block_size;
    CHECK(total == (size_t)L->n_blocks * pllm_kv_block_bytes(L) / 2);
    *kc = malloc(total);
    *vc = malloc(total);
    for (size_t i = 0; i < data; i++)
        ((uint8_t *)*kc)[i] = ((uint8_t *)*vc)[i] = (uint8_t)pllm_test_rand(rng);
    for (size_t i = data; i < total; i += 2) {
        ((uint8_t *)*kc)[i] = ((uint8_t *)*vc)[i] = 0x00;
        ((uint8_t *)*kc)[i + 1] = ((uint8_t *)*vc)[i + 1] = 0x7e; /* half NaN */
    }
    const int32_t hd = L->head_dim;
    for (int32_t h = 0; h < L->n_head_kv; h++)
        for (int32_t p = 0; p < n_ctx; p++)
            pllm_cpu_kv_i8_store(
                *kc, *vc, L, bt[p / L->block_size] * L->block_size + p % L->block_size, h,
                kf + ((size_t)h * n_ctx + p) * hd, vf + ((size_t)h * n_ctx + p) * hd);
}

static void i8_rand_kv(float *kf, float *vf, size_t n_rows, int32_t hd, uint64_t *rng)
{
    for (size_t r = 0; r < n_rows; r++)
        for (int32_t e = 0; e < hd; e++) {
            kf[r * hd + e] =
                (e % 16 == 3 ? 8.0f : 1.0f) * 2.0f * pllm_test_randf(rng); /* outlier channels */
            vf[r * hd + e] = pllm_test_randf(rng);
        }
}

static void run_case_i8(const attn_case *cs, const pllm_cpu_kernels *tiled, uint64_t *rng)
{
    const int32_t hd = cs->hd, G = cs->group, bs = cs->bs, n_kv = 2, n_head = G * n_kv,
                  n_ctx = cs->n_ctx;
    const int32_t n_seq_blocks = (n_ctx + bs - 1) / bs, n_pool = 2 * n_seq_blocks + 3;
    int32_t *pool = malloc(sizeof(int32_t) * (size_t)n_pool);
    for (int32_t i = 0; i < n_pool; i++) pool[i] = i;
    for (int32_t i = n_pool - 1; i > 0; i--) {
        int32_t j = (int32_t)(pllm_test_rand(rng) % (uint64_t)(i + 1)), x = pool[i];
        pool[i] = pool[j];
        pool[j] = x;
    }
    float *kf = malloc(sizeof(float) * (size_t)n_kv * n_ctx * hd),
          *vf = malloc(sizeof(float) * (size_t)n_kv * n_ctx * hd);
    i8_rand_kv(kf, vf, (size_t)n_kv * n_ctx, hd, rng);
    pllm_kv_layout L = {.n_layer = 1,
                        .n_head_kv = n_kv,
                        .head_dim = hd,
                        .block_size = bs,
                        .n_blocks = n_pool,
                        .dtype = PLLM_KV_DTYPE_I8};
    void *kc, *vc;
    i8_fill(&kc, &vc, &L, pool, kf, vf, n_ctx, rng);
    if (cs->window > 0) /* released blocks: a never-written one (NaN scales) */
        for (int32_t b = 0; (b + 1) * bs <= cs->pos0 + 1 - cs->window; b++)
            pool[b] = pool[n_pool - 1];

    const int32_t n_q = n_ctx - cs->pos0;
    const int64_t ld = (int64_t)n_head * hd;
    float *q = malloc(sizeof(float) * (size_t)(n_q * ld)),
          *out = malloc(sizeof(float) * (size_t)(n_q * ld)),
          *out2 = malloc(sizeof(float) * (size_t)(n_q * ld)),
          *ro = malloc(sizeof(float) * (size_t)hd);
    double *dref = malloc(sizeof(double) * (size_t)hd), *fref = malloc(sizeof(double) * (size_t)hd);
    double *sc = malloc(sizeof(double) * (size_t)n_ctx);
    for (int64_t e = 0; e < n_q * ld; e++) q[e] = pllm_test_randf(rng);
    const float scale = 1.0f / sqrtf((float)hd);
    pllm_cpu_attn_args a = {.k_cache = kc,
                            .v_cache = vc,
                            .kv = &L,
                            .block_table = pool,
                            .scale = scale,
                            .window = cs->window};
    float *scratch =
        malloc(sizeof(float) * PLLM_MAX(pllm_cpu_attn_tile_scratch(n_q * G, bs), (size_t)bs));

    bool bitwise = true;
    double e_tile = 0, e_def = 0, e_quant = 0;
    for (int32_t kh = 0; kh < n_kv; kh++) {
        pllm_cpu_attn_tile t = {.out = out + (int64_t)kh * G * hd,
                                .ld_out = ld,
                                .q = q + (int64_t)kh * G * hd,
                                .ld_q = ld,
                                .pos0 = cs->pos0,
                                .n_q = n_q,
                                .n_group = G,
                                .kv_head = kh};
        pllm_cpu_attend_tile(&t, &a, tiled, scratch);
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
                const int64_t off = (int64_t)i * ld + (int64_t)(kh * G + g) * hd;
                const int32_t np = cs->pos0 + i + 1;
                pllm_cpu_attn_args ra = a;
                ra.n_pos = np;
                pllm_cpu_attend_i8(ro, q + off, kh, &ra, scratch);
                /* float64: (1) the int8 numerics by their definition; (2) exact attention on the
                 * unquantized values */
                int8_t q8[128];
                int32_t qsum;
                const double qs = (double)(pllm_cpu_kv_i8_quant_q(q8, &qsum, q + off, hd) * scale);
                float kd[128], vd[128];
                const int32_t lo = cs->window > 0 ? PLLM_MAX(0, np - cs->window) : 0;
                for (int pass = 0; pass < 2; pass++) {
                    double mx = -INFINITY, l = 0, *r = pass ? fref : dref;
                    for (int32_t p = lo; p < np; p++) {
                        const float *kr = kf + ((size_t)kh * n_ctx + p) * hd;
                        double d = 0;
                        if (pass == 0) {
                            pllm_cpu_kv_i8_load(kd, NULL, kc, vc, &L, pool[p / bs] * bs + p % bs,
                                                kh);
                            for (int32_t e = 0; e < hd; e++) d += (double)q8[e] * kd[e];
                            d *= qs;
                        } else {
                            for (int32_t e = 0; e < hd; e++) d += (double)q[off + e] * kr[e];
                            d *= scale;
                        }
                        sc[p] = d;
                        mx = PLLM_MAX(mx, d);
                    }
                    for (int32_t e = 0; e < hd; e++) r[e] = 0;
                    for (int32_t p = lo; p < np; p++) {
                        const double w = exp(sc[p] - mx);
                        l += w;
                        if (pass == 0)
                            pllm_cpu_kv_i8_load(NULL, vd, kc, vc, &L, pool[p / bs] * bs + p % bs,
                                                kh);
                        const float *vr = pass ? vf + ((size_t)kh * n_ctx + p) * hd : vd;
                        for (int32_t e = 0; e < hd; e++) r[e] += w * vr[e];
                    }
                    for (int32_t e = 0; e < hd; e++) r[e] /= l;
                }
                double ro_d[128];
                for (int32_t e = 0; e < hd; e++) ro_d[e] = ro[e];
                e_tile = PLLM_MAX(e_tile, row_err(out + off, ro_d, hd));
                e_def = PLLM_MAX(e_def, row_err(ro, dref, hd));
                e_quant = PLLM_MAX(e_quant, row_err(out + off, fref, hd));
                if (memcmp(out + off, out2 + off, sizeof(float) * (size_t)hd) != 0) bitwise = false;
            }
    }
    g_i8_tile = PLLM_MAX(g_i8_tile, e_tile);
    g_i8_def = PLLM_MAX(g_i8_def, e_def);
    g_i8_quant = PLLM_MAX(g_i8_quant, e_quant);
    if (!(e_tile <= I8_TOL_TILE && e_def <= I8_TOL_DEF && e_quant <= I8_TOL_QUANT) || !bitwise)
        fprintf(stderr,
                "int8 case hd %d group %d bs %d n_ctx %d pos0 %d: tile %.3g, definition %.3g, "
                "quantization %.3g, sub-tiles %s\n",
                hd, G, bs, n_ctx, cs->pos0, e_tile, e_def, e_quant, bitwise ? "bitwise" : "DIFFER");
    CHECK(e_tile <= I8_TOL_TILE);
    CHECK(e_def <= I8_TOL_DEF);
    CHECK(e_quant <= I8_TOL_QUANT);
    CHECK(bitwise);
    free(kc);
    free(vc);
    free(pool);
    free(kf);
    free(vf);
    free(q);
    free(out);
    free(out2);
    free(ro);
    free(dref);
    free(fref);
    free(sc);
    free(scratch);
}

/* The int8 rows: the round trip is within half a step of each element, the scale is amax/127
 * rounded up to a half, zero rows stay zero, a store touches only its own slot's bytes; and the
 * same K/V in blocks of 1, 5, 16, 32 give bitwise the same attention (aligned chunks are read
 * in place, others staged). */
static void check_i8_store_and_blocks(const pllm_cpu_kernels *kern, uint64_t *rng)
{
    {
        const int32_t hd = 64, n_kv = 3, bs = 16;
        pllm_kv_layout L = {.n_layer = 1,
                            .n_head_kv = n_kv,
                            .head_dim = hd,
                            .block_size = bs,
                            .n_blocks = 4,
                            .dtype = PLLM_KV_DTYPE_I8};
        const size_t total = (size_t)4 * n_kv * bs * (hd + 2);
        uint8_t *kc = malloc(total), *vc = malloc(total), *k0 = malloc(total), *v0 = malloc(total);
        for (size_t i = 0; i < total; i++) kc[i] = vc[i] = (uint8_t)pllm_test_rand(rng);
        memcpy(k0, kc, total);
        memcpy(v0, vc, total);
        float k[64], v[64], kb[64], vb[64];
        for (int slot = 0; slot < 64; slot += 7)
            for (int32_t h = 0; h < n_kv; h++) {
                const float mag = slot == 14 ? 0.0f : slot == 21 ? 1e-6f : slot == 28 ? 3e4f : 1.0f;
                for (int e = 0; e < hd; e++) {
                    k[e] = mag * 4.0f * pllm_test_randf(rng);
                    v[e] = mag * pllm_test_randf(rng);
                }
                pllm_cpu_kv_i8_store(kc, vc, &L, slot, h, k, v);
                pllm_cpu_kv_i8_load(kb, vb, kc, vc, &L, slot, h);
                float ak = 0, av = 0;
                for (int e = 0; e < hd; e++) {
                    ak = fmaxf(ak, fabsf(k[e]));
                    av = fmaxf(av, fabsf(v[e]));
                }
                for (int e = 0; e < hd; e++) {
                    /* step s <= amax/127 * (1 + 2^-10) (or the smallest half), error <= s/2 */
                    const float sk = fmaxf(ak / 127 * (1 + 1.0f / 1024), 6e-8f),
                                sv = fmaxf(av / 127 * (1 + 1.0f / 1024), 6e-8f);
                    CHECK(fabsf(kb[e] - k[e]) <= 0.5001f * sk);
                    CHECK(fabsf(vb[e] - v[e]) <= 0.5001f * sv);
                    if (mag == 0) CHECK(kb[e] == 0 && vb[e] == 0);
                }
                /* only this slot's bytes of head h changed: restore them and compare */
                const int32_t b = slot / bs, p = slot % bs;
                const size_t sl = (size_t)b * n_kv + (size_t)h, data = (size_t)4 * n_kv * bs * hd;
                for (int g = 0; g < hd / 4; g++) {
                    const size_t o = sl * bs * hd + ((size_t)g * bs + (size_t)p) * 4;
                    memcpy(k0 + o, kc + o, 4);
                }
                memcpy(v0 + sl * bs * hd + (size_t)p * hd, vc + sl * bs * hd + (size_t)p * hd,
                       (size_t)hd);
                memcpy(k0 + data + 2 * (sl * bs + (size_t)p), kc + data + 2 * (sl * bs + (size_t)p),
                       2);
                memcpy(v0 + data + 2 * (sl * bs + (size_t)p), vc + data + 2 * (sl * bs + (size_t)p),
                       2);
                CHECK(memcmp(k0, kc, total) == 0);
                CHECK(memcmp(v0, vc, total) == 0);
            }
        free(kc);
        free(vc);
        free(k0);
        free(v0);
    }
    const int32_t hds[] = {64, 128, 48}, bss[] = {1, 5, 16, 32, 48};
    for (size_t hi = 0; hi < PLLM_ARRAY_LEN(hds); hi++) {
        const int32_t hd = hds[hi], G = 3, n_kv = 2, n_ctx = 300, pos0 = 140, n_q = n_ctx - pos0;
        const int64_t ld = (int64_t)G * n_kv * hd;
        float *kf = malloc(sizeof(float) * n_kv * n_ctx * hd),
              *vf = malloc(sizeof(float) * n_kv * n_ctx * hd);
        float *q = malloc(sizeof(float) * (size_t)(n_q * ld)), *outs[PLLM_ARRAY_LEN(bss)];
        i8_rand_kv(kf, vf, (size_t)n_kv * n_ctx, hd, rng);
        for (int64_t i = 0; i < n_q * ld; i++) q[i] = pllm_test_randf(rng);
        for (size_t bi = 0; bi < PLLM_ARRAY_LEN(bss); bi++) {
            const int32_t bs = bss[bi], nb = (n_ctx + bs - 1) / bs;
            int32_t *bt = malloc(sizeof(int32_t) * (size_t)nb);
            for (int32_t i = 0; i < nb; i++) bt[i] = nb - 1 - i;
            pllm_kv_layout L = {.n_layer = 1,
                                .n_head_kv = n_kv,
                                .head_dim = hd,
                                .block_size = bs,
                                .n_blocks = nb,
                                .dtype = PLLM_KV_DTYPE_I8};
            void *kc, *vc;
            i8_fill(&kc, &vc, &L, bt, kf, vf, n_ctx, rng);
            pllm_cpu_attn_args a = {
                .k_cache = kc, .v_cache = vc, .kv = &L, .block_table = bt, .scale = 0.125f};
            float *scratch = malloc(sizeof(float) *
                                    PLLM_MAX(pllm_cpu_attn_tile_scratch(n_q * G, bs), (size_t)bs));
            outs[bi] = malloc(sizeof(float) * (size_t)(n_q * ld));
            for (int32_t h = 0; h < n_kv; h++) {
                pllm_cpu_attn_tile t = {.out = outs[bi] + (int64_t)h * G * hd,
                                        .ld_out = ld,
                                        .q = q + (int64_t)h * G * hd,
                                        .ld_q = ld,
                                        .pos0 = pos0,
                                        .n_q = n_q,
                                        .n_group = G,
                                        .kv_head = h};
                pllm_cpu_attend_tile(&t, &a, kern, scratch);
            }
            /* the VNNI tile is block-size invariant; the per-row fallback works per block */
            if (bi > 0 && kern->isa >= PLLM_CPU_ISA_AVX512VNNI && hd % 16 == 0)
                CHECK(memcmp(outs[bi], outs[0], sizeof(float) * (size_t)(n_q * ld)) == 0);
            free(kc);
            free(vc);
            free(bt);
            free(scratch);
        }
        for (size_t bi = 0; bi < PLLM_ARRAY_LEN(bss); bi++) free(outs[bi]);
        free(kf);
        free(vf);
        free(q);
    }
}

static void run_i8(const pllm_cpu_kernels *best, const pllm_cpu_kernels *ref, uint64_t *rng)
{
    const int32_t hds[] = {64, 128, 48, 80}, groups[] = {1, 3, 8}, bss[] = {1, 5, 16, 32};
    int n = 0;
    for (size_t a = 0; a < PLLM_ARRAY_LEN(hds); a++)
        for (size_t b = 0; b < PLLM_ARRAY_LEN(groups); b++)
            for (size_t c = 0; c < PLLM_ARRAY_LEN(bss); c++)
                for (int kind = 0; kind < 3; kind++) {
                    attn_case cs = {
                        .hd = hds[a], .group = groups[b], .bs = bss[c], .dt = PLLM_KV_DTYPE_I8};
                    cs.n_ctx = 1 + (int32_t)(pllm_test_rand(rng) % 90);
                    cs.pos0 = kind == 0   ? 0
                              : kind == 1 ? (int32_t)(pllm_test_rand(rng) % (uint64_t)cs.n_ctx)
                                          : cs.n_ctx - 1;
                    run_case_i8(&cs, best, rng);
                    n++;
                }
    const attn_case longer[] = {{.hd = 64, .group = 3, .bs = 16, .n_ctx = 613, .pos0 = 500},
                                {.hd = 128, .group = 8, .bs = 32, .n_ctx = 300, .pos0 = 250},
                                {.hd = 64, .group = 8, .bs = 16, .n_ctx = 290, .pos0 = 289},
                                {.hd = 64, .group = 1, .bs = 5, .n_ctx = 260, .pos0 = 100},
                                {.hd = 64, .group = 7, .bs = 48, .n_ctx = 400, .pos0 = 0}};
    for (size_t i = 0; i < PLLM_ARRAY_LEN(longer); i++) run_case_i8(&longer[i], best, rng);
    /* sliding-window layers (Gemma 3): the window starting mid-block, chunks that start past it
     * and single decode rows, the blocks before it poisoned */
    const attn_case windowed[] = {
        {.hd = 48, .group = 2, .bs = 8, .n_ctx = 90, .pos0 = 60, .window = 8},
        {.hd = 64, .group = 3, .bs = 5, .n_ctx = 77, .pos0 = 76, .window = 12},
        {.hd = 64, .group = 1, .bs = 16, .n_ctx = 200, .pos0 = 130, .window = 37},
        {.hd = 48, .group = 4, .bs = 16, .n_ctx = 40, .pos0 = 0, .window = 16}};
    for (size_t i = 0; i < PLLM_ARRAY_LEN(windowed); i++) {
        run_case_i8(&windowed[i], best, rng);
        run_case_i8(&windowed[i], ref, rng);
    }
    /* the scalar table's tile is the per-row reference itself */
    const attn_case sc = {.hd = 64, .group = 3, .bs = 16, .n_ctx = 150, .pos0 = 100};
    run_case_i8(&sc, ref, rng);
    check_i8_store_and_blocks(best, rng);
    printf("cpu_attn: int8 KV, %d cases + %zu: max error per row against its largest element: tile "
           "vs scalar reference %.3g "
           "(tol %.2g), scalar reference vs float64 definition %.3g (tol %.2g), int8 vs float32 "
           "attention on unquantized q/K/V "
           "%.3g (tol %.2g)\n",
           n, PLLM_ARRAY_LEN(longer) + 1, g_i8_tile, I8_TOL_TILE, g_i8_def, I8_TOL_DEF, g_i8_quant,
           I8_TOL_QUANT);
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
    run_i8(best, ref, &rng);
    printf("cpu_attn: %d cases + 7: max abs error %.3g, max relative error (per row, against its largest element) %.3g\n",
           n_cases, g_max_abs, g_max_rel);
    return pllm_test_finish("cpu_attn");
}
