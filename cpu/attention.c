#include "cpu/attention.h"
#include "cpu/attention_simd.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

size_t pllm_cpu_attn_tile_scratch(int32_t n_rows, int32_t block_size)
{
    /* fast tile: m[rows], l[rows][16] (int8 KV: and per row its int8 query, 128 bytes, and two
     * words); other AVX-512 tile: m[rows], l[rows], one chunk of probabilities; fallback: one
     * block of scores */
    size_t tiled = PLLM_MAX((17 + 34) * (size_t)n_rows, 2 * (size_t)n_rows + PLLM_CPU_ATTN_CHUNK);
    return PLLM_MAX(tiled, (size_t)block_size) + 16;
}

/* Bytes from a layer's K (or V) cache base to the row of position pos of kv_head, and the bytes of
 * one row: layout [block][kv head][position in block][head_dim] (model/backend.h). */
static inline size_t kv_row_bytes(const pllm_kv_layout *kv)
{
    return (size_t)kv->head_dim * (kv->dtype == PLLM_DTYPE_F16 ? 2 : 4);
}

static inline size_t kv_row_off(const pllm_kv_layout *kv, const int32_t *block_table, int32_t kv_head, int32_t pos)
{
    const int32_t bs = kv->block_size;
    return (((size_t)block_table[pos / bs] * (size_t)kv->n_head_kv + (size_t)kv_head) * (size_t)bs + (size_t)(pos % bs)) *
           kv_row_bytes(kv);
}

/* Per-row reference path: pllm_cpu_attend for each (query, head) of the tile. */
static void tile_fallback(const pllm_cpu_attn_tile *t, const pllm_cpu_attn_args *a, const pllm_cpu_kernels *kern,
                          float *scratch)
{
    const int32_t hd = a->kv->head_dim;
    const bool i8 = a->kv->dtype == PLLM_KV_DTYPE_I8;
    pllm_cpu_attn_args ra = *a;
    for (int32_t i = 0; i < t->n_q; i++) {
        ra.n_pos = t->pos0 + i + 1;
        for (int32_t g = 0; g < t->n_group; g++) {
            float *o = t->out + i * t->ld_out + (int64_t)g * hd;
            const float *q = t->q + i * t->ld_q + (int64_t)g * hd;
            if (i8)
                pllm_cpu_attend_i8(o, q, t->kv_head, &ra, scratch);
            else
                pllm_cpu_attend(o, q, t->kv_head, &ra, kern, scratch);
        }
    }
}

#if defined(__x86_64__)
#define T512 PLLM_ATTN_T512

/* 16 (or fewer: mask) elements of a K or V row, as float. */
T512 static inline __m512 load_kv(const void *base, bool f16, int64_t off, __mmask16 m)
{
    if (f16) return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)base + off));
    return _mm512_maskz_loadu_ps(m, (const float *)base + off);
}

/*
 * One tile on AVX-512, for head dims the fast tile below does not take (not a multiple of 16, or
 * over 128). Rows r = i * n_group + g. For each chunk of at most 16 positions
 * (inside one block) and each row that reaches the chunk:
 *   s_j = scale * dot(q, K_j)          16-lane FMAs over head_dim in order, then a lane sum
 *   m' = max(m, max_j s_j), corr = e^(m - m'), p_j = e^(s_j - m'), l = l * corr + sum_j p_j
 *   out = out * corr + p_0 V_0 + p_1 V_1 + ...
 * then out /= l. K_j and V_j of the chunk stay in L1 while all rows of the tile use them.
 */
T512 static void tile_avx512(const pllm_cpu_attn_tile *t, const pllm_cpu_attn_args *a, float *scratch)
{
    const pllm_kv_layout *kv = a->kv;
    const int32_t hd = kv->head_dim, G = t->n_group, rows = t->n_q * G;
    const bool f16 = kv->dtype == PLLM_DTYPE_F16;
    const int32_t last = t->pos0 + t->n_q - 1;
    const __mmask16 tail = (__mmask16)((1u << (hd % 16)) - 1);
    const int32_t n_full = hd / 16;
    float *m = scratch, *l = scratch + rows, *p = scratch + 2 * rows;

    for (int32_t r = 0; r < rows; r++) {
        m[r] = -INFINITY;
        l[r] = 0;
    }
    for (int32_t i = 0; i < t->n_q; i++) memset(t->out + i * t->ld_out, 0, sizeof(float) * (size_t)G * (size_t)hd);

    for (int32_t P = 0; P <= last; P += PLLM_CPU_ATTN_CHUNK) {
        /* the chunk's K/V rows (positions P .. P + n - 1, possibly in several blocks) */
        const int32_t n = PLLM_MIN(PLLM_CPU_ATTN_CHUNK, last + 1 - P);
        const uint8_t *K[PLLM_CPU_ATTN_CHUNK], *V[PLLM_CPU_ATTN_CHUNK];
        for (int32_t j = 0; j < n; j++) {
            const int32_t pos = P + j;
            const size_t row = kv_row_off(kv, a->block_table, t->kv_head, pos);
            K[j] = (const uint8_t *)a->k_cache + row;
            V[j] = (const uint8_t *)a->v_cache + row;
        }

        for (int32_t i = 0; i < t->n_q; i++) {
            int32_t ni = t->pos0 + i + 1 - P;
            if (ni <= 0) continue;
            ni = PLLM_MIN(ni, n);
            const __mmask16 jm = (__mmask16)((1u << ni) - 1);
            for (int32_t g = 0; g < G; g++) {
                const int32_t r = i * G + g;
                const float *q = t->q + i * t->ld_q + (int64_t)g * hd;
                float *o = t->out + i * t->ld_out + (int64_t)g * hd;

                /* scores, four K rows at a time (the same per-score operations as one at a time) */
                int32_t j = 0;
                for (; j + 4 <= ni; j += 4) {
                    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
                    for (int32_t c = 0; c <= n_full; c++) {
                        const __mmask16 cm = c < n_full ? (__mmask16)0xffff : tail;
                        if (!cm) break;
                        const int64_t e = (int64_t)c * 16;
                        const __m512 qv = _mm512_maskz_loadu_ps(cm, q + e);
                        s0 = _mm512_fmadd_ps(qv, load_kv(K[j + 0], f16, e, cm), s0);
                        s1 = _mm512_fmadd_ps(qv, load_kv(K[j + 1], f16, e, cm), s1);
                        s2 = _mm512_fmadd_ps(qv, load_kv(K[j + 2], f16, e, cm), s2);
                        s3 = _mm512_fmadd_ps(qv, load_kv(K[j + 3], f16, e, cm), s3);
                    }
                    p[j + 0] = _mm512_reduce_add_ps(s0) * a->scale;
                    p[j + 1] = _mm512_reduce_add_ps(s1) * a->scale;
                    p[j + 2] = _mm512_reduce_add_ps(s2) * a->scale;
                    p[j + 3] = _mm512_reduce_add_ps(s3) * a->scale;
                }
                for (; j < ni; j++) {
                    __m512 s0 = _mm512_setzero_ps();
                    for (int32_t c = 0; c <= n_full; c++) {
                        const __mmask16 cm = c < n_full ? (__mmask16)0xffff : tail;
                        if (!cm) break;
                        const int64_t e = (int64_t)c * 16;
                        s0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(cm, q + e), load_kv(K[j], f16, e, cm), s0);
                    }
                    p[j] = _mm512_reduce_add_ps(s0) * a->scale;
                }

                /* online softmax step */
                const __m512 sv = _mm512_maskz_loadu_ps(jm, p);
                const float mb = _mm512_mask_reduce_max_ps(jm, sv), m_new = PLLM_MAX(m[r], mb);
                const float corr = m[r] == -INFINITY ? 0.0f : expf(m[r] - m_new);
                const __m512 pv = _mm512_maskz_mov_ps(
                    jm, pllm_attn_exp512(_mm512_sub_ps(sv, _mm512_set1_ps(m_new))));
                l[r] = l[r] * corr + _mm512_reduce_add_ps(pv);
                m[r] = m_new;
                _mm512_storeu_ps(p, pv);

                /* out = out * corr + sum_j p_j V_j */
                for (int32_t c = 0; c <= n_full; c++) {
                    const __mmask16 cm = c < n_full ? (__mmask16)0xffff : tail;
                    if (!cm) break;
                    const int64_t e = (int64_t)c * 16;
                    __m512 acc = _mm512_mul_ps(_mm512_maskz_loadu_ps(cm, o + e), _mm512_set1_ps(corr));
                    for (int32_t jj = 0; jj < ni; jj++)
                        acc = _mm512_fmadd_ps(_mm512_set1_ps(p[jj]), load_kv(V[jj], f16, e, cm), acc);
                    _mm512_mask_storeu_ps(o + e, cm, acc);
                }
            }
        }
    }

    for (int32_t i = 0; i < t->n_q; i++)
        for (int32_t g = 0; g < G; g++) {
            float *o = t->out + i * t->ld_out + (int64_t)g * hd;
            const float inv = 1.0f / l[i * G + g];
            for (int32_t e = 0; e < hd; e++) o[e] *= inv;
        }
}
/*
 * The fast tile for head_dim = 16 * NS (NS <= 8: head dims 16..128), on AVX-512.
 *
 * Work is organised per query position and per group of RG of its heads (RG rows that share
 * every K/V load; RG * NS <= 12 so that the rows' output accumulators stay in registers). The
 * tile sweeps the context in super-chunks of ATTN_SUPER positions (their K/V row addresses looked
 * up once, their K/V rows staying in L2 while every query of the tile uses them); inside one,
 * each row group walks the 16-position chunks with its state in registers:
 *   scores:  v_j = q (.) K_j over the head's NS 16-lane segments in order (a multiply, then
 *            FMAs), and the 16 lane sums of v_0..v_15 by one transpose-and-add tree (hsum16:
 *            lane j of the result is the sum of v_j), so the chunk's 16 scores land in one
 *            vector with no per-score horizontal reduction;
 *   softmax: s = scores * scale (lanes past the row's position: -inf), m' = max(m, max s),
 *            corr = e^(m - m'), p = e^(s - m') (zero past the position), l = l * corr + p (l is
 *            a 16-lane vector, summed once at the end), out = out * corr;
 *   values:  out += p_j V_j for j in order, each V_j segment loaded once for the RG rows.
 * Between super-chunks a row's state (out, m, l) goes through memory unchanged, so a row's result
 * is the same chain of operations whatever its tile, its row group or the block size: the tiling
 * and block-size invariance of attention.h hold.
 */
#define ATTN_SUPER 128
/* Software prefetch distance, in positions: the K/V rows of the chunk ATTN_PF positions ahead
 * are prefetched while a chunk is computed. The rows of one block are 2-4 KB that the hardware
 * prefetcher meets only as the sweep reaches them, and the next block is anywhere in the cache,
 * so a decode sweep over a context in DRAM otherwise waits on a miss at every block. Only the
 * first row group of a tile to reach a super-chunk prefetches (the others find it in L2).
 * The hint is T1 (into L2): on Zen 4 a T0 prefetch holds one of the L1's few miss buffers until
 * its line arrives, which capped scattered 2 KB reads at ~6 GB/s a core, where T1 reaches the
 * sequential rate (~15 GB/s); attn_lab's DRAM shape: 30.6 -> 27.5 ms. The engine also
 * prefetches a thread's next tile while it computes the current one
 * (pllm_cpu_attn_tile_prefetch). */
#ifndef ATTN_PF
#define ATTN_PF 32
#endif
#ifndef ATTN_PF_HINT
#define ATTN_PF_HINT _MM_HINT_T1
#endif

/* hsum16, the lane sums of 16 vectors v_0..v_15 as one vector (lane j = the sum of v_j's lanes),
 * by a fixed tree in two parts: hsum4 folds v_4k..v_4k+3 into y_k (in each 128-bit quarter,
 * the quarter's partial sums of the four), hsum_final adds the quarters of y_0..y_3. */
T512 static inline __m512 hsum4(__m512 a, __m512 b, __m512 c, __m512 d)
{
    const __m512 x0 = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
    const __m512 x1 = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
    return _mm512_add_ps(_mm512_shuffle_ps(x0, x1, 0x44), _mm512_shuffle_ps(x0, x1, 0xee));
}

T512 static inline __m512 hsum_final(const __m512 *y)
{
    const __m512 u = _mm512_add_ps(_mm512_shuffle_f32x4(y[0], y[1], 0x88), _mm512_shuffle_f32x4(y[0], y[1], 0xdd));
    const __m512 w = _mm512_add_ps(_mm512_shuffle_f32x4(y[2], y[3], 0x88), _mm512_shuffle_f32x4(y[2], y[3], 0xdd));
    return _mm512_add_ps(_mm512_shuffle_f32x4(u, w, 0x88), _mm512_shuffle_f32x4(u, w, 0xdd));
}

T512 static inline __m512 kv_seg(const uint8_t *row, bool f16, int s)
{
    if (f16) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(row + 32 * s)));
    return _mm512_loadu_ps((const float *)(row + 64 * s));
}

/* One row group (RG heads of one query at position pos) over the chunks of [P0, P1) that reach
 * pos. Kp/Vp: the K/V row of each position of the super-chunk starting at P0 (positions past
 * the tile's last point at a valid row). o[g]: the rows' outputs (running state), m[g]: running
 * max, lv: [RG][16] running sums. */
T512 static inline __attribute__((always_inline)) void rows_sweep(const int NS, const int RG, const bool f16, float *const *o,
                                                                   const float *const *q, float *m, float *lv,
                                                                   const uint8_t *const *Kp, const uint8_t *const *Vp,
                                                                   int32_t P0, int32_t P1, int32_t pos,
                                                                   float scale, int32_t pf_end)
{
    const int row_lines = ((f16 ? 32 : 64) * NS + 63) / 64; /* cache lines of one K or V row */
    __m512 acc[4][8], l[4];
    float mr[4];
#pragma GCC unroll 16
    for (int g = 0; g < RG; g++) {
#pragma GCC unroll 16
        for (int s = 0; s < NS; s++) acc[g][s] = _mm512_loadu_ps(o[g] + 16 * s);
        l[g] = _mm512_loadu_ps(lv + 16 * g);
        mr[g] = m[g];
    }
    const __m512 vscale = _mm512_set1_ps(scale), ninf = _mm512_set1_ps(-INFINITY);
    const int32_t end = PLLM_MIN(P1, pos + 1);
    for (int32_t P = P0; P < end; P += PLLM_CPU_ATTN_CHUNK) {
        const int32_t n = PLLM_MIN(PLLM_CPU_ATTN_CHUNK, end - P);
        const __mmask16 jm = (__mmask16)((1u << n) - 1);
        const uint8_t *const *K = Kp + (P - P0), *const *V = Vp + (P - P0);
        if (ATTN_PF > 0 && P + ATTN_PF < pf_end) { /* Kp/Vp hold the rows up to pf_end */
            const int32_t n_pf = PLLM_MIN(PLLM_CPU_ATTN_CHUNK, pf_end - (P + ATTN_PF));
            for (int32_t j = 0; j < n_pf; j++)
#pragma GCC unroll 8
                for (int c = 0; c < row_lines; c++) {
                    _mm_prefetch((const char *)K[ATTN_PF + j] + 64 * c, ATTN_PF_HINT);
                    _mm_prefetch((const char *)V[ATTN_PF + j] + 64 * c, ATTN_PF_HINT);
                }
        }
        float pj[4][PLLM_CPU_ATTN_CHUNK] __attribute__((aligned(64)));
        /* the scores: each K segment is loaded (and converted) once for the group's rows */
        __m512 y[4][4];
#pragma GCC unroll 16
        for (int k = 0; k < 4; k++) {
            __m512 v[4][4];
#pragma GCC unroll 16
            for (int jj = 0; jj < 4; jj++) {
                const uint8_t *kr = K[4 * k + jj];
                const __m512 k0 = kv_seg(kr, f16, 0);
#pragma GCC unroll 16
                for (int g = 0; g < RG; g++) v[g][jj] = _mm512_mul_ps(_mm512_loadu_ps(q[g]), k0);
#pragma GCC unroll 16
                for (int s = 1; s < NS; s++) {
                    const __m512 ks = kv_seg(kr, f16, s);
#pragma GCC unroll 16
                    for (int g = 0; g < RG; g++)
                        v[g][jj] = _mm512_fmadd_ps(_mm512_loadu_ps(q[g] + 16 * s), ks, v[g][jj]);
                }
            }
#pragma GCC unroll 16
            for (int g = 0; g < RG; g++) y[g][k] = hsum4(v[g][0], v[g][1], v[g][2], v[g][3]);
        }
#pragma GCC unroll 16
        for (int g = 0; g < RG; g++) {
            const __m512 sc = _mm512_mask_mov_ps(ninf, jm, _mm512_mul_ps(hsum_final(y[g]), vscale));
            _mm512_store_ps(pj[g], pllm_attn_softmax_step(NS, sc, jm, &mr[g], &l[g], acc[g]));
        }
        for (int32_t j = 0; j < n; j++)
#pragma GCC unroll 16
            for (int s = 0; s < NS; s++) {
                const __m512 vv = kv_seg(V[j], f16, s);
#pragma GCC unroll 16
                for (int g = 0; g < RG; g++) acc[g][s] = _mm512_fmadd_ps(_mm512_set1_ps(pj[g][j]), vv, acc[g][s]);
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

/* Rows per group for NS segments: the group's outputs (RG * NS zmm) stay in registers. */
#define RG_MAX(NS) ((NS) <= 3 ? 4 : (NS) == 4 ? 3 : (NS) <= 6 ? 2 : 1)

typedef void (*sweep_fn)(float *const *o, const float *const *q, float *m, float *lv, const uint8_t *const *Kp,
                         const uint8_t *const *Vp, int32_t P0, int32_t P1, int32_t pos, float scale, int32_t pf_end);
/* one function per (NS, RG, cache dtype), every small loop unrolled, the accumulators in registers */
#define SWEEP(NS, RG)                                                                                                  \
    T512 static void sweep_##NS##_##RG##_f32(float *const *o, const float *const *q, float *m, float *lv,             \
                                             const uint8_t *const *Kp, const uint8_t *const *Vp, int32_t P0,          \
                                             int32_t P1, int32_t pos, float scale, int32_t pf_end)                     \
    {                                                                                                                  \
        rows_sweep(NS, RG, false, o, q, m, lv, Kp, Vp, P0, P1, pos, scale, pf_end);                                    \
    }                                                                                                                  \
    T512 static void sweep_##NS##_##RG##_f16(float *const *o, const float *const *q, float *m, float *lv,             \
                                             const uint8_t *const *Kp, const uint8_t *const *Vp, int32_t P0,          \
                                             int32_t P1, int32_t pos, float scale, int32_t pf_end)                     \
    {                                                                                                                  \
        rows_sweep(NS, RG, true, o, q, m, lv, Kp, Vp, P0, P1, pos, scale, pf_end);                                     \
    }
SWEEP(1, 1) SWEEP(1, 2) SWEEP(1, 3) SWEEP(1, 4)
SWEEP(2, 1) SWEEP(2, 2) SWEEP(2, 3) SWEEP(2, 4)
SWEEP(3, 1) SWEEP(3, 2) SWEEP(3, 3) SWEEP(3, 4)
SWEEP(4, 1) SWEEP(4, 2) SWEEP(4, 3)
SWEEP(5, 1) SWEEP(5, 2)
SWEEP(6, 1) SWEEP(6, 2)
SWEEP(7, 1)
SWEEP(8, 1)
#undef SWEEP
#define ROW4(NS, T) {NULL, sweep_##NS##_1_##T, sweep_##NS##_2_##T, sweep_##NS##_3_##T, sweep_##NS##_4_##T}
#define ROW3(NS, T) {NULL, sweep_##NS##_1_##T, sweep_##NS##_2_##T, sweep_##NS##_3_##T}
#define ROW2(NS, T) {NULL, sweep_##NS##_1_##T, sweep_##NS##_2_##T}
#define ROW1(NS, T) {NULL, sweep_##NS##_1_##T}
static const sweep_fn sweeps[2][9][5] = {
    {[1] = ROW4(1, f32), [2] = ROW4(2, f32), [3] = ROW4(3, f32), [4] = ROW3(4, f32), [5] = ROW2(5, f32),
     [6] = ROW2(6, f32), [7] = ROW1(7, f32), [8] = ROW1(8, f32)},
    {[1] = ROW4(1, f16), [2] = ROW4(2, f16), [3] = ROW4(3, f16), [4] = ROW3(4, f16), [5] = ROW2(5, f16),
     [6] = ROW2(6, f16), [7] = ROW1(7, f16), [8] = ROW1(8, f16)},
};
#undef ROW4
#undef ROW3
#undef ROW2
#undef ROW1

/* The tile on the fast path (head_dim a multiple of 16, at most 128). Scratch: m[rows], then
 * l[rows][16]. */
T512 static void tile_fast(const pllm_cpu_attn_tile *t, const pllm_cpu_attn_args *a, float *scratch)
{
    const pllm_kv_layout *kv = a->kv;
    const int32_t bs = kv->block_size, hd = kv->head_dim, G = t->n_group, rows = t->n_q * G, NS = hd / 16;
    const int RG = RG_MAX(NS);
    const bool f16 = kv->dtype == PLLM_DTYPE_F16;
    const size_t row_bytes = kv_row_bytes(kv);
    const int32_t last = t->pos0 + t->n_q - 1;
    float *m = scratch, *lv = scratch + rows;

    for (int32_t r = 0; r < rows; r++) m[r] = -INFINITY;
    memset(lv, 0, sizeof(float) * 16 * (size_t)rows);
    for (int32_t i = 0; i < t->n_q; i++) memset(t->out + i * t->ld_out, 0, sizeof(float) * (size_t)G * (size_t)hd);

    const uint8_t *Kp[ATTN_SUPER + ATTN_PF], *Vp[ATTN_SUPER + ATTN_PF];
    for (int32_t P0 = 0; P0 <= last; P0 += ATTN_SUPER) {
        const int32_t P1 = PLLM_MIN(P0 + ATTN_SUPER, last + 1), pf_end = PLLM_MIN(P1 + ATTN_PF, last + 1);
        /* K/V rows of [P0, pf_end) (the rows from P1 on serve the prefetch, or are masked lanes
         * of P1's chunk), a block at a time; lanes of P1's chunk past pf_end point at a valid row */
        const int32_t n_fill = PLLM_MIN(ATTN_SUPER, (P1 - P0 + PLLM_CPU_ATTN_CHUNK - 1) / PLLM_CPU_ATTN_CHUNK * PLLM_CPU_ATTN_CHUNK);
        const int32_t n_rows = pf_end - P0;
        for (int32_t j = 0; j < n_rows;) {
            const int32_t pos = P0 + j, in = pos % bs, nb = PLLM_MIN(bs - in, n_rows - j);
            const size_t off = kv_row_off(kv, a->block_table, t->kv_head, pos);
            for (int32_t e = 0; e < nb; e++, j++) {
                Kp[j] = (const uint8_t *)a->k_cache + off + (size_t)e * row_bytes;
                Vp[j] = (const uint8_t *)a->v_cache + off + (size_t)e * row_bytes;
            }
        }
        for (int32_t j = n_rows; j < n_fill; j++) {
            Kp[j] = Kp[0];
            Vp[j] = Vp[0];
        }
        bool first = true;
        for (int32_t i = 0; i < t->n_q; i++) {
            const int32_t pos = t->pos0 + i;
            if (pos < P0) continue;
            for (int32_t g0 = 0; g0 < G; g0 += RG) {
                const int32_t rg = PLLM_MIN(RG, G - g0);
                float *o[4];
                const float *q[4];
                for (int32_t g = 0; g < rg; g++) {
                    o[g] = t->out + i * t->ld_out + (int64_t)(g0 + g) * hd;
                    q[g] = t->q + i * t->ld_q + (int64_t)(g0 + g) * hd;
                }
                const int32_t r = i * G + g0;
                sweeps[f16][NS][rg](o, q, m + r, lv + 16 * (size_t)r, Kp, Vp, P0, P1, pos, a->scale, first ? pf_end : 0);
                first = false;
            }
        }
    }

    for (int32_t i = 0; i < t->n_q; i++)
        for (int32_t g = 0; g < G; g++) {
            float *o = t->out + i * t->ld_out + (int64_t)g * hd;
            const float inv = 1.0f / _mm512_reduce_add_ps(_mm512_loadu_ps(lv + 16 * (size_t)(i * G + g)));
            for (int32_t e = 0; e < hd; e++) o[e] *= inv;
        }
}
#endif

void pllm_cpu_attn_tile_prefetch(const pllm_cpu_attn_tile *t, const pllm_cpu_attn_args *a, int32_t n_pos)
{
    if (a->kv->dtype == PLLM_KV_DTYPE_I8) {
        pllm_cpu_attn_tile_prefetch_i8(t, a, n_pos);
        return;
    }
#if defined(__x86_64__) && ATTN_PF > 0
    const pllm_kv_layout *kv = a->kv;
    const int32_t bs = kv->block_size, n = PLLM_MIN(n_pos, t->pos0 + t->n_q);
    for (int32_t b0 = 0; b0 < n; b0 += bs) { /* a block's rows of one head are contiguous */
        const size_t off = kv_row_off(kv, a->block_table, t->kv_head, b0);
        const size_t len = (size_t)PLLM_MIN(bs, n - b0) * kv_row_bytes(kv);
        for (size_t c = 0; c < len; c += 64) {
            _mm_prefetch((const char *)a->k_cache + off + c, ATTN_PF_HINT);
            _mm_prefetch((const char *)a->v_cache + off + c, ATTN_PF_HINT);
        }
    }
#else
    (void)t, (void)a, (void)n_pos;
#endif
}

void pllm_cpu_attend_tile(const pllm_cpu_attn_tile *t, const pllm_cpu_attn_args *a, const pllm_cpu_kernels *kern,
                          float *scratch)
{
    /* a sliding-window layer: the per-row path, which starts each row at its window (the
     * AVX-512 tiles sweep from position 0). Always, not only for tiles whose rows' windows
     * exclude keys: a row then takes the same path (and rounding) in any tile, so a sequence's
     * results do not depend on how its prompt was chunked or batched (they did: the tiles
     * within the first window and the per-row path past it rounded one row differently) */
    if (a->window > 0) {
        tile_fallback(t, a, kern, scratch);
        return;
    }
#if defined(__x86_64__)
    if (a->kv->dtype == PLLM_KV_DTYPE_I8) {
        if (kern->isa >= PLLM_CPU_ISA_AVX512VNNI && a->kv->head_dim % 16 == 0 &&
            a->kv->head_dim <= 128)
            pllm_cpu_attend_tile_i8_vnni(t, a, scratch);
        else
            tile_fallback(t, a, kern, scratch);
        return;
    }
    if (kern->isa >= PLLM_CPU_ISA_AVX512) {
        if (a->kv->head_dim % 16 == 0 && a->kv->head_dim <= 128) tile_fast(t, a, scratch);
        else tile_avx512(t, a, scratch);
        return;
    }
#endif
    tile_fallback(t, a, kern, scratch);
}

void pllm_cpu_rope_store_kv(void *k_cache, void *v_cache, const pllm_kv_layout *kv, int32_t slot, const float *k,
                            const float *v, const float *cos_sin, int32_t rope_dim, pllm_rope_mode mode,
                            const pllm_cpu_kernels *kern, float *tmp)
{
    const int32_t bs = kv->block_size, hd = kv->head_dim;
    if (kv->dtype == PLLM_KV_DTYPE_I8) {
        for (int32_t h = 0; h < kv->n_head_kv; h++) {
            memcpy(tmp, k + (int64_t)h * hd, sizeof(float) * (size_t)hd);
            pllm_cpu_rope_apply(tmp, cos_sin, rope_dim, mode);
            pllm_cpu_kv_i8_store(k_cache, v_cache, kv, slot, h, tmp, v + (int64_t)h * hd);
        }
        return;
    }
    for (int32_t h = 0; h < kv->n_head_kv; h++) {
        const size_t idx =
            (((size_t)(slot / bs) * (size_t)kv->n_head_kv + (size_t)h) * (size_t)bs + (size_t)(slot % bs)) * (size_t)hd;
        const float *kh = k + (int64_t)h * hd, *vh = v + (int64_t)h * hd;
        if (kv->dtype == PLLM_DTYPE_F16) {
            memcpy(tmp, kh, sizeof(float) * (size_t)hd);
            pllm_cpu_rope_apply(tmp, cos_sin, rope_dim, mode);
            kern->to_f16((uint16_t *)k_cache + idx, tmp, hd);
            kern->to_f16((uint16_t *)v_cache + idx, vh, hd);
        } else {
            float *kd = (float *)k_cache + idx; /* rotated in place in the cache line it lands in */
            memcpy(kd, kh, sizeof(float) * (size_t)hd);
            pllm_cpu_rope_apply(kd, cos_sin, rope_dim, mode);
            memcpy((float *)v_cache + idx, vh, sizeof(float) * (size_t)hd);
        }
    }
}
