/* speculate.c: the proposers and the adaptive policy of speculative decoding (speculate.h). */
#include "engine/speculate.h"

#include <stdlib.h>
#include <string.h>

#define NGRAM_BITS     18 /* table entries: 2^18 (3 MiB) */
#define NGRAM_ORDERS   2  /* contexts of 3, then 2 tokens */
#define COST_DECAY     0.98
#define COST_MARGIN    1.0
#define EXPLORE_DRAFTS 8   /* drafts per step while the cost model is not identified */
#define ALPHA_PRIOR    4.0 /* a sequence's own rate counts after this many trials */

typedef struct ngram_slot {
    uint64_t tag; /* 0: empty */
    int32_t next;
} ngram_slot;

struct pllm_spec {
    pllm_spec_params p;
    ngram_slot *table; /* [1 << NGRAM_BITS] */
    /* cost model: exponentially weighted sums over the steps of (u, d, t) (u = the step's
     * tokens that are not drafts, d = its drafts, t = its time), and of the products of their
     * differences between consecutive decode steps (du, dd, dt) */
    double sw, su, sd, sy, sv, suu, sud, sdd, suy, sdy;
    double pu, pd, py; /* the last decode step's (u, d, t) */
    bool prev_ok;      /* it was the step just before */
    int64_t n_obs;
    int64_t n_explore; /* steps chosen while not identified */
    double a, c, b;
    bool fitted;     /* a and b were fitted at least once */
    bool identified; /* the recent steps' token counts vary enough to fit */
    pllm_spec_stats st;
    int64_t trials;                          /* drafts tested (accepted ones and the first
                                                rejected one of each step) */
    int64_t src_trials[PLLM_SPEC_N_SOURCES]; /* the same per proposal source */
    int64_t src_accepted[PLLM_SPEC_N_SOURCES];
};

const char *pllm_spec_mode_str(pllm_spec_mode m)
{
    switch (m) {
    case PLLM_SPEC_OFF:
        return "off";
    case PLLM_SPEC_AUTO:
        return "auto";
    case PLLM_SPEC_PROMPT_LOOKUP:
        return "prompt-lookup";
    }
    return "unknown";
}

pllm_status pllm_spec_mode_parse(const char *s, pllm_spec_mode *out)
{
    static const pllm_spec_mode all[] = {PLLM_SPEC_OFF, PLLM_SPEC_AUTO, PLLM_SPEC_PROMPT_LOOKUP};
    for (size_t i = 0; s && i < PLLM_ARRAY_LEN(all); i++)
        if (!strcmp(s, pllm_spec_mode_str(all[i]))) {
            *out = all[i];
            return PLLM_OK;
        }
    return pllm_errorf(PLLM_ERR_INVALID, "speculate must be auto, off or prompt-lookup, got '%s'",
                       s ? s : "(null)");
}

/* ---- prompt lookup ---- */

int32_t pllm_spec_prompt_lookup(int32_t *draft, int32_t k, const int32_t *toks, int32_t n,
                                int32_t ngram_min, int32_t ngram_max, int32_t *match)
{
    if (match) *match = 0;
    if (k <= 0) return 0;
    for (int32_t m = PLLM_MIN(ngram_max, n - 1); m >= ngram_min && m >= 1; m--) {
        const int32_t *suf = toks + n - m;
        /* most recent earlier occurrence: starts i < n - m, so that a token follows it */
        for (int32_t i = n - m - 1; i >= 0; i--) {
            if (toks[i] != suf[0] || memcmp(toks + i, suf, (size_t)m * sizeof *toks) != 0) continue;
            int32_t got = 0;
            for (int32_t j = i + m; j < n && got < k; j++) draft[got++] = toks[j];
            if (match) *match = m;
            return got;
        }
    }
    return 0;
}

/* ---- the n-gram table ---- */

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Tag of the m tokens ending before toks[end] (never 0). */
static uint64_t ngram_tag(const int32_t *toks, int32_t end, int32_t m)
{
    uint64_t h = 0x9e3779b97f4a7c15ull * (uint64_t)m;
    for (int32_t i = end - m; i < end; i++) h = mix64(h ^ (uint32_t)toks[i]);
    return h ? h : 1;
}

void pllm_spec_ngram_add(pllm_spec *s, const int32_t *toks, int32_t from, int32_t n)
{
    if (!s->table) return;
    for (int32_t i = PLLM_MAX(from, 2); i < n; i++)
        for (int32_t o = 0; o < NGRAM_ORDERS; o++) {
            int32_t m = 3 - o;
            if (i < m) continue;
            uint64_t tag = ngram_tag(toks, i, m);
            ngram_slot *sl = &s->table[tag & ((1u << NGRAM_BITS) - 1)];
            sl->tag = tag; /* the latest n-gram wins a slot */
            sl->next = toks[i];
        }
}

int32_t pllm_spec_ngram_propose(const pllm_spec *s, int32_t *draft, int32_t k, const int32_t *toks,
                                int32_t n)
{
    if (!s->table || k <= 0) return 0;
    /* a window of the last 3 known tokens, extended by the drafts as they are chosen */
    int32_t win[3 + PLLM_SPEC_MAX_DRAFT];
    int32_t w = PLLM_MIN(n, 3);
    memcpy(win, toks + n - w, (size_t)w * sizeof *win);
    int32_t got = 0;
    k = PLLM_MIN(k, PLLM_SPEC_MAX_DRAFT);
    while (got < k) {
        int32_t next = -1;
        for (int32_t o = 0; o < NGRAM_ORDERS && next < 0; o++) {
            int32_t m = 3 - o;
            if (w < m) continue;
            uint64_t tag = ngram_tag(win, w, m);
            const ngram_slot *sl = &s->table[tag & ((1u << NGRAM_BITS) - 1)];
            if (sl->tag == tag) next = sl->next;
        }
        if (next < 0) break;
        draft[got++] = next;
        win[w++] = next;
    }
    return got;
}

int32_t pllm_spec_propose(const pllm_spec *s, int32_t *draft, int32_t k, const int32_t *toks,
                          int32_t n, int32_t *source)
{
    k = PLLM_MIN(k, s->p.max_draft);
    int32_t m = 0;
    int32_t got = pllm_spec_prompt_lookup(draft, k, toks, n, s->p.ngram_min, s->p.ngram_max, &m);
    int32_t src = PLLM_MIN(PLLM_MAX(m, 1), 4) - 1;
    if (got == 0 && s->p.mode == PLLM_SPEC_AUTO) {
        got = pllm_spec_ngram_propose(s, draft, k, toks, n);
        src = 4;
    }
    if (source) *source = src;
    return got;
}

/* ---- life cycle ---- */

pllm_status pllm_spec_init(pllm_spec **out, const pllm_spec_params *p)
{
    *out = NULL;
    if (p->mode != PLLM_SPEC_OFF && p->mode != PLLM_SPEC_AUTO && p->mode != PLLM_SPEC_PROMPT_LOOKUP)
        return pllm_errorf(PLLM_ERR_INVALID, "speculate: unknown mode %d", (int)p->mode);
    if (p->max_draft < 1 || p->max_draft > PLLM_SPEC_MAX_DRAFT)
        return pllm_errorf(PLLM_ERR_INVALID, "speculate: max_draft must be in [1, %d], got %d",
                           PLLM_SPEC_MAX_DRAFT, p->max_draft);
    if (p->fit_max_tokens < 1)
        return pllm_errorf(PLLM_ERR_INVALID, "speculate: fit_max_tokens must be >= 1, got %d",
                           p->fit_max_tokens);
    if (p->ngram_min < 1 || p->ngram_max < p->ngram_min)
        return pllm_errorf(PLLM_ERR_INVALID,
                           "speculate: n-gram sizes must satisfy 1 <= min <= max, got %d .. %d",
                           p->ngram_min, p->ngram_max);
    pllm_spec *s = pllm_calloc(1, sizeof *s);
    if (!s) return PLLM_ERR_NOMEM;
    s->p = *p;
    if (p->mode == PLLM_SPEC_AUTO) {
        s->table = pllm_calloc((size_t)1 << NGRAM_BITS, sizeof *s->table);
        if (!s->table) {
            free(s);
            return PLLM_ERR_NOMEM;
        }
    }
    *out = s;
    return PLLM_OK;
}

void pllm_spec_free(pllm_spec *s)
{
    if (!s) return;
    free(s->table);
    free(s);
}

/* ---- the policy ---- */

void pllm_spec_observe_step(pllm_spec *s, int32_t n_tokens, int32_t n_samples, int32_t n_drafts,
                            double seconds)
{
    if (n_drafts > 0) s->st.steps_drafting++;
    /* only the steps the policy chooses between: decode batches and their drafts, every token
     * with its logits (a prefill token costs less: no LM head row, no sampling) */
    if (n_tokens > s->p.fit_max_tokens || n_samples != n_tokens) {
        s->prev_ok = false; /* no difference across a prefill step */
        return;
    }
    const double u = n_tokens - n_drafts, d = n_drafts, f = COST_DECAY;
    double y = seconds;
    /* a step slowed by other jobs (the thread descheduled) is an outlier on the high side: it
     * counts as at most twice what the fit predicts */
    if (s->fitted) y = PLLM_MIN(y, 2.0 * (s->a + s->c * u + s->b * d));
    /* the intercept from the (weighted) levels */
    s->sw = f * s->sw + 1;
    s->su = f * s->su + u;
    s->sd = f * s->sd + d;
    s->sy = f * s->sy + y;
    s->n_obs++;
    /* the slopes from the differences between consecutive decode steps: the load of a shared
     * machine drifts over seconds, and the draft counts do too (copying phases); a fit over the
     * levels reads the drift as the drafts' cost (2.9 ms a draft at 16 sequences where a
     * sequence step cost 3.5 ms: then nothing drafted), a difference of neighbouring steps
     * sees the same load in both */
    const bool have_diff = s->prev_ok;
    const double du = u - s->pu, dd = d - s->pd, dy = y - s->py;
    s->pu = u;
    s->pd = d;
    s->py = y;
    s->prev_ok = true;
    if (!have_diff) return;
    s->sv = f * s->sv + 1;
    s->suu = f * s->suu + du * du;
    s->sud = f * s->sud + du * dd;
    s->sdd = f * s->sdd + dd * dd;
    s->suy = f * s->suy + du * dy;
    s->sdy = f * s->sdy + dd * dy;
    /* weighted means and (co)variances of the differences (their mean is ~0) */
    const double w = s->sw, mu = s->su / w, md = s->sd / w, my = s->sy / w, v = s->sv;
    const double vuu = s->suu / v, vud = s->sud / v, vdd = s->sdd / v;
    const double cuy = s->suy / v, cdy = s->sdy / v;
    /* the draft cost is identified while the (weighted) draft counts of neighbouring steps
     * differ by half a token or more; the sequences' cost while their counts do too. A
     * sequence costs at least what a draft does (its own token, plus its context): where the
     * sequence count did not vary, or the two-variable fit says less (noise), every token costs
     * the same, c = b (the fit t = a + b T). */
    s->identified = s->n_obs >= 4 && vdd >= 0.25;
    if (!s->identified) return;
    double c = -1, b = 0;
    const double det = vuu * vdd - vud * vud;
    if (vuu >= 0.25 && det > 1e-9 * vuu * vdd) {
        c = (cuy * vdd - cdy * vud) / det;
        b = (cdy * vuu - cuy * vud) / det;
    }
    if (c < b) {
        const double vtt = vuu + 2 * vud + vdd;
        c = b = vtt > 0 ? (cuy + cdy) / vtt : 0;
    }
    if (b < 0) c = b = 0;
    double a = my - c * mu - b * md;
    if (a < 0) { /* through the origin: all cost per token */
        a = 0;
        const double mt = mu + md;
        c = b = mt > 0 ? my / mt : 0;
    }
    s->a = a;
    s->c = c;
    s->b = b;
    s->fitted = true;
    s->st.cost_a = a;
    s->st.cost_c = c;
    s->st.cost_b = b;
}

void pllm_spec_observe_seq(pllm_spec *s, int32_t source, int32_t n_drafted, int32_t n_accepted)
{
    if (n_drafted <= 0) return;
    int32_t t = n_accepted + (n_accepted < n_drafted);
    s->st.drafted += n_drafted;
    s->st.accepted += n_accepted;
    s->trials += t;
    if (source >= 0 && source < PLLM_SPEC_N_SOURCES) {
        s->src_trials[source] += t;
        s->src_accepted[source] += n_accepted;
    }
}

void pllm_spec_seq_update(double *trials, double *accepted, int32_t n_drafted, int32_t n_accepted)
{
    if (n_drafted <= 0) return;
    *trials = 0.8 * *trials + (double)(n_accepted + (n_accepted < n_drafted));
    *accepted = 0.8 * *accepted + (double)n_accepted;
}

void pllm_spec_choose(pllm_spec *s, pllm_spec_cand *c, int32_t n, int32_t base_tokens,
                      int32_t n_decode, int32_t budget)
{
    for (int32_t i = 0; i < n; i++) c[i].k = 0;
    if (s->p.mode == PLLM_SPEC_OFF) return;
    if (s->p.mode == PLLM_SPEC_PROMPT_LOOKUP) {
        for (int32_t i = 0; i < n && budget > 0; i++) {
            c[i].k = PLLM_MIN(c[i].n_proposed, budget);
            budget -= c[i].k;
        }
        return;
    }
    /* auto: per-draft acceptance rates: the sequence's recent history, with its proposal
     * source's rate (itself with the run's overall rate as prior) as the prior */
    double glob = ((double)s->st.accepted + 1.0) / ((double)s->trials + 2.0);
    for (int32_t i = 0; i < n; i++) {
        int32_t src = PLLM_MIN(PLLM_MAX(c[i].source, 0), PLLM_SPEC_N_SOURCES - 1);
        double prior = ((double)s->src_accepted[src] + ALPHA_PRIOR * glob) /
                       ((double)s->src_trials[src] + ALPHA_PRIOR);
        c[i].alpha = (c[i].accepted + ALPHA_PRIOR * prior) / (c[i].trials + ALPHA_PRIOR);
        c[i].next_gain = c[i].alpha;
    }
    double G = n_decode > 0 ? n_decode : 1, a = s->a, cu = s->c, b = s->b;
    if (!s->identified) {
        /* nothing to fit (the recent steps' draft counts were all the same): explore with a few
         * drafts as if they were nearly free, 0, 8, 16, 0, ... in turn, which gives the next fit
         * its spread (a fixed count never would: every exploring step then had the same size,
         * and the policy stayed at that count for the whole run) */
        a = 1.0;
        cu = b = 0.01;
        budget = PLLM_MIN(budget, EXPLORE_DRAFTS * (int32_t)(s->n_explore++ % 3));
    }
    double t = a + cu * base_tokens;
    while (budget > 0) {
        int32_t best = -1;
        for (int32_t i = 0; i < n; i++)
            if (c[i].k < c[i].n_proposed && (best < 0 || c[i].next_gain > c[best].next_gain))
                best = i;
        if (best < 0) break;
        double g = c[best].next_gain;
        /* pays when (G + g) / (t + b) > G / t (COST_MARGIN scales the cost: it was 1.25 while
         * the fit read load drift as draft cost; with the difference fit, 1.25 left copy16 at
         * 0.97x on a quiet machine, where a draft costs ~87% of a sequence row and nets ~0.25
         * ms at 91% kept; 1.0 gave 1.13-1.15x there, ShareGPT at 64 unchanged, 0.98-1.00x) */
        if ((G + g) * t <= G * (t + COST_MARGIN * b) || g < 0.02) break;
        G += g;
        t += b;
        c[best].k++;
        c[best].next_gain *= c[best].alpha;
        budget--;
    }
}

void pllm_spec_get_stats(const pllm_spec *s, pllm_spec_stats *out)
{
    *out = s->st;
}
