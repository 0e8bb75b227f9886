/*
 * gemm_pack.c: the integer path's portable parts: activation buffers, the scalar reference
 * quantizer and matmul (reading the GGUF layout; gemm.h gives the numerics), and the packing of
 * weight matrices into 16-row panels for the SIMD paths.
 *
 * Panel layout (16 rows; rows past the matrix end are zero). Values are stored unsigned (w as in
 * gemm.h; Q8_0 as q + 128) in one of two encodings, per 32-element block:
 *   NIB  (Q4_0, Q4_1, Q4_K): 4 steps x 16 rows x 4 bytes (256 B); byte i of (step s, row r)
 *        holds element 8s + i of the row's block in its low nibble and 8s + 4 + i in its high one.
 *   BYTE (Q5_0, Q5_1, Q8_0, Q5_K, Q6_K): 8 steps x 16 rows x 4 bytes (512 B); byte i of (s, r)
 *        is element 4s + i.
 * So a 64-byte load is one step of all 16 rows: a vpdpbusd lane per row.
 * Per block of the 32-element types: d[16] (IEEE halves, one per row), for Q4_1/Q5_1 m[16],
 * then the values. Per super-block of the K-quants: a 320-byte header, then its 8 blocks' values:
 *   Q4_K, Q5_K: d[16], dmin[16] halves, sc[8][16], mn[8][16] bytes (the 6-bit scales unpacked);
 *   Q6_K: d[16] halves, 32 bytes of padding, sc[16][16] int8 (per 16-element half-block).
 * Sizes per row of 32 elements: Q4_0 18 B (as GGUF), Q4_1 20 (as GGUF), Q8_0 34 (as GGUF),
 * Q5_0 34 (GGUF 22), Q5_1 36 (24), Q4_K 18.5 (18), Q5_K 34.5 (22), Q6_K 34.5 (26.25): the 5- and
 * 6-bit types are stored a byte per value (no bit-plane unpacking in the inner loop).
 */
#include "cpu/gemm.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/kquant.h"

/* ---- activations --------------------------------------------------------------------------- */

pllm_status pllm_cpu_qact_init(pllm_cpu_qact *a, int64_t cap_tok, int64_t cap_k)
{
    memset(a, 0, sizeof *a);
    if (cap_tok < 1 || cap_k < 32 || cap_k % 64)
        return pllm_errorf(PLLM_ERR_INVALID, "qact_init: cap_tok %lld, cap_k %lld (>= 32, multiple of 64)", (long long)cap_tok,
                           (long long)cap_k);
    size_t n = (size_t)cap_tok * (size_t)cap_k;
    a->qs = pllm_aligned_alloc(n);
    a->dx = pllm_aligned_alloc(n / 32 * sizeof(float));
    a->xs = pllm_aligned_alloc(n / 32 * sizeof(float));
    a->sx = pllm_aligned_alloc(n / 32 * sizeof(int32_t));
    a->sx16 = pllm_aligned_alloc(n / 16 * sizeof(int32_t));
    a->cap_tok = cap_tok;
    a->cap_k = cap_k;
    if (!a->qs || !a->dx || !a->xs || !a->sx || !a->sx16) {
        pllm_cpu_qact_free(a);
        return pllm_errorf(PLLM_ERR_NOMEM, "qact_init: %lld tokens x %lld elements", (long long)cap_tok, (long long)cap_k);
    }
    return PLLM_OK;
}

void pllm_cpu_qact_free(pllm_cpu_qact *a)
{
    if (!a) return;
    pllm_aligned_free(a->qs);
    pllm_aligned_free(a->dx);
    pllm_aligned_free(a->xs);
    pllm_aligned_free(a->sx);
    pllm_aligned_free(a->sx16);
    memset(a, 0, sizeof *a);
}

void pllm_cpu_quant_ref(pllm_cpu_qact *a, int64_t t, const float *x, int64_t b0, int64_t b1)
{
    const int64_t nbr = a->cap_k / 32;
    for (int64_t b = b0; b < b1; b++, x += 32) {
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float id = amax > 0 ? 127.0f / amax : 0.0f;
        int8_t *q = a->qs + t * a->cap_k + 32 * b;
        int32_t s[2] = {0, 0};
        for (int j = 0; j < 32; j++) {
            q[j] = (int8_t)(int)rintf(x[j] * id);
            s[j / 16] += q[j];
        }
        const float d = amax / 127.0f;
        a->dx[t * nbr + b] = d;
        a->sx[t * nbr + b] = s[0] + s[1];
        a->sx16[2 * (t * nbr + b)] = s[0];
        a->sx16[2 * (t * nbr + b) + 1] = s[1];
        a->xs[t * nbr + b] = d * (float)(s[0] + s[1]);
    }
}

/* ---- one weight block in the canonical form ----------------------------------------------- */

bool pllm_cpu_qdtype(pllm_dtype dt)
{
    switch (dt) {
    case PLLM_DTYPE_Q4_0: case PLLM_DTYPE_Q4_1: case PLLM_DTYPE_Q5_0: case PLLM_DTYPE_Q5_1: case PLLM_DTYPE_Q8_0:
    case PLLM_DTYPE_Q4_K: case PLLM_DTYPE_Q5_K: case PLLM_DTYPE_Q6_K:
        return true;
    default:
        return false;
    }
}

typedef struct qblock {
    int32_t w[32];     /* stored values (Q8_0: signed) */
    uint16_t d, m;     /* halves: d (Q4_0..Q6_K: d of the (super-)block), m (Q4_1/Q5_1: m; K: dmin) */
    int sc[2], mn;     /* Q4_K/Q5_K: sc[0], mn; Q6_K: sc[0], sc[1] of the two halves */
} qblock;

static uint16_t rd16(const uint8_t *p)
{
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

/* Block b (32 elements) of a GGUF row of dtype dt. */
static void get_block(qblock *o, pllm_dtype dt, const uint8_t *row, int64_t b)
{
    memset(o, 0, sizeof *o);
    switch (dt) {
    case PLLM_DTYPE_Q4_0: case PLLM_DTYPE_Q4_1: case PLLM_DTYPE_Q5_0: case PLLM_DTYPE_Q5_1: case PLLM_DTYPE_Q8_0: {
        const uint8_t *p = row + (size_t)b * pllm_dtype_block_bytes(dt);
        o->d = rd16(p);
        if (dt == PLLM_DTYPE_Q8_0) {
            for (int j = 0; j < 32; j++) o->w[j] = (int8_t)p[2 + j];
            return;
        }
        bool has_m = dt == PLLM_DTYPE_Q4_1 || dt == PLLM_DTYPE_Q5_1, five = dt == PLLM_DTYPE_Q5_0 || dt == PLLM_DTYPE_Q5_1;
        if (has_m) o->m = rd16(p + 2);
        size_t off = has_m ? 4 : 2;
        uint32_t qh = 0;
        if (five) {
            memcpy(&qh, p + off, 4);
            off += 4;
        }
        for (int j = 0; j < 16; j++) {
            o->w[j] = p[off + j] & 15;
            o->w[j + 16] = p[off + j] >> 4;
        }
        if (five)
            for (int j = 0; j < 32; j++) o->w[j] |= (int32_t)((qh >> j) & 1) << 4;
        return;
    }
    case PLLM_DTYPE_Q4_K: case PLLM_DTYPE_Q5_K: {
        const int s = (int)(b % 8);
        const uint8_t *p = row + (size_t)(b / 8) * pllm_dtype_block_bytes(dt);
        o->d = rd16(p);
        o->m = rd16(p + 2);
        pllm_cpu_kq_scale_min(p + 4, s, &o->sc[0], &o->mn);
        const uint8_t *qs = p + (dt == PLLM_DTYPE_Q4_K ? offsetof(pllm_block_q4_k, qs) : offsetof(pllm_block_q5_k, qs));
        for (int l = 0; l < 32; l++) {
            uint8_t v = qs[32 * (s / 2) + l];
            o->w[l] = s % 2 ? v >> 4 : v & 15;
            if (dt == PLLM_DTYPE_Q5_K) o->w[l] |= ((p[offsetof(pllm_block_q5_k, qh) + l] >> s) & 1) << 4;
        }
        return;
    }
    case PLLM_DTYPE_Q6_K: {
        const pllm_block_q6_k *blk = (const void *)(row + (size_t)(b / 8) * sizeof(pllm_block_q6_k));
        const int h = (int)(b % 8) / 4, g = (int)(b % 8) % 4;
        const uint8_t *ql = blk->ql + 64 * h + (g & 1) * 32, *qh = blk->qh + 32 * h;
        o->d = rd16((const uint8_t *)&blk->d);
        for (int l = 0; l < 32; l++) {
            int lo = g < 2 ? ql[l] & 15 : ql[l] >> 4;
            o->w[l] = lo | ((qh[l] >> (2 * g)) & 3) << 4;
        }
        o->sc[0] = blk->scales[8 * h + 2 * g];
        o->sc[1] = blk->scales[8 * h + 2 * g + 1];
        return;
    }
    default:
        return;
    }
}

void pllm_cpu_qmatmul_ref(float *restrict Y, int64_t ldy, const pllm_cpu_qact *A, const pllm_cpu_qweight *W, int64_t n_tok,
                          int64_t r0, int64_t r1)
{
    const pllm_dtype dt = W->dtype;
    const int64_t nb = W->K / 32, nbr = A->cap_k / 32;
    const bool kq = dt == PLLM_DTYPE_Q4_K || dt == PLLM_DTYPE_Q5_K;
    const bool has_c = kq || dt == PLLM_DTYPE_Q4_1 || dt == PLLM_DTYPE_Q5_1;
    const int ofs = dt == PLLM_DTYPE_Q4_0 ? 8 : dt == PLLM_DTYPE_Q5_0 ? 16 : 0;
    qblock blk;
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *row = W->rows + (size_t)r * W->row_bytes;
        for (int64_t t = 0; t < n_tok; t++) {
            const int8_t *q = A->qs + t * A->cap_k;
            float acc = 0;
            for (int64_t b = 0; b < nb; b++) {
                get_block(&blk, dt, row, b);
                const int8_t *qb = q + 32 * b;
                const int64_t ib = t * nbr + b;
                int32_t i;
                if (dt == PLLM_DTYPE_Q6_K) {
                    int32_t h0 = 0, h1 = 0;
                    for (int j = 0; j < 16; j++) {
                        h0 += blk.w[j] * qb[j];
                        h1 += blk.w[16 + j] * qb[16 + j];
                    }
                    i = blk.sc[0] * (h0 - 32 * A->sx16[2 * ib]) + blk.sc[1] * (h1 - 32 * A->sx16[2 * ib + 1]);
                } else {
                    i = 0;
                    for (int j = 0; j < 32; j++) i += blk.w[j] * qb[j];
                    i -= ofs * A->sx[ib];
                }
                const float ws = kq ? pllm_fp16_to_fp32(blk.d) * (float)blk.sc[0] : pllm_fp16_to_fp32(blk.d);
                const float s = ws * A->dx[ib];
                acc = fmaf((float)i, s, acc);
                if (has_c) {
                    const float c = kq ? -(pllm_fp16_to_fp32(blk.m) * (float)blk.mn) : pllm_fp16_to_fp32(blk.m);
                    acc = fmaf(c, A->xs[ib], acc);
                }
            }
            Y[t * ldy + r] = acc;
        }
    }
}

/* ---- packing ------------------------------------------------------------------------------ */

static bool nib_type(pllm_dtype dt) { return dt == PLLM_DTYPE_Q4_0 || dt == PLLM_DTYPE_Q4_1 || dt == PLLM_DTYPE_Q4_K; }

static bool ktype(pllm_dtype dt) { return dt == PLLM_DTYPE_Q4_K || dt == PLLM_DTYPE_Q5_K || dt == PLLM_DTYPE_Q6_K; }

size_t pllm_cpu_panel_bytes(pllm_dtype dt, int64_t K)
{
    const size_t vals = nib_type(dt) ? 256 : 512;
    if (ktype(dt)) return (size_t)(K / 256) * (320 + 8 * vals);
    const size_t hdr = dt == PLLM_DTYPE_Q4_1 || dt == PLLM_DTYPE_Q5_1 ? 64 : 32;
    return (size_t)(K / 32) * (hdr + vals);
}

/* The values of block blk[r] (16 rows) in the panel encoding at dst. */
static void put_values(uint8_t *dst, pllm_dtype dt, const qblock *blk)
{
    for (int r = 0; r < PLLM_CPU_PANEL; r++) {
        const int32_t *w = blk[r].w;
        if (nib_type(dt)) {
            for (int s = 0; s < 4; s++)
                for (int i = 0; i < 4; i++) dst[64 * s + 4 * r + i] = (uint8_t)(w[8 * s + i] | w[8 * s + 4 + i] << 4);
        } else {
            for (int s = 0; s < 8; s++)
                for (int i = 0; i < 4; i++)
                    dst[64 * s + 4 * r + i] = (uint8_t)(dt == PLLM_DTYPE_Q8_0 ? w[4 * s + i] + 128 : w[4 * s + i]);
        }
    }
}

static void put16(uint8_t *dst, int r, uint16_t v) { memcpy(dst + 2 * r, &v, 2); }

static void pack_panel(uint8_t *dst, const pllm_cpu_qweight *w, int64_t p)
{
    const pllm_dtype dt = w->dtype;
    const size_t vals = nib_type(dt) ? 256 : 512;
    qblock blk[PLLM_CPU_PANEL];
    const int64_t nb = w->K / 32;
    int n_real = (int)PLLM_MIN((int64_t)PLLM_CPU_PANEL, w->n_rows - p * PLLM_CPU_PANEL);
    for (int64_t b = 0; b < nb; b++) {
        for (int r = 0; r < PLLM_CPU_PANEL; r++) {
            if (r < n_real) get_block(&blk[r], dt, w->rows + (size_t)(p * PLLM_CPU_PANEL + r) * w->row_bytes, b);
            else memset(&blk[r], 0, sizeof blk[r]);
            if (dt == PLLM_DTYPE_Q8_0 && r >= n_real)
                for (int j = 0; j < 32; j++) blk[r].w[j] = -128; /* stored as 0 */
        }
        if (ktype(dt)) {
            const int s = (int)(b % 8);
            if (s == 0) { /* the super-block header */
                memset(dst, 0, 320);
                for (int r = 0; r < PLLM_CPU_PANEL; r++) {
                    put16(dst, r, blk[r].d);
                    if (dt != PLLM_DTYPE_Q6_K) put16(dst + 32, r, blk[r].m);
                }
            }
            uint8_t *hdr = dst - (s ? 320 + (size_t)s * vals : 0);
            for (int r = 0; r < PLLM_CPU_PANEL; r++) {
                if (dt == PLLM_DTYPE_Q6_K) {
                    hdr[64 + 16 * (2 * s) + r] = (uint8_t)(int8_t)blk[r].sc[0];
                    hdr[64 + 16 * (2 * s + 1) + r] = (uint8_t)(int8_t)blk[r].sc[1];
                } else {
                    hdr[64 + 16 * s + r] = (uint8_t)blk[r].sc[0];
                    hdr[192 + 16 * s + r] = (uint8_t)blk[r].mn;
                }
            }
            if (s == 0) dst += 320;
        } else {
            for (int r = 0; r < PLLM_CPU_PANEL; r++) put16(dst, r, blk[r].d);
            dst += 32;
            if (dt == PLLM_DTYPE_Q4_1 || dt == PLLM_DTYPE_Q5_1) {
                for (int r = 0; r < PLLM_CPU_PANEL; r++) put16(dst, r, blk[r].m);
                dst += 32;
            }
        }
        put_values(dst, dt, blk);
        dst += vals;
    }
}

/* alloc and alloc_in: the packed copy in buf (not owned), or allocated (buf NULL) */
static pllm_status qweight_setup(pllm_cpu_qweight *w, pllm_dtype dt, const void *rows,
                                 size_t row_bytes, int64_t n_rows, int64_t K, bool pack,
                                 uint8_t *buf)
{
    memset(w, 0, sizeof *w);
    if (!pllm_cpu_qdtype(dt))
        return pllm_errorf(PLLM_ERR_UNSUPPORTED, "qweight: dtype %s has no integer path", pllm_dtype_name(dt));
    if (K <= 0 || K % pllm_dtype_block_elems(dt) || n_rows < 1 || row_bytes < pllm_dtype_row_bytes(dt, K))
        return pllm_errorf(PLLM_ERR_INVALID, "qweight: %s matrix of %lld x %lld (row_bytes %zu) is not a whole number of blocks",
                           pllm_dtype_name(dt), (long long)n_rows, (long long)K, row_bytes);
    *w = (pllm_cpu_qweight){.dtype = dt, .n_rows = n_rows, .K = K, .rows = rows, .row_bytes = row_bytes};
    if (!pack) return PLLM_OK;
    w->panel_bytes = pllm_cpu_panel_bytes(dt, K);
    if (buf) {
        w->packed = buf;
        return PLLM_OK;
    }
    w->packed = pllm_aligned_alloc(w->panel_bytes * (size_t)pllm_cpu_qweight_panels(w));
    if (!w->packed)
        return pllm_errorf(PLLM_ERR_NOMEM, "qweight: %zu bytes for the packed %s matrix",
                           w->panel_bytes * (size_t)pllm_cpu_qweight_panels(w), pllm_dtype_name(dt));
    w->owns_packed = true;
    return PLLM_OK;
}

pllm_status pllm_cpu_qweight_alloc(pllm_cpu_qweight *w, pllm_dtype dt, const void *rows,
                                   size_t row_bytes, int64_t n_rows, int64_t K, bool pack)
{
    return qweight_setup(w, dt, rows, row_bytes, n_rows, K, pack, NULL);
}

pllm_status pllm_cpu_qweight_alloc_in(pllm_cpu_qweight *w, pllm_dtype dt, const void *rows,
                                      size_t row_bytes, int64_t n_rows, int64_t K, uint8_t *packed)
{
    PLLM_ASSERT(packed);
    return qweight_setup(w, dt, rows, row_bytes, n_rows, K, true, packed);
}

size_t pllm_cpu_qweight_packed_bytes(pllm_dtype dt, int64_t n_rows, int64_t K)
{
    return pllm_cpu_panel_bytes(dt, K) * (size_t)((n_rows + PLLM_CPU_PANEL - 1) / PLLM_CPU_PANEL);
}

int64_t pllm_cpu_qweight_panels(const pllm_cpu_qweight *w) { return (w->n_rows + PLLM_CPU_PANEL - 1) / PLLM_CPU_PANEL; }

void pllm_cpu_qweight_pack(pllm_cpu_qweight *w, int64_t p0, int64_t p1)
{
    if (!w->packed) return;
    for (int64_t p = p0; p < p1; p++) pack_panel(w->packed + (size_t)p * w->panel_bytes, w, p);
}

pllm_status pllm_cpu_qweight_init(pllm_cpu_qweight *w, pllm_dtype dt, const void *rows, size_t row_bytes, int64_t n_rows,
                                  int64_t K, bool pack)
{
    PLLM_TRY(pllm_cpu_qweight_alloc(w, dt, rows, row_bytes, n_rows, K, pack));
    pllm_cpu_qweight_pack(w, 0, pllm_cpu_qweight_panels(w));
    return PLLM_OK;
}

void pllm_cpu_qweight_free(pllm_cpu_qweight *w)
{
    if (!w) return;
    if (w->owns_packed) pllm_aligned_free(w->packed);
    memset(w, 0, sizeof *w);
}
