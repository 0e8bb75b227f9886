/*
 * attention.h: tiled paged attention for the CPU backend, and RoPE fused with the K/V store.
 *
 * A tile is n_q consecutive query positions of ONE sequence (a prefill chunk or a decode token)
 * times the n_group query heads that share one KV head (GQA). The tile walks the sequence's
 * positions in order, in chunks of PLLM_CPU_ATTN_CHUNK positions [16k, 16k + 16) (a chunk may
 * span several blocks: its K/V rows are looked up through the block table one by one), and every
 * query row of the tile consumes the chunk while it is in L1: each K/V block is read from memory
 * once per tile, not once per (query, head). Causal: query position p uses only
 * positions <= p (a row simply stops consuming chunks past its position).
 *
 * Numerics (the invariant the engine's determinism rests on): a query row's result depends only
 * on its own q, its position and the cache contents -- never on the tile it is in, the tile's
 * size, the thread that runs it, or even the block size (chunks are fixed in position space).
 * Per row and per chunk the arithmetic is fixed: scores by a fixed-order dot product, an online
 * softmax (running max m and sum l, corrected by exp(m_old - m_new) per chunk),
 * out = out * corr + sum_j p_j V_j in j order. Results differ from pllm_cpu_attend (the
 * per-token reference, ops.h) only by float rounding (the exponential is a vector polynomial
 * accurate to ~2 ulp; sums are grouped by chunk).
 *
 * AVX-512, head_dim a multiple of 16 up to 128 (every supported model): the fast tile
 * (attention.c): a chunk's 16 scores come out in one vector (per-lane products over the head,
 * then one transpose-and-add tree for the 16 lane sums), l is kept per lane, and a query's heads
 * of one GQA group share each K/V load with their outputs in registers; the tile sweeps the
 * context in super-chunks of 128 positions whose K/V stay in L2 while every query of the tile
 * uses them. Other head dims: a per-row AVX-512 tile with one horizontal sum per score.
 * bench/lab/attn_lab times it (single thread, CPU time).
 *
 * Without AVX-512 (or when the kernel table is capped below it, PLLM_CPU_ISA) the tile falls back
 * to pllm_cpu_attend per row, which uses the table's own attention kernels.
 * No allocation: the caller passes scratch of pllm_cpu_attn_tile_scratch() floats.
 */
#pragma once

#include "cpu/kernels.h"
#include "cpu/ops.h"

#define PLLM_CPU_ATTN_CHUNK 16 /* positions per online-softmax step (one zmm of scores) */

typedef struct pllm_cpu_attn_tile {
    float *out;          /* row (i, g) at out + i * ld_out + g * head_dim: [n_q][n_group][head_dim] */
    int64_t ld_out;
    const float *q;      /* row (i, g) at q + i * ld_q + g * head_dim (after RoPE) */
    int64_t ld_q;
    int32_t pos0;        /* position of query i is pos0 + i */
    int32_t n_q;         /* >= 1 */
    int32_t n_group;     /* query heads sharing kv_head, >= 1 */
    int32_t kv_head;
} pllm_cpu_attn_tile;

/* Floats of scratch a tile of n_rows = n_q * n_group rows needs (block_size: the KV layout's). */
size_t pllm_cpu_attn_tile_scratch(int32_t n_rows, int32_t block_size);

/* Attention of every row of the tile (a->n_pos is ignored: each row's own position bounds it). */
void pllm_cpu_attend_tile(const pllm_cpu_attn_tile *t, const pllm_cpu_attn_args *a, const pllm_cpu_kernels *kern,
                          float *scratch);

/* Prefetch (into L2) the K/V rows of the tile's first n_pos positions: called for the next tile
 * of a thread while it computes the current one, so that a tile over a context in DRAM does not
 * start on a miss at every row (the tile's own sweep prefetches ahead from there). */
#define PLLM_CPU_ATTN_PREFETCH 32 /* positions of the next tile to prefetch */
void pllm_cpu_attn_tile_prefetch(const pllm_cpu_attn_tile *t, const pllm_cpu_attn_args *a, int32_t n_pos);

/*
 * int8 KV cache (engine/backend.h, PLLM_KV_DTYPE_I8; attention_i8.c has the numerics). The tile
 * takes the AVX-512 VNNI path (head_dim a multiple of 16 up to 128, kernel table avx512vnni);
 * otherwise each row runs pllm_cpu_attend_i8, the scalar reference. head_dim: a multiple of 4, at
 * most PLLM_KV_I8_MAX_HEAD_DIM.
 */
#define PLLM_KV_I8_MAX_HEAD_DIM 256
/* q[n] = the int8 row of x[n]; returns its scale as half bits (x ~ scale * q). */
uint16_t pllm_cpu_kv_i8_quant_row(int8_t *q, const float *x, int32_t n);
/* q8[n] = the int8 query row of q[n], *sum = sum(q8); returns its float scale. */
float pllm_cpu_kv_i8_quant_q(int8_t *q8, int32_t *sum, const float *q, int32_t n);
/* Quantize one head's k[head_dim] (after RoPE) and v[head_dim] into slot's place; and read
 * them back (dequantized; k or v may be NULL). */
void pllm_cpu_kv_i8_store(void *k_cache, void *v_cache, const pllm_kv_layout *kv, int32_t slot,
                          int32_t head, const float *k, const float *v);
void pllm_cpu_kv_i8_load(float *k, float *v, const void *k_cache, const void *v_cache,
                         const pllm_kv_layout *kv, int32_t slot, int32_t head);
/* The per-row reference (pllm_cpu_attend's contract; scores: block_size floats). */
void pllm_cpu_attend_i8(float *out, const float *q, int32_t kv_head, const pllm_cpu_attn_args *a,
                        float *scores);
void pllm_cpu_attend_tile_i8_vnni(const pllm_cpu_attn_tile *t, const pllm_cpu_attn_args *a,
                                  float *scratch);
void pllm_cpu_attn_tile_prefetch_i8(const pllm_cpu_attn_tile *t, const pllm_cpu_attn_args *a,
                                    int32_t n_pos);

/* RoPE of one token's K heads written straight into the cache, with its V heads, in one pass:
 *   k, v: [n_head_kv][head_dim] (k is not modified); cos_sin: [rope_dim] (pllm_cpu_rope_table);
 *   the cache position is slot's (model/backend.h); tmp: head_dim floats (F16 and I8 caches). */
void pllm_cpu_rope_store_kv(void *k_cache, void *v_cache, const pllm_kv_layout *kv, int32_t slot, const float *k,
                            const float *v, const float *cos_sin, int32_t rope_dim, pllm_rope_mode mode,
                            const pllm_cpu_kernels *kern, float *tmp);
