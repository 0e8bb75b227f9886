/*
 * jinja_filters.c: jinja2's filters (jinja2/filters.py, with transformers' tojson) and tests
 * (jinja2/tests.py), the lazy generators behind select/reject/map/items/unique/batch/reverse,
 * attribute getters ("a.b.0") and Python's stable sort.
 */
#include "tokenizer/jinja_builtins.h"

#include "tokenizer/jinja_unicode.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- attribute getters (filters) */

/* jinja2's make_attrgetter: "a.b.0" looked up part by part with getitem. */
static pllm_status attr_get(pllm_jctx *c, pllm_jv item, pllm_jv attribute, const pllm_jv *dflt,
                            bool lower, pllm_jv *out)
{
    pllm_jv v = item;
    if (attribute.t == PLLM_JV_STR) {
        const char *s = attribute.s->s;
        size_t n = attribute.s->len, i = 0;
        for (;;) {
            size_t j = i;
            while (j < n && s[j] != '.') j++;
            bool digits = j > i;
            for (size_t k = i; k < j; k++) digits &= s[k] >= '0' && s[k] <= '9';
            pllm_jv part;
            if (digits && j - i < 18)
                part = pllm_jv_int(strtoll(s + i, NULL, 10));
            else
                PLLM_TRY(pllm_jv_str(c, s + i, j - i, &part));
            PLLM_TRY(pllm_jinja_getitem(c, v, part, &v));
            if (dflt && v.t == PLLM_JV_UNDEF) v = *dflt;
            if (j >= n) break;
            i = j + 1;
        }
    } else if (attribute.t != PLLM_JV_NONE) {
        PLLM_TRY(pllm_jinja_getitem(c, v, attribute, &v));
        if (dflt && v.t == PLLM_JV_UNDEF) v = *dflt;
    }
    if (lower && v.t == PLLM_JV_STR) PLLM_TRY(pllm_jb_change_case(c, v, CASE_LOWER, &v));
    *out = v;
    return PLLM_OK;
}

/* make_multi_attrgetter for sort(): the key is the list of the comma-separated attributes. */
static pllm_status multi_attr_get(pllm_jctx *c, pllm_jv item, pllm_jv attribute, bool lower,
                                  pllm_jv *out)
{
    pllm_jv parts[16];
    size_t n = 0;
    if (attribute.t == PLLM_JV_STR) {
        const char *s = attribute.s->s;
        size_t len = attribute.s->len, i = 0;
        for (;;) {
            size_t j = i;
            while (j < len && s[j] != ',') j++;
            if (n == PLLM_ARRAY_LEN(parts))
                return pllm_jerr(c, PLLM_ERR_UNSUPPORTED, "too many sort attributes");
            pllm_jv part;
            PLLM_TRY(pllm_jv_str(c, s + i, j - i, &part));
            PLLM_TRY(attr_get(c, item, part, NULL, lower, &parts[n++]));
            if (j >= len) break;
            i = j + 1;
        }
    } else {
        PLLM_TRY(attr_get(c, item, attribute, NULL, lower, &parts[n++]));
    }
    return pllm_jb_make_list(c, parts, n, PLLM_JL_LIST, out);
}

/* ---------------------------------------------------------------- generators */

enum gen_kind {
    GEN_SELECT,
    GEN_REJECT,
    GEN_SELECTATTR,
    GEN_REJECTATTR,
    GEN_MAP,
    GEN_ITEMS,
    GEN_REVERSE,
    GEN_UNIQUE,
    GEN_BATCH,
};

struct pllm_jgen {
    int kind;
    pllm_jv src;
    pllm_jargs args;
    bool started, finished;
    pllm_jiter it;
    /* prepared on the first pull */
    pllm_jv attr; /* selectattr/rejectattr/map(attribute=)/unique(attribute=) */
    bool has_attr;
    pllm_jv dflt; /* map default */
    bool has_dflt;
    int fn_id;       /* test (select) or filter (map); -1: bool() */
    pllm_jargs rest; /* extra arguments for the test / filter */
    bool case_sensitive;
    pllm_jv *seen; /* unique */
    size_t n_seen, cap_seen;
    pllm_jv *items; /* reverse: snapshot */
    size_t n_items, pos;
};

static pllm_status new_gen(pllm_jctx *c, int kind, pllm_jv src, const pllm_jargs *args,
                           pllm_jv *out)
{
    pllm_jgen *g = pllm_jb_alloc(c, sizeof *g);
    if (!g) return PLLM_ERR_NOMEM;
    memset(g, 0, sizeof *g);
    g->kind = kind;
    g->src = src;
    if (args) g->args = *args;
    g->fn_id = -1;
    *out = (pllm_jv){.t = PLLM_JV_GEN, .gen = g};
    return PLLM_OK;
}

static pllm_status kwarg(const pllm_jargs *a, const char *name, pllm_jv *v, bool *has)
{
    *has = false;
    for (size_t k = 0; k < a->n_kw; k++)
        if (!strcmp(a->kw_names[k], name)) {
            *v = a->kw[k];
            *has = true;
        }
    return PLLM_OK;
}

static pllm_status lookup_runtime(pllm_jctx *c, pllm_jbuiltin_kind kind, pllm_jv name, int *id)
{
    const char *what = kind == PLLM_JB_FILTER ? "filter" : "test";
    if (name.t != PLLM_JV_STR) {
        pllm_jsb b = {0};
        PLLM_TRY(pllm_jv_write_repr(c, &b, name));
        return pllm_jerr(c, PLLM_ERR_INVALID, "TemplateRuntimeError: No %s pllm_jb_named %s.", what,
                         b.s);
    }
    *id = pllm_jinja_builtin_lookup(kind, name.s->s);
    if (*id == -1)
        return pllm_jerr(c, PLLM_ERR_INVALID, "TemplateRuntimeError: No %s pllm_jb_named '%s'.",
                         what, name.s->s);
    if (*id == -2)
        return pllm_jerr(c, PLLM_ERR_UNSUPPORTED, "%s '%s' is not supported by pllm", what,
                         name.s->s);
    return PLLM_OK;
}

static pllm_status gen_prepare(pllm_jctx *c, pllm_jgen *g)
{
    const pllm_jargs *a = &g->args;
    switch (g->kind) {
    case GEN_SELECT:
    case GEN_REJECT:
    case GEN_SELECTATTR:
    case GEN_REJECTATTR: {
        size_t off = 0;
        if (g->kind == GEN_SELECTATTR || g->kind == GEN_REJECTATTR) {
            if (a->n_pos < 1)
                return pllm_jerr(c, PLLM_ERR_INVALID,
                                 "FilterArgumentError: Missing parameter for attribute name");
            g->attr = a->pos[0];
            g->has_attr = true;
            off = 1;
        }
        if (a->n_pos > off) {
            PLLM_TRY(lookup_runtime(c, PLLM_JB_TEST, a->pos[off], &g->fn_id));
            g->rest = (pllm_jargs){.pos = a->pos + off + 1,
                                   .n_pos = a->n_pos - off - 1,
                                   .kw_names = a->kw_names,
                                   .kw = a->kw,
                                   .n_kw = a->n_kw};
        }
        return PLLM_OK;
    }
    case GEN_MAP: {
        bool has;
        pllm_jv v;
        kwarg(a, "attribute", &v, &has);
        if (a->n_pos == 0 && has) {
            g->attr = v;
            g->has_attr = true;
            kwarg(a, "default", &g->dflt, &g->has_dflt);
            if (g->has_dflt && g->dflt.t == PLLM_JV_NONE) g->has_dflt = false;
            for (size_t k = 0; k < a->n_kw; k++)
                if (strcmp(a->kw_names[k], "attribute") && strcmp(a->kw_names[k], "default"))
                    return pllm_jerr(c, PLLM_ERR_INVALID,
                                     "FilterArgumentError: Unexpected keyword argument '%s'",
                                     a->kw_names[k]);
            return PLLM_OK;
        }
        if (a->n_pos == 0)
            return pllm_jerr(c, PLLM_ERR_INVALID,
                             "FilterArgumentError: map requires a filter argument");
        PLLM_TRY(lookup_runtime(c, PLLM_JB_FILTER, a->pos[0], &g->fn_id));
        g->rest = (pllm_jargs){.pos = a->pos + 1,
                               .n_pos = a->n_pos - 1,
                               .kw_names = a->kw_names,
                               .kw = a->kw,
                               .n_kw = a->n_kw};
        return PLLM_OK;
    }
    case GEN_UNIQUE: {
        static const char *const params[] = {"case_sensitive", "attribute"};
        pllm_jv vals[2];
        bool given[2];
        PLLM_TRY(pllm_jb_bind(c, "unique()", a, params, 2, 0, vals, given));
        g->case_sensitive = given[0] && pllm_jv_truthy(vals[0]);
        g->attr = given[1] ? vals[1] : pllm_jv_none();
        g->has_attr = true;
        return PLLM_OK;
    }
    case GEN_BATCH: {
        static const char *const params[] = {"linecount", "fill_with"};
        pllm_jv vals[2];
        bool given[2];
        PLLM_TRY(pllm_jb_bind(c, "batch()", a, params, 2, 1, vals, given));
        g->attr = vals[0]; /* linecount */
        g->has_dflt = given[1] && vals[1].t != PLLM_JV_NONE;
        g->dflt = vals[1];
        return PLLM_OK;
    }
    case GEN_ITEMS:
        if (g->src.t == PLLM_JV_UNDEF) {
            g->finished = true;
            return PLLM_OK;
        }
        if (g->src.t != PLLM_JV_DICT)
            return TYPE_ERROR(c, "Can only get item pairs from a mapping.");
        return PLLM_OK;
    default:
        return PLLM_OK;
    }
}

/* jinja2's do_batch: lists of linecount items; the last one padded with fill_with if given. */
static pllm_status batch_next(pllm_jctx *c, pllm_jgen *g, pllm_jv *out, bool *done)
{
    pllm_jv *tmp = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (g->n_items) { /* the item that closed the previous batch */
            PLLM_TRY(pllm_jb_list_push(c, &tmp, &n, &cap, g->items[0]));
            g->n_items = 0;
        }
        pllm_jv item;
        bool end;
        PLLM_TRY(pllm_jiter_next(c, &g->it, &item, &end));
        if (end) {
            g->finished = true;
            break;
        }
        bool full;
        PLLM_TRY(pllm_jv_eq(c, pllm_jv_int((int64_t)n), g->attr, &full));
        if (full) {
            g->items = pllm_jb_alloc(c, sizeof(pllm_jv));
            if (!g->items) return PLLM_ERR_NOMEM;
            g->items[0] = item;
            g->n_items = 1;
            return pllm_jb_make_list(c, tmp, n, PLLM_JL_LIST, out);
        }
        PLLM_TRY(pllm_jb_list_push(c, &tmp, &n, &cap, item));
    }
    if (n == 0) {
        *done = true;
        return PLLM_OK;
    }
    if (g->has_dflt) {
        if (!is_int_like(g->attr))
            return TYPE_ERROR(c, "can't multiply sequence by non-int of type '%s'",
                              pllm_jv_type_name(g->attr));
        while ((int64_t)n < as_int(g->attr))
            PLLM_TRY(pllm_jb_list_push(c, &tmp, &n, &cap, g->dflt));
    }
    return pllm_jb_make_list(c, tmp, n, PLLM_JL_LIST, out);
}

static pllm_status gen_next(pllm_jctx *c, pllm_jgen *g, pllm_jv *out, bool *done);

pllm_status pllm_jinja_gen_next(pllm_jctx *c, pllm_jgen *g, pllm_jv *out, bool *done)
{
    PLLM_TRY(pllm_jinja_nest_enter(c));
    pllm_status st = gen_next(c, g, out, done);
    pllm_jinja_nest_leave(c);
    return st;
}

static pllm_status gen_next(pllm_jctx *c, pllm_jgen *g, pllm_jv *out, bool *done)
{
    *done = false;
    if (!g->started) {
        g->started = true;
        bool lazy_falsy = g->kind == GEN_SELECT || g->kind == GEN_REJECT ||
                          g->kind == GEN_SELECTATTR || g->kind == GEN_REJECTATTR ||
                          g->kind == GEN_MAP;
        if (lazy_falsy && !pllm_jv_truthy(g->src)) {
            g->finished = true; /* `if value:` in jinja2's generator functions */
        } else {
            PLLM_TRY(gen_prepare(c, g));
            if (!g->finished && g->kind != GEN_REVERSE && g->kind != GEN_ITEMS)
                PLLM_TRY(pllm_jiter_init(c, g->src, &g->it));
        }
    }
    for (;;) {
        if (g->finished) {
            *done = true;
            return PLLM_OK;
        }
        if (g->kind == GEN_REVERSE) {
            if (g->pos >= g->n_items) {
                g->finished = true;
                continue;
            }
            *out = g->items[g->n_items - 1 - g->pos++];
            return PLLM_OK;
        }
        if (g->kind == GEN_ITEMS) {
            if (g->pos >= g->src.d->n) {
                g->finished = true;
                continue;
            }
            PLLM_TRY(pllm_jv_list(c, 2, PLLM_JL_TUPLE, out));
            out->l->v[0] = g->src.d->keys[g->pos];
            out->l->v[1] = g->src.d->vals[g->pos];
            g->pos++;
            return PLLM_OK;
        }
        if (g->kind == GEN_BATCH) return batch_next(c, g, out, done);
        pllm_jv item;
        bool end;
        PLLM_TRY(pllm_jiter_next(c, &g->it, &item, &end));
        if (end) {
            g->finished = true;
            continue;
        }
        switch (g->kind) {
        case GEN_MAP:
            if (g->has_attr)
                return attr_get(c, item, g->attr, g->has_dflt ? &g->dflt : NULL, false, out);
            return pllm_jinja_call_filter(c, g->fn_id, item, &g->rest, out);
        case GEN_UNIQUE: {
            pllm_jv key;
            PLLM_TRY(attr_get(c, item, g->attr, NULL, !g->case_sensitive, &key));
            PLLM_TRY(pllm_jv_check_hashable(c, key));
            PLLM_TRY(pllm_jinja_charge(c, g->n_seen));
            bool seen = false;
            for (size_t k = 0; k < g->n_seen && !seen; k++)
                PLLM_TRY(pllm_jv_eq(c, g->seen[k], key, &seen));
            if (seen) continue;
            PLLM_TRY(pllm_jb_list_push(c, &g->seen, &g->n_seen, &g->cap_seen, key));
            *out = item;
            return PLLM_OK;
        }
        default: {
            pllm_jv probe = item;
            if (g->has_attr) PLLM_TRY(attr_get(c, item, g->attr, NULL, false, &probe));
            bool r;
            if (g->fn_id < 0)
                r = pllm_jv_truthy(probe);
            else
                PLLM_TRY(pllm_jinja_call_test(c, g->fn_id, probe, &g->rest, &r));
            bool keep = (g->kind == GEN_SELECT || g->kind == GEN_SELECTATTR) ? r : !r;
            if (!keep) continue;
            *out = item;
            return PLLM_OK;
        }
        }
    }
}

/* ---------------------------------------------------------------- sorting */

typedef struct sort_item {
    pllm_jv key, val;
} sort_item;

/* Stable merge sort with Python's `<` (errors propagate). */
static pllm_status merge_sort(pllm_jctx *c, sort_item *v, sort_item *tmp, size_t n, bool reverse)
{
    if (n < 2) return PLLM_OK;
    size_t mid = n / 2;
    PLLM_TRY(merge_sort(c, v, tmp, mid, reverse));
    PLLM_TRY(merge_sort(c, v + mid, tmp, n - mid, reverse));
    size_t i = 0, j = mid, k = 0;
    PLLM_TRY(pllm_jinja_charge(c, n));
    while (i < mid && j < n) {
        bool take_right;
        /* right goes first only when strictly before left */
        if (reverse)
            PLLM_TRY(pllm_jv_lt(c, v[i].key, v[j].key, &take_right));
        else
            PLLM_TRY(pllm_jv_lt(c, v[j].key, v[i].key, &take_right));
        tmp[k++] = take_right ? v[j++] : v[i++];
    }
    while (i < mid) tmp[k++] = v[i++];
    while (j < n) tmp[k++] = v[j++];
    memcpy(v, tmp, n * sizeof *v);
    return PLLM_OK;
}

static pllm_status sort_values(pllm_jctx *c, sort_item *items, size_t n, bool reverse)
{
    sort_item *tmp = pllm_jb_alloc(c, (n ? n : 1) * sizeof *tmp);
    if (!tmp) return PLLM_ERR_NOMEM;
    return merge_sort(c, items, tmp, n, reverse);
}

static pllm_status filter_int(pllm_jctx *c, pllm_jv in, const pllm_jargs *a, pllm_jv *out)
{
    static const char *const params[] = {"default", "base"};
    pllm_jv vals[2];
    bool given[2];
    PLLM_TRY(pllm_jb_bind(c, "int()", a, params, 2, 0, vals, given));
    pllm_jv dflt = given[0] ? vals[0] : pllm_jv_int(0);
    switch (in.t) {
    case PLLM_JV_UNDEF:
        return pllm_jv_undef_fail(c, in);
    case PLLM_JV_BOOL:
    case PLLM_JV_INT:
        *out = pllm_jv_int(as_int(in));
        return PLLM_OK;
    case PLLM_JV_FLOAT:
        if (isinf(in.f))
            return pllm_jerr(c, PLLM_ERR_INVALID,
                             "OverflowError: cannot convert float infinity to integer");
        if (isnan(in.f)) {
            *out = dflt;
            return PLLM_OK;
        }
        return pllm_jb_float_to_int(c, in.f, out);
    case PLLM_JV_STR: {
        const char *txt;
        size_t tn;
        bool valid;
        PLLM_TRY(pllm_jb_number_text(c, in.s, &txt, &tn, &valid));
        if (!valid) {
            *out = dflt;
            return PLLM_OK;
        }
        int64_t base = 10;
        if (given[1]) {
            if (!is_int_like(vals[1]))
                return TYPE_ERROR(c, "'%s' object cannot be interpreted as an integer",
                                  pllm_jv_type_name(vals[1]));
            base = as_int(vals[1]);
        }
        int64_t iv = 0;
        bool ok, overflow;
        pllm_jb_parse_int(txt, tn, base, &iv, &ok, &overflow);
        if (ok && overflow) return OVERFLOW(c);
        if (ok) {
            *out = pllm_jv_int(iv);
            return PLLM_OK;
        }
        double f;
        pllm_jb_parse_float(txt, tn, &f, &ok);
        if (!ok || isinf(f) || isnan(f)) {
            *out = dflt;
            return PLLM_OK;
        }
        return pllm_jb_float_to_int(c, f, out);
    }
    default:
        *out = dflt;
        return PLLM_OK;
    }
}

static pllm_status filter_float(pllm_jctx *c, pllm_jv in, const pllm_jargs *a, pllm_jv *out)
{
    static const char *const params[] = {"default"};
    pllm_jv vals[1];
    bool given[1];
    PLLM_TRY(pllm_jb_bind(c, "float()", a, params, 1, 0, vals, given));
    pllm_jv dflt = given[0] ? vals[0] : pllm_jv_float(0.0);
    switch (in.t) {
    case PLLM_JV_UNDEF:
        return pllm_jv_undef_fail(c, in);
    case PLLM_JV_BOOL:
    case PLLM_JV_INT:
        *out = pllm_jv_float((double)as_int(in));
        return PLLM_OK;
    case PLLM_JV_FLOAT:
        *out = in;
        return PLLM_OK;
    case PLLM_JV_STR: {
        const char *txt;
        size_t tn;
        bool ok;
        PLLM_TRY(pllm_jb_number_text(c, in.s, &txt, &tn, &ok));
        double f = 0;
        if (ok) pllm_jb_parse_float(txt, tn, &f, &ok);
        *out = ok ? pllm_jv_float(f) : dflt;
        return PLLM_OK;
    }
    default:
        *out = dflt;
        return PLLM_OK;
    }
}

static pllm_status filter_round(pllm_jctx *c, pllm_jv in, const pllm_jargs *a, pllm_jv *out)
{
    static const char *const params[] = {"precision", "method"};
    pllm_jv vals[2];
    bool given[2];
    PLLM_TRY(pllm_jb_bind(c, "round()", a, params, 2, 0, vals, given));
    int64_t prec = 0;
    if (given[0]) {
        if (!is_int_like(vals[0]))
            return TYPE_ERROR(c, "'%s' object cannot be interpreted as an integer",
                              pllm_jv_type_name(vals[0]));
        prec = as_int(vals[0]);
    }
    const char *method = "common";
    if (given[1]) {
        if (vals[1].t != PLLM_JV_STR)
            return pllm_jerr(c, PLLM_ERR_INVALID,
                             "FilterArgumentError: method must be common, ceil or floor");
        method = vals[1].s->s;
    }
    bool common = !strcmp(method, "common"), ceil_m = !strcmp(method, "ceil"),
         floor_m = !strcmp(method, "floor");
    if (!common && !ceil_m && !floor_m)
        return pllm_jerr(c, PLLM_ERR_INVALID,
                         "FilterArgumentError: method must be common, ceil or floor");
    if (in.t == PLLM_JV_UNDEF) return pllm_jv_undef_fail(c, in);
    if (!is_num(in))
        return TYPE_ERROR(c, "type %s doesn't define __round__ method", pllm_jv_type_name(in));
    if (prec < 0)
        return pllm_jerr(c, PLLM_ERR_UNSUPPORTED,
                         "round with a negative precision is not supported");
    if (common) {
        if (is_int_like(in)) {
            *out = pllm_jv_int(as_int(in));
            return PLLM_OK;
        }
        double x = in.f;
        if (prec == 0 || !isfinite(x)) {
            *out = pllm_jv_float(prec == 0 ? nearbyint(x) : x);
            return PLLM_OK;
        }
        if (prec > 330) {
            *out = pllm_jv_float(x);
            return PLLM_OK;
        }
        char buf[512];
        snprintf(buf, sizeof buf, "%.*f", (int)prec, x);
        *out = pllm_jv_float(strtod(buf, NULL));
        return PLLM_OK;
    }
    /* math.ceil/floor(value * 10**p) / 10**p: with 10**p exact in a double (p <= 22) and the
     * floor an integral double, IEEE division gives Python's correctly rounded int / int */
    if (prec > 22)
        return pllm_jerr(c, PLLM_ERR_UNSUPPORTED, "round precision above 22 is not supported");
    if (is_int_like(in) && llabs(as_int(in)) > (1LL << 53))
        return pllm_jerr(c, PLLM_ERR_UNSUPPORTED,
                         "round(ceil/floor) of integers above 2**53 is not supported");
    double m = 1;
    for (int64_t k = 0; k < prec; k++) m *= 10;
    double r = (ceil_m ? ceil : floor)(as_float(in) * m);
    if (isnan(r))
        return pllm_jerr(c, PLLM_ERR_INVALID, "ValueError: cannot convert float NaN to integer");
    if (!isfinite(r))
        return pllm_jerr(c, PLLM_ERR_INVALID,
                         "OverflowError: cannot convert float infinity to integer");
    *out = pllm_jv_float(r / m);
    return PLLM_OK;
}

/* ---------------------------------------------------------------- filters */

static pllm_status filter_len(pllm_jctx *c, pllm_jv in, int64_t *n)
{
    switch (in.t) {
    case PLLM_JV_UNDEF:
        *n = 0;
        return PLLM_OK;
    case PLLM_JV_STR:
        *n = (int64_t)in.s->nchars;
        return PLLM_OK;
    case PLLM_JV_LIST:
        *n = (int64_t)in.l->n;
        return PLLM_OK;
    case PLLM_JV_DICT:
        *n = (int64_t)in.d->n;
        return PLLM_OK;
    case PLLM_JV_LOOP:
        *n = (int64_t)in.loop->n;
        return PLLM_OK;
    default:
        return TYPE_ERROR(c, "object of type '%s' has no len()", pllm_jv_type_name(in));
    }
}

static pllm_status filter_join(pllm_jctx *c, pllm_jv in, const pllm_jargs *a, pllm_jv *out)
{
    static const char *const params[] = {"d", "attribute"};
    pllm_jv vals[2];
    bool given[2];
    PLLM_TRY(pllm_jb_bind(c, "join()", a, params, 2, 0, vals, given));
    pllm_jsb sep = {0}, b = {0};
    if (given[0]) PLLM_TRY(pllm_jv_write_str(c, &sep, vals[0]));
    pllm_jiter it;
    PLLM_TRY(pllm_jiter_init(c, in, &it));
    for (size_t i = 0;; i++) {
        pllm_jv x;
        bool done;
        PLLM_TRY(pllm_jiter_next(c, &it, &x, &done));
        if (done) break;
        if (given[1] && vals[1].t != PLLM_JV_NONE)
            PLLM_TRY(attr_get(c, x, vals[1], NULL, false, &x));
        if (i) PLLM_TRY(pllm_jsb_append(c, &b, sep.s, sep.n));
        PLLM_TRY(pllm_jv_write_str(c, &b, x));
    }
    return pllm_jv_str_sb(c, &b, out);
}

static pllm_status filter_tojson(pllm_jctx *c, pllm_jv in, const pllm_jargs *a, pllm_jv *out)
{
    static const char *const params[] = {"ensure_ascii", "indent", "separators", "sort_keys"};
    pllm_jv vals[4];
    bool given[4];
    PLLM_TRY(pllm_jb_bind(c, "tojson()", a, params, 4, 0, vals, given));
    pllm_jjson_opts o = {.indent = -1, .item_sep = ", ", .key_sep = ": "};
    o.ensure_ascii = given[0] && pllm_jv_truthy(vals[0]);
    o.sort_keys = given[3] && pllm_jv_truthy(vals[3]);
    if (given[1] && vals[1].t != PLLM_JV_NONE) {
        if (vals[1].t == PLLM_JV_STR) {
            o.indent_s = vals[1].s->s;
        } else if (is_int_like(vals[1])) {
            int64_t w = as_int(vals[1]);
            if (w > 1000) return pllm_jerr(c, PLLM_ERR_UNSUPPORTED, "tojson indent too large");
            o.indent = w < 0 ? 0 : (int)w;
        } else {
            return TYPE_ERROR(c, "can't multiply sequence by non-int of type '%s'",
                              pllm_jv_type_name(vals[1]));
        }
        o.item_sep = ",";
    }
    if (given[2] && vals[2].t != PLLM_JV_NONE) {
        pllm_jv s = vals[2];
        if (s.t != PLLM_JV_LIST || (s.l->kind != PLLM_JL_LIST && s.l->kind != PLLM_JL_TUPLE) ||
            s.l->n != 2 || s.l->v[0].t != PLLM_JV_STR || s.l->v[1].t != PLLM_JV_STR)
            return pllm_jerr(c, PLLM_ERR_UNSUPPORTED,
                             "tojson separators must be a pair of strings");
        o.item_sep = s.l->v[0].s->s;
        o.key_sep = s.l->v[1].s->s;
    }
    pllm_jsb b = {0};
    PLLM_TRY(pllm_jv_write_json(c, &b, in, &o));
    return pllm_jv_str_sb(c, &b, out);
}

static pllm_status filter_indent(pllm_jctx *c, pllm_jv in, const pllm_jargs *a, pllm_jv *out)
{
    static const char *const params[] = {"width", "first", "blank"};
    pllm_jv vals[3];
    bool given[3];
    PLLM_TRY(pllm_jb_bind(c, "indent()", a, params, 3, 0, vals, given));
    pllm_jsb ind = {0};
    if (given[0] && vals[0].t == PLLM_JV_STR) {
        PLLM_TRY(pllm_jsb_append(c, &ind, vals[0].s->s, vals[0].s->len));
    } else {
        int64_t w = 4;
        if (given[0]) {
            if (!is_int_like(vals[0]))
                return TYPE_ERROR(c, "can't multiply sequence by non-int of type '%s'",
                                  pllm_jv_type_name(vals[0]));
            w = as_int(vals[0]);
        }
        if (w > 10000) return pllm_jerr(c, PLLM_ERR_UNSUPPORTED, "indent width too large");
        for (int64_t k = 0; k < w; k++) PLLM_TRY(pllm_jsb_append(c, &ind, " ", 1));
    }
    bool first = given[1] && pllm_jv_truthy(vals[1]), blank = given[2] && pllm_jv_truthy(vals[2]);
    /* do_indent starts with `s += "\n"`: only strings work */
    if (in.t == PLLM_JV_UNDEF) return pllm_jv_undef_fail(c, in);
    if (in.t != PLLM_JV_STR)
        return TYPE_ERROR(c, "indent needs a string, not %s", pllm_jv_type_name(in));
    pllm_jv s = in;
    pllm_jsb tmp = {0};
    PLLM_TRY(pllm_jsb_append(c, &tmp, s.s->s, s.s->len));
    PLLM_TRY(pllm_jsb_append(c, &tmp, "\n", 1));
    pllm_jv withnl, lines;
    PLLM_TRY(pllm_jv_str_sb(c, &tmp, &withnl));
    PLLM_TRY(pllm_jb_splitlines(c, withnl.s, false, &lines));
    pllm_jsb b = {0};
    if (first) PLLM_TRY(pllm_jsb_append(c, &b, ind.s, ind.n));
    for (size_t i = 0; i < lines.l->n; i++) {
        const pllm_jstr *line = lines.l->v[i].s;
        if (i) PLLM_TRY(pllm_jsb_append(c, &b, "\n", 1));
        if (i && (blank || line->len)) PLLM_TRY(pllm_jsb_append(c, &b, ind.s, ind.n));
        PLLM_TRY(pllm_jsb_append(c, &b, line->s, line->len));
    }
    PLLM_TRY(pllm_jv_str_sb(c, &b, out));
    return pllm_jb_mark(c, out, s.s->markup);
}

static pllm_status filter_minmax(pllm_jctx *c, pllm_jv in, const pllm_jargs *a, bool is_max,
                                 pllm_jv *out)
{
    static const char *const params[] = {"case_sensitive", "attribute"};
    pllm_jv vals[2];
    bool given[2];
    PLLM_TRY(pllm_jb_bind(c, is_max ? "max()" : "min()", a, params, 2, 0, vals, given));
    bool lower = !(given[0] && pllm_jv_truthy(vals[0]));
    pllm_jv attr = given[1] ? vals[1] : pllm_jv_none();
    pllm_jiter it;
    PLLM_TRY(pllm_jiter_init(c, in, &it));
    pllm_jv best, best_key;
    bool have = false;
    for (;;) {
        pllm_jv x, k;
        bool done;
        PLLM_TRY(pllm_jiter_next(c, &it, &x, &done));
        if (done) break;
        PLLM_TRY(attr_get(c, x, attr, NULL, lower, &k));
        if (!have) {
            best = x;
            best_key = k;
            have = true;
            continue;
        }
        bool better;
        PLLM_TRY(pllm_jinja_compare(c, is_max ? PLLM_JOP_GT : PLLM_JOP_LT, k, best_key, &better));
        if (better) {
            best = x;
            best_key = k;
        }
    }
    if (!have) return pllm_jv_undef_hint(c, "No aggregated item, sequence was empty.", out);
    *out = best;
    return PLLM_OK;
}

static pllm_status filter_sort(pllm_jctx *c, pllm_jv in, const pllm_jargs *a, pllm_jv *out)
{
    static const char *const params[] = {"reverse", "case_sensitive", "attribute"};
    pllm_jv vals[3];
    bool given[3];
    PLLM_TRY(pllm_jb_bind(c, "sort()", a, params, 3, 0, vals, given));
    bool reverse = given[0] && pllm_jv_truthy(vals[0]);
    bool lower = !(given[1] && pllm_jv_truthy(vals[1]));
    pllm_jv attr = given[2] ? vals[2] : pllm_jv_none();
    pllm_jv *items;
    size_t n;
    PLLM_TRY(pllm_jv_collect(c, in, &items, &n));
    sort_item *si = pllm_jb_alloc(c, (n ? n : 1) * sizeof *si);
    if (!si) return PLLM_ERR_NOMEM;
    for (size_t i = 0; i < n; i++) {
        si[i].val = items[i];
        PLLM_TRY(multi_attr_get(c, items[i], attr, lower, &si[i].key));
    }
    PLLM_TRY(sort_values(c, si, n, reverse));
    PLLM_TRY(pllm_jv_list(c, n, PLLM_JL_LIST, out));
    for (size_t i = 0; i < n; i++) out->l->v[i] = si[i].val;
    return PLLM_OK;
}

static pllm_status filter_dictsort(pllm_jctx *c, pllm_jv in, const pllm_jargs *a, pllm_jv *out)
{
    static const char *const params[] = {"case_sensitive", "by", "reverse"};
    pllm_jv vals[3];
    bool given[3];
    PLLM_TRY(pllm_jb_bind(c, "dictsort()", a, params, 3, 0, vals, given));
    bool lower = !(given[0] && pllm_jv_truthy(vals[0]));
    int pos = 0;
    if (given[1]) {
        if (vals[1].t == PLLM_JV_STR && !strcmp(vals[1].s->s, "value"))
            pos = 1;
        else if (!(vals[1].t == PLLM_JV_STR && !strcmp(vals[1].s->s, "key")))
            return pllm_jerr(
                c, PLLM_ERR_INVALID,
                "FilterArgumentError: You can only sort by either \"key\" or \"value\"");
    }
    bool reverse = given[2] && pllm_jv_truthy(vals[2]);
    if (in.t == PLLM_JV_UNDEF) return pllm_jv_undef_fail(c, in);
    if (in.t != PLLM_JV_DICT)
        return pllm_jerr(c, PLLM_ERR_INVALID,
                         "AttributeError: '%s' object has no attribute 'items'",
                         pllm_jv_type_name(in));
    size_t n = in.d->n;
    sort_item *si = pllm_jb_alloc(c, (n ? n : 1) * sizeof *si);
    if (!si) return PLLM_ERR_NOMEM;
    for (size_t i = 0; i < n; i++) {
        PLLM_TRY(pllm_jv_list(c, 2, PLLM_JL_TUPLE, &si[i].val));
        si[i].val.l->v[0] = in.d->keys[i];
        si[i].val.l->v[1] = in.d->vals[i];
        pllm_jv k = pos ? in.d->vals[i] : in.d->keys[i];
        if (lower && k.t == PLLM_JV_STR) PLLM_TRY(pllm_jb_change_case(c, k, CASE_LOWER, &k));
        si[i].key = k;
    }
    PLLM_TRY(sort_values(c, si, n, reverse));
    PLLM_TRY(pllm_jv_list(c, n, PLLM_JL_LIST, out));
    for (size_t i = 0; i < n; i++) out->l->v[i] = si[i].val;
    return PLLM_OK;
}

static pllm_status filter_sum(pllm_jctx *c, pllm_jv in, const pllm_jargs *a, pllm_jv *out)
{
    static const char *const params[] = {"attribute", "start"};
    pllm_jv vals[2];
    bool given[2];
    PLLM_TRY(pllm_jb_bind(c, "sum()", a, params, 2, 0, vals, given));
    pllm_jv acc = given[1] ? vals[1] : pllm_jv_int(0);
    if (acc.t == PLLM_JV_STR)
        return TYPE_ERROR(c, "sum() can't sum strings [use ''.join(seq) instead]");
    pllm_jiter it;
    PLLM_TRY(pllm_jiter_init(c, in, &it));
    for (;;) {
        pllm_jv x;
        bool done;
        PLLM_TRY(pllm_jiter_next(c, &it, &x, &done));
        if (done) break;
        if (given[0] && vals[0].t != PLLM_JV_NONE)
            PLLM_TRY(attr_get(c, x, vals[0], NULL, false, &x));
        PLLM_TRY(pllm_jinja_binop(c, PLLM_JOP_ADD, acc, x, &acc));
    }
    *out = acc;
    return PLLM_OK;
}

static pllm_status filter_last(pllm_jctx *c, pllm_jv in, pllm_jv *out)
{
    switch (in.t) {
    case PLLM_JV_STR:
        if (in.s->nchars) {
            PLLM_TRY(pllm_jb_substr(c, in.s, in.s->nchars - 1, in.s->nchars, out));
            return pllm_jb_mark(c, out, in.s->markup);
        }
        break;
    case PLLM_JV_LIST:
        if (in.l->n) {
            *out = in.l->v[in.l->n - 1];
            return PLLM_OK;
        }
        break;
    case PLLM_JV_DICT:
        if (in.d->n) {
            *out = in.d->keys[in.d->n - 1];
            return PLLM_OK;
        }
        break;
    case PLLM_JV_UNDEF:
        break;
    default:
        return TYPE_ERROR(c, "'%s' object is not reversible", pllm_jv_type_name(in));
    }
    return pllm_jv_undef_hint(c, "No last item, sequence was empty.", out);
}

static pllm_status filter_reverse(pllm_jctx *c, pllm_jv in, pllm_jv *out)
{
    if (in.t == PLLM_JV_STR) {
        pllm_jv parts[1] = {pllm_jv_int(-1)};
        return pllm_jinja_slice(c, in, NULL, NULL, &parts[0], out);
    }
    if (in.t == PLLM_JV_GEN) {
        pllm_jv *items;
        size_t n;
        PLLM_TRY(pllm_jv_collect(c, in, &items, &n));
        PLLM_TRY(pllm_jv_list(c, n, PLLM_JL_LIST, out));
        for (size_t i = 0; i < n; i++) out->l->v[i] = items[n - 1 - i];
        return PLLM_OK;
    }
    if (in.t != PLLM_JV_LIST && in.t != PLLM_JV_DICT && in.t != PLLM_JV_UNDEF)
        return pllm_jerr(c, PLLM_ERR_INVALID, "FilterArgumentError: argument must be iterable");
    PLLM_TRY(new_gen(c, GEN_REVERSE, in, NULL, out));
    pllm_jgen *g = out->gen;
    if (in.t == PLLM_JV_LIST) {
        g->items = in.l->v;
        g->n_items = in.l->n;
    } else if (in.t == PLLM_JV_DICT) {
        g->items = in.d->keys;
        g->n_items = in.d->n;
    }
    return PLLM_OK;
}

pllm_status pllm_jinja_call_filter(pllm_jctx *c, int id, pllm_jv in, const pllm_jargs *a,
                                   pllm_jv *out)
{
    switch (id) {
    case F_ABS:
        PLLM_TRY(pllm_jb_no_args(c, "abs()", a));
        if (in.t == PLLM_JV_UNDEF) return pllm_jv_undef_fail(c, in);
        if (in.t == PLLM_JV_FLOAT) {
            *out = pllm_jv_float(fabs(in.f));
            return PLLM_OK;
        }
        if (is_int_like(in)) {
            int64_t v = as_int(in);
            if (v == INT64_MIN) return OVERFLOW(c);
            *out = pllm_jv_int(v < 0 ? -v : v);
            return PLLM_OK;
        }
        return TYPE_ERROR(c, "bad operand type for abs(): '%s'", pllm_jv_type_name(in));
    case F_ATTR: {
        static const char *const params[] = {"name"};
        pllm_jv vals[1];
        bool given[1];
        PLLM_TRY(pllm_jb_bind(c, "attr()", a, params, 1, 1, vals, given));
        if (in.t == PLLM_JV_UNDEF) return pllm_jv_undef_fail(c, in);
        if (vals[0].t != PLLM_JV_STR) return TYPE_ERROR(c, "attribute name must be string");
        bool found;
        PLLM_TRY(pllm_jb_py_getattr(c, in, vals[0].s->s, &found, out));
        if (found) return PLLM_OK;
        return pllm_jv_undef_attr(c, in, vals[0], out);
    }
    case F_CAPITALIZE:
    case F_LOWER:
    case F_UPPER:
    case F_TITLE: {
        PLLM_TRY(pllm_jb_no_args(c, "filter", a));
        pllm_jv s;
        PLLM_TRY(pllm_jb_soft_str(c, in, &s));
        int mode = id == F_CAPITALIZE ? CASE_CAPITALIZE
                   : id == F_LOWER    ? CASE_LOWER
                   : id == F_UPPER    ? CASE_UPPER
                                      : CASE_TITLE_FILTER;
        return pllm_jb_change_case(c, s, mode, out);
    }
    case F_DEFAULT: {
        static const char *const params[] = {"default_value", "boolean"};
        pllm_jv vals[2];
        bool given[2];
        PLLM_TRY(pllm_jb_bind(c, "default()", a, params, 2, 0, vals, given));
        bool boolean = given[1] && pllm_jv_truthy(vals[1]);
        if (in.t == PLLM_JV_UNDEF || (boolean && !pllm_jv_truthy(in))) {
            if (given[0])
                *out = vals[0];
            else
                PLLM_TRY(pllm_jv_strc(c, "", out));
            return PLLM_OK;
        }
        *out = in;
        return PLLM_OK;
    }
    case F_DICTSORT:
        return filter_dictsort(c, in, a, out);
    case F_ESCAPE:
        PLLM_TRY(pllm_jb_no_args(c, "escape()", a));
        if (in.t == PLLM_JV_STR && in.s->markup) {
            *out = in;
            return PLLM_OK;
        }
        {
            pllm_jv s;
            PLLM_TRY(pllm_jv_to_str(c, in, &s));
            return pllm_jb_html_escape(c, s.s, out);
        }
    case F_FIRST: {
        PLLM_TRY(pllm_jb_no_args(c, "first()", a));
        pllm_jiter it;
        PLLM_TRY(pllm_jiter_init(c, in, &it));
        bool done;
        PLLM_TRY(pllm_jiter_next(c, &it, out, &done));
        if (done) return pllm_jv_undef_hint(c, "No first item, sequence was empty.", out);
        return PLLM_OK;
    }
    case F_FLOAT:
        return filter_float(c, in, a, out);
    case F_FORMAT: {
        /* pllm_jb_soft_str(value) % (kwargs or args) */
        if (a->n_pos && a->n_kw)
            return pllm_jerr(c, PLLM_ERR_INVALID,
                             "FilterArgumentError: can't handle positional and keyword arguments "
                             "at the same time");
        pllm_jv fmt, args;
        PLLM_TRY(pllm_jb_soft_str(c, in, &fmt));
        if (a->n_kw) {
            PLLM_TRY(pllm_jv_dict(c, &args));
            for (size_t k = 0; k < a->n_kw; k++) {
                pllm_jv key;
                PLLM_TRY(pllm_jv_strc(c, a->kw_names[k], &key));
                PLLM_TRY(pllm_jdict_set(c, args.d, key, a->kw[k]));
            }
        } else {
            PLLM_TRY(pllm_jb_make_list(c, (pllm_jv *)a->pos, a->n_pos, PLLM_JL_TUPLE, &args));
        }
        return pllm_jb_str_format(c, fmt, args, out);
    }
    case F_INDENT:
        return filter_indent(c, in, a, out);
    case F_INT:
        return filter_int(c, in, a, out);
    case F_ITEMS:
        PLLM_TRY(pllm_jb_no_args(c, "items()", a));
        return new_gen(c, GEN_ITEMS, in, NULL, out);
    case F_JOIN:
        return filter_join(c, in, a, out);
    case F_LAST:
        PLLM_TRY(pllm_jb_no_args(c, "last()", a));
        return filter_last(c, in, out);
    case F_LENGTH: {
        PLLM_TRY(pllm_jb_no_args(c, "length()", a));
        int64_t n = 0;
        PLLM_TRY(filter_len(c, in, &n));
        *out = pllm_jv_int(n);
        return PLLM_OK;
    }
    case F_LIST: {
        PLLM_TRY(pllm_jb_no_args(c, "list()", a));
        pllm_jv *items;
        size_t n;
        PLLM_TRY(pllm_jv_collect(c, in, &items, &n));
        return pllm_jb_make_list(c, items, n, PLLM_JL_LIST, out);
    }
    case F_MAP:
        return new_gen(c, GEN_MAP, in, a, out);
    case F_SELECT:
        return new_gen(c, GEN_SELECT, in, a, out);
    case F_REJECT:
        return new_gen(c, GEN_REJECT, in, a, out);
    case F_SELECTATTR:
        return new_gen(c, GEN_SELECTATTR, in, a, out);
    case F_REJECTATTR:
        return new_gen(c, GEN_REJECTATTR, in, a, out);
    case F_UNIQUE:
        return new_gen(c, GEN_UNIQUE, in, a, out);
    case F_BATCH:
        return new_gen(c, GEN_BATCH, in, a, out);
    case F_MAX:
    case F_MIN:
        return filter_minmax(c, in, a, id == F_MAX, out);
    case F_REPLACE: {
        static const char *const params[] = {"old", "new", "count"};
        pllm_jv vals[3];
        bool given[3];
        PLLM_TRY(pllm_jb_bind(c, "replace()", a, params, 3, 2, vals, given));
        int64_t count = -1;
        if (given[2] && vals[2].t != PLLM_JV_NONE) {
            if (!is_int_like(vals[2]))
                return TYPE_ERROR(c, "'%s' object cannot be interpreted as an integer",
                                  pllm_jv_type_name(vals[2]));
            count = as_int(vals[2]);
        }
        pllm_jv s, o, r;
        PLLM_TRY(pllm_jv_to_str(c, in, &s));
        PLLM_TRY(pllm_jv_to_str(c, vals[0], &o));
        PLLM_TRY(pllm_jv_to_str(c, vals[1], &r));
        return pllm_jb_replace(c, s.s, o.s, r.s, count, out);
    }
    case F_REVERSE:
        PLLM_TRY(pllm_jb_no_args(c, "reverse()", a));
        return filter_reverse(c, in, out);
    case F_ROUND:
        return filter_round(c, in, a, out);
    case F_SAFE:
        PLLM_TRY(pllm_jb_no_args(c, "safe()", a));
        PLLM_TRY(pllm_jv_to_str(c, in, out));
        return pllm_jb_mark(c, out, true);
    case F_SORT:
        return filter_sort(c, in, a, out);
    case F_STRING:
        PLLM_TRY(pllm_jb_no_args(c, "string()", a));
        return pllm_jb_soft_str(c, in, out);
    case F_SUM:
        return filter_sum(c, in, a, out);
    case F_TOJSON:
        return filter_tojson(c, in, a, out);
    case F_TRIM: {
        static const char *const params[] = {"chars"};
        pllm_jv vals[1];
        bool given[1];
        PLLM_TRY(pllm_jb_bind(c, "trim()", a, params, 1, 0, vals, given));
        const pllm_jstr *chars = NULL;
        if (given[0] && vals[0].t != PLLM_JV_NONE) {
            if (vals[0].t != PLLM_JV_STR) return TYPE_ERROR(c, "strip arg must be None or str");
            chars = vals[0].s;
        }
        pllm_jv s;
        PLLM_TRY(pllm_jb_soft_str(c, in, &s));
        return pllm_jb_strip(c, s, chars, 3, out);
    }
    default:
        return pllm_jerr(c, PLLM_ERR_INTERNAL, "unknown filter id %d", id);
    }
}

/* ---------------------------------------------------------------- tests */

pllm_status pllm_jinja_call_test(pllm_jctx *c, int id, pllm_jv in, const pllm_jargs *a, bool *out)
{
    static const char *const one[] = {"value"};
    pllm_jv vals[1];
    bool given[1];
    /* tests taking one argument besides the value */
    bool takes_arg = id == T_DIVISIBLEBY || id == T_SAMEAS || id == T_IN || id == T_EQ ||
                     id == T_NE || id == T_GT || id == T_GE || id == T_LT || id == T_LE;
    if (takes_arg)
        PLLM_TRY(pllm_jb_bind(c, "test", a, one, 1, 1, vals, given));
    else
        PLLM_TRY(pllm_jb_no_args(c, "test", a));
    switch (id) {
    case T_ODD:
    case T_EVEN:
    case T_DIVISIBLEBY: {
        pllm_jv m;
        PLLM_TRY(pllm_jinja_binop(c, PLLM_JOP_MOD, in,
                                  id == T_DIVISIBLEBY ? vals[0] : pllm_jv_int(2), &m));
        return pllm_jv_eq(c, m, pllm_jv_int(id == T_ODD ? 1 : 0), out);
    }
    case T_DEFINED:
        *out = in.t != PLLM_JV_UNDEF;
        return PLLM_OK;
    case T_UNDEFINED:
        *out = in.t == PLLM_JV_UNDEF;
        return PLLM_OK;
    case T_NONE:
        *out = in.t == PLLM_JV_NONE;
        return PLLM_OK;
    case T_BOOLEAN:
        *out = in.t == PLLM_JV_BOOL;
        return PLLM_OK;
    case T_FALSE:
        *out = in.t == PLLM_JV_BOOL && !in.b;
        return PLLM_OK;
    case T_TRUE:
        *out = in.t == PLLM_JV_BOOL && in.b;
        return PLLM_OK;
    case T_INTEGER:
        *out = in.t == PLLM_JV_INT;
        return PLLM_OK;
    case T_FLOAT:
        *out = in.t == PLLM_JV_FLOAT;
        return PLLM_OK;
    case T_NUMBER:
        *out = is_num(in);
        return PLLM_OK;
    case T_STRING:
        *out = in.t == PLLM_JV_STR;
        return PLLM_OK;
    case T_MAPPING:
        *out = in.t == PLLM_JV_DICT;
        return PLLM_OK;
    case T_ESCAPED:
        *out = in.t == PLLM_JV_STR && in.s->markup;
        return PLLM_OK;
    case T_LOWER:
    case T_UPPER: {
        pllm_jv s;
        PLLM_TRY(pllm_jv_to_str(c, in, &s));
        return pllm_jb_str_predicate(c, s.s, id == T_LOWER ? M_ISLOWER : M_ISUPPER, out);
    }
    case T_SEQUENCE:
        *out =
            in.t == PLLM_JV_STR || in.t == PLLM_JV_DICT || in.t == PLLM_JV_UNDEF ||
            (in.t == PLLM_JV_LIST && (in.l->kind == PLLM_JL_LIST || in.l->kind == PLLM_JL_TUPLE ||
                                      in.l->kind == PLLM_JL_RANGE));
        return PLLM_OK;
    case T_ITERABLE:
        *out = in.t == PLLM_JV_STR || in.t == PLLM_JV_DICT || in.t == PLLM_JV_UNDEF ||
               in.t == PLLM_JV_LIST || in.t == PLLM_JV_GEN || in.t == PLLM_JV_LOOP;
        return PLLM_OK;
    case T_CALLABLE:
        *out = in.t == PLLM_JV_MACRO || in.t == PLLM_JV_FUNC || in.t == PLLM_JV_UNDEF ||
               in.t == PLLM_JV_LOOP;
        return PLLM_OK;
    case T_SAMEAS:
        if (vals[0].t == PLLM_JV_NONE) {
            *out = in.t == PLLM_JV_NONE;
            return PLLM_OK;
        }
        if (vals[0].t == PLLM_JV_BOOL) {
            *out = in.t == PLLM_JV_BOOL && in.b == vals[0].b;
            return PLLM_OK;
        }
        return pllm_jerr(c, PLLM_ERR_UNSUPPORTED,
                         "'sameas' is only supported against none, true and false");
    case T_IN:
        return pllm_jv_contains(c, vals[0], in, out);
    case T_EQ:
        return pllm_jinja_compare(c, PLLM_JOP_EQ, in, vals[0], out);
    case T_NE:
        return pllm_jinja_compare(c, PLLM_JOP_NE, in, vals[0], out);
    case T_GT:
        return pllm_jinja_compare(c, PLLM_JOP_GT, in, vals[0], out);
    case T_GE:
        return pllm_jinja_compare(c, PLLM_JOP_GE, in, vals[0], out);
    case T_LT:
        return pllm_jinja_compare(c, PLLM_JOP_LT, in, vals[0], out);
    case T_LE:
        return pllm_jinja_compare(c, PLLM_JOP_LE, in, vals[0], out);
    default:
        return pllm_jerr(c, PLLM_ERR_INTERNAL, "unknown test id %d", id);
    }
}
