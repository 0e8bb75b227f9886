/*
 * backend.c: the checks of the backend contract (backend.h) and the RoPE table, one copy for
 * every backend (cpu/, cuda/): a bad plan is refused with the same message by either, and both
 * rotate by the same frequencies.
 */
#include "model/backend.h"

#include <math.h>

int32_t pllm_backend_pending_history(const pllm_batch_plan *p, int32_t s)
{
    const pllm_sample_req *r = &p->samples[s];
    if (!p->token_src || r->back != 0 || r->ctx.n_output < 1 || !r->ctx.output ||
        r->ctx.output[r->ctx.n_output - 1] != PLLM_TOKEN_PENDING || r->seq < 0 ||
        r->seq >= p->n_seqs)
        return -1;
    const pllm_seq_plan *sp = &p->seqs[r->seq];
    const int32_t i = sp->token_start + sp->n_new - 1;
    return i >= 0 && i < p->n_tokens && p->token_src[i] >= 0 ? i : -1;
}

static pllm_status check_ids(const char *who, const int32_t *ids, int32_t n, int32_t n_vocab,
                             int32_t s, const char *what)
{
    if (n < 0 || (n > 0 && !ids))
        return pllm_errorf(PLLM_ERR_INVALID, "%s step: samples[%d].ctx.%s: count %d with %s array",
                           who, s, what, n, ids ? "an" : "a NULL");
    for (int32_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= n_vocab)
            return pllm_errorf(
                PLLM_ERR_RANGE,
                "%s step: samples[%d].ctx.%s[%d] = %d is outside the vocabulary [0, %d)", who, s,
                what, i, ids[i], n_vocab);
    return PLLM_OK;
}

void pllm_kv_layout_sliding(const pllm_model *m, pllm_kv_layout *out)
{
    out->n_layer_sw = 0;
    for (int32_t l = 0; l < m->cfg.n_layer; l++) out->n_layer_sw += m->layers[l].window > 0;
    out->window = out->n_layer_sw ? m->cfg.sliding_window : 0;
}

pllm_status pllm_kv_check_sliding(const char *who, const pllm_kv_layout *L, const pllm_model *m)
{
    pllm_kv_layout want = {0};
    pllm_kv_layout_sliding(m, &want);
    if (L->n_blocks_sw < 0 ||
        (L->n_blocks_sw > 0 && (want.n_layer_sw == 0 || L->n_layer_sw != want.n_layer_sw ||
                                L->window != m->cfg.sliding_window)))
        return pllm_errorf(PLLM_ERR_INVALID,
                           "%s: a sliding pool of %d blocks (%d layers, window %d) does not fit "
                           "the model (%d sliding layers, window %d)",
                           who, L->n_blocks_sw, L->n_layer_sw, L->window, want.n_layer_sw,
                           m->cfg.sliding_window);
    if ((int64_t)L->n_blocks_sw * L->block_size > INT32_MAX)
        return pllm_errorf(PLLM_ERR_RANGE,
                           "%s: %d sliding blocks of %d tokens exceed the int32 slot range", who,
                           L->n_blocks_sw, L->block_size);
    return PLLM_OK;
}

/* The hybrid layout's sliding tables and slots (backend.h), on a plan whose global part is
 * valid: each sequence's entries from its first new token's window on inside the sliding pool,
 * sw_slots where they put each position, no sliding slot written twice. */
static pllm_status check_sw(const char *who, const pllm_kv_layout *kv, uint64_t *slot_bits,
                            const pllm_batch_plan *p)
{
    if (kv->n_blocks_sw <= 0) {
        if (p->sw_block_tables || p->sw_slots)
            return pllm_errorf(PLLM_ERR_INVALID,
                               "%s step: sw_block_tables / sw_slots given without a sliding pool",
                               who);
        return PLLM_OK;
    }
    if (p->n_tokens > 0 && (!p->sw_block_tables || !p->sw_slots))
        return pllm_errorf(PLLM_ERR_INVALID,
                           "%s step: the KV cache has a sliding pool but sw_block_tables or "
                           "sw_slots is NULL",
                           who);
    const int32_t bs = kv->block_size;
    pllm_status st = PLLM_OK;
    int32_t s_end = 0, j_end = 0; /* marks set so far, for the clearing pass */
    for (int32_t s = 0; s < p->n_seqs && st == PLLM_OK; s++) {
        const pllm_seq_plan *sp = &p->seqs[s];
        const int32_t *bt = p->sw_block_tables + sp->block_start;
        const int32_t first = PLLM_MAX(0, sp->n_ctx - sp->n_new + 1 - kv->window) / bs;
        for (int32_t b = first; b < (sp->n_ctx + bs - 1) / bs && st == PLLM_OK; b++)
            if (bt[b] < 0 || bt[b] >= kv->n_blocks_sw)
                st = pllm_errorf(PLLM_ERR_RANGE,
                                 "%s step: seqs[%d] sliding block table entry %d = %d is outside "
                                 "the sliding pool [0, %d) (the window needs it)",
                                 who, s, b, bt[b], kv->n_blocks_sw);
        for (int32_t j = 0; j < sp->n_new && st == PLLM_OK; j++) {
            const int32_t i = sp->token_start + j, pos = sp->n_ctx - sp->n_new + j;
            const int32_t want = bt[pos / bs] * bs + pos % bs, slot = p->sw_slots[i];
            if (slot != want)
                st = pllm_errorf(PLLM_ERR_INVALID,
                                 "%s step: sw_slots[%d] = %d but seqs[%d]'s sliding block table "
                                 "puts position %d at slot %d",
                                 who, i, slot, s, pos, want);
            else if (slot_bits[slot / 64] >> (slot % 64) & 1)
                st = pllm_errorf(PLLM_ERR_INVALID,
                                 "%s step: sliding slot %d (tokens[%d]) is written twice in one "
                                 "step",
                                 who, slot, i);
            else {
                slot_bits[slot / 64] |= 1ull << (slot % 64);
                s_end = s;
                j_end = j + 1;
            }
        }
    }
    for (int32_t s = 0; s <= s_end && s < p->n_seqs; s++) {
        const pllm_seq_plan *sp = &p->seqs[s];
        for (int32_t j = 0; j < (s == s_end ? j_end : sp->n_new); j++) {
            int32_t slot = p->sw_slots[sp->token_start + j];
            slot_bits[slot / 64] &= ~(1ull << (slot % 64));
        }
    }
    return st;
}

pllm_status pllm_backend_check_plan(const char *who, const pllm_kv_layout *kv, int32_t n_vocab,
                                    uint64_t *slot_bits, int32_t *tok_seq, const pllm_batch_plan *p,
                                    const pllm_step_out *out)
{
    if (!kv) return pllm_errorf(PLLM_ERR_INVALID, "%s step: kv_init was not called", who);
    const int32_t bs = kv->block_size;
    if (!p || !out) return pllm_errorf(PLLM_ERR_INVALID, "%s step: NULL plan or output", who);
    if (p->n_tokens < 0 || p->n_seqs < 0 || p->n_samples < 0)
        return pllm_errorf(PLLM_ERR_INVALID,
                           "%s step: negative count (n_tokens %d, n_seqs %d, n_samples %d)", who,
                           p->n_tokens, p->n_seqs, p->n_samples);
    if (p->n_tokens > 0 && (!p->tokens || !p->positions || !p->slots))
        return pllm_errorf(PLLM_ERR_INVALID,
                           "%s step: n_tokens = %d but tokens, positions or slots is NULL", who,
                           p->n_tokens);
    if (p->n_seqs > 0 && (!p->seqs || !p->block_tables))
        return pllm_errorf(PLLM_ERR_INVALID,
                           "%s step: n_seqs = %d but seqs or block_tables is NULL", who, p->n_seqs);
    if (p->n_samples > 0 && (!p->samples || !out->tokens))
        return pllm_errorf(PLLM_ERR_INVALID,
                           "%s step: n_samples = %d but samples or out->tokens is NULL", who,
                           p->n_samples);

    int32_t next = 0;
    pllm_status st = PLLM_OK;
    for (int32_t s = 0; s < p->n_seqs && st == PLLM_OK; s++) {
        const pllm_seq_plan *sp = &p->seqs[s];
        if (sp->token_start != next || sp->n_new < 1 || sp->n_new > p->n_tokens - next)
            st =
                pllm_errorf(PLLM_ERR_INVALID,
                            "%s step: seqs[%d] covers tokens [%d, %d + %d) but must start at "
                            "%d, take >= 1 token and end by n_tokens = %d",
                            who, s, sp->token_start, sp->token_start, sp->n_new, next, p->n_tokens);
        else if (sp->n_ctx < sp->n_new)
            st = pllm_errorf(PLLM_ERR_RANGE,
                             "%s step: seqs[%d].n_ctx = %d is less than its n_new = %d", who, s,
                             sp->n_ctx, sp->n_new);
        else if (sp->block_start < 0 || sp->n_blocks < 0 || (int64_t)sp->n_blocks * bs < sp->n_ctx)
            st = pllm_errorf(PLLM_ERR_RANGE,
                             "%s step: seqs[%d]: block table [%d, +%d) of %d-token blocks cannot "
                             "hold n_ctx = %d",
                             who, s, sp->block_start, sp->n_blocks, bs, sp->n_ctx);
        if (st != PLLM_OK) break;
        const int32_t *bt = p->block_tables + sp->block_start;
        for (int32_t b = 0; b < (sp->n_ctx + bs - 1) / bs; b++)
            if (bt[b] < 0 || bt[b] >= kv->n_blocks) {
                st = pllm_errorf(
                    PLLM_ERR_RANGE,
                    "%s step: seqs[%d] block table entry %d = %d is outside the pool [0, %d)", who,
                    s, b, bt[b], kv->n_blocks);
                break;
            }
        for (int32_t j = 0; j < sp->n_new && st == PLLM_OK; j++) {
            int32_t i = sp->token_start + j, pos = sp->n_ctx - sp->n_new + j;
            const bool src = p->token_src && p->token_src[i] >= 0; /* resolved by the backend */
            if (p->token_src && p->token_src[i] < -1)
                st = pllm_errorf(PLLM_ERR_RANGE, "%s step: token_src[%d] = %d (must be >= -1)", who,
                                 i, p->token_src[i]);
            else if (!src && (p->tokens[i] < 0 || p->tokens[i] >= n_vocab))
                st = pllm_errorf(PLLM_ERR_RANGE,
                                 "%s step: tokens[%d] = %d is outside the vocabulary [0, %d)", who,
                                 i, p->tokens[i], n_vocab);
            else if (p->positions[i] != pos)
                st = pllm_errorf(
                    PLLM_ERR_INVALID,
                    "%s step: positions[%d] = %d but seqs[%d] (n_ctx %d, n_new %d) puts it at %d",
                    who, i, p->positions[i], s, sp->n_ctx, sp->n_new, pos);
            else if (p->slots[i] != bt[pos / bs] * bs + pos % bs)
                st = pllm_errorf(PLLM_ERR_INVALID,
                                 "%s step: slots[%d] = %d but seqs[%d]'s block table puts "
                                 "position %d at slot %d",
                                 who, i, p->slots[i], s, pos, bt[pos / bs] * bs + pos % bs);
            else if (slot_bits[p->slots[i] / 64] >> (p->slots[i] % 64) & 1)
                st = pllm_errorf(PLLM_ERR_INVALID,
                                 "%s step: slot %d (tokens[%d]) is written twice in one step", who,
                                 p->slots[i], i);
            else if (tok_seq)
                tok_seq[i] = s;
            if (st == PLLM_OK) slot_bits[p->slots[i] / 64] |= 1ull << (p->slots[i] % 64);
        }
        next += sp->n_new;
    }
    /* clear the marks set above (only those: the bitmap may be large) */
    for (int32_t s = 0; s < p->n_seqs; s++) {
        const pllm_seq_plan *sp = &p->seqs[s];
        if (sp->token_start < 0 || sp->n_new < 0 || sp->token_start > p->n_tokens - sp->n_new)
            break;
        for (int32_t j = 0; j < sp->n_new; j++) {
            int32_t slot = p->slots[sp->token_start + j];
            if (slot >= 0 && (int64_t)slot < (int64_t)kv->n_blocks * bs)
                slot_bits[slot / 64] &= ~(1ull << (slot % 64));
        }
    }
    if (st != PLLM_OK) return st;
    if (next != p->n_tokens)
        return pllm_errorf(PLLM_ERR_INVALID,
                           "%s step: the sequences cover %d tokens but n_tokens = %d", who, next,
                           p->n_tokens);
    PLLM_TRY(check_sw(who, kv, slot_bits, p));

    for (int32_t s = 0; s < p->n_samples; s++) {
        const pllm_sample_req *r = &p->samples[s];
        if (r->seq < 0 || r->seq >= p->n_seqs)
            return pllm_errorf(PLLM_ERR_RANGE, "%s step: samples[%d].seq = %d is outside [0, %d)",
                               who, s, r->seq, p->n_seqs);
        if (r->back < 0 || r->back >= p->seqs[r->seq].n_new)
            return pllm_errorf(PLLM_ERR_RANGE,
                               "%s step: samples[%d].back = %d is outside [0, n_new = %d) of "
                               "seqs[%d]",
                               who, s, r->back, p->seqs[r->seq].n_new, r->seq);
        if (s > 0 && p->samples[s - 1].seq == r->seq && p->samples[s - 1].back <= r->back)
            return pllm_errorf(PLLM_ERR_INVALID,
                               "%s step: samples[%d] and [%d] of seqs[%d] must have decreasing "
                               "back (%d, %d)",
                               who, s - 1, s, r->seq, p->samples[s - 1].back, r->back);
        if (!r->params)
            return pllm_errorf(PLLM_ERR_INVALID, "%s step: samples[%d].params is NULL", who, s);
        if (pllm_sampling_validate(r->params) != PLLM_OK)
            return pllm_error_prefix(PLLM_ERR_INVALID, "%s step: samples[%d]: ", who, s);
        if (out->top_ids && r->params->logprobs > out->top_n)
            return pllm_errorf(PLLM_ERR_INVALID,
                               "%s step: samples[%d] asks for %d top logprobs but out->top_n = %d",
                               who, s, r->params->logprobs, out->top_n);
        /* the last history entry may be the token the previous step samples (backend.h) */
        const bool pend = pllm_backend_pending_history(p, s) >= 0;
        PLLM_TRY(check_ids(who, r->ctx.prompt, r->ctx.n_prompt, n_vocab, s, "prompt"));
        PLLM_TRY(check_ids(who, r->ctx.output, r->ctx.n_output - pend, n_vocab, s, "output"));
        PLLM_TRY(check_ids(who, r->ctx.banned, r->ctx.n_banned, n_vocab, s, "banned"));
    }
    return PLLM_OK;
}

pllm_status pllm_backend_check_copy_blocks(const char *who, const pllm_kv_layout *kv,
                                           const int32_t *src, const int32_t *dst, int32_t n)
{
    if (!kv) return pllm_errorf(PLLM_ERR_INVALID, "%s copy_blocks: kv_init was not called", who);
    if (n < 0 || (n > 0 && (!src || !dst)))
        return pllm_errorf(PLLM_ERR_INVALID, "%s copy_blocks: bad arguments (n = %d)", who, n);
    for (int32_t i = 0; i < n; i++)
        if (src[i] < 0 || src[i] >= kv->n_blocks || dst[i] < 0 || dst[i] >= kv->n_blocks)
            return pllm_errorf(PLLM_ERR_RANGE,
                               "%s copy_blocks: pair %d (%d -> %d) is outside the pool [0, %d)",
                               who, i, src[i], dst[i], kv->n_blocks);
    return PLLM_OK;
}

pllm_status pllm_backend_resolve_tokens(const char *who, const pllm_batch_plan *p,
                                        const int32_t *prev, int32_t n_prev, int32_t *dst)
{
    for (int32_t i = 0; i < p->n_tokens; i++) {
        const int32_t r = p->token_src ? p->token_src[i] : -1;
        if (r < -1 || r >= n_prev)
            return pllm_errorf(PLLM_ERR_RANGE,
                               "%s step: token_src[%d] = %d but the previous step sampled %d rows",
                               who, i, r, n_prev);
        dst[i] = r >= 0 ? prev[r] : p->tokens[i];
    }
    return PLLM_OK;
}

void pllm_backend_rope_freqs(double *inv_freq, const pllm_model_config *cfg,
                             const float *freq_factors)
{
    for (int32_t i = 0; i < cfg->rope_dim / 2; i++) {
        double f = pow((double)cfg->rope_theta, -2.0 * i / (double)cfg->rope_dim);
        if (freq_factors)
            f /= freq_factors[i]; /* the complete per-pair scaling (Llama 3) */
        else if (cfg->rope_scaling == PLLM_ROPE_SCALING_LINEAR)
            f /= cfg->rope_factor;
        inv_freq[i] = f;
    }
}

void pllm_backend_rope_freqs_local(double *inv_freq, const pllm_model_config *cfg)
{
    for (int32_t i = 0; i < cfg->rope_dim / 2; i++)
        inv_freq[i] = pow((double)cfg->rope_theta_local, -2.0 * i / (double)cfg->rope_dim);
}
