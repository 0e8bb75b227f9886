/* engine_fake_backend.c: deterministic, self-checking backend for engine tests. */
#include "tests/engine_fake_backend.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

typedef struct fake_ctx {
    fake_backend_params p;
    pllm_kv_layout layout;
    int32_t n_slots;
    int32_t *kv_tok;  /* [n_slots] */
    int32_t *kv_pos;  /* [n_slots]: -1 never written */
    int64_t *kv_step; /* [n_slots]: step that last wrote the slot */
    uint64_t *kv_h;   /* [n_slots]: hash of the prefix up to the slot's position */
    int32_t n_sw_slots; /* the sliding pool (layout n_blocks_sw): */
    int32_t *sw_pos;    /* [n_sw_slots] -1 never written */
    uint64_t *sw_h;     /* [n_sw_slots] */
    int64_t *sw_step;   /* [n_sw_slots] */
    int32_t *ctx_buf;
    int32_t ctx_cap;
    fake_backend_stats st;

    /* submit / wait: results are computed at submit but reach the caller's out only at wait */
    uint8_t *kv_src;   /* [n_slots]: written from a token_src (the previous step's sample) */
    int32_t *prev_tok; /* the last submitted step's sampled ids */
    int32_t n_prev, cap_prev;
    int32_t *tok_buf; /* a plan's tokens with token_src resolved */
    int32_t cap_tok;
    struct fake_pending {
        pllm_step_out *out; /* the caller's */
        pllm_step_out res;  /* ours: tokens, logprobs, top_ids, top_logprobs */
        int32_t n_samples, cap;
    } q[2];
    int32_t q_head, q_n;
} fake_ctx;

int32_t fake_next_token(const int32_t *ctx, int32_t n, uint64_t seed, const int32_t *banned,
                        int32_t n_banned, int32_t n_vocab, float *logprob)
{
    uint64_t h = XXH3_64bits_withSeed(ctx, (size_t)n * sizeof *ctx, seed);
    int32_t t = (int32_t)(h % (uint64_t)n_vocab);
    for (int32_t tries = 0; tries < n_vocab; tries++) {
        bool bad = false;
        for (int32_t i = 0; i < n_banned; i++) bad |= banned[i] == t;
        if (!bad) break;
        t = (t + 1) % n_vocab;
    }
    if (logprob) *logprob = -(float)((h >> 40) % 1000) / 100.0f;
    return t;
}

void fake_top(int32_t token, float logprob, int32_t k, int32_t n_vocab, int32_t *ids, float *lps)
{
    for (int32_t j = 0; j < k; j++) {
        ids[j] = (token + j) % n_vocab;
        lps[j] = logprob - (float)j;
    }
}

static pllm_status fake_kv_layout(void *vctx, int32_t block_size, pllm_kv_layout *out)
{
    const fake_ctx *c = vctx;
    *out = (pllm_kv_layout){.n_layer = c->p.n_layer ? c->p.n_layer : 1,
                            .n_head_kv = 1,
                            .head_dim = 1,
                            .block_size = block_size,
                            .dtype = PLLM_DTYPE_F32,
                            .window = c->p.window,
                            .n_layer_sw = c->p.window > 0 ? c->p.n_layer_sw : 0};
    return PLLM_OK;
}

static pllm_status fake_kv_available(void *vctx, size_t *bytes)
{
    *bytes = ((fake_ctx *)vctx)->p.kv_available;
    return PLLM_OK;
}

static pllm_status fake_workspace_bytes(void *vctx, int32_t n_tokens, int32_t n_samples,
                                        size_t *bytes)
{
    (void)n_samples;
    *bytes = ((fake_ctx *)vctx)->p.workspace_per_token * (size_t)n_tokens;
    return PLLM_OK;
}

static pllm_status fake_kv_init(void *vctx, const pllm_kv_layout *l)
{
    fake_ctx *c = vctx;
    if (c->kv_tok) return pllm_errorf(PLLM_ERR_INTERNAL, "fake: kv_init called twice");
    c->layout = *l;
    c->n_slots = l->n_blocks * l->block_size;
    c->kv_tok = pllm_malloc((size_t)c->n_slots * sizeof *c->kv_tok);
    c->kv_pos = pllm_malloc((size_t)c->n_slots * sizeof *c->kv_pos);
    c->kv_step = pllm_calloc((size_t)c->n_slots, sizeof *c->kv_step);
    c->kv_src = pllm_calloc((size_t)c->n_slots, 1);
    c->kv_h = pllm_calloc((size_t)c->n_slots, sizeof *c->kv_h);
    if (!c->kv_tok || !c->kv_pos || !c->kv_step || !c->kv_src || !c->kv_h) return PLLM_ERR_NOMEM;
    for (int32_t i = 0; i < c->n_slots; i++) c->kv_pos[i] = -1;
    if (l->n_blocks_sw > 0) {
        if (c->p.window <= 0 || l->window != c->p.window)
            return pllm_errorf(PLLM_ERR_INTERNAL, "fake: a sliding pool for window %d", l->window);
        c->n_sw_slots = l->n_blocks_sw * l->block_size;
        c->sw_pos = pllm_malloc((size_t)c->n_sw_slots * sizeof *c->sw_pos);
        c->sw_h = pllm_calloc((size_t)c->n_sw_slots, sizeof *c->sw_h);
        c->sw_step = pllm_calloc((size_t)c->n_sw_slots, sizeof *c->sw_step);
        if (!c->sw_pos || !c->sw_h || !c->sw_step) return PLLM_ERR_NOMEM;
        for (int32_t i = 0; i < c->n_sw_slots; i++) c->sw_pos[i] = -1;
    }
    c->st.n_blocks = l->n_blocks;
    c->st.n_blocks_sw = l->n_blocks_sw;
    c->st.block_size = l->block_size;
    return PLLM_OK;
}

#define FAIL(...) return pllm_errorf(PLLM_ERR_INTERNAL, "fake backend step %lld: " __VA_ARGS__)

static pllm_status fake_run(fake_ctx *c, const pllm_batch_plan *pl, pllm_step_out *out)
{
    long long step = (long long)c->st.steps + 1;
    int32_t bs = c->layout.block_size;
    if (!c->kv_tok) FAIL("no kv_init", step);
    if (pl->n_tokens < 1 || pl->n_seqs < 1)
        FAIL("empty plan (%d tokens, %d seqs)", step, pl->n_tokens, pl->n_seqs);
    if (c->p.max_batched_tokens && pl->n_tokens > c->p.max_batched_tokens)
        FAIL("%d tokens > budget %d", step, pl->n_tokens, c->p.max_batched_tokens);
    if (c->p.max_seqs && pl->n_seqs > c->p.max_seqs)
        FAIL("%d seqs > max_seqs %d", step, pl->n_seqs, c->p.max_seqs);
    if (pl->n_samples < 0 || pl->n_samples > pl->n_tokens)
        FAIL("%d samples for %d tokens", step, pl->n_samples, pl->n_tokens);

    /* 1. plan structure and writes */
    int32_t t = 0;
    for (int32_t s = 0; s < pl->n_seqs; s++) {
        const pllm_seq_plan *sp = &pl->seqs[s];
        if (sp->token_start != t || sp->n_new < 1 || sp->n_ctx < sp->n_new ||
            t + sp->n_new > pl->n_tokens)
            FAIL("seq %d: token_start %d n_new %d n_ctx %d (expected start %d)", step, s,
                 sp->token_start, sp->n_new, sp->n_ctx, t);
        if ((int64_t)sp->n_blocks * bs < sp->n_ctx)
            FAIL("seq %d: %d blocks for %d positions", step, s, sp->n_blocks, sp->n_ctx);
        for (int32_t b = 0; b < sp->n_blocks; b++) {
            int32_t id = pl->block_tables[sp->block_start + b];
            if (id < 0 || id >= c->layout.n_blocks) FAIL("seq %d: block %d is %d", step, s, b, id);
        }
        for (int32_t j = 0; j < sp->n_new; j++, t++) {
            int32_t pos = sp->n_ctx - sp->n_new + j;
            int32_t want = pl->block_tables[sp->block_start + pos / bs] * bs + pos % bs;
            if (pl->positions[t] != pos)
                FAIL("seq %d token %d: position %d, expected %d", step, s, j, pl->positions[t],
                     pos);
            if (pl->slots[t] != want)
                FAIL("seq %d pos %d: slot %d, table says %d", step, s, pos, pl->slots[t], want);
            if (pl->tokens[t] < 0 || pl->tokens[t] >= c->p.n_vocab)
                FAIL("seq %d pos %d: token %d", step, s, pos, pl->tokens[t]);
            if (c->kv_step[want] == step) FAIL("slot %d written twice in one step", step, want);
            c->kv_step[want] = step;
            c->kv_src[want] = pl->token_src && pl->token_src[t] >= 0;
            c->kv_tok[want] = pl->tokens[t];
            c->kv_pos[want] = pos;
            /* the prefix hash: the previous position's (already in the cache) and this token */
            uint64_t h = 0x1234567ull;
            if (pos > 0) {
                int32_t ps =
                    pl->block_tables[sp->block_start + (pos - 1) / bs] * bs + (pos - 1) % bs;
                if (c->kv_pos[ps] != pos - 1)
                    FAIL("seq %d pos %d: the previous position's slot %d holds %d", step, s, pos,
                         ps, c->kv_pos[ps]);
                h = c->kv_h[ps];
            }
            c->kv_h[want] = h = XXH3_64bits_withSeed(&pl->tokens[t], sizeof pl->tokens[t], h);
            if (c->n_sw_slots) { /* the sliding layers write the same row into their pool */
                if (!pl->sw_block_tables || !pl->sw_slots) FAIL("no sliding tables", step);
                int32_t id = pl->sw_block_tables[sp->block_start + pos / bs];
                if (id < 0 || id >= c->layout.n_blocks_sw)
                    FAIL("seq %d pos %d: sliding block %d", step, s, pos, id);
                int32_t sws = id * bs + pos % bs;
                if (pl->sw_slots[t] != sws)
                    FAIL("seq %d pos %d: sliding slot %d, table says %d", step, s, pos,
                         pl->sw_slots[t], sws);
                if (c->sw_step[sws] == step) FAIL("sliding slot %d written twice", step, sws);
                c->sw_step[sws] = step;
                c->sw_pos[sws] = pos;
                c->sw_h[sws] = h;
            }
        }
    }
    if (!c->n_sw_slots && (pl->sw_block_tables || pl->sw_slots))
        FAIL("sliding tables without a sliding pool", step);
    if (t != pl->n_tokens) FAIL("seqs cover %d of %d tokens", step, t, pl->n_tokens);

    /* 2. every sequence's context is where its table says */
    for (int32_t s = 0; s < pl->n_seqs; s++) {
        const pllm_seq_plan *sp = &pl->seqs[s];
        for (int32_t pos = 0; pos < sp->n_ctx; pos++) {
            int32_t slot = pl->block_tables[sp->block_start + pos / bs] * bs + pos % bs;
            if (c->kv_pos[slot] != pos)
                FAIL("seq %d pos %d: slot %d holds position %d", step, s, pos, slot,
                     c->kv_pos[slot]);
        }
    }

    /* 2b. the sliding pool: every position a new token attends to (its window) holds that
     * position with the prefix hash of the global slot */
    for (int32_t s = 0; c->n_sw_slots && s < pl->n_seqs; s++) {
        const pllm_seq_plan *sp = &pl->seqs[s];
        for (int32_t pos = PLLM_MAX(0, sp->n_ctx - sp->n_new + 1 - c->p.window); pos < sp->n_ctx;
             pos++) {
            int32_t slot = pl->block_tables[sp->block_start + pos / bs] * bs + pos % bs;
            int32_t id = pl->sw_block_tables[sp->block_start + pos / bs];
            if (id < 0 || id >= c->layout.n_blocks_sw)
                FAIL("seq %d pos %d (window): sliding block %d", step, s, pos, id);
            int32_t sws = id * bs + pos % bs;
            if (c->sw_pos[sws] != pos || c->sw_h[sws] != c->kv_h[slot])
                FAIL("seq %d pos %d: sliding slot %d holds position %d of another prefix (%d)",
                     step, s, pos, sws, c->sw_pos[sws], (int)(c->sw_h[sws] != c->kv_h[slot]));
            c->st.sw_checked++;
        }
    }

    /* 3. samples */
    int32_t prev_seq = -1, prev_back = 0;
    for (int32_t k = 0; k < pl->n_samples; k++) {
        const pllm_sample_req *sr = &pl->samples[k];
        /* one sequence's samples are consecutive, back decreasing to 0 (speculation) */
        if (sr->seq < prev_seq || sr->seq >= pl->n_seqs || (sr->seq == prev_seq) != (prev_back > 0))
            FAIL("sample %d: seq %d after %d (back %d)", step, k, sr->seq, prev_seq, prev_back);
        const pllm_seq_plan *sp = &pl->seqs[sr->seq];
        if (sr->back < 0 || sr->back >= sp->n_new ||
            (sr->seq == prev_seq && sr->back != prev_back - 1))
            FAIL("sample %d: back %d (previous %d, n_new %d)", step, k, sr->back, prev_back,
                 sp->n_new);
        prev_seq = sr->seq;
        prev_back = sr->back;
        int32_t n = sp->n_ctx - sr->back;
        if (sr->ctx.n_prompt + sr->ctx.n_output != n)
            FAIL("sample %d: history %d + %d != n_ctx %d", step, k, sr->ctx.n_prompt,
                 sr->ctx.n_output, n);
        if (n > c->ctx_cap) {
            int32_t *b = pllm_realloc(c->ctx_buf, (size_t)n * 2 * sizeof *b);
            if (!b) return PLLM_ERR_NOMEM;
            c->ctx_buf = b;
            c->ctx_cap = n * 2;
        }
        const pllm_sampling_params *spp = sr->params;
        const bool reads = spp->repetition_penalty != 1.0f || spp->frequency_penalty != 0.0f ||
                           spp->presence_penalty != 0.0f;
        for (int32_t pos = 0; pos < n; pos++) {
            int32_t slot = pl->block_tables[sp->block_start + pos / bs] * bs + pos % bs;
            c->ctx_buf[pos] = c->kv_tok[slot];
            int32_t truth = pos < sr->ctx.n_prompt ? sr->ctx.prompt[pos]
                                                   : sr->ctx.output[pos - sr->ctx.n_prompt];
            /* a token still being sampled when the plan was made: the step read it from the
             * previous step's result (token_src), in this step */
            if (truth == PLLM_TOKEN_PENDING && c->kv_step[slot] == step && c->kv_src[slot] &&
                pos == n - 1 && sr->back == 0 && !(c->p.no_pending_history && reads))
                truth = c->ctx_buf[pos];
            if (c->ctx_buf[pos] != truth)
                FAIL("sample %d (seq %d) pos %d: cache holds token %d, history says %d", step, k,
                     sr->seq, pos, c->ctx_buf[pos], truth);
        }
        if (c->n_sw_slots) { /* the slots' prefix hashes are the history's */
            uint64_t h = 0x1234567ull;
            for (int32_t pos = 0; pos < n; pos++) {
                h = XXH3_64bits_withSeed(&c->ctx_buf[pos], sizeof c->ctx_buf[pos], h);
                int32_t slot = pl->block_tables[sp->block_start + pos / bs] * bs + pos % bs;
                if (c->kv_h[slot] != h)
                    FAIL("sample %d (seq %d) pos %d: slot %d holds another prefix", step, k,
                         sr->seq, pos, slot);
            }
        }
        float lp;
        int32_t tok = fake_next_token(c->ctx_buf, n, sr->params->seed, sr->ctx.banned,
                                      sr->ctx.n_banned, c->p.n_vocab, &lp);
        out->tokens[k] = tok;
        int32_t want_top = sr->params->logprobs;
        if (want_top > 0) {
            if (!out->logprobs || !out->top_ids || !out->top_logprobs || out->top_n < want_top)
                FAIL("sample %d wants %d logprobs; out has top_n %d", step, k, want_top,
                     out->top_n);
            out->logprobs[k] = lp;
            fake_top(tok, lp, want_top, c->p.n_vocab, out->top_ids + (size_t)k * (size_t)out->top_n,
                     out->top_logprobs + (size_t)k * (size_t)out->top_n);
        } else if (out->logprobs) {
            out->logprobs[k] = lp;
        }
    }
    c->st.steps++;
    c->st.tokens += pl->n_tokens;
    c->st.samples += pl->n_samples;
    c->st.max_step_tokens = PLLM_MAX(c->st.max_step_tokens, pl->n_tokens);
    c->st.max_step_seqs = PLLM_MAX(c->st.max_step_seqs, pl->n_seqs);
    return PLLM_OK;
}

static pllm_status fake_submit(void *vctx, const pllm_batch_plan *pl, pllm_step_out *out)
{
    fake_ctx *c = vctx;
    if (c->q_n >= 2) FAIL("a third step submitted before a wait", (long long)c->st.steps + 1);
    if (!c->kv_tok) FAIL("no kv_init", (long long)c->st.steps + 1);
    pllm_batch_plan p = *pl;
    if (pl->token_src) { /* "the token the previous step samples for row r" */
        if (pl->n_tokens > c->cap_tok) {
            int32_t *b = pllm_realloc(c->tok_buf, (size_t)pl->n_tokens * 2 * sizeof *b);
            if (!b) return PLLM_ERR_NOMEM;
            c->tok_buf = b;
            c->cap_tok = pl->n_tokens * 2;
        }
        PLLM_TRY(pllm_backend_resolve_tokens("fake", pl, c->prev_tok, c->n_prev, c->tok_buf));
        p.tokens = c->tok_buf;
    }
    struct fake_pending *q = &c->q[(c->q_head + c->q_n) % 2];
    int32_t top = out->top_n > 0 ? out->top_n : 0, n = PLLM_MAX(pl->n_samples, 1);
    if (n * PLLM_MAX(top, 1) > q->cap) {
        int32_t cap = n * PLLM_MAX(top, 1) * 2;
        free(q->res.tokens);
        free(q->res.logprobs);
        free(q->res.top_ids);
        free(q->res.top_logprobs);
        q->res.tokens = pllm_malloc((size_t)cap * sizeof(int32_t));
        q->res.logprobs = pllm_malloc((size_t)cap * sizeof(float));
        q->res.top_ids = pllm_malloc((size_t)cap * sizeof(int32_t));
        q->res.top_logprobs = pllm_malloc((size_t)cap * sizeof(float));
        q->cap =
            q->res.tokens && q->res.logprobs && q->res.top_ids && q->res.top_logprobs ? cap : 0;
        if (!q->cap) return PLLM_ERR_NOMEM;
    }
    pllm_step_out res = {.tokens = q->res.tokens,
                         .logprobs = out->logprobs ? q->res.logprobs : NULL,
                         .top_n = out->top_n,
                         .top_ids = out->top_ids ? q->res.top_ids : NULL,
                         .top_logprobs = out->top_logprobs ? q->res.top_logprobs : NULL};
    PLLM_TRY(fake_run(c, &p, &res));
    if (pl->n_samples > c->cap_prev) {
        int32_t *b = pllm_realloc(c->prev_tok, (size_t)pl->n_samples * 2 * sizeof *b);
        if (!b) return PLLM_ERR_NOMEM;
        c->prev_tok = b;
        c->cap_prev = pl->n_samples * 2;
    }
    if (pl->n_samples > 0)
        memcpy(c->prev_tok, res.tokens, (size_t)pl->n_samples * sizeof *c->prev_tok);
    c->n_prev = pl->n_samples;
    /* the caller sees nothing before wait: poison its arrays */
    for (int32_t k = 0; k < pl->n_samples; k++) out->tokens[k] = -7;
    q->out = out;
    q->n_samples = pl->n_samples;
    q->res.top_n = out->top_n;
    c->q_n++;
    return PLLM_OK;
}

static pllm_status fake_wait(void *vctx)
{
    fake_ctx *c = vctx;
    if (c->q_n == 0) FAIL("wait without a submitted step", (long long)c->st.steps);
    struct fake_pending *q = &c->q[c->q_head];
    c->q_head = (c->q_head + 1) % 2;
    c->q_n--;
    pllm_step_out *o = q->out;
    size_t n = (size_t)q->n_samples, nt = n * (size_t)(o->top_n > 0 ? o->top_n : 0);
    if (n == 0) return PLLM_OK;
    memcpy(o->tokens, q->res.tokens, n * sizeof *o->tokens);
    if (o->logprobs) memcpy(o->logprobs, q->res.logprobs, n * sizeof *o->logprobs);
    if (o->top_ids) memcpy(o->top_ids, q->res.top_ids, nt * sizeof *o->top_ids);
    if (o->top_logprobs) memcpy(o->top_logprobs, q->res.top_logprobs, nt * sizeof(float));
    return PLLM_OK;
}

static pllm_status fake_step(void *vctx, const pllm_batch_plan *pl, pllm_step_out *out)
{
    PLLM_TRY(fake_submit(vctx, pl, out));
    return fake_wait(vctx);
}

static void fake_destroy(void *vctx)
{
    fake_ctx *c = vctx;
    if (!c) return;
    free(c->kv_src);
    free(c->prev_tok);
    free(c->tok_buf);
    for (int k = 0; k < 2; k++) {
        free(c->q[k].res.tokens);
        free(c->q[k].res.logprobs);
        free(c->q[k].res.top_ids);
        free(c->q[k].res.top_logprobs);
    }
    free(c->kv_tok);
    free(c->kv_pos);
    free(c->kv_step);
    free(c->kv_h);
    free(c->sw_pos);
    free(c->sw_h);
    free(c->sw_step);
    free(c->ctx_buf);
    free(c);
}

static const pllm_backend_iface fake_iface = {
    .name = "fake",
    .kv_layout = fake_kv_layout,
    .kv_available = fake_kv_available,
    .workspace_bytes = fake_workspace_bytes,
    .kv_init = fake_kv_init,
    .step = fake_step,
    .submit = fake_submit,
    .wait = fake_wait,
    .copy_blocks = NULL,
    .destroy = fake_destroy,
};

/* The same without pending histories (backend.h no_pending_history): the engine's fallback. */
static const pllm_backend_iface fake_iface_no_pending = {
    .name = "fake",
    .no_pending_history = true,
    .kv_layout = fake_kv_layout,
    .kv_available = fake_kv_available,
    .workspace_bytes = fake_workspace_bytes,
    .kv_init = fake_kv_init,
    .step = fake_step,
    .submit = fake_submit,
    .wait = fake_wait,
    .copy_blocks = NULL,
    .destroy = fake_destroy,
};

pllm_status fake_backend_create(pllm_backend *out, const fake_backend_params *p)
{
    fake_ctx *c = pllm_calloc(1, sizeof *c);
    if (!c) return PLLM_ERR_NOMEM;
    c->p = *p;
    out->iface = p->no_pending_history ? &fake_iface_no_pending : &fake_iface;
    out->ctx = c;
    return PLLM_OK;
}

void fake_backend_get_stats(const pllm_backend *b, fake_backend_stats *out)
{
    *out = ((const fake_ctx *)b->ctx)->st;
}
