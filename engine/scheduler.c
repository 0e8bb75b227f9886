/* scheduler.c: token-budget continuous batching, prefix-aware admission, preemption. */
#include "engine/scheduler.h"

#include <stdlib.h>
#include <string.h>

#define GROUP_JUMP_LIMIT 2048 /* a new request joins its group only this far back */

__extension__ typedef unsigned __int128 u128;

struct pllm_sched {
    pllm_sched_params p;
    pllm_kv_manager *kv;
    pllm_plan *plan;
    int32_t bs;
    pllm_req *w_head, *w_tail; /* waiting queue, by order */
    int32_t n_waiting;
    pllm_req **running; /* [max_seqs], by order */
    int32_t n_running;
    int64_t n_preemptions;
    int64_t n_relabels;
    u128 max_label;        /* the largest label handed out */
    pllm_req **skipped;    /* [scan_limit]: deferred in the current admission scan */
    pllm_req **prefilling; /* [max_seqs]: running requests still computing their prompt */
    int32_t *hit;          /* [hit_cap]: cache hits of the candidate */
    int32_t hit_cap;
};

void pllm_sched_out_free(pllm_sched_out *o)
{
    if (!o) return;
    free(o->entries);
    free(o->preempted);
    *o = (pllm_sched_out){0};
}

pllm_status pllm_sched_init(pllm_sched **out, const pllm_sched_params *p, pllm_kv_manager *kv,
                            pllm_plan *plan)
{
    *out = NULL;
    if (p->max_batched_tokens < 1)
        return pllm_errorf(PLLM_ERR_INVALID, "max_batched_tokens must be >= 1, got %d",
                           p->max_batched_tokens);
    if (p->max_seqs < 1)
        return pllm_errorf(PLLM_ERR_INVALID, "max_seqs must be >= 1, got %d", p->max_seqs);
    if (p->max_bypass < 0)
        return pllm_errorf(PLLM_ERR_INVALID, "max_bypass must be >= 0, got %d", p->max_bypass);
    if (p->scan_limit < 1)
        return pllm_errorf(PLLM_ERR_INVALID, "scan_limit must be >= 1, got %d", p->scan_limit);
    pllm_sched *s = pllm_calloc(1, sizeof *s);
    if (!s) return PLLM_ERR_NOMEM;
    s->p = *p;
    s->kv = kv;
    s->plan = plan;
    if (s->p.label_bits <= 0 || s->p.label_bits > 64) s->p.label_bits = 64;
    s->bs = pllm_kv_block_size(kv);
    s->running = pllm_calloc((size_t)p->max_seqs, sizeof *s->running);
    s->skipped = pllm_calloc((size_t)p->scan_limit, sizeof *s->skipped);
    s->prefilling = pllm_calloc((size_t)p->max_seqs, sizeof *s->prefilling);
    if (!s->running || !s->skipped || !s->prefilling) {
        pllm_sched_free(s);
        return PLLM_ERR_NOMEM;
    }
    *out = s;
    return PLLM_OK;
}

void pllm_sched_free(pllm_sched *s)
{
    if (!s) return;
    free(s->running);
    free(s->skipped);
    free(s->prefilling);
    free(s->hit);
    free(s);
}

int32_t pllm_sched_n_waiting(const pllm_sched *s)
{
    return s->n_waiting;
}
int32_t pllm_sched_n_running(const pllm_sched *s)
{
    return s->n_running;
}
int64_t pllm_sched_n_preemptions(const pllm_sched *s)
{
    return s->n_preemptions;
}
int64_t pllm_sched_n_grouped(const pllm_sched *s)
{
    pllm_plan_stats st;
    pllm_plan_get_stats(s->plan, &st);
    return st.grouped;
}
int64_t pllm_sched_n_relabels(const pllm_sched *s)
{
    return s->n_relabels;
}
pllm_req *pllm_sched_waiting_head(const pllm_sched *s)
{
    return s->w_head;
}
pllm_req *const *pllm_sched_running(const pllm_sched *s, int32_t *n)
{
    *n = s->n_running;
    return s->running;
}

/* ---- queues ---- */

static u128 lab_u(pllm_label l)
{
    return ((u128)l.hi << 64) | l.lo;
}

static pllm_label u_lab(u128 v)
{
    return (pllm_label){.hi = (uint64_t)(v >> 64), .lo = (uint64_t)v};
}

/* Respace every label (waiting and running requests, merged in order) evenly, 2^64 apart
 * (2^label_bits) or closer when there are more than 2^62 of them, keeping their order. */
static void relabel(pllm_sched *s)
{
    int64_t n = s->n_waiting + s->n_running;
    u128 step = ((u128)1 << 126) / (u128)(n + 1), at = 0;
    if (step > ((u128)1 << s->p.label_bits)) step = (u128)1 << s->p.label_bits;
    pllm_req *w = s->w_head;
    int32_t i = 0;
    while (w || i < s->n_running) {
        pllm_req *r;
        if (w && (i == s->n_running || !pllm_order_lt(s->running[i]->order, w->order))) {
            r = w;
            w = w->w_next;
        } else {
            r = s->running[i++];
        }
        at += step;
        r->order = u_lab(at);
        if (r->state == PLLM_REQ_WAITING) pllm_plan_relabeled(s->plan, r);
    }
    s->max_label = at;
    s->n_relabels++;
}

/* The smallest label above after's among the waiting and running requests (a running one
 * keeps its label for when it is preempted, so labels stay unique). */
static u128 next_label(const pllm_sched *s, const pllm_req *after)
{
    u128 x = lab_u(after->order), y = lab_u(after->w_next->order);
    for (int32_t i = 0; i < s->n_running; i++) {
        u128 r = lab_u(s->running[i]->order);
        if (r > x && r < y) y = r;
    }
    return y;
}

/* A label for a new request queued right after `after` (the tail or NULL: after every label
 * handed out). */
static pllm_order label_after(pllm_sched *s, const pllm_req *after)
{
    if (s->max_label >= ((u128)1 << 127)) relabel(s);
    if (!after || !after->w_next) {
        s->max_label += (u128)1 << s->p.label_bits;
        return u_lab(s->max_label);
    }
    u128 x = lab_u(after->order), y = next_label(s, after);
    if (y - x < 2) {
        relabel(s);
        x = lab_u(after->order);
        y = next_label(s, after);
    }
    /* close to x: the group's next member will go right after this one */
    u128 step = (y - x) / 64;
    return u_lab(x + (step ? step : 1));
}

/* Link r into the waiting queue right after `after` (NULL: at the head). */
static void waiting_link(pllm_sched *s, pllm_req *r, pllm_req *after)
{
    r->w_prev = after;
    r->w_next = after ? after->w_next : s->w_head;
    if (r->w_next)
        r->w_next->w_prev = r;
    else
        s->w_tail = r;
    if (after)
        after->w_next = r;
    else
        s->w_head = r;
    s->n_waiting++;
    r->state = PLLM_REQ_WAITING;
    r->n_bypassed = 0;
}

/* A preempted request returns to its old place (its label), searched from the head. */
static void waiting_reinsert(pllm_sched *s, pllm_req *r)
{
    pllm_req *after = NULL;
    if (s->w_tail && pllm_order_lt(s->w_tail->order, r->order)) {
        after = s->w_tail;
    } else {
        for (pllm_req *x = s->w_head; x && pllm_order_lt(x->order, r->order); x = x->w_next)
            after = x;
    }
    waiting_link(s, r, after);
}

static void waiting_remove(pllm_sched *s, pllm_req *r)
{
    if (r->w_prev)
        r->w_prev->w_next = r->w_next;
    else
        s->w_head = r->w_next;
    if (r->w_next)
        r->w_next->w_prev = r->w_prev;
    else
        s->w_tail = r->w_prev;
    r->w_prev = r->w_next = NULL;
    s->n_waiting--;
}

static void running_insert(pllm_sched *s, pllm_req *r)
{
    PLLM_ASSERT(s->n_running < s->p.max_seqs);
    int32_t i = s->n_running;
    while (i > 0 && pllm_order_lt(r->order, s->running[i - 1]->order)) {
        s->running[i] = s->running[i - 1];
        i--;
    }
    s->running[i] = r;
    s->n_running++;
    r->state = PLLM_REQ_RUNNING;
}

static void running_remove_at(pllm_sched *s, int32_t i)
{
    memmove(&s->running[i], &s->running[i + 1],
            (size_t)(s->n_running - i - 1) * sizeof *s->running);
    s->n_running--;
}

static int32_t running_index(const pllm_sched *s, const pllm_req *r)
{
    for (int32_t i = 0; i < s->n_running; i++)
        if (s->running[i] == r) return i;
    return -1;
}

/* ---- adding ---- */

pllm_status pllm_sched_add(pllm_sched *s, pllm_req *r)
{
    bool caching = pllm_block_pool_caching(pllm_kv_pool(s->kv));
    if (caching)
        PLLM_TRY(pllm_kv_keys_extend(s->kv, &r->keys, r->tokens.ids, (int32_t)r->tokens.n));
    PLLM_TRY(pllm_plan_add(s->plan, r));
    /* Join the group: r goes right behind the last waiting request of the deepest trie node it
     * shares (depth-first order), overtaking everyone queued after that request, unless one of
     * those has already been overtaken max_bypass times or they are too many. It does so only
     * when it pays: when the work queued behind the group (prompt + max_tokens each) exceeds
     * half the cache, so the shared prefix would likely be evicted before r ran at the tail.
     * Otherwise r goes to the tail. */
    pllm_req *after = s->w_tail, *g = NULL;
    int32_t depth = 0;
    if (caching && s->p.max_bypass > 0 && !s->p.no_grouping)
        g = pllm_plan_group_tail(s->plan, r, &depth);
    bool jump = false;
    if (g && g != s->w_tail) {
        int32_t n_jump = 0;
        bool ok = true;
        int64_t work = 0,
                enough = (int64_t)pllm_block_pool_n_blocks(pllm_kv_pool(s->kv)) * s->bs / 2;
        for (pllm_req *x = s->w_tail; x != g && ok; x = x->w_prev) {
            ok = x->n_bypassed < s->p.max_bypass && ++n_jump <= GROUP_JUMP_LIMIT;
            work += (int64_t)x->tokens.n + x->params.max_tokens;
        }
        if (ok && work >= enough) {
            after = g;
            jump = true;
        }
    }
    r->order = label_after(s, after);
    waiting_link(s, r, after);
    pllm_status st = pllm_plan_wait(s->plan, r);
    if (st != PLLM_OK) { /* leave no trace: r is not queued */
        waiting_remove(s, r);
        pllm_plan_remove(s->plan, r);
        return st;
    }
    if (jump) {
        for (pllm_req *x = s->w_tail; x != r; x = x->w_prev) x->n_bypassed++;
        pllm_plan_note_grouped(s->plan);
    }
    return PLLM_OK;
}

void pllm_sched_remove(pllm_sched *s, pllm_req *r)
{
    pllm_plan_remove(s->plan, r);
    if (r->state == PLLM_REQ_WAITING) {
        waiting_remove(s, r);
    } else if (r->state == PLLM_REQ_RUNNING) {
        int32_t i = running_index(s, r);
        PLLM_ASSERT(i >= 0);
        running_remove_at(s, i);
    }
    pllm_kv_free(s->kv, &r->table);
    r->state = PLLM_REQ_FINISHED;
}

/* ---- plan output ---- */

static pllm_status out_push(pllm_sched_out *o, pllm_req *r, int32_t n_new, int32_t n_draft,
                            bool admitted, int32_t n_hit)
{
    if (o->n_entries == o->cap_entries) {
        int32_t cap = o->cap_entries ? o->cap_entries * 2 : 16;
        pllm_sched_entry *e = pllm_realloc(o->entries, (size_t)cap * sizeof *e);
        if (!e) return PLLM_ERR_NOMEM;
        o->entries = e;
        o->cap_entries = cap;
    }
    o->entries[o->n_entries++] = (pllm_sched_entry){
        .req = r,
        .req_id = r->id,
        .index = r->index,
        .n_computed = r->n_computed,
        .n_new = n_new,
        .n_draft = n_draft,
        .sample = r->n_computed + n_new - n_draft == (int32_t)r->tokens.n,
        .admitted = admitted,
        .n_hit = n_hit,
    };
    o->n_tokens += n_new;
    return PLLM_OK;
}

static pllm_status out_push_victim(pllm_sched_out *o, const pllm_req *r)
{
    if (o->n_preempted == o->cap_preempted) {
        int32_t cap = o->cap_preempted ? o->cap_preempted * 2 : 8;
        pllm_sched_victim *v = pllm_realloc(o->preempted, (size_t)cap * sizeof *v);
        if (!v) return PLLM_ERR_NOMEM;
        o->preempted = v;
        o->cap_preempted = cap;
    }
    o->preempted[o->n_preempted++] = (pllm_sched_victim){.req_id = r->id, .index = r->index};
    return PLLM_OK;
}

/* ---- preemption ---- */

/* Computed tokens a request would have to compute again after losing its blocks: all but
 * those in leading blocks another running request also holds (they stay resident and
 * findable); with a sliding pool, only as far as that prefix's window of sliding blocks is
 * shared too (else its re-admission trims the prefix: pllm_kv_shared_prefix). Its private
 * blocks count as lost even when indexed: under the memory pressure that causes the
 * preemption they are the next ones evicted. */
static int32_t rebuild_cost(const pllm_sched *s, const pllm_req *r)
{
    int32_t covered = pllm_kv_shared_prefix(s->kv, &r->table) * s->bs;
    return r->n_computed > covered ? r->n_computed - covered : 0;
}

/* The victim among running[from ..]: the cheapest to rebuild, ties to the latest. When only the
 * sliding pool is short (sw_short), a request whose preemption would free no sliding block
 * (all it holds there is shared) does not help: it is passed over unless every candidate is
 * such. */
static int32_t pick_victim(const pllm_sched *s, int32_t from, bool sw_short)
{
    int32_t best = -1, best_cost = 0;
    for (int pass = 0; pass < 2 && best < 0; pass++)
        for (int32_t i = from; i < s->n_running; i++) {
            if (pass == 0 && sw_short && pllm_kv_sw_private(s->kv, &s->running[i]->table) == 0)
                continue;
            int32_t c = rebuild_cost(s, s->running[i]);
            if (best < 0 || c <= best_cost) { /* ties: the later one (running[] is sorted) */
                best = i;
                best_cost = c;
            }
        }
    return best;
}

/* Release the sliding blocks that leaders keep for their forks (pllm_kv_hold_sliding). */
static void drop_holds(pllm_sched *s)
{
    for (int32_t i = 0; i < s->n_running; i++)
        pllm_kv_drop_hold(s->kv, &s->running[i]->table, s->running[i]->n_computed);
}

static pllm_status preempt(pllm_sched *s, int32_t i, pllm_sched_out *o)
{
    pllm_req *r = s->running[i];
    running_remove_at(s, i);
    pllm_kv_free(s->kv, &r->table);
    r->n_computed = 0;
    r->n_preempted++;
    s->n_preemptions++;
    waiting_reinsert(s, r);
    PLLM_TRY(pllm_plan_wait(s->plan, r));
    return out_push_victim(o, r);
}

/* ---- admission ---- */

static pllm_status hit_reserve(pllm_sched *s, int32_t n)
{
    if (n <= s->hit_cap) return PLLM_OK;
    int32_t cap = s->hit_cap ? s->hit_cap : 64;
    while (cap < n) cap *= 2;
    int32_t *h = pllm_realloc(s->hit, (size_t)cap * sizeof *h);
    if (!h) return PLLM_ERR_NOMEM;
    s->hit = h;
    s->hit_cap = cap;
    return PLLM_OK;
}

/* Is a running request computing, right now, the block of r's prompt that follows its cached
 * prefix of n_hit blocks? (r then waits for it rather than computing it too.) prefilling[]:
 * the running requests that have not yet computed their prompt. */
static bool prefix_in_flight(const pllm_sched *s, pllm_req *const *prefilling, int32_t n_prefilling,
                             const pllm_req *r, int32_t n_hit)
{
    int32_t h = n_hit, bs = s->bs;
    if (h >= ((int32_t)r->tokens.n - 1) / bs || h >= r->keys.n) return false;
    uint64_t key = r->keys.keys[h];
    size_t bytes = (size_t)(h + 1) * (size_t)bs * sizeof(int32_t);
    for (int32_t i = 0; i < n_prefilling; i++) {
        const pllm_req *o = prefilling[i];
        if (o->keys.n <= h || o->keys.keys[h] != key || o->n_computed >= (h + 1) * bs) continue;
        if (memcmp(o->tokens.ids, r->tokens.ids, bytes) == 0) return true;
    }
    return false;
}

static pllm_status admit(pllm_sched *s, pllm_sched_out *o, int32_t *budget)
{
    int32_t n_skipped = 0;
    bool caching = pllm_block_pool_caching(pllm_kv_pool(s->kv));
    /* running requests still in their prompt: the only ones a shared prefix can be in flight in */
    int32_t n_prefilling = 0;
    for (int32_t i = 0; i < s->n_running; i++)
        if (s->running[i]->n_computed < s->running[i]->n_prompt)
            s->prefilling[n_prefilling++] = s->running[i];
    pllm_req *next;
    for (pllm_req *r = s->w_head; r && *budget > 0 && s->n_running < s->p.max_seqs; r = next) {
        /* every admission needs at least one fresh block (the last token is never a hit) */
        if (pllm_block_pool_n_free(pllm_kv_pool(s->kv)) == 0) break;
        next = r->w_next;
        bool defer = false;
        int32_t n_tok = (int32_t)r->tokens.n, n_hit = 0;
        PLLM_TRY(hit_reserve(s, n_tok / s->bs + 1));

        /* completion i > 0 of an n > 1 request: share completion 0's prompt */
        pllm_req *lead = r->group->leader;
        bool forked = false;
        if (lead && lead != r && lead->state == PLLM_REQ_RUNNING && (n_tok - 1) / s->bs > 0) {
            if (lead->n_computed < lead->n_prompt) {
                defer = true;
            } else {
                n_hit = PLLM_MIN((n_tok - 1) / s->bs, r->n_prompt / s->bs);
                PLLM_ASSERT(n_hit <= lead->table.n);
                memcpy(s->hit, lead->table.ids, (size_t)n_hit * sizeof *s->hit);
                /* sliding layers: the leader's window blocks, shared as the global ones */
                PLLM_TRY(pllm_kv_share_hits(s->kv, &lead->table, &r->keys, r->tokens.ids, s->hit,
                                            &n_hit));
                forked = true;
            }
        }
        if (!defer && !forked) {
            PLLM_TRY(pllm_kv_find_cached(s->kv, &r->keys, r->tokens.ids, n_tok, s->hit, &n_hit));
            /* the persistent prefix cache: blocks after the hits, loaded from disk */
            PLLM_TRY(pllm_kv_fetch_tier(s->kv, &r->keys, r->tokens.ids, n_tok, s->hit, &n_hit));
            if (caching && prefix_in_flight(s, s->prefilling, n_prefilling, r, n_hit)) defer = true;
        }
        int32_t n_new = PLLM_MIN(n_tok - n_hit * s->bs, *budget);
        if (!defer) { /* a sliding pool short of a whole chunk takes a shorter one */
            int32_t m = pllm_kv_fit_sliding(s->kv, &r->table, s->hit, n_hit, n_hit * s->bs, n_new);
            if (m >= 1) n_new = m;
        }
        if (!defer && !pllm_kv_can_allocate(s->kv, &r->table, s->hit, n_hit, n_hit * s->bs + n_new))
            defer = true;

        if (defer) {
            /* an overtaken-to-the-bound request blocks everything behind it */
            if (r->n_bypassed >= s->p.max_bypass || n_skipped == s->p.scan_limit) break;
            s->skipped[n_skipped++] = r;
            continue;
        }
        /* admit r: everyone skipped ahead of it is overtaken once more */
        PLLM_TRY(pllm_kv_allocate(s->kv, &r->table, s->hit, n_hit, n_hit * s->bs + n_new));
        waiting_remove(s, r);
        pllm_plan_unwait(s->plan, r);
        pllm_plan_link(s->plan, r, 0, n_hit);
        r->n_computed = n_hit * s->bs;
        if (!r->admitted_once) {
            r->admitted_once = true;
            r->cached_tokens = PLLM_MIN(r->n_computed, r->n_prompt);
        }
        running_insert(s, r);
        /* a leader whose forks will share its prompt blocks keeps their window a little */
        if (r->group->leader == r && r->group->n_alive > 1 && r->n_prompt > s->bs)
            pllm_kv_hold_sliding(s->kv, &r->table,
                                 PLLM_MIN((r->n_prompt - 1) / s->bs, r->n_prompt / s->bs) * s->bs);
        if (r->n_computed < r->n_prompt) s->prefilling[n_prefilling++] = r;
        r->n_bypassed = 0;
        PLLM_TRY(out_push(o, r, n_new, 0, true, n_hit * s->bs));
        *budget -= n_new;
        bool blocked = false;
        for (int32_t i = 0; i < n_skipped; i++)
            if (++s->skipped[i]->n_bypassed >= s->p.max_bypass) blocked = true;
        if (blocked) break;
    }
    return PLLM_OK;
}

pllm_status pllm_sched_schedule(pllm_sched *s, pllm_sched_out *o)
{
    o->n_entries = 0;
    o->n_tokens = 0;
    o->n_preempted = 0;
    int32_t budget = s->p.max_batched_tokens;

    /* 1. running requests, in queue order */
    int32_t i = 0;
    while (i < s->n_running && budget > 0) {
        pllm_req *r = s->running[i];
        int32_t n_new = PLLM_MIN((int32_t)r->tokens.n - r->n_computed, budget);
        PLLM_ASSERT(n_new > 0);
        bool self = false;
        for (;;) {
            /* short of sliding blocks: first the windows leaders keep for their forks */
            if (pllm_kv_sliding_short(s->kv, &r->table, r->n_computed + n_new)) drop_holds(s);
            /* a sliding pool short of the whole chunk: a shorter one rather than a preemption */
            const int32_t m = pllm_kv_fit_sliding(s->kv, &r->table, NULL, 0, r->n_computed, n_new);
            if (m >= 1) n_new = m;
            if (pllm_kv_can_allocate(s->kv, &r->table, NULL, 0, r->n_computed + n_new)) break;
            int32_t v =
                pick_victim(s, i, pllm_kv_sliding_short(s->kv, &r->table, r->n_computed + n_new));
            PLLM_TRY(preempt(s, v, o));
            if (v == i) {
                self = true;
                break;
            }
        }
        if (self) continue; /* running[i] is now the next request */
        /* drafts: only after the known tokens, within the budget, never at anyone's expense */
        int32_t nd = 0;
        if (r->n_draft > 0 && r->n_computed + n_new == (int32_t)r->tokens.n)
            nd = PLLM_MIN(r->n_draft, budget - n_new);
        if (nd > 0 && !pllm_kv_can_allocate(s->kv, &r->table, NULL, 0, r->n_computed + n_new + nd))
            nd = 0;
        PLLM_TRY(pllm_kv_allocate(s->kv, &r->table, NULL, 0, r->n_computed + n_new + nd));
        PLLM_TRY(out_push(o, r, n_new + nd, nd, false, 0));
        budget -= n_new + nd;
        i++;
    }

    /* 2. admission, unless memory is so tight that someone was just preempted */
    if (o->n_preempted == 0) PLLM_TRY(admit(s, o, &budget));
    return PLLM_OK;
}

pllm_status pllm_sched_update(pllm_sched *s, const pllm_sched_out *o)
{
    for (int32_t i = 0; i < o->n_entries; i++) {
        pllm_req *r = o->entries[i].req;
        if (!r) continue; /* finished while the step was in flight (engine.c, overlap) */
        int32_t before = r->n_computed, committed = r->table.n_committed;
        r->n_computed += o->entries[i].n_new;
        PLLM_ASSERT(r->n_computed <= (int32_t)r->tokens.n);
        PLLM_ASSERT(o->entries[i].n_draft == 0);
        PLLM_TRY(pllm_kv_commit(s->kv, &r->table, &r->keys, r->tokens.ids, r->n_computed));
        pllm_plan_link(s->plan, r, committed, r->table.n_committed);
        pllm_plan_computed(s->plan, r, before, r->n_computed);
    }
    return PLLM_OK;
}
