#include "cpu/ops.h"

#include <math.h>

void pllm_cpu_rmsnorm(float *out, const float *x, const float *w, int64_t n, float eps)
{
    double ss = 0;
    for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float r = (float)(1.0 / sqrt(ss / (double)n + (double)eps));
    for (int64_t i = 0; i < n; i++) out[i] = x[i] * r * w[i];
}

void pllm_cpu_rope_table(float *cos_sin, int32_t pos, const double *inv_freq, int32_t n_pairs)
{
    for (int32_t i = 0; i < n_pairs; i++) {
        double a = (double)pos * inv_freq[i];
        cos_sin[2 * i] = (float)cos(a);
        cos_sin[2 * i + 1] = (float)sin(a);
    }
}

void pllm_cpu_rope_table_scaled(float *cos_sin, int32_t pos, const double *inv_freq,
                                int32_t n_pairs, double mscale)
{
    for (int32_t i = 0; i < n_pairs; i++) {
        double a = (double)pos * inv_freq[i];
        cos_sin[2 * i] = (float)(cos(a) * mscale);
        cos_sin[2 * i + 1] = (float)(sin(a) * mscale);
    }
}

void pllm_cpu_rope_apply(float *x, const float *cos_sin, int32_t rope_dim, pllm_rope_mode mode)
{
    const int32_t n_pairs = rope_dim / 2;
    /* NORM pairs (2i, 2i+1); NEOX pairs (i, i + n_pairs) */
    const int32_t stride = mode == PLLM_ROPE_NORM ? 2 : 1, off = mode == PLLM_ROPE_NORM ? 1 : n_pairs;
    for (int32_t i = 0; i < n_pairs; i++) {
        float c = cos_sin[2 * i], s = cos_sin[2 * i + 1];
        float *a = x + i * stride, *b = a + off;
        float x0 = *a, x1 = *b;
        *a = x0 * c - x1 * s;
        *b = x0 * s + x1 * c;
    }
}

void pllm_cpu_swiglu(float *gate, const float *up, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        float g = gate[i];
        gate[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

void pllm_cpu_geglu(float *gate, const float *up, int64_t n)
{
    const float k = 0.7978845608028654f; /* sqrt(2/pi) */
    for (int64_t i = 0; i < n; i++) {
        float g = gate[i];
        gate[i] = 0.5f * g * (1.0f + tanhf(k * (g + 0.044715f * g * g * g))) * up[i];
    }
}

void pllm_cpu_attend(float *out, const float *q, int32_t kv_head, const pllm_cpu_attn_args *a,
                     const pllm_cpu_kernels *kern, float *scores)
{
    const pllm_kv_layout *kv = a->kv;
    const int32_t bs = kv->block_size, hd = kv->head_dim;
    const bool f16 = kv->dtype == PLLM_DTYPE_F16;
    const size_t esz = f16 ? 2 : 4;
    float m = -INFINITY, l = 0;
    for (int32_t i = 0; i < hd; i++) out[i] = 0;

    /* a window starts mid-block: the first step takes the rest of that block */
    const int32_t lo = a->window > 0 ? PLLM_MAX(0, a->n_pos - a->window) : 0;
    for (int32_t p0 = lo; p0 < a->n_pos; p0 = (p0 / bs + 1) * bs) {
        const int32_t n = PLLM_MIN(bs - p0 % bs, a->n_pos - p0);
        /* this block's [block_size][head_dim] slab of kv head kv_head, from position p0 */
        size_t base = ((size_t)a->block_table[p0 / bs] * (size_t)kv->n_head_kv + (size_t)kv_head) *
                          (size_t)bs * (size_t)hd +
                      (size_t)(p0 % bs) * (size_t)hd;
        const uint8_t *K = (const uint8_t *)a->k_cache + base * esz, *V = (const uint8_t *)a->v_cache + base * esz;
        if (f16) kern->attn_scores_f16(scores, q, (const uint16_t *)K, n, hd, a->scale);
        else kern->attn_scores_f32(scores, q, (const float *)K, n, hd, a->scale);
        float mb = -INFINITY;
        for (int32_t j = 0; j < n; j++) mb = scores[j] > mb ? scores[j] : mb;
        float m_new = mb > m ? mb : m;
        float corr = expf(m - m_new); /* 0 on the first block (m = -inf) */
        l *= corr;
        for (int32_t j = 0; j < n; j++) {
            scores[j] = expf(scores[j] - m_new);
            l += scores[j];
        }
        if (f16) kern->attn_accum_f16(out, corr, scores, (const uint16_t *)V, n, hd);
        else kern->attn_accum_f32(out, corr, scores, (const float *)V, n, hd);
        m = m_new;
    }
    float inv = 1.0f / l;
    for (int32_t i = 0; i < hd; i++) out[i] *= inv;
}
