#include "cpu/attention.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

size_t pllm_cpu_attn_tile_scratch(int32_t n_rows, int32_t block_size)
{
    /* tiled: m[rows], l[rows], one chunk of probabilities; fallback: one block of scores */
    size_t tiled = 2 * (size_t)n_rows + PLLM_CPU_ATTN_CHUNK;
    return PLLM_MAX(tiled, (size_t)block_size) + 16;
}

/* Per-row reference path: pllm_cpu_attend for each (query, head) of the tile. */
static void tile_fallback(const pllm_cpu_attn_tile *t, const pllm_cpu_attn_args *a, const pllm_cpu_kernels *kern,
                          float *scratch)
{
    const int32_t hd = a->kv->head_dim;
    pllm_cpu_attn_args ra = *a;
    for (int32_t i = 0; i < t->n_q; i++) {
        ra.n_pos = t->pos0 + i + 1;
        for (int32_t g = 0; g < t->n_group; g++)
            pllm_cpu_attend(t->out + i * t->ld_out + (int64_t)g * hd, t->q + i * t->ld_q + (int64_t)g * hd, t->kv_head, &ra,
                            kern, scratch);
    }
}

#if defined(__x86_64__)
#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,f16c,fma")))

/* e^x for x <= 0 (lanes below -87 give ~0): x = n ln2 + r, |r| <= ln2 / 2, degree-6 Taylor
 * polynomial of e^r (relative error < 1e-7 on the interval), times 2^n by vscalefps. */
T512 static inline __m512 exp512(__m512 x)
{
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x); /* ln2 high part (exact) */
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860682030941723e-6f), r);   /* ln2 low part */
    __m512 p = _mm512_set1_ps(1.0f / 720);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

/* 16 (or fewer: mask) elements of a K or V row, as float. */
T512 static inline __m512 load_kv(const void *base, bool f16, int64_t off, __mmask16 m)
{
    if (f16) return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)base + off));
    return _mm512_maskz_loadu_ps(m, (const float *)base + off);
}

/*
 * One tile on AVX-512. Rows r = i * n_group + g. For each chunk of at most 16 positions
 * (inside one block) and each row that reaches the chunk:
 *   s_j = scale * dot(q, K_j)          16-lane FMAs over head_dim in order, then a lane sum
 *   m' = max(m, max_j s_j), corr = e^(m - m'), p_j = e^(s_j - m'), l = l * corr + sum_j p_j
 *   out = out * corr + p_0 V_0 + p_1 V_1 + ...
 * then out /= l. K_j and V_j of the chunk stay in L1 while all rows of the tile use them.
 */
T512 static void tile_avx512(const pllm_cpu_attn_tile *t, const pllm_cpu_attn_args *a, float *scratch)
{
    const pllm_kv_layout *kv = a->kv;
    const int32_t bs = kv->block_size, hd = kv->head_dim, G = t->n_group, rows = t->n_q * G;
    const bool f16 = kv->dtype == PLLM_DTYPE_F16;
    const size_t esz = f16 ? 2 : 4;
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
            const size_t row = (((size_t)a->block_table[pos / bs] * (size_t)kv->n_head_kv + (size_t)t->kv_head) * (size_t)bs +
                                (size_t)(pos % bs)) * (size_t)hd * esz;
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
                const __m512 pv = _mm512_maskz_mov_ps(jm, exp512(_mm512_sub_ps(sv, _mm512_set1_ps(m_new))));
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
#endif

void pllm_cpu_attend_tile(const pllm_cpu_attn_tile *t, const pllm_cpu_attn_args *a, const pllm_cpu_kernels *kern,
                          float *scratch)
{
#if defined(__x86_64__)
    if (kern->isa >= PLLM_CPU_ISA_AVX512) {
        tile_avx512(t, a, scratch);
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
