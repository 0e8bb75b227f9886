/*
 * attention_i8.c: the int8 KV cache (layout in engine/backend.h, PLLM_KV_DTYPE_I8): the row
 * quantizer of the K/V store, the scalar reference attention over it, and the AVX-512 VNNI tile.
 *
 * Numerics (both paths):
 *   - a cached row is s * q (q int8 in [-127, 127], s its fp16 scale; engine/backend.h);
 *   - the query row (one head, after RoPE) is quantized the same way but with a float scale:
 *     sq = amax(|q|) / 127, q8 = clamp(rint(q / sq), -127, 127) (pllm_cpu_kv_i8_quant_q);
 *   - score_j = (float)dot(q8, k8_j) * (sk_j * (sq * attn_scale)): the dot product is an exact
 *     integer, so the scores are bitwise the same on every path, block size and tile;
 *   - P.V dequantizes in the sum: out = out * corr + sum_j (p_j * sv_j) * (float)v8_j.
 * The VNNI tile follows attention.c's fast tile (chunks of 16 positions fixed in position space,
 * online softmax, the query heads of a GQA group sharing each K/V load, super-chunks of 128
 * positions), so its results are independent of the tile, the thread and the block size too.
 * It differs from the scalar reference only by float rounding (exp polynomial, sum order).
 */
#include "cpu/attention.h"
#include "cpu/attention_simd.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* ---- layout ---------------------------------------------------------------------------- */

/* The slab (one block of one kv head) of a layer's K or V cache, and its block_size scales. */
static inline const int8_t *slab_data(const void *cache, const pllm_kv_layout *kv, int32_t block,
                                      int32_t head)
{
    return (const int8_t *)cache + ((size_t)block * (size_t)kv->n_head_kv + (size_t)head) *
                                       (size_t)kv->block_size * (size_t)kv->head_dim;
}

static inline const uint16_t *slab_scales(const void *cache, const pllm_kv_layout *kv,
                                          int32_t block, int32_t head)
{
    const size_t data = (size_t)kv->n_blocks * (size_t)kv->n_head_kv * (size_t)kv->block_size *
                        (size_t)kv->head_dim;
    return (const uint16_t *)((const uint8_t *)cache + data) +
           ((size_t)block * (size_t)kv->n_head_kv + (size_t)head) * (size_t)kv->block_size;
}

/* ---- quantizers -------------------------------------------------------------------------- */

/* max |x[e]| (NaNs ignored, as fmaxf does; 0 for n = 0). The max is exact in any order, so the
 * 16 running maxima (one vmaxps a step) give fmaxf's result bitwise; `v > m ? v : m` is what
 * maxps computes, while fmaxf itself is a libm call per element (2% of the 200-ShareGPT int8
 * run's CPU time in perf). */
static inline float amax_of(const float *x, int32_t n)
{
    float m[16] = {0};
    int32_t e = 0;
    for (; e + 16 <= n; e += 16)
        for (int k = 0; k < 16; k++) {
            const float v = fabsf(x[e + k]);
            m[k] = v > m[k] ? v : m[k];
        }
    float a = 0;
    for (int k = 0; k < 16; k++) a = m[k] > a ? m[k] : a;
    for (; e < n; e++) {
        const float v = fabsf(x[e]);
        a = v > a ? v : a;
    }
    return a;
}

uint16_t pllm_cpu_kv_i8_quant_row(int8_t *q, const float *x, int32_t n)
{
    const float amax = amax_of(x, n);
    if (!(amax > 0)) {
        memset(q, 0, (size_t)n);
        return 0;
    }
    /* the scale rounded up to a half, so that |x / s| <= 127 */
    const float s = amax / 127.0f;
    uint16_t h = pllm_fp32_to_fp16(s);
    if (h >= 0x7c00)
        h = 0x7bff; /* past the largest half: the row saturates */
    else if (pllm_fp16_to_fp32(h) < s)
        h++;
    const float inv = 1.0f / pllm_fp16_to_fp32(h);
    for (int32_t e = 0; e < n; e++) {
        const float v = rintf(x[e] * inv);
        q[e] = (int8_t)(v > 127.0f ? 127 : v < -127.0f ? -127 : (int)v);
    }
    return h;
}

float pllm_cpu_kv_i8_quant_q(int8_t *q8, int32_t *sum, const float *q, int32_t n)
{
    const float amax = amax_of(q, n);
    int32_t s = 0;
    if (!(amax > 0)) {
        memset(q8, 0, (size_t)n);
        *sum = 0;
        return 0;
    }
    const float sq = amax / 127.0f, inv = 1.0f / sq;
    for (int32_t e = 0; e < n; e++) {
        const float v = rintf(q[e] * inv);
        q8[e] = (int8_t)(v > 127.0f ? 127 : v < -127.0f ? -127 : (int)v);
        s += q8[e];
    }
    *sum = s;
    return sq;
}

void pllm_cpu_kv_i8_store(void *k_cache, void *v_cache, const pllm_kv_layout *kv, int32_t slot,
                          int32_t head, const float *k, const float *v)
{
    const int32_t bs = kv->block_size, hd = kv->head_dim, b = slot / bs, p = slot % bs;
    int8_t q[PLLM_KV_I8_MAX_HEAD_DIM];
    PLLM_ASSERT(hd <= PLLM_KV_I8_MAX_HEAD_DIM && hd % 4 == 0);
    /* K: 4-element groups interleaved by position */
    const uint16_t hk = pllm_cpu_kv_i8_quant_row(q, k, hd);
    int8_t *kd = (int8_t *)slab_data(k_cache, kv, b, head);
    for (int32_t g = 0; g < hd / 4; g++)
        memcpy(kd + ((size_t)g * (size_t)bs + (size_t)p) * 4, q + 4 * g, 4);
    *(uint16_t *)&slab_scales(k_cache, kv, b, head)[p] = hk;
    /* V: row-major */
    int8_t *vd = (int8_t *)slab_data(v_cache, kv, b, head) + (size_t)p * (size_t)hd;
    const uint16_t hv = pllm_cpu_kv_i8_quant_row(vd, v, hd);
    *(uint16_t *)&slab_scales(v_cache, kv, b, head)[p] = hv;
}

void pllm_cpu_kv_i8_load(float *k, float *v, const void *k_cache, const void *v_cache,
                         const pllm_kv_layout *kv, int32_t slot, int32_t head)
{
    const int32_t bs = kv->block_size, hd = kv->head_dim, b = slot / bs, p = slot % bs;
    const int8_t *kd = slab_data(k_cache, kv, b, head),
                 *vd = slab_data(v_cache, kv, b, head) + (size_t)p * (size_t)hd;
    const float sk = pllm_fp16_to_fp32(slab_scales(k_cache, kv, b, head)[p]);
    const float sv = pllm_fp16_to_fp32(slab_scales(v_cache, kv, b, head)[p]);
    for (int32_t e = 0; e < hd; e++) {
        if (k)
            k[e] = sk * (float)kd[((size_t)(e / 4) * (size_t)bs + (size_t)p) * 4 + (size_t)(e % 4)];
        if (v) v[e] = sv * (float)vd[e];
    }
}

/* ---- scalar reference ---------------------------------------------------------------------- */

void pllm_cpu_attend_i8(float *out, const float *q, int32_t kv_head, const pllm_cpu_attn_args *a,
                        float *scores)
{
    const pllm_kv_layout *kv = a->kv;
    const int32_t bs = kv->block_size, hd = kv->head_dim;
    int8_t q8[PLLM_KV_I8_MAX_HEAD_DIM];
    int32_t qsum;
    PLLM_ASSERT(hd <= PLLM_KV_I8_MAX_HEAD_DIM && hd % 4 == 0);
    const float qs = pllm_cpu_kv_i8_quant_q(q8, &qsum, q, hd) * a->scale;
    float m = -INFINITY, l = 0;
    for (int32_t e = 0; e < hd; e++) out[e] = 0;

    /* a sliding-window layer (ops.h): positions [n_pos - window, n_pos) only; a window starting
     * mid-block takes the rest of that block first */
    const int32_t lo = a->window > 0 ? PLLM_MAX(0, a->n_pos - a->window) : 0;
    for (int32_t p0 = lo; p0 < a->n_pos; p0 = (p0 / bs + 1) * bs) {
        const int32_t j0 = p0 % bs, n = PLLM_MIN(bs - j0, a->n_pos - p0),
                      b = a->block_table[p0 / bs];
        const int8_t *K = slab_data(a->k_cache, kv, b, kv_head),
                     *V = slab_data(a->v_cache, kv, b, kv_head) + (size_t)j0 * (size_t)hd;
        const uint16_t *sk = slab_scales(a->k_cache, kv, b, kv_head) + j0,
                       *sv = slab_scales(a->v_cache, kv, b, kv_head) + j0;
        K += (size_t)j0 * 4; /* the K slab interleaves positions in groups of 4 elements */
        float mb = -INFINITY;
        for (int32_t j = 0; j < n; j++) {
            int32_t d = 0;
            for (int32_t e = 0; e < hd; e++)
                d += (int32_t)q8[e] *
                     K[((size_t)(e / 4) * (size_t)bs + (size_t)j) * 4 + (size_t)(e % 4)];
            scores[j] = (float)d * (pllm_fp16_to_fp32(sk[j]) * qs);
            mb = scores[j] > mb ? scores[j] : mb;
        }
        const float m_new = mb > m ? mb : m;
        const float corr = expf(m - m_new); /* 0 on the first block (m = -inf) */
        l *= corr;
        for (int32_t e = 0; e < hd; e++) out[e] *= corr;
        for (int32_t j = 0; j < n; j++) {
            const float p = expf(scores[j] - m_new);
            l += p;
            const float w = p * pllm_fp16_to_fp32(sv[j]);
            for (int32_t e = 0; e < hd; e++)
                out[e] += w * (float)V[(size_t)j * (size_t)hd + (size_t)e];
        }
        m = m_new;
    }
    const float inv = 1.0f / l;
    for (int32_t e = 0; e < hd; e++) out[e] *= inv;
}

/* ---- AVX-512 VNNI tile ------------------------------------------------------------------- */

#if defined(__x86_64__)
#define TV __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,f16c,fma")))

#define I8_SUPER  128 /* positions per super-chunk (attention.c's ATTN_SUPER) */
#define I8_PF     32  /* prefetch distance in positions (attention.c's ATTN_PF) */
#define I8_CHUNKS ((I8_SUPER + I8_PF) / PLLM_CPU_ATTN_CHUNK)

/* One super-chunk's view of the cache: per chunk c (positions P0 + 16c ..), the address of its
 * first K group (16 positions x 4 bytes; group i at kg[c] + i * kstr) and of its 16 K and V
 * scales; per position j, its V row. */
typedef struct i8_super {
    const uint8_t *kg[I8_CHUNKS];
    const uint16_t *ks[I8_CHUNKS], *vs[I8_CHUNKS];
    const int8_t *vp[I8_SUPER + I8_PF + PLLM_CPU_ATTN_CHUNK];
    int64_t kstr;
} i8_super;

/* One row group (RG heads of the query at pos) over the chunks of [P0, P1) that reach pos.
 * q8[g]: the head's int8 query (hd bytes), qc[g] = 128 * sum(q8[g]), qs[g] = sq * attn scale.
 * o, m, lv: the running state as in attention.c's rows_sweep. */
TV static inline __attribute__((always_inline)) void
i8_rows_sweep(const int NS, const int RG, float *const *o, const int8_t *const *q8,
              const int32_t *qc, const float *qs, float *m, float *lv, const i8_super *S,
              int32_t P0, int32_t P1, int32_t pos, int32_t pf_end)
{
    const int NG = 4 * NS; /* 4-byte groups of a row: hd / 4 */
    __m512 acc[4][8], l[4];
    float mr[4];
#pragma GCC unroll 16
    for (int g = 0; g < RG; g++) {
#pragma GCC unroll 16
        for (int s = 0; s < NS; s++) acc[g][s] = _mm512_loadu_ps(o[g] + 16 * s);
        l[g] = _mm512_loadu_ps(lv + 16 * g);
        mr[g] = m[g];
    }
    const __m512i x80 = _mm512_set1_epi8((char)0x80);
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    const int32_t end = PLLM_MIN(P1, pos + 1);
    const int64_t kstr = S->kstr;
    for (int32_t P = P0; P < end; P += PLLM_CPU_ATTN_CHUNK) {
        const int32_t c = (P - P0) / PLLM_CPU_ATTN_CHUNK,
                      n = PLLM_MIN(PLLM_CPU_ATTN_CHUNK, end - P);
        const __mmask16 jm = (__mmask16)((1u << n) - 1);
        if (P + I8_PF < pf_end) { /* the chunk I8_PF positions ahead, into L2 */
            const int32_t cf = c + I8_PF / PLLM_CPU_ATTN_CHUNK,
                          n_pf = PLLM_MIN(PLLM_CPU_ATTN_CHUNK, pf_end - (P + I8_PF));
#pragma GCC unroll 32
            for (int i = 0; i < NG; i++)
                _mm_prefetch((const char *)S->kg[cf] + i * kstr, _MM_HINT_T1);
            _mm_prefetch((const char *)S->ks[cf], _MM_HINT_T1);
            _mm_prefetch((const char *)S->vs[cf], _MM_HINT_T1);
            const int8_t *const *vf = S->vp + (P + I8_PF - P0);
            for (int32_t j = 0; j < n_pf; j++)
                for (int b = 0; b < NS * 16; b += 64)
                    _mm_prefetch((const char *)vf[j] + b, _MM_HINT_T1);
        }
        /* Q.K: 16 positions' integer scores per head, one vpdpbusd per 4-byte group; K is made
         * unsigned (k + 128), so the sum is dot + 128 * sum(q8): qc is taken off after */
        __m512i d[4];
#pragma GCC unroll 16
        for (int g = 0; g < RG; g++) d[g] = _mm512_setzero_si512();
        const uint8_t *kg = S->kg[c];
#pragma GCC unroll 32
        for (int i = 0; i < NG; i++) {
            const __m512i kk =
                _mm512_xor_si512(_mm512_loadu_si512((const void *)(kg + i * kstr)), x80);
#pragma GCC unroll 16
            for (int g = 0; g < RG; g++) {
                int32_t qw;
                memcpy(&qw, q8[g] + 4 * i, 4);
                d[g] = _mm512_dpbusd_epi32(d[g], kk, _mm512_set1_epi32(qw));
            }
        }
        const __m512 ksc = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)S->ks[c]));
        const __m512 vsc = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)S->vs[c]));
        float pj[4][PLLM_CPU_ATTN_CHUNK] __attribute__((aligned(64)));
#pragma GCC unroll 16
        for (int g = 0; g < RG; g++) {
            const __m512 df = _mm512_cvtepi32_ps(_mm512_sub_epi32(d[g], _mm512_set1_epi32(qc[g])));
            const __m512 sc = _mm512_mask_mov_ps(
                ninf, jm, _mm512_mul_ps(df, _mm512_mul_ps(ksc, _mm512_set1_ps(qs[g]))));
            const __m512 p = pllm_attn_softmax_step(NS, sc, jm, &mr[g], &l[g], acc[g]);
            _mm512_store_ps(pj[g], _mm512_maskz_mul_ps(jm, p, vsc)); /* p_j * sv_j */
        }
        /* P.V, dequantized in the sum */
        const int8_t *const *V = S->vp + (P - P0);
        for (int32_t j = 0; j < n; j++)
#pragma GCC unroll 16
            for (int s = 0; s < NS; s++) {
                const __m512 vv = _mm512_cvtepi32_ps(
                    _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(V[j] + 16 * s))));
#pragma GCC unroll 16
                for (int g = 0; g < RG; g++)
                    acc[g][s] = _mm512_fmadd_ps(_mm512_set1_ps(pj[g][j]), vv, acc[g][s]);
            }
    }
#pragma GCC unroll 16
    for (int g = 0; g < RG; g++) {
#pragma GCC unroll 16
        for (int s = 0; s < NS; s++) _mm512_storeu_ps(o[g] + 16 * s, acc[g][s]);
        _mm512_storeu_ps(lv + 16 * g, l[g]);
        m[g] = mr[g];
    }
}

/* Rows per group for NS segments: RG * NS output accumulators stay in registers. */
#define I8_RG_MAX(NS) ((NS) <= 3 ? 4 : (NS) == 4 ? 3 : (NS) <= 6 ? 2 : 1)

typedef void (*i8_sweep_fn)(float *const *o, const int8_t *const *q8, const int32_t *qc,
                            const float *qs, float *m, float *lv, const i8_super *S, int32_t P0,
                            int32_t P1, int32_t pos, int32_t pf_end);
#define I8_SWEEP(NS, RG)                                                                           \
    TV static void i8_sweep_##NS##_##RG(                                                           \
        float *const *o, const int8_t *const *q8, const int32_t *qc, const float *qs, float *m,    \
        float *lv, const i8_super *S, int32_t P0, int32_t P1, int32_t pos, int32_t pf_end)         \
    {                                                                                              \
        i8_rows_sweep(NS, RG, o, q8, qc, qs, m, lv, S, P0, P1, pos, pf_end);                       \
    }
// clang-format off
I8_SWEEP(1, 1) I8_SWEEP(1, 2) I8_SWEEP(1, 3) I8_SWEEP(1, 4)
I8_SWEEP(2, 1) I8_SWEEP(2, 2) I8_SWEEP(2, 3) I8_SWEEP(2, 4)
I8_SWEEP(3, 1) I8_SWEEP(3, 2) I8_SWEEP(3, 3) I8_SWEEP(3, 4)
I8_SWEEP(4, 1) I8_SWEEP(4, 2) I8_SWEEP(4, 3)
I8_SWEEP(5, 1) I8_SWEEP(5, 2)
I8_SWEEP(6, 1) I8_SWEEP(6, 2)
I8_SWEEP(7, 1)
I8_SWEEP(8, 1)
#undef I8_SWEEP
static const i8_sweep_fn i8_sweeps[9][5] = {
    [1] = {NULL, i8_sweep_1_1, i8_sweep_1_2, i8_sweep_1_3, i8_sweep_1_4},
    [2] = {NULL, i8_sweep_2_1, i8_sweep_2_2, i8_sweep_2_3, i8_sweep_2_4},
    [3] = {NULL, i8_sweep_3_1, i8_sweep_3_2, i8_sweep_3_3, i8_sweep_3_4},
    [4] = {NULL, i8_sweep_4_1, i8_sweep_4_2, i8_sweep_4_3},
    [5] = {NULL, i8_sweep_5_1, i8_sweep_5_2},
    [6] = {NULL, i8_sweep_6_1, i8_sweep_6_2},
    [7] = {NULL, i8_sweep_7_1},
    [8] = {NULL, i8_sweep_8_1},
};
// clang-format on

/* Staging of chunks that are not 16 positions of one block (block sizes not a multiple of 16):
 * each chunk's K groups packed as [hd / 4][16][4], its scales as [16], V rows left in place. */
typedef struct i8_stage {
    uint8_t k[I8_CHUNKS][PLLM_CPU_ATTN_CHUNK * 128] __attribute__((aligned(64)));
    uint16_t ks[I8_CHUNKS][PLLM_CPU_ATTN_CHUNK], vs[I8_CHUNKS][PLLM_CPU_ATTN_CHUNK];
} i8_stage;

TV void pllm_cpu_attend_tile_i8_vnni(const pllm_cpu_attn_tile *t, const pllm_cpu_attn_args *a,
                                     float *scratch)
{
    const pllm_kv_layout *kv = a->kv;
    const int32_t bs = kv->block_size, hd = kv->head_dim, G = t->n_group, rows = t->n_q * G,
                  NS = hd / 16;
    const int RG = I8_RG_MAX(NS);
    const int32_t last = t->pos0 + t->n_q - 1, h = t->kv_head;
    const bool aligned = bs % PLLM_CPU_ATTN_CHUNK == 0;
    PLLM_ASSERT(hd % 16 == 0 && hd <= 128);
    /* scratch: m[rows], lv[rows][16], then per row: qc, qs, q8[128] */
    float *m = scratch, *lv = scratch + rows;
    float *qrow = lv + 16 * (size_t)rows;
    const size_t qstride = 2 + 128 / 4; /* floats per row */

    for (int32_t r = 0; r < rows; r++) m[r] = -INFINITY;
    memset(lv, 0, sizeof(float) * 16 * (size_t)rows);
    for (int32_t i = 0; i < t->n_q; i++) {
        memset(t->out + i * t->ld_out, 0, sizeof(float) * (size_t)G * (size_t)hd);
        for (int32_t g = 0; g < G; g++) {
            float *qr = qrow + (size_t)(i * G + g) * qstride;
            int32_t sum;
            qr[1] = pllm_cpu_kv_i8_quant_q((int8_t *)(qr + 2), &sum,
                                           t->q + i * t->ld_q + (int64_t)g * hd, hd) *
                    a->scale;
            const int32_t qc = 128 * sum;
            memcpy(&qr[0], &qc, 4);
        }
    }

    i8_super S;
    i8_stage st; /* used only when !aligned */
    S.kstr = aligned ? 4 * (int64_t)bs : 4 * PLLM_CPU_ATTN_CHUNK;
    for (int32_t P0 = 0; P0 <= last; P0 += I8_SUPER) {
        const int32_t P1 = PLLM_MIN(P0 + I8_SUPER, last + 1),
                      pf_end = PLLM_MIN(P1 + I8_PF, last + 1);
        const int32_t n_rows = pf_end - P0,
                      n_chunks = (n_rows + PLLM_CPU_ATTN_CHUNK - 1) / PLLM_CPU_ATTN_CHUNK;
        /* V rows of [P0, pf_end), a block at a time; the rest of the last chunk points at a valid
         * row */
        for (int32_t j = 0; j < n_rows;) {
            const int32_t pos = P0 + j, in = pos % bs, nb = PLLM_MIN(bs - in, n_rows - j),
                          b = a->block_table[pos / bs];
            const int8_t *v0 = slab_data(a->v_cache, kv, b, h) + (size_t)in * (size_t)hd;
            for (int32_t e = 0; e < nb; e++, j++) S.vp[j] = v0 + (size_t)e * (size_t)hd;
        }
        for (int32_t j = n_rows; j < n_chunks * PLLM_CPU_ATTN_CHUNK; j++) S.vp[j] = S.vp[0];
        for (int32_t c = 0; c < n_chunks; c++) {
            const int32_t pc = P0 + c * PLLM_CPU_ATTN_CHUNK;
            if (aligned) { /* the chunk is 16 positions of one block */
                const int32_t b = a->block_table[pc / bs], in = pc % bs;
                S.kg[c] = (const uint8_t *)slab_data(a->k_cache, kv, b, h) + 4 * (size_t)in;
                S.ks[c] = slab_scales(a->k_cache, kv, b, h) + in;
                S.vs[c] = slab_scales(a->v_cache, kv, b, h) + in;
                continue;
            }
            const int32_t nc = PLLM_MIN(PLLM_CPU_ATTN_CHUNK, pf_end - pc);
            for (int32_t j = 0; j < PLLM_CPU_ATTN_CHUNK; j++) {
                if (j >= nc) {
                    for (int32_t gi = 0; gi < hd / 4; gi++)
                        memset(st.k[c] + (gi * PLLM_CPU_ATTN_CHUNK + j) * 4, 0, 4);
                    st.ks[c][j] = st.vs[c][j] = 0;
                    continue;
                }
                const int32_t pos = pc + j, b = a->block_table[pos / bs], in = pos % bs;
                const int8_t *K = slab_data(a->k_cache, kv, b, h);
                for (int32_t gi = 0; gi < hd / 4; gi++)
                    memcpy(st.k[c] + (gi * PLLM_CPU_ATTN_CHUNK + j) * 4,
                           K + ((size_t)gi * (size_t)bs + (size_t)in) * 4, 4);
                st.ks[c][j] = slab_scales(a->k_cache, kv, b, h)[in];
                st.vs[c][j] = slab_scales(a->v_cache, kv, b, h)[in];
            }
            S.kg[c] = st.k[c];
            S.ks[c] = st.ks[c];
            S.vs[c] = st.vs[c];
        }
        bool first = true;
        for (int32_t i = 0; i < t->n_q; i++) {
            const int32_t pos = t->pos0 + i;
            if (pos < P0) continue;
            for (int32_t g0 = 0; g0 < G; g0 += RG) {
                const int32_t rg = PLLM_MIN(RG, G - g0), r = i * G + g0;
                float *o[4];
                const int8_t *q8[4];
                int32_t qc[4];
                float qs[4];
                for (int32_t g = 0; g < rg; g++) {
                    const float *qr = qrow + (size_t)(r + g) * qstride;
                    o[g] = t->out + i * t->ld_out + (int64_t)(g0 + g) * hd;
                    q8[g] = (const int8_t *)(qr + 2);
                    memcpy(&qc[g], &qr[0], 4);
                    qs[g] = qr[1];
                }
                i8_sweeps[NS][rg](o, q8, qc, qs, m + r, lv + 16 * (size_t)r, &S, P0, P1, pos,
                                  first ? pf_end : 0);
                first = false;
            }
        }
    }

    for (int32_t i = 0; i < t->n_q; i++)
        for (int32_t g = 0; g < G; g++) {
            float *o = t->out + i * t->ld_out + (int64_t)g * hd;
            const float inv =
                1.0f / _mm512_reduce_add_ps(_mm512_loadu_ps(lv + 16 * (size_t)(i * G + g)));
            for (int32_t e = 0; e < hd; e++) o[e] *= inv;
        }
}
#endif

void pllm_cpu_attn_tile_prefetch_i8(const pllm_cpu_attn_tile *t, const pllm_cpu_attn_args *a,
                                    int32_t n_pos)
{
#if defined(__x86_64__)
    const pllm_kv_layout *kv = a->kv;
    const int32_t bs = kv->block_size, hd = kv->head_dim, n = PLLM_MIN(n_pos, t->pos0 + t->n_q);
    for (int32_t b0 = 0; b0 < n; b0 += bs) {
        const int32_t b = a->block_table[b0 / bs], cnt = PLLM_MIN(bs, n - b0);
        const char *K = (const char *)slab_data(a->k_cache, kv, b, t->kv_head);
        const char *V = (const char *)slab_data(a->v_cache, kv, b, t->kv_head);
        for (int32_t gi = 0; gi < hd / 4; gi++)
            for (int32_t c = 0; c < 4 * cnt; c += 64)
                _mm_prefetch(K + (size_t)gi * 4 * (size_t)bs + c, _MM_HINT_T1);
        for (size_t c = 0; c < (size_t)cnt * (size_t)hd; c += 64) _mm_prefetch(V + c, _MM_HINT_T1);
        _mm_prefetch((const char *)slab_scales(a->k_cache, kv, b, t->kv_head), _MM_HINT_T1);
        _mm_prefetch((const char *)slab_scales(a->v_cache, kv, b, t->kv_head), _MM_HINT_T1);
    }
#else
    (void)t, (void)a, (void)n_pos;
#endif
}
