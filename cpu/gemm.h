/*
 * gemm.h: integer matmul for quantized weights: activations quantized per block of 32 to int8,
 * integer block dot products (AVX-512 VNNI vpdpbusd, or the scalar reference), scales applied
 * in float32 in one fixed order, so every path gives bitwise the same result.
 *
 * Activations (pllm_cpu_qact): each token's row of K floats (K a multiple of 32) becomes, per
 * block b of 32 elements, q[32] int8 = rint(x * 127/amax) (amax = max |x| of the block; all
 * zero when amax = 0), its scale dx[b] = amax / 127, the integer sums sx[b] = sum q and
 * sx16[2b + h] = sum of half h (16 elements), and xs[b] = dx[b] * (float)sx[b]. Computed once per
 * token per matmul input (pllm_cpu_qact_row) and read by every weight row.
 *
 * Canonical numerics (what every path computes, bitwise): for output (row r, token t), over the
 * 32-element blocks b of the row in order, starting from acc = +0:
 *     i_b  = integer block dot (exact, int32), by dtype, with w the stored unsigned or signed
 *            values of the weight block and q the activation block:
 *              Q4_0: sum w q - 8 sx    Q5_0: sum w q - 16 sx    Q8_0: sum w q
 *              Q4_1, Q5_1, Q4_K, Q5_K: sum w q
 *              Q6_K: sc[2b] (sum_{half 0} w q - 32 sx16[2b]) + sc[2b+1] (sum_{half 1} ... )
 *     ws_b = the block's float weight scale: d (Q4_0..Q8_0, Q6_K), d * (float)sc (Q4_K, Q5_K),
 *            with the halves d, dmin converted exactly to float
 *     acc  = fmaf((float)i_b, ws_b * dx[b], acc)
 *     for the types with an offset: c_b = m (Q4_1, Q5_1) or -(dmin * (float)mn) (Q4_K, Q5_K),
 *     acc  = fmaf(c_b, xs[b], acc)
 * and Y[t][r] = acc. Each output is one sequential chain over its blocks, so the result does not
 * depend on the batch, the tile, the row range or the thread split (batch invariance), and a
 * SIMD path that vectorizes over rows (one lane per row) reproduces the scalar chain exactly.
 *
 * Packed weights (pllm_cpu_qweight): the SIMD paths read a copy of the matrix repacked at load
 * time into panels of 16 rows, so that one 64-byte load gives 16 rows x 4 values, a vpdpbusd
 * lane per row with the token's 4 activation bytes broadcast (layouts in gemm_pack.c). The
 * scalar reference reads the GGUF layout directly (it is independent of the packing).
 *
 * Ownership: pllm_cpu_qact_init/free and pllm_cpu_qweight_pack/free pairs; kernels never
 * allocate.
 */
#pragma once

#include "model/common.h"
#include "model/dtype.h"

#define PLLM_CPU_PANEL 16 /* rows per packed panel */

typedef struct pllm_cpu_qact {
    int8_t *qs;    /* [cap_tok][cap_k] quantized values */
    float *dx;     /* [cap_tok][cap_k / 32] block scales */
    float *xs;     /* [cap_tok][cap_k / 32] dx * sx */
    int32_t *sx;   /* [cap_tok][cap_k / 32] block sums of qs */
    int32_t *sx16; /* [cap_tok][cap_k / 16] half-block sums of qs */
    int64_t cap_tok, cap_k;
} pllm_cpu_qact;

pllm_status pllm_cpu_qact_init(pllm_cpu_qact *a, int64_t cap_tok, int64_t cap_k);
void pllm_cpu_qact_free(pllm_cpu_qact *a);

/* Quantize blocks [b0, b1) of token t's row: x points at the row's element 32 * b0. */
typedef void (*pllm_cpu_quant_fn)(pllm_cpu_qact *a, int64_t t, const float *x, int64_t b0, int64_t b1);

/* A weight matrix for the integer path: the GGUF rows and (for SIMD tables) the packed copy. */
typedef struct pllm_cpu_qweight {
    pllm_dtype dtype;
    int64_t n_rows, K;
    const uint8_t *rows; /* the original [n_rows][row_bytes] (GGUF layout) */
    size_t row_bytes;
    uint8_t *packed;     /* [ceil(n_rows / 16)][panel_bytes], or NULL (scalar table) */
    size_t panel_bytes;
    /* packed was allocated by alloc/init (free releases it), not given to alloc_in */
    bool owns_packed;
} pllm_cpu_qweight;

/* Whether the integer path computes this dtype (the quantized types). */
bool pllm_cpu_qdtype(pllm_dtype dt);
/* Bytes of one packed panel of 16 rows of K elements of dt. */
size_t pllm_cpu_panel_bytes(pllm_dtype dt, int64_t K);
/* Fill w for the matrix rows[n_rows][row_bytes]; pack = whether to build the packed copy. */
pllm_status pllm_cpu_qweight_init(pllm_cpu_qweight *w, pllm_dtype dt, const void *rows, size_t row_bytes, int64_t n_rows,
                                  int64_t K, bool pack);
/* The same in two parts, so that several threads can pack: alloc (packed copy allocated, not
 * filled), then pack panels [p0, p1) (any split of [0, panels)). */
pllm_status pllm_cpu_qweight_alloc(pllm_cpu_qweight *w, pllm_dtype dt, const void *rows, size_t row_bytes, int64_t n_rows,
                                   int64_t K, bool pack);
/* The same with the packed copy placed in the caller's buffer of
 * pllm_cpu_qweight_packed_bytes(dt, n_rows, K) bytes, 64-byte aligned (it outlives w; free does
 * not release it): the CPU backend places all its matrices in one huge-page region, in the order
 * a step reads them. */
pllm_status pllm_cpu_qweight_alloc_in(pllm_cpu_qweight *w, pllm_dtype dt, const void *rows,
                                      size_t row_bytes, int64_t n_rows, int64_t K, uint8_t *packed);
size_t pllm_cpu_qweight_packed_bytes(pllm_dtype dt, int64_t n_rows, int64_t K);
int64_t pllm_cpu_qweight_panels(const pllm_cpu_qweight *w);
void pllm_cpu_qweight_pack(pllm_cpu_qweight *w, int64_t p0, int64_t p1);
void pllm_cpu_qweight_free(pllm_cpu_qweight *w);

/*
 * Y[t][r] = the canonical dot of weight row r and activation row t, for t in [0, n_tok),
 * r in [r0, r1). Y: [n_tok][ldy] float32 (only columns r0..r1-1 are written); A holds rows
 * 0..n_tok-1 quantized with K = W->K.
 */
typedef void (*pllm_cpu_qmatmul_fn)(float *restrict Y, int64_t ldy, const pllm_cpu_qact *A, const pllm_cpu_qweight *W,
                                    int64_t n_tok, int64_t r0, int64_t r1);

/* The scalar reference (GGUF layout) and its activation quantizer. */
void pllm_cpu_qmatmul_ref(float *restrict Y, int64_t ldy, const pllm_cpu_qact *A, const pllm_cpu_qweight *W, int64_t n_tok,
                          int64_t r0, int64_t r1);
void pllm_cpu_quant_ref(pllm_cpu_qact *a, int64_t t, const float *x, int64_t b0, int64_t b1);

/* AVX2 (gemm_avx2.c; vpmaddubsw, no VNNI needed): packed panels. */
void pllm_cpu_qmatmul_avx2(float *restrict Y, int64_t ldy, const pllm_cpu_qact *A, const pllm_cpu_qweight *W, int64_t n_tok,
                           int64_t r0, int64_t r1);
void pllm_cpu_quant_avx2(pllm_cpu_qact *a, int64_t t, const float *x, int64_t b0, int64_t b1);

/* AVX-512 VNNI (gemm_avx512.c): packed panels. */
void pllm_cpu_qmatmul_avx512vnni(float *restrict Y, int64_t ldy, const pllm_cpu_qact *A, const pllm_cpu_qweight *W,
                                 int64_t n_tok, int64_t r0, int64_t r1);
void pllm_cpu_quant_avx512(pllm_cpu_qact *a, int64_t t, const float *x, int64_t b0, int64_t b1);
