#include "model/dtype.h"

#include <math.h>
#include <string.h>

static const struct {
    const char *name;
    int block_elems;
    size_t block_bytes;
    bool supported;
} g_dtypes[PLLM_DTYPE_COUNT] = {
    [PLLM_DTYPE_F32] = {"F32", 1, 4, true},
    [PLLM_DTYPE_F16] = {"F16", 1, 2, true},
    [PLLM_DTYPE_BF16] = {"BF16", 1, 2, true},
    [PLLM_DTYPE_Q8_0] = {"Q8_0", PLLM_QK, sizeof(pllm_block_q8_0), true},
    [PLLM_DTYPE_Q4_0] = {"Q4_0", PLLM_QK, sizeof(pllm_block_q4_0), true},
    [PLLM_DTYPE_Q4_1] = {"Q4_1", PLLM_QK, sizeof(pllm_block_q4_1), true},
    [PLLM_DTYPE_Q5_0] = {"Q5_0", PLLM_QK, sizeof(pllm_block_q5_0), true},
    [PLLM_DTYPE_Q5_1] = {"Q5_1", PLLM_QK, sizeof(pllm_block_q5_1), true},
    [PLLM_DTYPE_Q4_K] = {"Q4_K", PLLM_QK_K, sizeof(pllm_block_q4_k), true},
    [PLLM_DTYPE_Q5_K] = {"Q5_K", PLLM_QK_K, sizeof(pllm_block_q5_k), true},
    [PLLM_DTYPE_Q6_K] = {"Q6_K", PLLM_QK_K, sizeof(pllm_block_q6_k), true},
};

_Static_assert(sizeof(pllm_block_q8_0) == 34, "q8_0 layout");
_Static_assert(sizeof(pllm_block_q4_0) == 18, "q4_0 layout");
_Static_assert(sizeof(pllm_block_q4_1) == 20, "q4_1 layout");
_Static_assert(sizeof(pllm_block_q5_0) == 22, "q5_0 layout");
_Static_assert(sizeof(pllm_block_q5_1) == 24, "q5_1 layout");
_Static_assert(sizeof(pllm_block_q4_k) == 144, "q4_K layout");
_Static_assert(sizeof(pllm_block_q5_k) == 176, "q5_K layout");
_Static_assert(sizeof(pllm_block_q6_k) == 210, "q6_K layout");

const char *pllm_dtype_name(pllm_dtype t)
{
    return (unsigned)t < PLLM_DTYPE_COUNT ? g_dtypes[t].name : "?";
}
bool pllm_dtype_is_quantized(pllm_dtype t)
{
    return (unsigned)t < PLLM_DTYPE_COUNT && g_dtypes[t].block_elems > 1;
}
int pllm_dtype_block_elems(pllm_dtype t)
{
    return g_dtypes[t].block_elems;
}
size_t pllm_dtype_block_bytes(pllm_dtype t)
{
    return g_dtypes[t].block_bytes;
}
bool pllm_dtype_supported(pllm_dtype t)
{
    return (unsigned)t < PLLM_DTYPE_COUNT && g_dtypes[t].supported;
}

size_t pllm_dtype_row_bytes(pllm_dtype t, int64_t n)
{
    int be = g_dtypes[t].block_elems;
    if (n < 0 || n % be) return 0;
    return (size_t)(n / be) * g_dtypes[t].block_bytes;
}

float pllm_fp16_to_fp32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff, bits;
    if (exp == 0) {
        if (mant == 0) {
            bits = sign;
        } else { /* subnormal: normalise */
            int e = -1;
            do {
                e++;
                mant <<= 1;
            } while (!(mant & 0x400));
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((mant & 0x3ff) << 13);
        }
    } else if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (mant << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t pllm_fp32_to_fp16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t absx = x & 0x7fffffff;
    if (absx >= 0x7f800000u) /* inf or nan */
        return (uint16_t)(sign | 0x7c00 | (absx > 0x7f800000u ? 0x200 : 0));
    if (absx >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* rounds to inf */
    if (absx < 0x38800000u) {                                  /* subnormal or zero in half */
        /* value = absx as float; half subnormal unit is 2^-24 */
        float af;
        memcpy(&af, &absx, 4);
        float scaled = af * 16777216.0f;           /* / 2^-24 */
        uint32_t q = (uint32_t)nearbyintf(scaled); /* default rounding: to nearest even */
        return (uint16_t)(sign | q);
    }
    uint32_t mant = absx & 0x7fffff;
    uint32_t exp = (absx >> 23) - 127 + 15;
    uint32_t h = (exp << 10) | (mant >> 13);
    uint32_t rem = mant & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;
    return (uint16_t)(sign | h);
}

float pllm_bf16_to_fp32(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t pllm_fp32_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffff) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40); /* quiet nan */
    x += 0x7fff + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

/* Sub-block s (0..7) of a Q4_K/Q5_K super-block: its 6-bit scale and min (see dtype.h). */
static void kq_scale_min(const uint8_t *scales, int s, int *sc, int *mn)
{
    if (s < 4) {
        *sc = scales[s] & 63;
        *mn = scales[s + 4] & 63;
    } else {
        *sc = (scales[s + 4] & 15) | (scales[s - 4] >> 6) << 4;
        *mn = (scales[s + 4] >> 4) | (scales[s] >> 6) << 4;
    }
}

/* Q4_K (qh == NULL) and Q5_K: 256 elements of one super-block. */
static void dequant_q45_k(float *y, uint16_t d16, uint16_t dmin16, const uint8_t *scales,
                          const uint8_t *qh, const uint8_t *qs)
{
    const float d = pllm_fp16_to_fp32(d16), dmin = pllm_fp16_to_fp32(dmin16);
    for (int c = 0; c < 4; c++) { /* chunk of 64: sub-blocks 2c (low nibbles) and 2c+1 (high) */
        int sc0, mn0, sc1, mn1;
        kq_scale_min(scales, 2 * c, &sc0, &mn0);
        kq_scale_min(scales, 2 * c + 1, &sc1, &mn1);
        const float d0 = d * (float)sc0, m0 = dmin * (float)mn0, d1 = d * (float)sc1,
                    m1 = dmin * (float)mn1;
        for (int l = 0; l < 32; l++) {
            int lo = qs[32 * c + l] & 15, hi = qs[32 * c + l] >> 4;
            if (qh) {
                lo |= (qh[l] >> (2 * c) & 1) << 4;
                hi |= (qh[l] >> (2 * c + 1) & 1) << 4;
            }
            y[64 * c + l] = d0 * (float)lo - m0;
            y[64 * c + 32 + l] = d1 * (float)hi - m1;
        }
    }
}

static void dequant_q6_k(float *y, const pllm_block_q6_k *b)
{
    const float d = pllm_fp16_to_fp32(b->d);
    for (int h = 0; h < 2; h++) {
        const uint8_t *ql = b->ql + 64 * h, *qh = b->qh + 32 * h;
        const int8_t *sc = b->scales + 8 * h;
        float *yh = y + 128 * h;
        for (int l = 0; l < 32; l++) {
            int q[4] = {(ql[l] & 15) | (qh[l] & 3) << 4, (ql[32 + l] & 15) | (qh[l] >> 2 & 3) << 4,
                        (ql[l] >> 4) | (qh[l] >> 4 & 3) << 4,
                        (ql[32 + l] >> 4) | (qh[l] >> 6) << 4};
            for (int k = 0; k < 4; k++) {
                int e = 32 * k + l;
                yh[e] = d * (float)sc[e / 16] * (float)(q[k] - 32);
            }
        }
    }
}

void pllm_dequantize_row(float *dst, const void *src, pllm_dtype t, int64_t n)
{
    switch (t) {
    case PLLM_DTYPE_F32:
        memcpy(dst, src, (size_t)n * 4);
        return;
    case PLLM_DTYPE_F16: {
        const uint16_t *s = src;
        for (int64_t i = 0; i < n; i++) dst[i] = pllm_fp16_to_fp32(s[i]);
        return;
    }
    case PLLM_DTYPE_BF16: {
        const uint16_t *s = src;
        for (int64_t i = 0; i < n; i++) dst[i] = pllm_bf16_to_fp32(s[i]);
        return;
    }
    case PLLM_DTYPE_Q8_0: {
        const pllm_block_q8_0 *b = src;
        for (int64_t i = 0; i < n / PLLM_QK; i++) {
            float d = pllm_fp16_to_fp32(b[i].d);
            for (int j = 0; j < PLLM_QK; j++) dst[i * PLLM_QK + j] = d * (float)b[i].qs[j];
        }
        return;
    }
    case PLLM_DTYPE_Q4_0: {
        const pllm_block_q4_0 *b = src;
        for (int64_t i = 0; i < n / PLLM_QK; i++) {
            float d = pllm_fp16_to_fp32(b[i].d);
            for (int j = 0; j < PLLM_QK / 2; j++) {
                dst[i * PLLM_QK + j] = d * (float)((b[i].qs[j] & 0xf) - 8);
                dst[i * PLLM_QK + j + 16] = d * (float)((b[i].qs[j] >> 4) - 8);
            }
        }
        return;
    }
    case PLLM_DTYPE_Q4_1: {
        const pllm_block_q4_1 *b = src;
        for (int64_t i = 0; i < n / PLLM_QK; i++) {
            float d = pllm_fp16_to_fp32(b[i].d), m = pllm_fp16_to_fp32(b[i].m);
            for (int j = 0; j < PLLM_QK / 2; j++) {
                dst[i * PLLM_QK + j] = d * (float)(b[i].qs[j] & 0xf) + m;
                dst[i * PLLM_QK + j + 16] = d * (float)(b[i].qs[j] >> 4) + m;
            }
        }
        return;
    }
    case PLLM_DTYPE_Q5_0: {
        const pllm_block_q5_0 *b = src;
        for (int64_t i = 0; i < n / PLLM_QK; i++) {
            float d = pllm_fp16_to_fp32(b[i].d);
            uint32_t qh;
            memcpy(&qh, b[i].qh, 4);
            for (int j = 0; j < PLLM_QK / 2; j++) {
                int lo = (b[i].qs[j] & 0xf) | (int)(((qh >> j) & 1) << 4);
                int hi = (b[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
                dst[i * PLLM_QK + j] = d * (float)(lo - 16);
                dst[i * PLLM_QK + j + 16] = d * (float)(hi - 16);
            }
        }
        return;
    }
    case PLLM_DTYPE_Q5_1: {
        const pllm_block_q5_1 *b = src;
        for (int64_t i = 0; i < n / PLLM_QK; i++) {
            float d = pllm_fp16_to_fp32(b[i].d), m = pllm_fp16_to_fp32(b[i].m);
            uint32_t qh;
            memcpy(&qh, b[i].qh, 4);
            for (int j = 0; j < PLLM_QK / 2; j++) {
                int lo = (b[i].qs[j] & 0xf) | (int)(((qh >> j) & 1) << 4);
                int hi = (b[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
                dst[i * PLLM_QK + j] = d * (float)lo + m;
                dst[i * PLLM_QK + j + 16] = d * (float)hi + m;
            }
        }
        return;
    }
    case PLLM_DTYPE_Q4_K: {
        const pllm_block_q4_k *b = src;
        for (int64_t i = 0; i < n / PLLM_QK_K; i++)
            dequant_q45_k(dst + i * PLLM_QK_K, b[i].d, b[i].dmin, b[i].scales, NULL, b[i].qs);
        return;
    }
    case PLLM_DTYPE_Q5_K: {
        const pllm_block_q5_k *b = src;
        for (int64_t i = 0; i < n / PLLM_QK_K; i++)
            dequant_q45_k(dst + i * PLLM_QK_K, b[i].d, b[i].dmin, b[i].scales, b[i].qh, b[i].qs);
        return;
    }
    case PLLM_DTYPE_Q6_K: {
        const pllm_block_q6_k *b = src;
        for (int64_t i = 0; i < n / PLLM_QK_K; i++) dequant_q6_k(dst + i * PLLM_QK_K, &b[i]);
        return;
    }
    default:
        PLLM_ASSERT(!"dequantize: unsupported dtype");
    }
}
