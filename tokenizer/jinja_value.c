/*
 * jinja_value.c: the render arena, strings, lists, dicts, scopes and the Python semantics of
 * values: truthiness, str()/repr(), json.dumps, ==, ordering, `in`, iteration.
 */
#include "tokenizer/jinja.h"

#include "tokenizer/jinja_unicode.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- arena */

struct pllm_jarena_chunk {
    pllm_jarena_chunk *next;
    size_t cap, used;
    _Alignas(16) unsigned char data[];
};

#define JARENA_CHUNK (64 * 1024)

void *pllm_jarena_alloc(pllm_jarena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (n == 0) n = 16;
    pllm_jarena_chunk *h = a->head;
    if (h && h->cap - h->used >= n) {
        void *p = h->data + h->used;
        h->used += n;
        return p;
    }
    size_t cap = n > JARENA_CHUNK / 4 ? n : JARENA_CHUNK;
    size_t total = sizeof(pllm_jarena_chunk) + cap;
    if (a->limit && (a->used + total > a->limit || total < cap)) {
        pllm_errorf(PLLM_ERR_NOMEM, "chat template: memory budget of %zu bytes exhausted",
                    a->limit);
        return NULL;
    }
    pllm_jarena_chunk *ch = malloc(total);
    if (!ch) {
        pllm_errorf(PLLM_ERR_NOMEM, "chat template: out of memory allocating %zu bytes", total);
        return NULL;
    }
    a->used += total;
    ch->cap = cap;
    ch->used = n;
    if (h && cap != JARENA_CHUNK) {
        /* a big block goes behind the head so that the head's free space stays usable */
        ch->next = h->next;
        h->next = ch;
    } else {
        ch->next = h;
        a->head = ch;
    }
    return ch->data;
}

void pllm_jarena_free(pllm_jarena *a)
{
    if (!a) return;
    pllm_jarena_chunk *ch = a->head;
    while (ch) {
        pllm_jarena_chunk *next = ch->next;
        free(ch);
        ch = next;
    }
    a->head = NULL;
    a->used = 0;
}

char *pllm_jarena_strndup(pllm_jarena *a, const char *s, size_t n)
{
    char *p = pllm_jarena_alloc(a, n + 1);
    if (!p) return NULL;
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

/* ---------------------------------------------------------------- errors, builders */

pllm_status pllm_jerr(pllm_jctx *c, pllm_status st, const char *fmt, ...)
{
    char msg[1800];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return pllm_errorf(st, "%s:%d: %s", c->name, c->line, msg);
}

pllm_status pllm_jinja_charge(pllm_jctx *c, uint64_t units)
{
    c->steps += units;
    if (c->steps > c->max_steps)
        return pllm_jerr(c, PLLM_ERR_RANGE,
                         "template exceeded its budget of %llu work steps (loop iterations, calls, "
                         "element visits)",
                         (unsigned long long)c->max_steps);
    return PLLM_OK;
}

pllm_status pllm_jinja_nest_enter(pllm_jctx *c)
{
    if (c->nest >= PLLM_JINJA_MAX_NEST)
        return pllm_jerr(c, PLLM_ERR_RANGE, "values nested deeper than %d levels",
                         PLLM_JINJA_MAX_NEST);
    c->nest++;
    return PLLM_OK;
}

static void *jalloc(pllm_jctx *c, size_t n)
{
    void *p = pllm_jarena_alloc(c->arena, n);
    if (!p) pllm_error_prefix(PLLM_ERR_NOMEM, "%s:%d: ", c->name, c->line);
    return p;
}

pllm_status pllm_jsb_append(pllm_jctx *c, pllm_jsb *b, const char *s, size_t n)
{
    if (n == 0) return PLLM_OK;
    if (b->n + n > c->max_str)
        return pllm_jerr(c, PLLM_ERR_RANGE, "output or string exceeds the limit of %zu bytes",
                         c->max_str);
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = jalloc(c, cap);
        if (!p) return PLLM_ERR_NOMEM;
        if (b->n) memcpy(p, b->s, b->n);
        b->s = p;
        b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
    return PLLM_OK;
}

pllm_status pllm_jsb_appendc(pllm_jctx *c, pllm_jsb *b, const char *s)
{
    return pllm_jsb_append(c, b, s, strlen(s));
}

pllm_status pllm_jsb_cp(pllm_jctx *c, pllm_jsb *b, uint32_t cp)
{
    char tmp[4];
    size_t n = pllm_jinja_utf8_encode(cp, tmp);
    return pllm_jsb_append(c, b, tmp, n);
}

/* ---------------------------------------------------------------- strings, lists, dicts */

static size_t count_chars(const char *s, size_t n)
{
    return pllm_jinja_utf8_count(s, n);
}

pllm_jstr *pllm_jstr_new(pllm_jarena *a, const char *s, size_t n)
{
    pllm_jstr *str = pllm_jarena_alloc(a, sizeof(pllm_jstr) + n + 1);
    if (!str) return NULL;
    str->len = n;
    str->nchars = count_chars(s, n);
    str->markup = false;
    if (n) memcpy(str->s, s, n);
    str->s[n] = 0;
    return str;
}

pllm_status pllm_jv_str(pllm_jctx *c, const char *s, size_t n, pllm_jv *out)
{
    if (n > c->max_str)
        return pllm_jerr(c, PLLM_ERR_RANGE, "string exceeds the limit of %zu bytes", c->max_str);
    pllm_jstr *str = pllm_jstr_new(c->arena, s, n);
    if (!str) return pllm_error_prefix(PLLM_ERR_NOMEM, "%s:%d: ", c->name, c->line);
    *out = (pllm_jv){.t = PLLM_JV_STR, .s = str};
    return PLLM_OK;
}

pllm_status pllm_jv_strc(pllm_jctx *c, const char *s, pllm_jv *out)
{
    return pllm_jv_str(c, s, strlen(s), out);
}

pllm_status pllm_jv_str_sb(pllm_jctx *c, const pllm_jsb *b, pllm_jv *out)
{
    return pllm_jv_str(c, b->n ? b->s : "", b->n, out);
}

size_t pllm_jstr_offset(const pllm_jstr *s, size_t i)
{
    if (s->nchars == s->len) return i;
    size_t off = 0;
    while (i > 0 && off < s->len) {
        off++;
        while (off < s->len && ((unsigned char)s->s[off] & 0xC0) == 0x80) off++;
        i--;
    }
    return off;
}

pllm_status pllm_jv_list(pllm_jctx *c, size_t n, uint8_t kind, pllm_jv *out)
{
    if (n > c->max_str / sizeof(pllm_jv))
        return pllm_jerr(c, PLLM_ERR_RANGE, "list of %zu items exceeds the size limit", n);
    pllm_jlist *l = jalloc(c, sizeof *l);
    if (!l) return PLLM_ERR_NOMEM;
    memset(l, 0, sizeof *l);
    l->n = n;
    l->kind = kind;
    l->v = jalloc(c, (n ? n : 1) * sizeof(pllm_jv));
    if (!l->v) return PLLM_ERR_NOMEM;
    for (size_t i = 0; i < n; i++) l->v[i] = pllm_jv_undef();
    *out = (pllm_jv){.t = PLLM_JV_LIST, .l = l};
    return PLLM_OK;
}

pllm_status pllm_jv_dict(pllm_jctx *c, pllm_jv *out)
{
    pllm_jdict *d = jalloc(c, sizeof *d);
    if (!d) return PLLM_ERR_NOMEM;
    memset(d, 0, sizeof *d);
    *out = (pllm_jv){.t = PLLM_JV_DICT, .d = d};
    return PLLM_OK;
}

static pllm_status check_hashable(pllm_jctx *c, pllm_jv key)
{
    switch (key.t) {
    case PLLM_JV_NONE:
    case PLLM_JV_BOOL:
    case PLLM_JV_INT:
    case PLLM_JV_FLOAT:
    case PLLM_JV_STR:
    case PLLM_JV_UNDEF:
        return PLLM_OK;
    case PLLM_JV_LIST:
        if (key.l->kind == PLLM_JL_RANGE) return PLLM_OK;
        if (key.l->kind == PLLM_JL_TUPLE) {
            PLLM_TRY(pllm_jinja_charge(c, key.l->n));
            for (size_t i = 0; i < key.l->n; i++) PLLM_TRY(pllm_jv_check_hashable(c, key.l->v[i]));
            return PLLM_OK;
        }
        break;
    default:
        break;
    }
    if (key.t == PLLM_JV_NS || key.t == PLLM_JV_MACRO || key.t == PLLM_JV_FUNC ||
        key.t == PLLM_JV_LOOP || key.t == PLLM_JV_GEN)
        return pllm_jerr(c, PLLM_ERR_UNSUPPORTED, "using a %s as a dict key is not supported",
                         pllm_jv_type_name(key));
    return pllm_jerr(c, PLLM_ERR_INVALID, "TypeError: unhashable type: '%s'",
                     pllm_jv_type_name(key));
}

pllm_status pllm_jv_check_hashable(pllm_jctx *c, pllm_jv key)
{
    PLLM_TRY(pllm_jinja_nest_enter(c));
    pllm_status st = check_hashable(c, key);
    pllm_jinja_nest_leave(c);
    return st;
}

/* Equality of hashable keys (no errors possible). */
static bool key_eq(pllm_jv a, pllm_jv b);

static bool num_of(pllm_jv v, double *f, int64_t *i, bool *is_int)
{
    if (v.t == PLLM_JV_BOOL) {
        *i = v.b;
        *is_int = true;
        return true;
    }
    if (v.t == PLLM_JV_INT) {
        *i = v.i;
        *is_int = true;
        return true;
    }
    if (v.t == PLLM_JV_FLOAT) {
        *f = v.f;
        *is_int = false;
        return true;
    }
    return false;
}

/* Exact comparison of an int64 and a double: -1, 0, 1, or 2 when f is NaN. */
static int cmp_int_float(int64_t i, double f)
{
    if (isnan(f)) return 2;
    if (f >= 9223372036854775808.0) return -1;
    if (f < -9223372036854775808.0) return 1;
    double fl = floor(f);
    int64_t fi = (int64_t)fl;
    if (i < fi) return -1;
    if (i > fi) return 1;
    return fl == f ? 0 : -1;
}

/* Numeric three-way compare; 2 when unordered (NaN). */
static int num_cmp(pllm_jv a, pllm_jv b)
{
    double fa = 0, fb = 0;
    int64_t ia = 0, ib = 0;
    bool inta = false, intb = false;
    num_of(a, &fa, &ia, &inta);
    num_of(b, &fb, &ib, &intb);
    if (inta && intb) return ia < ib ? -1 : ia > ib;
    if (inta) return cmp_int_float(ia, fb);
    if (intb) {
        int r = cmp_int_float(ib, fa);
        return r == 2 ? 2 : -r;
    }
    if (isnan(fa) || isnan(fb)) return 2;
    return fa < fb ? -1 : fa > fb;
}

static bool is_num(pllm_jv v)
{
    return v.t == PLLM_JV_BOOL || v.t == PLLM_JV_INT || v.t == PLLM_JV_FLOAT;
}

static bool key_eq(pllm_jv a, pllm_jv b)
{
    if (is_num(a) && is_num(b)) return num_cmp(a, b) == 0;
    if (a.t != b.t) return false;
    switch (a.t) {
    case PLLM_JV_NONE:
    case PLLM_JV_UNDEF:
        return true;
    case PLLM_JV_STR:
        return a.s->len == b.s->len && memcmp(a.s->s, b.s->s, a.s->len) == 0;
    case PLLM_JV_LIST:
        if (a.l->kind != b.l->kind || a.l->n != b.l->n) return false;
        for (size_t i = 0; i < a.l->n; i++)
            if (!key_eq(a.l->v[i], b.l->v[i])) return false;
        return true;
    default:
        return false;
    }
}

static bool dict_find(const pllm_jdict *d, pllm_jv key, size_t *idx)
{
    for (size_t i = 0; i < d->n; i++) {
        if (key_eq(d->keys[i], key)) {
            *idx = i;
            return true;
        }
    }
    return false;
}

pllm_status pllm_jdict_set(pllm_jctx *c, pllm_jdict *d, pllm_jv key, pllm_jv val)
{
    PLLM_TRY(pllm_jv_check_hashable(c, key));
    PLLM_TRY(pllm_jinja_charge(c, d->n / 8 + 1));
    size_t idx;
    if (dict_find(d, key, &idx)) {
        d->vals[idx] = val;
        return PLLM_OK;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 8;
        if (cap > c->max_str / sizeof(pllm_jv))
            return pllm_jerr(c, PLLM_ERR_RANGE, "dict of %zu items exceeds the size limit", cap);
        pllm_jv *k = jalloc(c, cap * sizeof *k), *v = jalloc(c, cap * sizeof *v);
        if (!k || !v) return PLLM_ERR_NOMEM;
        if (d->n) {
            memcpy(k, d->keys, d->n * sizeof *k);
            memcpy(v, d->vals, d->n * sizeof *v);
        }
        d->keys = k;
        d->vals = v;
        d->cap = cap;
    }
    d->keys[d->n] = key;
    d->vals[d->n] = val;
    d->n++;
    return PLLM_OK;
}

bool pllm_jdict_get(const pllm_jdict *d, pllm_jv key, pllm_jv *val)
{
    size_t idx;
    if (!dict_find(d, key, &idx)) return false;
    *val = d->vals[idx];
    return true;
}

/* ---------------------------------------------------------------- undefined */

static const char *object_type_repr(pllm_jv obj)
{
    /* jinja2.utils.object_type_repr: builtins are named without their module */
    switch (obj.t) {
    case PLLM_JV_NONE:
        return "None";
    case PLLM_JV_BOOL:
        return "bool object";
    case PLLM_JV_INT:
        return "int object";
    case PLLM_JV_FLOAT:
        return "float object";
    case PLLM_JV_STR:
        return obj.s->markup ? "markupsafe.Markup object" : "str object";
    case PLLM_JV_LIST:
        switch (obj.l->kind) {
        case PLLM_JL_TUPLE:
            return "tuple object";
        case PLLM_JL_RANGE:
            return "range object";
        case PLLM_JL_KEYS:
            return "dict_keys object";
        case PLLM_JL_VALUES:
            return "dict_values object";
        case PLLM_JL_ITEMS:
            return "dict_items object";
        default:
            return "list object";
        }
    case PLLM_JV_DICT:
        return "dict object";
    case PLLM_JV_NS:
        return "jinja2.utils.Namespace object";
    case PLLM_JV_MACRO:
        return "jinja2.runtime.Macro object";
    case PLLM_JV_LOOP:
        return "jinja2.runtime.LoopContext object";
    case PLLM_JV_GEN:
        return "generator object";
    default:
        return "builtin_function_or_method object";
    }
}

pllm_status pllm_jv_undef_attr(pllm_jctx *c, pllm_jv obj, pllm_jv name, pllm_jv *out)
{
    pllm_jundef *u = jalloc(c, sizeof *u);
    if (!u) return PLLM_ERR_NOMEM;
    u->hint = NULL;
    u->obj_type = object_type_repr(obj);
    u->name = name;
    *out = (pllm_jv){.t = PLLM_JV_UNDEF, .u = u};
    return PLLM_OK;
}

pllm_status pllm_jv_undef_hint(pllm_jctx *c, const char *hint, pllm_jv *out)
{
    pllm_jundef *u = jalloc(c, sizeof *u);
    if (!u) return PLLM_ERR_NOMEM;
    u->hint = hint;
    u->obj_type = NULL;
    u->name = pllm_jv_undef();
    *out = (pllm_jv){.t = PLLM_JV_UNDEF, .u = u};
    return PLLM_OK;
}

pllm_status pllm_jv_undef_fail(pllm_jctx *c, pllm_jv v)
{
    const pllm_jundef *u = v.u;
    if (!u) return pllm_jerr(c, PLLM_ERR_INVALID, "UndefinedError: value is undefined");
    if (u->hint) return pllm_jerr(c, PLLM_ERR_INVALID, "UndefinedError: %s", u->hint);
    pllm_jsb b = {0};
    pllm_status st = pllm_jv_write_repr(c, &b, u->name);
    if (st != PLLM_OK) return st;
    if (!u->obj_type) return pllm_jerr(c, PLLM_ERR_INVALID, "UndefinedError: %s is undefined", b.s);
    if (u->name.t == PLLM_JV_STR)
        return pllm_jerr(c, PLLM_ERR_INVALID, "UndefinedError: '%s' has no attribute %s",
                         u->obj_type, b.s);
    return pllm_jerr(c, PLLM_ERR_INVALID, "UndefinedError: %s has no element %s", u->obj_type, b.s);
}

/* ---------------------------------------------------------------- types, truth */

const char *pllm_jv_type_name(pllm_jv v)
{
    switch (v.t) {
    case PLLM_JV_UNDEF:
        return "Undefined";
    case PLLM_JV_NONE:
        return "NoneType";
    case PLLM_JV_BOOL:
        return "bool";
    case PLLM_JV_INT:
        return "int";
    case PLLM_JV_FLOAT:
        return "float";
    case PLLM_JV_STR:
        return v.s->markup ? "Markup" : "str";
    case PLLM_JV_LIST:
        switch (v.l->kind) {
        case PLLM_JL_TUPLE:
            return "tuple";
        case PLLM_JL_RANGE:
            return "range";
        case PLLM_JL_KEYS:
            return "dict_keys";
        case PLLM_JL_VALUES:
            return "dict_values";
        case PLLM_JL_ITEMS:
            return "dict_items";
        default:
            return "list";
        }
    case PLLM_JV_DICT:
        return "dict";
    case PLLM_JV_NS:
        return "Namespace";
    case PLLM_JV_MACRO:
        return "Macro";
    case PLLM_JV_FUNC:
        return "builtin_function_or_method";
    case PLLM_JV_LOOP:
        return "LoopContext";
    case PLLM_JV_GEN:
        return "generator";
    }
    return "object";
}

bool pllm_jv_truthy(pllm_jv v)
{
    switch (v.t) {
    case PLLM_JV_UNDEF:
    case PLLM_JV_NONE:
        return false;
    case PLLM_JV_BOOL:
        return v.b;
    case PLLM_JV_INT:
        return v.i != 0;
    case PLLM_JV_FLOAT:
        return v.f != 0.0;
    case PLLM_JV_STR:
        return v.s->len != 0;
    case PLLM_JV_LIST:
        return v.l->n != 0;
    case PLLM_JV_DICT:
        return v.d->n != 0;
    default:
        return true;
    }
}

/* ---------------------------------------------------------------- float repr */

/* Add delta (+1/-1) to the last digit of a digit string; returns false when it would need a
 * carry past the first digit or borrow below zero (the caller then skips that candidate). */
static bool digits_bump(char *d, int n, int delta)
{
    for (int i = n - 1; i >= 0; i--) {
        int v = d[i] - '0' + delta;
        if (v >= 0 && v <= 9) {
            d[i] = (char)('0' + v);
            return true;
        }
        d[i] = delta > 0 ? '0' : '9';
    }
    return false;
}

static double digits_value(const char *d, int n, int decpt)
{
    char tmp[64];
    snprintf(tmp, sizeof tmp, "0.%.*se%d", n, d, decpt);
    return strtod(tmp, NULL);
}

/* Shortest round-tripping digits (as repr uses): digits into d, returns the count; *decpt is
 * the decimal point position (value = 0.d * 10^decpt). x is finite and positive. */
static int shortest_digits(double x, char *d, int *decpt)
{
    char tmp[64];
    for (int p = 1; p <= 17; p++) {
        snprintf(tmp, sizeof tmp, "%.*e", p - 1, x);
        /* tmp: d[.ddd]e[+-]xx */
        int n = 0;
        const char *q = tmp;
        for (; *q && *q != 'e'; q++)
            if (*q >= '0' && *q <= '9') d[n++] = *q;
        int e = atoi(q + 1);
        int dp = e + 1;
        if (strtod(tmp, NULL) == x) {
            while (n > 1 && d[n - 1] == '0') n--;
            *decpt = dp;
            return n;
        }
        /* at a binade boundary the rounding interval is lopsided: a neighbour may round-trip */
        char alt[20];
        for (int delta = -1; delta <= 1; delta += 2) {
            memcpy(alt, d, (size_t)n);
            if (!digits_bump(alt, n, delta) || alt[0] == '0') continue;
            if (digits_value(alt, n, dp) == x) {
                memcpy(d, alt, (size_t)n);
                while (n > 1 && d[n - 1] == '0') n--;
                *decpt = dp;
                return n;
            }
        }
    }
    snprintf(tmp, sizeof tmp, "%.16e", x);
    int n = 0;
    const char *q = tmp;
    for (; *q && *q != 'e'; q++)
        if (*q >= '0' && *q <= '9') d[n++] = *q;
    *decpt = atoi(q + 1) + 1;
    while (n > 1 && d[n - 1] == '0') n--;
    return n;
}

void pllm_jv_float_repr(double f, char *buf, size_t cap)
{
    if (isnan(f)) {
        snprintf(buf, cap, "nan");
        return;
    }
    if (isinf(f)) {
        snprintf(buf, cap, f < 0 ? "-inf" : "inf");
        return;
    }
    if (f == 0) {
        snprintf(buf, cap, signbit(f) ? "-0.0" : "0.0");
        return;
    }
    char d[24];
    int decpt;
    int n = shortest_digits(fabs(f), d, &decpt);
    char out[64];
    size_t o = 0;
    if (f < 0) out[o++] = '-';
    if (decpt > -4 && decpt <= 16) {
        if (decpt <= 0) {
            out[o++] = '0';
            out[o++] = '.';
            for (int i = 0; i < -decpt; i++) out[o++] = '0';
            for (int i = 0; i < n; i++) out[o++] = d[i];
        } else if (decpt >= n) {
            for (int i = 0; i < n; i++) out[o++] = d[i];
            for (int i = n; i < decpt; i++) out[o++] = '0';
            out[o++] = '.';
            out[o++] = '0';
        } else {
            for (int i = 0; i < decpt; i++) out[o++] = d[i];
            out[o++] = '.';
            for (int i = decpt; i < n; i++) out[o++] = d[i];
        }
        out[o] = 0;
    } else {
        out[o++] = d[0];
        if (n > 1) {
            out[o++] = '.';
            for (int i = 1; i < n; i++) out[o++] = d[i];
        }
        int e = decpt - 1;
        snprintf(out + o, sizeof out - o, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
    }
    snprintf(buf, cap, "%s", out);
}

/* ---------------------------------------------------------------- str / repr */

static pllm_status write_str_repr(pllm_jctx *c, pllm_jsb *b, const pllm_jstr *s)
{
    bool has_sq = memchr(s->s, '\'', s->len) != NULL, has_dq = memchr(s->s, '"', s->len) != NULL;
    char quote = (has_sq && !has_dq) ? '"' : '\'';
    if (s->markup) PLLM_TRY(pllm_jsb_appendc(c, b, "Markup("));
    PLLM_TRY(pllm_jsb_append(c, b, &quote, 1));
    size_t i = 0;
    while (i < s->len) {
        size_t l;
        uint32_t cp = pllm_jinja_utf8_decode(s->s + i, &l);
        char esc[16];
        if (cp == (uint32_t)quote || cp == '\\') {
            esc[0] = '\\';
            esc[1] = (char)cp;
            PLLM_TRY(pllm_jsb_append(c, b, esc, 2));
        } else if (cp == '\t') {
            PLLM_TRY(pllm_jsb_append(c, b, "\\t", 2));
        } else if (cp == '\n') {
            PLLM_TRY(pllm_jsb_append(c, b, "\\n", 2));
        } else if (cp == '\r') {
            PLLM_TRY(pllm_jsb_append(c, b, "\\r", 2));
        } else if (pllm_jinja_is_printable(cp)) {
            PLLM_TRY(pllm_jsb_append(c, b, s->s + i, l));
        } else {
            if (cp <= 0xFF)
                snprintf(esc, sizeof esc, "\\x%02x", cp);
            else if (cp <= 0xFFFF)
                snprintf(esc, sizeof esc, "\\u%04x", cp);
            else
                snprintf(esc, sizeof esc, "\\U%08x", cp);
            PLLM_TRY(pllm_jsb_appendc(c, b, esc));
        }
        i += l;
    }
    PLLM_TRY(pllm_jsb_append(c, b, &quote, 1));
    if (s->markup) PLLM_TRY(pllm_jsb_append(c, b, ")", 1));
    return PLLM_OK;
}

static pllm_status write_seq_repr(pllm_jctx *c, pllm_jsb *b, const pllm_jv *v, size_t n,
                                  const char *open, const char *close, bool tuple)
{
    PLLM_TRY(pllm_jsb_appendc(c, b, open));
    for (size_t i = 0; i < n; i++) {
        if (i) PLLM_TRY(pllm_jsb_append(c, b, ", ", 2));
        PLLM_TRY(pllm_jv_write_repr(c, b, v[i]));
    }
    if (tuple && n == 1) PLLM_TRY(pllm_jsb_append(c, b, ",", 1));
    return pllm_jsb_appendc(c, b, close);
}

static pllm_status write_dict_repr(pllm_jctx *c, pllm_jsb *b, const pllm_jdict *d)
{
    PLLM_TRY(pllm_jsb_append(c, b, "{", 1));
    for (size_t i = 0; i < d->n; i++) {
        if (i) PLLM_TRY(pllm_jsb_append(c, b, ", ", 2));
        PLLM_TRY(pllm_jv_write_repr(c, b, d->keys[i]));
        PLLM_TRY(pllm_jsb_append(c, b, ": ", 2));
        PLLM_TRY(pllm_jv_write_repr(c, b, d->vals[i]));
    }
    return pllm_jsb_append(c, b, "}", 1);
}

static pllm_status write_repr(pllm_jctx *c, pllm_jsb *b, pllm_jv v)
{
    char tmp[64];
    switch (v.t) {
    case PLLM_JV_UNDEF:
        return pllm_jsb_appendc(c, b, "Undefined");
    case PLLM_JV_NONE:
        return pllm_jsb_appendc(c, b, "None");
    case PLLM_JV_BOOL:
        return pllm_jsb_appendc(c, b, v.b ? "True" : "False");
    case PLLM_JV_INT:
        snprintf(tmp, sizeof tmp, "%lld", (long long)v.i);
        return pllm_jsb_appendc(c, b, tmp);
    case PLLM_JV_FLOAT:
        pllm_jv_float_repr(v.f, tmp, sizeof tmp);
        return pllm_jsb_appendc(c, b, tmp);
    case PLLM_JV_STR:
        return write_str_repr(c, b, v.s);
    case PLLM_JV_LIST:
        switch (v.l->kind) {
        case PLLM_JL_TUPLE:
            return write_seq_repr(c, b, v.l->v, v.l->n, "(", ")", true);
        case PLLM_JL_RANGE:
            if (v.l->r_step == 1)
                snprintf(tmp, sizeof tmp, "range(%lld, %lld)", (long long)v.l->r_start,
                         (long long)v.l->r_stop);
            else
                snprintf(tmp, sizeof tmp, "range(%lld, %lld, %lld)", (long long)v.l->r_start,
                         (long long)v.l->r_stop, (long long)v.l->r_step);
            return pllm_jsb_appendc(c, b, tmp);
        case PLLM_JL_KEYS:
            return write_seq_repr(c, b, v.l->v, v.l->n, "dict_keys([", "])", false);
        case PLLM_JL_VALUES:
            return write_seq_repr(c, b, v.l->v, v.l->n, "dict_values([", "])", false);
        case PLLM_JL_ITEMS:
            return write_seq_repr(c, b, v.l->v, v.l->n, "dict_items([", "])", false);
        default:
            return write_seq_repr(c, b, v.l->v, v.l->n, "[", "]", false);
        }
    case PLLM_JV_DICT:
        return write_dict_repr(c, b, v.d);
    case PLLM_JV_NS:
        PLLM_TRY(pllm_jsb_appendc(c, b, "<Namespace "));
        PLLM_TRY(write_dict_repr(c, b, &v.ns->attrs));
        return pllm_jsb_append(c, b, ">", 1);
    case PLLM_JV_LOOP:
        snprintf(tmp, sizeof tmp, "<LoopContext %zu/%zu>", v.loop->i + 1, v.loop->n);
        return pllm_jsb_appendc(c, b, tmp);
    default:
        break;
    }
    /* Python prints these with a memory address: no output could match */
    return pllm_jerr(c, PLLM_ERR_UNSUPPORTED,
                     "converting a %s to a string is not supported (Python shows its address)",
                     pllm_jv_type_name(v));
}

pllm_status pllm_jv_write_repr(pllm_jctx *c, pllm_jsb *b, pllm_jv v)
{
    PLLM_TRY(pllm_jinja_nest_enter(c));
    pllm_status st = write_repr(c, b, v);
    pllm_jinja_nest_leave(c);
    return st;
}

pllm_status pllm_jv_write_str(pllm_jctx *c, pllm_jsb *b, pllm_jv v)
{
    switch (v.t) {
    case PLLM_JV_UNDEF:
        return PLLM_OK;
    case PLLM_JV_STR:
        return pllm_jsb_append(c, b, v.s->s, v.s->len);
    default:
        return pllm_jv_write_repr(c, b, v);
    }
}

pllm_status pllm_jv_to_str(pllm_jctx *c, pllm_jv v, pllm_jv *out)
{
    if (v.t == PLLM_JV_STR) {
        *out = v;
        return PLLM_OK;
    }
    pllm_jsb b = {0};
    PLLM_TRY(pllm_jv_write_str(c, &b, v));
    return pllm_jv_str_sb(c, &b, out);
}

/* ---------------------------------------------------------------- JSON */

static pllm_status json_string(pllm_jctx *c, pllm_jsb *b, const char *s, size_t n,
                               bool ensure_ascii)
{
    PLLM_TRY(pllm_jsb_append(c, b, "\"", 1));
    size_t i = 0, run = 0;
    while (i < n) {
        unsigned char ch = (unsigned char)s[i];
        const char *esc = NULL;
        char tmp[16];
        size_t l = 1;
        if (ch == '"')
            esc = "\\\"";
        else if (ch == '\\')
            esc = "\\\\";
        else if (ch == '\n')
            esc = "\\n";
        else if (ch == '\r')
            esc = "\\r";
        else if (ch == '\t')
            esc = "\\t";
        else if (ch == '\b')
            esc = "\\b";
        else if (ch == '\f')
            esc = "\\f";
        else if (ch < 0x20 || (ensure_ascii && ch == 0x7F)) {
            snprintf(tmp, sizeof tmp, "\\u%04x", ch);
            esc = tmp;
        } else if (ch >= 0x80 && ensure_ascii) {
            uint32_t cp = pllm_jinja_utf8_decode(s + i, &l);
            if (cp >= 0x10000) {
                uint32_t v = cp - 0x10000;
                snprintf(tmp, sizeof tmp, "\\u%04x\\u%04x", 0xD800 + (v >> 10),
                         0xDC00 + (v & 0x3FF));
            } else {
                snprintf(tmp, sizeof tmp, "\\u%04x", cp);
            }
            esc = tmp;
        }
        if (esc) {
            PLLM_TRY(pllm_jsb_append(c, b, s + i - run, run));
            run = 0;
            PLLM_TRY(pllm_jsb_appendc(c, b, esc));
            i += l;
        } else {
            run++;
            i++;
        }
    }
    PLLM_TRY(pllm_jsb_append(c, b, s + n - run, run));
    return pllm_jsb_append(c, b, "\"", 1);
}

static pllm_status json_newline(pllm_jctx *c, pllm_jsb *b, const pllm_jjson_opts *o, int level)
{
    PLLM_TRY(pllm_jsb_append(c, b, "\n", 1));
    for (int i = 0; i < level; i++) {
        if (o->indent_s)
            PLLM_TRY(pllm_jsb_appendc(c, b, o->indent_s));
        else
            for (int k = 0; k < o->indent; k++) PLLM_TRY(pllm_jsb_append(c, b, " ", 1));
    }
    return PLLM_OK;
}

static bool json_indented(const pllm_jjson_opts *o)
{
    return o->indent_s != NULL || o->indent >= 0;
}

static pllm_status json_value(pllm_jctx *c, pllm_jsb *b, pllm_jv v, const pllm_jjson_opts *o,
                              int level);

static pllm_status json_key(pllm_jctx *c, pllm_jsb *b, pllm_jv k, const pllm_jjson_opts *o)
{
    char tmp[64];
    switch (k.t) {
    case PLLM_JV_STR:
        return json_string(c, b, k.s->s, k.s->len, o->ensure_ascii);
    case PLLM_JV_BOOL:
        return json_string(c, b, k.b ? "true" : "false", k.b ? 4 : 5, false);
    case PLLM_JV_NONE:
        return json_string(c, b, "null", 4, false);
    case PLLM_JV_INT:
        snprintf(tmp, sizeof tmp, "%lld", (long long)k.i);
        return json_string(c, b, tmp, strlen(tmp), false);
    case PLLM_JV_FLOAT:
        if (isnan(k.f))
            snprintf(tmp, sizeof tmp, "NaN");
        else if (isinf(k.f))
            snprintf(tmp, sizeof tmp, k.f < 0 ? "-Infinity" : "Infinity");
        else
            pllm_jv_float_repr(k.f, tmp, sizeof tmp);
        return json_string(c, b, tmp, strlen(tmp), false);
    default:
        return pllm_jerr(c, PLLM_ERR_INVALID,
                         "TypeError: keys must be str, int, float, bool or None, not %s",
                         pllm_jv_type_name(k));
    }
}

static pllm_status json_value(pllm_jctx *c, pllm_jsb *b, pllm_jv v, const pllm_jjson_opts *o,
                              int level)
{
    char tmp[64];
    if (level > 200) return pllm_jerr(c, PLLM_ERR_RANGE, "tojson: nesting too deep");
    switch (v.t) {
    case PLLM_JV_NONE:
        return pllm_jsb_appendc(c, b, "null");
    case PLLM_JV_BOOL:
        return pllm_jsb_appendc(c, b, v.b ? "true" : "false");
    case PLLM_JV_INT:
        snprintf(tmp, sizeof tmp, "%lld", (long long)v.i);
        return pllm_jsb_appendc(c, b, tmp);
    case PLLM_JV_FLOAT:
        if (isnan(v.f)) return pllm_jsb_appendc(c, b, "NaN");
        if (isinf(v.f)) return pllm_jsb_appendc(c, b, v.f < 0 ? "-Infinity" : "Infinity");
        pllm_jv_float_repr(v.f, tmp, sizeof tmp);
        return pllm_jsb_appendc(c, b, tmp);
    case PLLM_JV_STR:
        return json_string(c, b, v.s->s, v.s->len, o->ensure_ascii);
    case PLLM_JV_LIST:
        if (v.l->kind != PLLM_JL_LIST && v.l->kind != PLLM_JL_TUPLE) break;
        if (v.l->n == 0) return pllm_jsb_append(c, b, "[]", 2);
        PLLM_TRY(pllm_jsb_append(c, b, "[", 1));
        for (size_t i = 0; i < v.l->n; i++) {
            if (i) PLLM_TRY(pllm_jsb_appendc(c, b, o->item_sep));
            if (json_indented(o)) PLLM_TRY(json_newline(c, b, o, level + 1));
            PLLM_TRY(json_value(c, b, v.l->v[i], o, level + 1));
        }
        if (json_indented(o)) PLLM_TRY(json_newline(c, b, o, level));
        return pllm_jsb_append(c, b, "]", 1);
    case PLLM_JV_DICT: {
        const pllm_jdict *d = v.d;
        if (d->n == 0) return pllm_jsb_append(c, b, "{}", 2);
        size_t *order = jalloc(c, d->n * sizeof *order);
        if (!order) return PLLM_ERR_NOMEM;
        for (size_t i = 0; i < d->n; i++) order[i] = i;
        if (o->sort_keys) {
            /* insertion sort: stable, and errors (unorderable keys) propagate */
            for (size_t i = 1; i < d->n; i++) {
                size_t x = order[i], j = i;
                while (j > 0) {
                    bool lt;
                    PLLM_TRY(pllm_jv_lt(c, d->keys[x], d->keys[order[j - 1]], &lt));
                    if (!lt) break;
                    order[j] = order[j - 1];
                    j--;
                }
                order[j] = x;
            }
        }
        PLLM_TRY(pllm_jsb_append(c, b, "{", 1));
        for (size_t i = 0; i < d->n; i++) {
            if (i) PLLM_TRY(pllm_jsb_appendc(c, b, o->item_sep));
            if (json_indented(o)) PLLM_TRY(json_newline(c, b, o, level + 1));
            PLLM_TRY(json_key(c, b, d->keys[order[i]], o));
            PLLM_TRY(pllm_jsb_appendc(c, b, o->key_sep));
            PLLM_TRY(json_value(c, b, d->vals[order[i]], o, level + 1));
        }
        if (json_indented(o)) PLLM_TRY(json_newline(c, b, o, level));
        return pllm_jsb_append(c, b, "}", 1);
    }
    default:
        break;
    }
    return pllm_jerr(c, PLLM_ERR_INVALID, "TypeError: Object of type %s is not JSON serializable",
                     pllm_jv_type_name(v));
}

pllm_status pllm_jv_write_json(pllm_jctx *c, pllm_jsb *b, pllm_jv v, const pllm_jjson_opts *o)
{
    return json_value(c, b, v, o, 0);
}

/* ---------------------------------------------------------------- comparisons */

static bool plain_seq(pllm_jv v)
{
    return v.t == PLLM_JV_LIST &&
           (v.l->kind == PLLM_JL_LIST || v.l->kind == PLLM_JL_TUPLE || v.l->kind == PLLM_JL_RANGE);
}

static pllm_status jv_eq(pllm_jctx *c, pllm_jv a, pllm_jv b, bool *eq)
{
    if (is_num(a) && is_num(b)) {
        *eq = num_cmp(a, b) == 0;
        return PLLM_OK;
    }
    if (a.t != b.t) {
        *eq = false;
        return PLLM_OK;
    }
    switch (a.t) {
    case PLLM_JV_UNDEF:
    case PLLM_JV_NONE:
        *eq = true;
        return PLLM_OK;
    case PLLM_JV_STR:
        *eq = a.s->len == b.s->len && memcmp(a.s->s, b.s->s, a.s->len) == 0;
        return PLLM_OK;
    case PLLM_JV_LIST:
        if (!plain_seq(a) || !plain_seq(b))
            return pllm_jerr(c, PLLM_ERR_UNSUPPORTED, "comparing dict views is not supported");
        if (a.l->kind != b.l->kind || a.l->n != b.l->n) {
            *eq = false;
            return PLLM_OK;
        }
        PLLM_TRY(pllm_jinja_charge(c, a.l->n));
        for (size_t i = 0; i < a.l->n; i++) {
            PLLM_TRY(pllm_jv_eq(c, a.l->v[i], b.l->v[i], eq));
            if (!*eq) return PLLM_OK;
        }
        *eq = true;
        return PLLM_OK;
    case PLLM_JV_DICT:
        if (a.d->n != b.d->n) {
            *eq = false;
            return PLLM_OK;
        }
        PLLM_TRY(pllm_jinja_charge(c, (uint64_t)a.d->n * (a.d->n / 8 + 1)));
        for (size_t i = 0; i < a.d->n; i++) {
            pllm_jv bv;
            if (!pllm_jdict_get(b.d, a.d->keys[i], &bv)) {
                *eq = false;
                return PLLM_OK;
            }
            PLLM_TRY(pllm_jv_eq(c, a.d->vals[i], bv, eq));
            if (!*eq) return PLLM_OK;
        }
        *eq = true;
        return PLLM_OK;
    case PLLM_JV_NS:
        *eq = a.ns == b.ns;
        return PLLM_OK;
    case PLLM_JV_MACRO:
        *eq = a.m == b.m;
        return PLLM_OK;
    case PLLM_JV_LOOP:
        *eq = a.loop == b.loop;
        return PLLM_OK;
    case PLLM_JV_GEN:
        *eq = a.gen == b.gen;
        return PLLM_OK;
    case PLLM_JV_FUNC:
        return pllm_jerr(c, PLLM_ERR_UNSUPPORTED, "comparing functions is not supported");
    default:
        *eq = false;
        return PLLM_OK;
    }
}

pllm_status pllm_jv_eq(pllm_jctx *c, pllm_jv a, pllm_jv b, bool *eq)
{
    PLLM_TRY(pllm_jinja_nest_enter(c));
    pllm_status st = jv_eq(c, a, b, eq);
    pllm_jinja_nest_leave(c);
    return st;
}

/* Python's rich comparison for op in LT, LE, GT, GE. */
static pllm_status cmp_op_inner(pllm_jctx *c, int op, pllm_jv a, pllm_jv b, bool *res);

static pllm_status cmp_op(pllm_jctx *c, int op, pllm_jv a, pllm_jv b, bool *res)
{
    PLLM_TRY(pllm_jinja_nest_enter(c));
    pllm_status st = cmp_op_inner(c, op, a, b, res);
    pllm_jinja_nest_leave(c);
    return st;
}

static pllm_status cmp_op_inner(pllm_jctx *c, int op, pllm_jv a, pllm_jv b, bool *res)
{
    if (a.t == PLLM_JV_UNDEF) return pllm_jv_undef_fail(c, a);
    if (b.t == PLLM_JV_UNDEF) return pllm_jv_undef_fail(c, b);
    int r;
    if (is_num(a) && is_num(b)) {
        r = num_cmp(a, b);
        if (r == 2) {
            *res = false;
            return PLLM_OK;
        }
    } else if (a.t == PLLM_JV_STR && b.t == PLLM_JV_STR) {
        size_t n = PLLM_MIN(a.s->len, b.s->len);
        int m = memcmp(a.s->s, b.s->s, n);
        r = m < 0 ? -1 : m > 0 ? 1 : (a.s->len < b.s->len ? -1 : a.s->len > b.s->len);
    } else if (a.t == PLLM_JV_LIST && b.t == PLLM_JV_LIST && a.l->kind == b.l->kind &&
               (a.l->kind == PLLM_JL_LIST || a.l->kind == PLLM_JL_TUPLE)) {
        size_t n = PLLM_MIN(a.l->n, b.l->n);
        PLLM_TRY(pllm_jinja_charge(c, n));
        for (size_t i = 0; i < n; i++) {
            bool eq;
            PLLM_TRY(pllm_jv_eq(c, a.l->v[i], b.l->v[i], &eq));
            if (!eq) return cmp_op(c, op, a.l->v[i], b.l->v[i], res);
        }
        r = a.l->n < b.l->n ? -1 : a.l->n > b.l->n;
    } else {
        static const char *const sym[] = {
            [PLLM_JOP_LT] = "<", [PLLM_JOP_LE] = "<=", [PLLM_JOP_GT] = ">", [PLLM_JOP_GE] = ">="};
        return pllm_jerr(c, PLLM_ERR_INVALID,
                         "TypeError: '%s' not supported between instances of '%s' and '%s'",
                         sym[op], pllm_jv_type_name(a), pllm_jv_type_name(b));
    }
    switch (op) {
    case PLLM_JOP_LT:
        *res = r < 0;
        break;
    case PLLM_JOP_LE:
        *res = r <= 0;
        break;
    case PLLM_JOP_GT:
        *res = r > 0;
        break;
    default:
        *res = r >= 0;
        break;
    }
    return PLLM_OK;
}

pllm_status pllm_jv_lt(pllm_jctx *c, pllm_jv a, pllm_jv b, bool *lt)
{
    return cmp_op(c, PLLM_JOP_LT, a, b, lt);
}

pllm_status pllm_jinja_compare(pllm_jctx *c, int op, pllm_jv a, pllm_jv b, bool *res)
{
    switch (op) {
    case PLLM_JOP_EQ:
        return pllm_jv_eq(c, a, b, res);
    case PLLM_JOP_NE:
        PLLM_TRY(pllm_jv_eq(c, a, b, res));
        *res = !*res;
        return PLLM_OK;
    case PLLM_JOP_IN:
        return pllm_jv_contains(c, b, a, res);
    case PLLM_JOP_NOTIN:
        PLLM_TRY(pllm_jv_contains(c, b, a, res));
        *res = !*res;
        return PLLM_OK;
    default:
        return cmp_op(c, op, a, b, res);
    }
}

static const char *find_bytes(const char *h, size_t hn, const char *n, size_t nn)
{
    if (nn == 0) return h;
    if (nn > hn) return NULL;
    return memmem(h, hn, n, nn);
}

pllm_status pllm_jv_contains(pllm_jctx *c, pllm_jv container, pllm_jv item, bool *in)
{
    *in = false;
    switch (container.t) {
    case PLLM_JV_STR:
        if (item.t != PLLM_JV_STR)
            return pllm_jerr(c, PLLM_ERR_INVALID,
                             "TypeError: 'in <string>' requires string as left operand, not %s",
                             pllm_jv_type_name(item));
        *in = find_bytes(container.s->s, container.s->len, item.s->s, item.s->len) != NULL;
        return PLLM_OK;
    case PLLM_JV_DICT: {
        PLLM_TRY(pllm_jv_check_hashable(c, item));
        PLLM_TRY(pllm_jinja_charge(c, container.d->n / 8 + 1));
        pllm_jv v;
        *in = pllm_jdict_get(container.d, item, &v);
        return PLLM_OK;
    }
    case PLLM_JV_LIST:
    case PLLM_JV_UNDEF:
    case PLLM_JV_GEN: {
        pllm_jiter it;
        PLLM_TRY(pllm_jiter_init(c, container, &it));
        for (;;) {
            pllm_jv x;
            bool done;
            PLLM_TRY(pllm_jiter_next(c, &it, &x, &done));
            if (done) return PLLM_OK;
            PLLM_TRY(pllm_jv_eq(c, x, item, in));
            if (*in) return PLLM_OK;
        }
    }
    default:
        return pllm_jerr(c, PLLM_ERR_INVALID, "TypeError: argument of type '%s' is not iterable",
                         pllm_jv_type_name(container));
    }
}

/* ---------------------------------------------------------------- iteration */

pllm_status pllm_jiter_init(pllm_jctx *c, pllm_jv v, pllm_jiter *it)
{
    switch (v.t) {
    case PLLM_JV_STR:
    case PLLM_JV_LIST:
    case PLLM_JV_DICT:
    case PLLM_JV_UNDEF:
    case PLLM_JV_GEN:
        it->v = v;
        it->pos = 0;
        return PLLM_OK;
    default:
        return pllm_jerr(c, PLLM_ERR_INVALID, "TypeError: '%s' object is not iterable",
                         pllm_jv_type_name(v));
    }
}

pllm_status pllm_jiter_next(pllm_jctx *c, pllm_jiter *it, pllm_jv *out, bool *done)
{
    *done = false;
    PLLM_TRY(pllm_jinja_charge(c, 1));
    switch (it->v.t) {
    case PLLM_JV_STR: {
        const pllm_jstr *s = it->v.s;
        if (it->pos >= s->len) break;
        size_t l = pllm_jinja_utf8_seq(s->s + it->pos, s->len - it->pos);
        if (l == 0) l = 1;
        PLLM_TRY(pllm_jv_str(c, s->s + it->pos, l, out));
        it->pos += l;
        return PLLM_OK;
    }
    case PLLM_JV_LIST:
        if (it->pos >= it->v.l->n) break;
        *out = it->v.l->v[it->pos++];
        return PLLM_OK;
    case PLLM_JV_DICT:
        if (it->pos >= it->v.d->n) break;
        *out = it->v.d->keys[it->pos++];
        return PLLM_OK;
    case PLLM_JV_GEN:
        return pllm_jinja_gen_next(c, it->v.gen, out, done);
    default:
        break;
    }
    *done = true;
    return PLLM_OK;
}

pllm_status pllm_jv_collect(pllm_jctx *c, pllm_jv v, pllm_jv **items, size_t *n)
{
    if (v.t == PLLM_JV_LIST) {
        *items = v.l->v;
        *n = v.l->n;
        return PLLM_OK;
    }
    pllm_jiter it = {0};
    PLLM_TRY(pllm_jiter_init(c, v, &it));
    size_t cap = 8, len = 0;
    pllm_jv *arr = jalloc(c, cap * sizeof *arr);
    if (!arr) return PLLM_ERR_NOMEM;
    for (;;) {
        pllm_jv x;
        bool done;
        PLLM_TRY(pllm_jiter_next(c, &it, &x, &done));
        if (done) break;
        if (len == cap) {
            if (cap * 2 > c->max_str / sizeof *arr)
                return pllm_jerr(c, PLLM_ERR_RANGE, "sequence exceeds the size limit");
            pllm_jv *na = jalloc(c, cap * 2 * sizeof *na);
            if (!na) return PLLM_ERR_NOMEM;
            memcpy(na, arr, len * sizeof *arr);
            arr = na;
            cap *= 2;
        }
        arr[len++] = x;
    }
    *items = arr;
    *n = len;
    return PLLM_OK;
}

/* ---------------------------------------------------------------- scopes */

pllm_status pllm_jscope_new(pllm_jctx *c, pllm_jscope *parent, pllm_jscope **out)
{
    pllm_jscope *s = jalloc(c, sizeof *s);
    if (!s) return PLLM_ERR_NOMEM;
    memset(s, 0, sizeof *s);
    s->parent = parent;
    *out = s;
    return PLLM_OK;
}

pllm_status pllm_jscope_set(pllm_jctx *c, pllm_jscope *s, const char *name, pllm_jv v)
{
    for (size_t i = 0; i < s->n; i++) {
        if (strcmp(s->names[i], name) == 0) {
            s->vals[i] = v;
            return PLLM_OK;
        }
    }
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 4;
        const char **names = jalloc(c, cap * sizeof *names);
        pllm_jv *vals = jalloc(c, cap * sizeof *vals);
        if (!names || !vals) return PLLM_ERR_NOMEM;
        if (s->n) {
            memcpy(names, s->names, s->n * sizeof *names);
            memcpy(vals, s->vals, s->n * sizeof *vals);
        }
        s->names = names;
        s->vals = vals;
        s->cap = cap;
    }
    s->names[s->n] = name;
    s->vals[s->n] = v;
    s->n++;
    return PLLM_OK;
}

bool pllm_jscope_lookup(const pllm_jscope *s, const char *name, pllm_jv *out)
{
    for (; s; s = s->parent) {
        for (size_t i = s->n; i-- > 0;) {
            if (strcmp(s->names[i], name) == 0) {
                *out = s->vals[i];
                return true;
            }
        }
    }
    return false;
}

/* ---------------------------------------------------------------- argument binding */

pllm_status pllm_jargs_bind(pllm_jctx *c, const char *what, const pllm_jargs *args,
                            const char *const *params, size_t n_params, size_t n_required,
                            pllm_jv *vals, bool *given)
{
    for (size_t i = 0; i < n_params; i++) {
        given[i] = false;
        vals[i] = pllm_jv_undef();
    }
    if (args->n_pos > n_params)
        return pllm_jerr(c, PLLM_ERR_INVALID,
                         "TypeError: %s takes at most %zu argument(s) (%zu given)", what, n_params,
                         args->n_pos);
    for (size_t i = 0; i < args->n_pos; i++) {
        vals[i] = args->pos[i];
        given[i] = true;
    }
    for (size_t k = 0; k < args->n_kw; k++) {
        size_t i = 0;
        while (i < n_params && strcmp(params[i], args->kw_names[k]) != 0) i++;
        if (i == n_params)
            return pllm_jerr(c, PLLM_ERR_INVALID,
                             "TypeError: %s got an unexpected keyword argument '%s'", what,
                             args->kw_names[k]);
        if (given[i])
            return pllm_jerr(c, PLLM_ERR_INVALID,
                             "TypeError: %s got multiple values for argument '%s'", what,
                             params[i]);
        vals[i] = args->kw[k];
        given[i] = true;
    }
    for (size_t i = 0; i < n_required; i++)
        if (!given[i])
            return pllm_jerr(c, PLLM_ERR_INVALID, "TypeError: %s missing required argument '%s'",
                             what, params[i]);
    return PLLM_OK;
}
