/* request.c: per-completion state: creation, token append, stop ids and stop strings. */
#include "engine/request.h"

#include <stdlib.h>
#include <string.h>

pllm_status pllm_req_create(pllm_req **out, const pllm_req_init *ini)
{
    *out = NULL;
    const pllm_request_params *p = ini->params;
    pllm_req *r = pllm_calloc(1, sizeof *r);
    if (!r) return PLLM_ERR_NOMEM;
    r->id = ini->id;
    r->index = ini->index;
    r->user = ini->user;
    r->arrival = ini->arrival;
    r->group = ini->group;
    r->group->n_alive++;
    if (ini->index == 0) r->group->leader = r;
    r->state = PLLM_REQ_WAITING;
    r->n_prompt = ini->n_prompt;
    r->params = *p;
    r->sampling = p->sampling;
    r->sampling.seed = ini->seed;
    r->tok = ini->tok;
    r->finish = PLLM_FINISH_LENGTH;
    pllm_status st = pllm_tokens_reserve(&r->tokens, (size_t)ini->n_prompt +
                                                         (size_t)PLLM_MIN(p->max_tokens, 64));
    if (st == PLLM_OK) st = pllm_tokens_append(&r->tokens, ini->prompt, (size_t)ini->n_prompt);
    if (st != PLLM_OK) goto fail;
    /* stop strings: own copies */
    for (int32_t i = 0; i < p->n_stop; i++) {
        r->stop_store[i] = pllm_strdup(p->stop[i]);
        if (!r->stop_store[i]) {
            st = PLLM_ERR_NOMEM;
            goto fail;
        }
        r->params.stop[i] = r->stop_store[i];
        r->max_stop_len = PLLM_MAX(r->max_stop_len, strlen(p->stop[i]));
    }
    if (!ini->tok) r->params.n_stop = 0; /* no text to match on */
    /* stop ids: the tokenizer's EOS/end-of-turn ids unless ignore_eos, then the request's */
    int32_t n_eos = p->ignore_eos ? 0 : ini->n_eos_ids;
    r->stop_ids = pllm_malloc(((size_t)n_eos + (size_t)p->n_stop_ids + 1) * sizeof *r->stop_ids);
    if (!r->stop_ids) {
        st = PLLM_ERR_NOMEM;
        goto fail;
    }
    for (int32_t i = 0; i < n_eos; i++) r->stop_ids[r->n_stop_ids++] = ini->eos_ids[i];
    for (int32_t i = 0; i < p->n_stop_ids; i++) {
        if (!pllm_req_is_stop_id(r, p->stop_ids[i])) r->stop_ids[r->n_stop_ids++] = p->stop_ids[i];
    }
    if (ini->tok) pllm_detok_init(&r->detok, ini->tok, true);
    *out = r;
    return PLLM_OK;
fail:
    pllm_req_free(r);
    return st;
}

void pllm_req_free(pllm_req *r)
{
    if (!r) return;
    pllm_tokens_free(&r->tokens);
    pllm_kv_table_free(&r->table);
    pllm_key_chain_free(&r->keys);
    PLLM_ASSERT(!r->plan_waiting);
    free(r->plan_path);
    free(r->plan_keys);
    for (int32_t i = 0; i < PLLM_MAX_STOP; i++) free(r->stop_store[i]);
    free(r->stop_ids);
    pllm_buf_free(&r->text);
    free(r->logprobs);
    free(r->top_ids);
    free(r->top_logprobs);
    free(r->token_times);
    if (r->group) {
        if (r->group->leader == r) r->group->leader = NULL;
        if (--r->group->n_alive == 0) free(r->group);
    }
    free(r);
}

static pllm_status grow_outputs(pllm_req *r, int32_t need)
{
    if (need <= r->out_cap) return PLLM_OK;
    int32_t cap = r->out_cap ? r->out_cap * 2 : 16;
    while (cap < need) cap *= 2;
    size_t k = (size_t)r->sampling.logprobs;
    float *lp = pllm_realloc(r->logprobs, (size_t)cap * sizeof *lp);
    if (!lp) return PLLM_ERR_NOMEM;
    r->logprobs = lp;
    int32_t *ti = pllm_realloc(r->top_ids, (size_t)cap * k * sizeof *ti + 1);
    if (!ti) return PLLM_ERR_NOMEM;
    r->top_ids = ti;
    float *tl = pllm_realloc(r->top_logprobs, (size_t)cap * k * sizeof *tl + 1);
    if (!tl) return PLLM_ERR_NOMEM;
    r->top_logprobs = tl;
    r->out_cap = cap;
    return PLLM_OK;
}

pllm_status pllm_req_append(pllm_req *r, int32_t token, float logprob, const int32_t *top_ids,
                            const float *top_logprobs, double t)
{
    int32_t k = pllm_req_n_output(r);
    if (k >= r->times_cap) {
        int32_t cap = r->times_cap ? 2 * r->times_cap : 16;
        double *tt = pllm_realloc(r->token_times, (size_t)cap * sizeof *tt);
        if (!tt) return PLLM_ERR_NOMEM;
        r->token_times = tt;
        r->times_cap = cap;
    }
    r->token_times[k] = t;
    if (r->sampling.logprobs > 0) {
        PLLM_TRY(grow_outputs(r, k + 1));
        size_t n = (size_t)r->sampling.logprobs;
        r->logprobs[k] = logprob;
        if (top_ids)
            memcpy(r->top_ids + (size_t)k * n, top_ids, n * sizeof *top_ids);
        else
            for (size_t i = 0; i < n; i++) r->top_ids[(size_t)k * n + i] = -1;
        if (top_logprobs)
            memcpy(r->top_logprobs + (size_t)k * n, top_logprobs, n * sizeof *top_logprobs);
        else
            for (size_t i = 0; i < n; i++) r->top_logprobs[(size_t)k * n + i] = 0.0f;
    }
    return pllm_tokens_push(&r->tokens, token);
}

bool pllm_req_is_stop_id(const pllm_req *r, int32_t token)
{
    for (int32_t i = 0; i < r->n_stop_ids; i++)
        if (r->stop_ids[i] == token) return true;
    return false;
}

int64_t pllm_stop_find(const char *text, size_t len, size_t from, const char *const *stops,
                       int32_t n_stops)
{
    int64_t best = -1;
    for (int32_t i = 0; i < n_stops; i++) {
        size_t m = strlen(stops[i]);
        if (m == 0 || m > len) continue;
        /* a match must end past `from`: it starts at >= from - m + 1 */
        size_t start = from + 1 > m ? from + 1 - m : 0;
        if (start + m > len) continue;
        const char *hit = memmem(text + start, len - start, stops[i], m);
        if (hit && (best < 0 || hit - text < best)) best = hit - text;
    }
    return best;
}
