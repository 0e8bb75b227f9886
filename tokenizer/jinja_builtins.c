/*
 * jinja_builtins.c: what the environment provides besides filters and tests: the tables of
 * builtin names, the sandbox's attribute and item access (Python attributes of str, list,
 * dict, loop, namespace values; jinja2's getattr/getitem/undefined rules; slices), binary
 * operators with Python's numeric rules, the globals (range, namespace, dict,
 * raise_exception, strftime_now) and method calls on dicts, lists and loops. str methods
 * are in jinja_str.c; filters, tests and generators in jinja_filters.c.
 *
 * The rule everywhere: reproduce Python's result exactly, or fail with an error naming the
 * construct. Where Python would print an object's address, or where a feature is outside the
 * subset, the render fails rather than guesses.
 */
#include "tokenizer/jinja_builtins.h"

#include "tokenizer/jinja_unicode.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---------------------------------------------------------------- ids and names */

static const pllm_jb_named k_filters[] = {
    {"abs", F_ABS},         {"attr", F_ATTR},
    {"batch", F_BATCH},     {"capitalize", F_CAPITALIZE},
    {"count", F_LENGTH},    {"d", F_DEFAULT},
    {"default", F_DEFAULT}, {"dictsort", F_DICTSORT},
    {"e", F_ESCAPE},        {"escape", F_ESCAPE},
    {"first", F_FIRST},     {"float", F_FLOAT},
    {"format", F_FORMAT},   {"indent", F_INDENT},
    {"int", F_INT},         {"items", F_ITEMS},
    {"join", F_JOIN},       {"last", F_LAST},
    {"length", F_LENGTH},   {"list", F_LIST},
    {"lower", F_LOWER},     {"map", F_MAP},
    {"max", F_MAX},         {"min", F_MIN},
    {"reject", F_REJECT},   {"rejectattr", F_REJECTATTR},
    {"replace", F_REPLACE}, {"reverse", F_REVERSE},
    {"round", F_ROUND},     {"safe", F_SAFE},
    {"select", F_SELECT},   {"selectattr", F_SELECTATTR},
    {"sort", F_SORT},       {"string", F_STRING},
    {"sum", F_SUM},         {"title", F_TITLE},
    {"tojson", F_TOJSON},   {"trim", F_TRIM},
    {"unique", F_UNIQUE},   {"upper", F_UPPER},
};
/* jinja2 filters outside the subset */
static const char *const k_filters_unsupported[] = {
    "center",    "filesizeformat", "forceescape", "groupby", "pprint",    "random",   "slice",
    "striptags", "truncate",       "urlencode",   "urlize",  "wordcount", "wordwrap", "xmlattr"};

static const pllm_jb_named k_tests[] = {
    {"odd", T_ODD},
    {"even", T_EVEN},
    {"divisibleby", T_DIVISIBLEBY},
    {"defined", T_DEFINED},
    {"undefined", T_UNDEFINED},
    {"none", T_NONE},
    {"boolean", T_BOOLEAN},
    {"false", T_FALSE},
    {"true", T_TRUE},
    {"integer", T_INTEGER},
    {"float", T_FLOAT},
    {"lower", T_LOWER},
    {"upper", T_UPPER},
    {"string", T_STRING},
    {"mapping", T_MAPPING},
    {"number", T_NUMBER},
    {"sequence", T_SEQUENCE},
    {"iterable", T_ITERABLE},
    {"callable", T_CALLABLE},
    {"sameas", T_SAMEAS},
    {"escaped", T_ESCAPED},
    {"in", T_IN},
    {"==", T_EQ},
    {"eq", T_EQ},
    {"equalto", T_EQ},
    {"!=", T_NE},
    {"ne", T_NE},
    {">", T_GT},
    {"gt", T_GT},
    {"greaterthan", T_GT},
    {">=", T_GE},
    {"ge", T_GE},
    {"<", T_LT},
    {"lt", T_LT},
    {"lessthan", T_LT},
    {"<=", T_LE},
    {"le", T_LE},
};
static const char *const k_tests_unsupported[] = {"filter", "test"};

static const pllm_jb_named k_globals[] = {
    {"range", G_RANGE},           {"namespace", G_NAMESPACE},   {"dict", G_DICT},
    {"raise_exception", G_RAISE}, {"strftime_now", G_STRFTIME}, {"lipsum", G_LIPSUM},
    {"cycler", G_CYCLER},         {"joiner", G_JOINER},
};

static const pllm_jb_named k_str_methods[] = {
    {"strip", M_STRIP},
    {"lstrip", M_LSTRIP},
    {"rstrip", M_RSTRIP},
    {"split", M_SPLIT},
    {"rsplit", M_RSPLIT},
    {"splitlines", M_SPLITLINES},
    {"startswith", M_STARTSWITH},
    {"endswith", M_ENDSWITH},
    {"upper", M_UPPER},
    {"lower", M_LOWER},
    {"title", M_TITLE},
    {"capitalize", M_CAPITALIZE},
    {"replace", M_REPLACE},
    {"find", M_FIND},
    {"rfind", M_RFIND},
    {"index", M_INDEX},
    {"rindex", M_RINDEX},
    {"count", M_COUNT},
    {"join", M_JOIN},
    {"removeprefix", M_REMOVEPREFIX},
    {"removesuffix", M_REMOVESUFFIX},
    {"isspace", M_ISSPACE},
    {"islower", M_ISLOWER},
    {"isupper", M_ISUPPER},
    {"isdigit", M_ISDIGIT},
    {"isalpha", M_ISALPHA},
    {"isalnum", M_ISALNUM},
    {"format", M_FORMAT},
};

/* Python attributes of builtin types that pllm does not implement: using one fails. */
static const char *const k_str_other[] = {"casefold",   "center",      "encode",    "expandtabs",
                                          "format_map", "isascii",     "isdecimal", "isidentifier",
                                          "isnumeric",  "isprintable", "istitle",   "ljust",
                                          "maketrans",  "partition",   "rjust",     "rpartition",
                                          "swapcase",   "translate",   "zfill"};
static const char *const k_dict_unsafe[] = {"clear", "pop", "popitem", "setdefault", "update"};
static const char *const k_dict_other[] = {"copy", "fromkeys"};
static const char *const k_list_unsafe[] = {"append", "clear",  "extend",  "insert",
                                            "pop",    "remove", "reverse", "sort"};
static const char *const k_list_other[] = {"copy"};
static const char *const k_num_other[] = {
    "as_integer_ratio", "bit_count", "bit_length", "conjugate", "denominator", "from_bytes", "imag",
    "numerator",        "real",      "to_bytes",   "fromhex",   "hex",         "is_integer"};

int pllm_jb_find_named(const pllm_jb_named *t, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(t[i].name, name) == 0) return t[i].id;
    return -1;
}

static bool in_list(const char *const *t, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(t[i], name) == 0) return true;
    return false;
}

int pllm_jinja_builtin_lookup(pllm_jbuiltin_kind kind, const char *name)
{
    if (kind == PLLM_JB_FILTER) {
        int id = pllm_jb_find_named(k_filters, PLLM_ARRAY_LEN(k_filters), name);
        if (id >= 0) return id;
        return in_list(k_filters_unsupported, PLLM_ARRAY_LEN(k_filters_unsupported), name) ? -2
                                                                                           : -1;
    }
    int id = pllm_jb_find_named(k_tests, PLLM_ARRAY_LEN(k_tests), name);
    if (id >= 0) return id;
    return in_list(k_tests_unsupported, PLLM_ARRAY_LEN(k_tests_unsupported), name) ? -2 : -1;
}

bool pllm_jinja_filter_needs_context(int id)
{
    return id == F_MAP || id == F_SELECT || id == F_REJECT || id == F_SELECTATTR ||
           id == F_REJECTATTR;
}

const char *pllm_jb_func_name(int id)
{
    for (size_t i = 0; i < PLLM_ARRAY_LEN(k_globals); i++)
        if (k_globals[i].id == id) return k_globals[i].name;
    for (size_t i = 0; i < PLLM_ARRAY_LEN(k_str_methods); i++)
        if (k_str_methods[i].id == id) return k_str_methods[i].name;
    switch (id) {
    case M_DICT_ITEMS:
        return "items";
    case M_DICT_KEYS:
        return "keys";
    case M_DICT_VALUES:
        return "values";
    case M_DICT_GET:
        return "get";
    case M_SEQ_COUNT:
        return "count";
    case M_SEQ_INDEX:
        return "index";
    case M_LOOP_CYCLE:
        return "cycle";
    case M_LOOP_CHANGED:
        return "changed";
    default:
        return "function";
    }
}

/* ---------------------------------------------------------------- small helpers */

void *pllm_jb_alloc(pllm_jctx *c, size_t n)
{
    void *p = pllm_jarena_alloc(c->arena, n ? n : 1);
    if (!p) pllm_error_prefix(PLLM_ERR_NOMEM, "%s:%d: ", c->name, c->line);
    return p;
}

pllm_status pllm_jb_new_func(pllm_jctx *c, int id, pllm_jv self, pllm_jv *out)
{
    pllm_jfunc *f = pllm_jb_alloc(c, sizeof *f);
    if (!f) return PLLM_ERR_NOMEM;
    f->id = id;
    f->self = self;
    *out = (pllm_jv){.t = PLLM_JV_FUNC, .fn = f};
    return PLLM_OK;
}

/* pllm_jb_soft_str(): the value if it is a string, else str(value). */
pllm_status pllm_jb_soft_str(pllm_jctx *c, pllm_jv v, pllm_jv *out)
{
    return pllm_jv_to_str(c, v, out);
}

pllm_status pllm_jb_mark(pllm_jctx *c, pllm_jv *v, bool markup)
{
    if (!markup || v->s->markup) return PLLM_OK;
    pllm_jv copy;
    PLLM_TRY(pllm_jv_str(c, v->s->s, v->s->len, &copy));
    copy.s->markup = true;
    *v = copy;
    return PLLM_OK;
}

/* markupsafe.escape() of a plain string. */
pllm_status pllm_jb_html_escape(pllm_jctx *c, const pllm_jstr *s, pllm_jv *out)
{
    pllm_jsb b = {0};
    size_t run = 0;
    for (size_t i = 0; i < s->len; i++) {
        const char *rep = NULL;
        switch (s->s[i]) {
        case '&':
            rep = "&amp;";
            break;
        case '<':
            rep = "&lt;";
            break;
        case '>':
            rep = "&gt;";
            break;
        case '"':
            rep = "&#34;";
            break;
        case '\'':
            rep = "&#39;";
            break;
        default:
            run++;
            continue;
        }
        PLLM_TRY(pllm_jsb_append(c, &b, s->s + i - run, run));
        run = 0;
        PLLM_TRY(pllm_jsb_appendc(c, &b, rep));
    }
    PLLM_TRY(pllm_jsb_append(c, &b, s->s + s->len - run, run));
    PLLM_TRY(pllm_jv_str_sb(c, &b, out));
    out->s->markup = true;
    return PLLM_OK;
}

pllm_status pllm_jb_bind(pllm_jctx *c, const char *what, const pllm_jargs *a,
                         const char *const *params, size_t n, size_t required, pllm_jv *vals,
                         bool *given)
{
    return pllm_jargs_bind(c, what, a, params, n, required, vals, given);
}

pllm_status pllm_jb_no_args(pllm_jctx *c, const char *what, const pllm_jargs *a)
{
    if (a->n_pos || a->n_kw) return TYPE_ERROR(c, "%s takes no arguments", what);
    return PLLM_OK;
}

/* Positional-only parameters (most str methods). */
pllm_status pllm_jb_pos_only(pllm_jctx *c, const char *what, const pllm_jargs *a, size_t min,
                             size_t max)
{
    if (a->n_kw) return TYPE_ERROR(c, "%s takes no keyword arguments", what);
    if (a->n_pos < min || a->n_pos > max)
        return TYPE_ERROR(c, "%s takes %zu to %zu arguments (%zu given)", what, min, max, a->n_pos);
    return PLLM_OK;
}

pllm_status pllm_jb_float_to_int(pllm_jctx *c, double f, pllm_jv *out)
{
    double t = trunc(f);
    if (!(t >= -9223372036854775808.0 && t < 9223372036854775808.0)) return OVERFLOW(c);
    *out = pllm_jv_int((int64_t)t);
    return PLLM_OK;
}

/* ---------------------------------------------------------------- numbers */

static pllm_status int_add(pllm_jctx *c, int64_t a, int64_t b, pllm_jv *out)
{
    int64_t r;
    if (__builtin_add_overflow(a, b, &r)) return OVERFLOW(c);
    *out = pllm_jv_int(r);
    return PLLM_OK;
}

static double py_fmod(double x, double y)
{
    double mod = fmod(x, y);
    if (mod != 0) {
        if ((y < 0) != (mod < 0)) mod += y;
    } else {
        mod = copysign(0.0, y);
    }
    return mod;
}

static double py_floordiv(double vx, double wx)
{
    double mod = fmod(vx, wx);
    double div = (vx - mod) / wx;
    if (mod != 0) {
        if ((wx < 0) != (mod < 0)) div -= 1.0;
    }
    double floordiv;
    if (div != 0) {
        floordiv = floor(div);
        if (div - floordiv > 0.5) floordiv += 1.0;
    } else {
        floordiv = copysign(0.0, vx / wx);
    }
    return floordiv;
}

static const char *op_symbol(int op)
{
    switch (op) {
    case PLLM_JOP_ADD:
        return "+";
    case PLLM_JOP_SUB:
        return "-";
    case PLLM_JOP_MUL:
        return "*";
    case PLLM_JOP_DIV:
        return "/";
    case PLLM_JOP_FLOORDIV:
        return "//";
    case PLLM_JOP_MOD:
        return "%";
    default:
        return "** or pow()";
    }
}

static pllm_status repeat(pllm_jctx *c, pllm_jv seq, int64_t times, pllm_jv *out)
{
    if (times < 0) times = 0;
    if (seq.t == PLLM_JV_STR) {
        if (seq.s->len && (uint64_t)times > c->max_str / seq.s->len)
            return pllm_jerr(c, PLLM_ERR_RANGE, "string exceeds the limit of %zu bytes",
                             c->max_str);
        pllm_jsb b = {0};
        for (int64_t i = 0; i < times; i++) PLLM_TRY(pllm_jsb_append(c, &b, seq.s->s, seq.s->len));
        PLLM_TRY(pllm_jv_str_sb(c, &b, out));
        return pllm_jb_mark(c, out, seq.s->markup);
    }
    size_t n = seq.l->n;
    if (n && (uint64_t)times > c->max_str / sizeof(pllm_jv) / n)
        return pllm_jerr(c, PLLM_ERR_RANGE, "list exceeds the size limit");
    PLLM_TRY(pllm_jv_list(c, n * (size_t)times, seq.l->kind, out));
    for (int64_t i = 0; i < times; i++)
        if (n) memcpy(out->l->v + (size_t)i * n, seq.l->v, n * sizeof(pllm_jv));
    return PLLM_OK;
}

pllm_status pllm_jinja_binop(pllm_jctx *c, int op, pllm_jv a, pllm_jv b, pllm_jv *out)
{
    /* the left operand's method runs first: str % Undefined formats, it does not fail */
    if (op == PLLM_JOP_MOD && a.t == PLLM_JV_STR) return pllm_jb_str_format(c, a, b, out);
    if (a.t == PLLM_JV_UNDEF) return pllm_jv_undef_fail(c, a);
    if (b.t == PLLM_JV_UNDEF) return pllm_jv_undef_fail(c, b);
    if (is_num(a) && is_num(b)) {
        bool ints = is_int_like(a) && is_int_like(b);
        int64_t x = ints ? as_int(a) : 0, y = ints ? as_int(b) : 0;
        double fx = as_float(a), fy = as_float(b);
        int64_t r;
        switch (op) {
        case PLLM_JOP_ADD:
            if (ints) return int_add(c, x, y, out);
            *out = pllm_jv_float(fx + fy);
            return PLLM_OK;
        case PLLM_JOP_SUB:
            if (ints) {
                if (__builtin_sub_overflow(x, y, &r)) return OVERFLOW(c);
                *out = pllm_jv_int(r);
                return PLLM_OK;
            }
            *out = pllm_jv_float(fx - fy);
            return PLLM_OK;
        case PLLM_JOP_MUL:
            if (ints) {
                if (__builtin_mul_overflow(x, y, &r)) return OVERFLOW(c);
                *out = pllm_jv_int(r);
                return PLLM_OK;
            }
            *out = pllm_jv_float(fx * fy);
            return PLLM_OK;
        case PLLM_JOP_DIV:
            if (fy == 0)
                return pllm_jerr(c, PLLM_ERR_INVALID, "ZeroDivisionError: division by zero");
            if (ints && (llabs(x) > (1LL << 53) || llabs(y) > (1LL << 53)))
                return pllm_jerr(c, PLLM_ERR_UNSUPPORTED,
                                 "true division of integers above 2**53 is not supported");
            *out = pllm_jv_float(fx / fy);
            return PLLM_OK;
        case PLLM_JOP_FLOORDIV:
        case PLLM_JOP_MOD:
            if (ints) {
                if (y == 0)
                    return pllm_jerr(c, PLLM_ERR_INVALID,
                                     "ZeroDivisionError: integer division or modulo by zero");
                if (x == INT64_MIN && y == -1) return OVERFLOW(c);
                int64_t q = x / y, m = x % y;
                if (m != 0 && ((m < 0) != (y < 0))) {
                    q -= 1;
                    m += y;
                }
                *out = pllm_jv_int(op == PLLM_JOP_MOD ? m : q);
                return PLLM_OK;
            }
            if (fy == 0)
                return pllm_jerr(c, PLLM_ERR_INVALID, "ZeroDivisionError: float %s",
                                 op == PLLM_JOP_MOD ? "modulo" : "floor division by zero");
            *out = pllm_jv_float(op == PLLM_JOP_MOD ? py_fmod(fx, fy) : py_floordiv(fx, fy));
            return PLLM_OK;
        default: /* POW */
            if (ints && y >= 0) {
                int64_t res = 1, base = x;
                int64_t e = y;
                while (e > 0) {
                    if (e & 1)
                        if (__builtin_mul_overflow(res, base, &res)) return OVERFLOW(c);
                    e >>= 1;
                    if (e && __builtin_mul_overflow(base, base, &base)) return OVERFLOW(c);
                }
                *out = pllm_jv_int(res);
                return PLLM_OK;
            }
            if (fx == 0 && fy < 0)
                return pllm_jerr(c, PLLM_ERR_INVALID,
                                 "ZeroDivisionError: 0.0 cannot be raised to a negative power");
            if (fx < 0 && fy != floor(fy))
                return pllm_jerr(c, PLLM_ERR_UNSUPPORTED,
                                 "complex results of ** are not supported");
            double pr = pow(fx, fy);
            /* float.__pow__ reports overflow of finite operands (errno ERANGE) */
            if (isinf(pr) && isfinite(fx) && isfinite(fy))
                return pllm_jerr(c, PLLM_ERR_INVALID,
                                 "OverflowError: (34, 'Numerical result out of range')");
            *out = pllm_jv_float(pr);
            return PLLM_OK;
        }
    }
    if (op == PLLM_JOP_ADD) {
        if (a.t == PLLM_JV_STR && b.t == PLLM_JV_STR) {
            pllm_jv ea = a, eb = b;
            bool markup = a.s->markup || b.s->markup;
            /* markupsafe: adding a plain string to Markup escapes the plain one */
            if (markup && !a.s->markup) PLLM_TRY(pllm_jb_html_escape(c, a.s, &ea));
            if (markup && !b.s->markup) PLLM_TRY(pllm_jb_html_escape(c, b.s, &eb));
            pllm_jsb buf = {0};
            PLLM_TRY(pllm_jsb_append(c, &buf, ea.s->s, ea.s->len));
            PLLM_TRY(pllm_jsb_append(c, &buf, eb.s->s, eb.s->len));
            PLLM_TRY(pllm_jv_str_sb(c, &buf, out));
            return pllm_jb_mark(c, out, markup);
        }
        if (a.t == PLLM_JV_LIST && b.t == PLLM_JV_LIST && a.l->kind == b.l->kind &&
            (a.l->kind == PLLM_JL_LIST || a.l->kind == PLLM_JL_TUPLE)) {
            PLLM_TRY(pllm_jv_list(c, a.l->n + b.l->n, a.l->kind, out));
            if (a.l->n) memcpy(out->l->v, a.l->v, a.l->n * sizeof(pllm_jv));
            if (b.l->n) memcpy(out->l->v + a.l->n, b.l->v, b.l->n * sizeof(pllm_jv));
            return PLLM_OK;
        }
        if (a.t == PLLM_JV_STR && !a.s->markup)
            return TYPE_ERROR(c, "can only concatenate str (not \"%s\") to str",
                              pllm_jv_type_name(b));
        if (a.t == PLLM_JV_LIST && (a.l->kind == PLLM_JL_LIST || a.l->kind == PLLM_JL_TUPLE))
            return TYPE_ERROR(c, "can only concatenate %s (not \"%s\") to %s", pllm_jv_type_name(a),
                              pllm_jv_type_name(b), pllm_jv_type_name(a));
    }
    if (op == PLLM_JOP_MUL) {
        bool seq_a =
            a.t == PLLM_JV_STR ||
            (a.t == PLLM_JV_LIST && (a.l->kind == PLLM_JL_LIST || a.l->kind == PLLM_JL_TUPLE));
        bool seq_b =
            b.t == PLLM_JV_STR ||
            (b.t == PLLM_JV_LIST && (b.l->kind == PLLM_JL_LIST || b.l->kind == PLLM_JL_TUPLE));
        if (seq_a && is_int_like(b)) return repeat(c, a, as_int(b), out);
        if (seq_b && is_int_like(a)) return repeat(c, b, as_int(a), out);
    }
    return TYPE_ERROR(c, "unsupported operand type(s) for %s: '%s' and '%s'", op_symbol(op),
                      pllm_jv_type_name(a), pllm_jv_type_name(b));
}

/* ---------------------------------------------------------------- attribute access */

static pllm_status unsafe_undef(pllm_jctx *c, const char *attr, pllm_jv obj, pllm_jv *out)
{
    char *hint = pllm_jb_alloc(c, 160);
    if (!hint) return PLLM_ERR_NOMEM;
    snprintf(hint, 160, "access to attribute '%s' of '%s' object is unsafe.", attr,
             pllm_jv_type_name(obj));
    return pllm_jv_undef_hint(c, hint, out);
}

static pllm_status loop_attr(pllm_jctx *c, pllm_jv obj, const char *name, bool *found, pllm_jv *out)
{
    const pllm_jloop *l = obj.loop;
    *found = true;
    int64_t i = (int64_t)l->i, n = (int64_t)l->n;
    if (!strcmp(name, "index"))
        *out = pllm_jv_int(i + 1);
    else if (!strcmp(name, "index0"))
        *out = pllm_jv_int(i);
    else if (!strcmp(name, "revindex"))
        *out = pllm_jv_int(n - i);
    else if (!strcmp(name, "revindex0"))
        *out = pllm_jv_int(n - i - 1);
    else if (!strcmp(name, "first"))
        *out = pllm_jv_bool(i == 0);
    else if (!strcmp(name, "last"))
        *out = pllm_jv_bool(i == n - 1);
    else if (!strcmp(name, "length"))
        *out = pllm_jv_int(n);
    else if (!strcmp(name, "depth"))
        *out = pllm_jv_int(1);
    else if (!strcmp(name, "depth0"))
        *out = pllm_jv_int(0);
    else if (!strcmp(name, "previtem")) {
        if (i > 0)
            *out = l->items[i - 1];
        else
            return pllm_jv_undef_hint(c, "there is no previous item", out);
    } else if (!strcmp(name, "nextitem")) {
        if (i + 1 < n)
            *out = l->items[i + 1];
        else
            return pllm_jv_undef_hint(c, "there is no next item", out);
    } else if (!strcmp(name, "cycle"))
        return pllm_jb_new_func(c, M_LOOP_CYCLE, obj, out);
    else if (!strcmp(name, "changed"))
        return pllm_jb_new_func(c, M_LOOP_CHANGED, obj, out);
    else
        *found = false;
    return PLLM_OK;
}

/* Python's getattr(obj, name) under the immutable sandbox: *found false when the object has
 * no such attribute. Attributes pllm does not model fail with an error. */
pllm_status pllm_jb_py_getattr(pllm_jctx *c, pllm_jv obj, const char *name, bool *found,
                               pllm_jv *out)
{
    *found = false;
    if (name[0] == '_' && name[1] == '_') {
        /* dunder attributes exist on every object and the sandbox marks them unsafe */
        *found = true;
        return unsafe_undef(c, name, obj, out);
    }
    int id;
    switch (obj.t) {
    case PLLM_JV_STR:
        id = pllm_jb_find_named(k_str_methods, PLLM_ARRAY_LEN(k_str_methods), name);
        if (id >= 0) {
            if (obj.s->markup)
                return pllm_jerr(c, PLLM_ERR_UNSUPPORTED,
                                 "methods of Markup (safe) strings are not supported");
            *found = true;
            return pllm_jb_new_func(c, id, obj, out);
        }
        if (in_list(k_str_other, PLLM_ARRAY_LEN(k_str_other), name))
            return pllm_jerr(c, PLLM_ERR_UNSUPPORTED, "str.%s is not supported", name);
        return PLLM_OK;
    case PLLM_JV_DICT:
        id = !strcmp(name, "items")    ? M_DICT_ITEMS
             : !strcmp(name, "keys")   ? M_DICT_KEYS
             : !strcmp(name, "values") ? M_DICT_VALUES
             : !strcmp(name, "get")    ? M_DICT_GET
                                       : -1;
        if (id >= 0) {
            *found = true;
            return pllm_jb_new_func(c, id, obj, out);
        }
        if (in_list(k_dict_unsafe, PLLM_ARRAY_LEN(k_dict_unsafe), name)) {
            *found = true;
            return unsafe_undef(c, name, obj, out);
        }
        if (in_list(k_dict_other, PLLM_ARRAY_LEN(k_dict_other), name))
            return pllm_jerr(c, PLLM_ERR_UNSUPPORTED, "dict.%s is not supported", name);
        return PLLM_OK;
    case PLLM_JV_LIST: {
        uint8_t k = obj.l->kind;
        if (k == PLLM_JL_LIST || k == PLLM_JL_TUPLE || k == PLLM_JL_RANGE) {
            if (!strcmp(name, "count") || !strcmp(name, "index")) {
                *found = true;
                return pllm_jb_new_func(c, name[0] == 'c' ? M_SEQ_COUNT : M_SEQ_INDEX, obj, out);
            }
        }
        if (k == PLLM_JL_RANGE &&
            (!strcmp(name, "start") || !strcmp(name, "stop") || !strcmp(name, "step"))) {
            *found = true;
            *out = pllm_jv_int(name[2] == 'a'   ? obj.l->r_start
                               : name[2] == 'o' ? obj.l->r_stop
                                                : obj.l->r_step);
            return PLLM_OK;
        }
        if (k == PLLM_JL_LIST && in_list(k_list_unsafe, PLLM_ARRAY_LEN(k_list_unsafe), name)) {
            *found = true;
            return unsafe_undef(c, name, obj, out);
        }
        if (k == PLLM_JL_LIST && in_list(k_list_other, PLLM_ARRAY_LEN(k_list_other), name))
            return pllm_jerr(c, PLLM_ERR_UNSUPPORTED, "list.%s is not supported", name);
        if (k != PLLM_JL_LIST && k != PLLM_JL_TUPLE && k != PLLM_JL_RANGE &&
            !strcmp(name, "mapping"))
            return pllm_jerr(c, PLLM_ERR_UNSUPPORTED, "dict view attributes are not supported");
        return PLLM_OK;
    }
    case PLLM_JV_BOOL:
    case PLLM_JV_INT:
    case PLLM_JV_FLOAT:
        if (in_list(k_num_other, PLLM_ARRAY_LEN(k_num_other), name))
            return pllm_jerr(c, PLLM_ERR_UNSUPPORTED, "%s.%s is not supported",
                             pllm_jv_type_name(obj), name);
        return PLLM_OK;
    case PLLM_JV_NS: {
        pllm_jv key;
        PLLM_TRY(pllm_jv_strc(c, name, &key));
        PLLM_TRY(pllm_jinja_charge(c, obj.ns->attrs.n / 8 + 1));
        *found = pllm_jdict_get(&obj.ns->attrs, key, out);
        return PLLM_OK;
    }
    case PLLM_JV_LOOP:
        return loop_attr(c, obj, name, found, out);
    case PLLM_JV_MACRO:
    case PLLM_JV_GEN:
    case PLLM_JV_FUNC:
        if (!strcmp(name, "name") || !strcmp(name, "arguments") || !strcmp(name, "defaults") ||
            !strcmp(name, "catch_kwargs") || !strcmp(name, "catch_varargs") ||
            !strcmp(name, "caller") || !strncmp(name, "gi_", 3) || !strcmp(name, "send") ||
            !strcmp(name, "throw") || !strcmp(name, "close"))
            return pllm_jerr(c, PLLM_ERR_UNSUPPORTED, "attribute '%s' of a %s is not supported",
                             name, pllm_jv_type_name(obj));
        return PLLM_OK;
    default:
        return PLLM_OK;
    }
}

/* obj[key] for the container types; *found false when Python would raise. */
static pllm_status py_getitem(pllm_jctx *c, pllm_jv obj, pllm_jv key, bool *found, pllm_jv *out)
{
    *found = false;
    if (obj.t == PLLM_JV_DICT) {
        if (pllm_jv_check_hashable(c, key) != PLLM_OK) {
            pllm_error_clear();
            return PLLM_OK; /* TypeError: falls back like a missing key */
        }
        PLLM_TRY(pllm_jinja_charge(c, obj.d->n / 8 + 1));
        *found = pllm_jdict_get(obj.d, key, out);
        return PLLM_OK;
    }
    if (!is_int_like(key)) return PLLM_OK;
    int64_t i = as_int(key);
    if (obj.t == PLLM_JV_STR) {
        int64_t n = (int64_t)obj.s->nchars;
        if (i < 0) i += n;
        if (i < 0 || i >= n) return PLLM_OK;
        *found = true;
        PLLM_TRY(pllm_jb_substr(c, obj.s, (size_t)i, (size_t)i + 1, out));
        return pllm_jb_mark(c, out, obj.s->markup);
    }
    if (obj.t == PLLM_JV_LIST && (obj.l->kind == PLLM_JL_LIST || obj.l->kind == PLLM_JL_TUPLE ||
                                  obj.l->kind == PLLM_JL_RANGE)) {
        int64_t n = (int64_t)obj.l->n;
        if (i < 0) i += n;
        if (i < 0 || i >= n) return PLLM_OK;
        *found = true;
        *out = obj.l->v[i];
    }
    return PLLM_OK;
}

pllm_status pllm_jinja_getattr(pllm_jctx *c, pllm_jv obj, const char *name, pllm_jv *out)
{
    if (obj.t == PLLM_JV_UNDEF) return pllm_jv_undef_fail(c, obj);
    bool found;
    PLLM_TRY(pllm_jb_py_getattr(c, obj, name, &found, out));
    if (found) return PLLM_OK;
    pllm_jv key;
    PLLM_TRY(pllm_jv_strc(c, name, &key));
    PLLM_TRY(py_getitem(c, obj, key, &found, out));
    if (found) return PLLM_OK;
    return pllm_jv_undef_attr(c, obj, key, out);
}

pllm_status pllm_jinja_getitem(pllm_jctx *c, pllm_jv obj, pllm_jv key, pllm_jv *out)
{
    if (obj.t == PLLM_JV_UNDEF) return pllm_jv_undef_fail(c, obj);
    bool found;
    PLLM_TRY(py_getitem(c, obj, key, &found, out));
    if (found) return PLLM_OK;
    if (key.t == PLLM_JV_STR) {
        PLLM_TRY(pllm_jb_py_getattr(c, obj, key.s->s, &found, out));
        if (found) return PLLM_OK;
    }
    return pllm_jv_undef_attr(c, obj, key, out);
}

pllm_status pllm_jinja_slice(pllm_jctx *c, pllm_jv obj, const pllm_jv *start, const pllm_jv *stop,
                             const pllm_jv *stepv, pllm_jv *out)
{
    /* jinja2 compiles slices to Python's own obj[a:b:c], bypassing the sandbox's getitem:
     * errors propagate instead of becoming undefined */
    if (obj.t == PLLM_JV_UNDEF) return pllm_jv_undef_fail(c, obj);
    bool is_str = obj.t == PLLM_JV_STR;
    bool is_seq =
        obj.t == PLLM_JV_LIST && (obj.l->kind == PLLM_JL_LIST || obj.l->kind == PLLM_JL_TUPLE);
    is_seq |= obj.t == PLLM_JV_LIST && obj.l->kind == PLLM_JL_RANGE;
    /* constant folding (as_const) goes through the sandbox's getitem: TypeError -> undefined */
    bool bad_index = false;
    for (int k = 0; k < 3; k++) {
        const pllm_jv *x = k == 0 ? start : k == 1 ? stop : stepv;
        if (x && x->t != PLLM_JV_NONE && x->t != PLLM_JV_UNDEF && !is_int_like(*x))
            bad_index = true;
    }
    if (c->const_mode && ((!is_str && !is_seq) || bad_index)) {
        c->const_slice_undef++;
        pllm_jv key;
        PLLM_TRY(pllm_jv_strc(c, "slice", &key));
        return pllm_jv_undef_attr(c, obj, key, out);
    }
    if (obj.t == PLLM_JV_DICT) return TYPE_ERROR(c, "unhashable type: 'slice'");
    if (!is_str && !is_seq)
        return TYPE_ERROR(c, "'%s' object is not subscriptable", pllm_jv_type_name(obj));
    const pllm_jv *parts[3] = {start, stop, stepv};
    int64_t v[3] = {0, 0, 1};
    bool given[3] = {false, false, false};
    for (int k = 0; k < 3; k++) {
        if (!parts[k] || parts[k]->t == PLLM_JV_NONE) continue;
        if (parts[k]->t == PLLM_JV_UNDEF) return pllm_jv_undef_fail(c, *parts[k]);
        if (!is_int_like(*parts[k]))
            return TYPE_ERROR(c,
                              "slice indices must be integers or None or have an __index__ method");
        v[k] = as_int(*parts[k]);
        given[k] = true;
    }
    int64_t stepn = given[2] ? v[2] : 1;
    if (stepn == 0) return pllm_jerr(c, PLLM_ERR_INVALID, "ValueError: slice step cannot be zero");
    int64_t len = is_str ? (int64_t)obj.s->nchars : (int64_t)obj.l->n;
    int64_t lo, hi;
    /* PySlice_AdjustIndices */
    if (!given[0]) {
        lo = stepn < 0 ? len - 1 : 0;
    } else {
        lo = v[0];
        if (lo < 0) {
            lo += len;
            if (lo < 0) lo = stepn < 0 ? -1 : 0;
        } else if (lo >= len) {
            lo = stepn < 0 ? len - 1 : len;
        }
    }
    if (!given[1]) {
        hi = stepn < 0 ? -1 : len;
    } else {
        hi = v[1];
        if (hi < 0) {
            hi += len;
            if (hi < 0) hi = stepn < 0 ? -1 : 0;
        } else if (hi >= len) {
            hi = stepn < 0 ? len - 1 : len;
        }
    }
    int64_t count = 0;
    if (stepn > 0 && hi > lo) count = (hi - lo - 1) / stepn + 1;
    if (stepn < 0 && lo > hi) count = (lo - hi - 1) / (-stepn) + 1;
    if (is_str) {
        if (stepn == 1) {
            PLLM_TRY(pllm_jb_substr(c, obj.s, (size_t)lo, (size_t)(lo + count), out));
            return pllm_jb_mark(c, out, obj.s->markup);
        }
        pllm_jb_cpbuf cp;
        PLLM_TRY(pllm_jb_decode(c, obj.s, &cp));
        pllm_jsb b = {0};
        for (int64_t k = 0; k < count; k++) PLLM_TRY(pllm_jsb_cp(c, &b, cp.v[lo + k * stepn]));
        PLLM_TRY(pllm_jv_str_sb(c, &b, out));
        return pllm_jb_mark(c, out, obj.s->markup);
    }
    PLLM_TRY(pllm_jv_list(c, (size_t)count, obj.l->kind, out));
    for (int64_t k = 0; k < count; k++) out->l->v[k] = obj.l->v[lo + k * stepn];
    if (obj.l->kind == PLLM_JL_RANGE) {
        /* range slicing makes a range: CPython's compute_slice */
        out->l->r_start = obj.l->r_start + lo * obj.l->r_step;
        out->l->r_stop = obj.l->r_start + hi * obj.l->r_step;
        out->l->r_step = obj.l->r_step * stepn;
    }
    return PLLM_OK;
}

/* ---------------------------------------------------------------- functions and methods */

/* dict(...) / namespace(...) contents: an optional mapping or iterable of pairs, then keywords. */
static pllm_status fill_dict(pllm_jctx *c, const char *what, const pllm_jargs *a, pllm_jdict *d)
{
    if (a->n_pos > 1)
        return TYPE_ERROR(c, "%s expected at most 1 argument, got %zu", what, a->n_pos);
    if (a->n_pos == 1) {
        pllm_jv src = a->pos[0];
        if (src.t == PLLM_JV_UNDEF) return pllm_jv_undef_fail(c, src);
        if (src.t == PLLM_JV_DICT) {
            for (size_t i = 0; i < src.d->n; i++)
                PLLM_TRY(pllm_jdict_set(c, d, src.d->keys[i], src.d->vals[i]));
        } else {
            pllm_jiter it;
            PLLM_TRY(pllm_jiter_init(c, src, &it));
            for (;;) {
                pllm_jv pair;
                bool done;
                PLLM_TRY(pllm_jiter_next(c, &it, &pair, &done));
                if (done) break;
                pllm_jv *kv;
                size_t n;
                PLLM_TRY(pllm_jv_collect(c, pair, &kv, &n));
                if (n != 2)
                    return pllm_jerr(c, PLLM_ERR_INVALID,
                                     "ValueError: dictionary update sequence element has length "
                                     "%zu; 2 is required",
                                     n);
                PLLM_TRY(pllm_jdict_set(c, d, kv[0], kv[1]));
            }
        }
    }
    for (size_t k = 0; k < a->n_kw; k++) {
        pllm_jv key;
        PLLM_TRY(pllm_jv_strc(c, a->kw_names[k], &key));
        PLLM_TRY(pllm_jdict_set(c, d, key, a->kw[k]));
    }
    return PLLM_OK;
}

static pllm_status fn_range(pllm_jctx *c, const pllm_jargs *a, pllm_jv *out)
{
    PLLM_TRY(pllm_jb_pos_only(c, "range()", a, 1, 3));
    int64_t v[3] = {0, 0, 1};
    for (size_t i = 0; i < a->n_pos; i++) {
        if (a->pos[i].t == PLLM_JV_UNDEF) return pllm_jv_undef_fail(c, a->pos[i]);
        if (!is_int_like(a->pos[i]))
            return TYPE_ERROR(c, "'%s' object cannot be interpreted as an integer",
                              pllm_jv_type_name(a->pos[i]));
        v[i] = as_int(a->pos[i]);
    }
    int64_t start = 0, stop, stepn = 1;
    if (a->n_pos == 1) {
        stop = v[0];
    } else {
        start = v[0];
        stop = v[1];
        if (a->n_pos == 3) stepn = v[2];
    }
    if (stepn == 0)
        return pllm_jerr(c, PLLM_ERR_INVALID, "ValueError: range() arg 3 must not be zero");
    __int128 count = 0;
    if (stepn > 0 && stop > start) count = ((__int128)stop - start - 1) / stepn + 1;
    if (stepn < 0 && start > stop) count = ((__int128)start - stop - 1) / (-(__int128)stepn) + 1;
    if (count > 100000)
        return pllm_jerr(c, PLLM_ERR_INVALID,
                         "OverflowError: Range too big. The sandbox blocks ranges larger than "
                         "MAX_RANGE (100000).");
    PLLM_TRY(pllm_jv_list(c, (size_t)count, PLLM_JL_RANGE, out));
    out->l->r_start = start;
    out->l->r_stop = stop;
    out->l->r_step = stepn;
    for (int64_t i = 0; i < (int64_t)count; i++) out->l->v[i] = pllm_jv_int(start + i * stepn);
    return PLLM_OK;
}

static pllm_status fn_strftime(pllm_jctx *c, const pllm_jargs *a, pllm_jv *out)
{
    PLLM_TRY(pllm_jb_pos_only(c, "strftime_now()", a, 1, 1));
    if (a->pos[0].t != PLLM_JV_STR)
        return TYPE_ERROR(c, "strftime() argument 1 must be str, not %s",
                          pllm_jv_type_name(a->pos[0]));
    const pllm_jstr *f = a->pos[0].s;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    time_t secs = ts.tv_sec;
    localtime_r(&secs, &tm);
    /* datetime.strftime handles %f itself and, for the naive now(), renders %z and %Z empty */
    pllm_jsb fmt = {0};
    for (size_t i = 0; i < f->len; i++) {
        if (f->s[i] == '%' && i + 1 < f->len) {
            char k = f->s[i + 1];
            if (k == 'f') {
                char us[32];
                snprintf(us, sizeof us, "%06ld", (long)(ts.tv_nsec / 1000));
                PLLM_TRY(pllm_jsb_appendc(c, &fmt, us));
                i++;
                continue;
            }
            if (k == 'z' || k == 'Z') {
                i++;
                continue;
            }
            if (k == ':')
                return pllm_jerr(c, PLLM_ERR_UNSUPPORTED,
                                 "strftime_now: '%%:' directives are not supported");
            PLLM_TRY(pllm_jsb_append(c, &fmt, f->s + i, 2));
            i++;
            continue;
        }
        PLLM_TRY(pllm_jsb_append(c, &fmt, f->s + i, 1));
    }
    if (fmt.n == 0) return pllm_jv_strc(c, "", out);
    char buf[1024];
    size_t n = strftime(buf, sizeof buf, fmt.s, &tm);
    if (n == 0) return pllm_jerr(c, PLLM_ERR_UNSUPPORTED, "strftime_now: result too long or empty");
    return pllm_jv_str(c, buf, n, out);
}

static pllm_status dict_view(pllm_jctx *c, const pllm_jdict *d, uint8_t kind, pllm_jv *out)
{
    PLLM_TRY(pllm_jv_list(c, d->n, kind, out));
    for (size_t i = 0; i < d->n; i++) {
        if (kind == PLLM_JL_KEYS) {
            out->l->v[i] = d->keys[i];
        } else if (kind == PLLM_JL_VALUES) {
            out->l->v[i] = d->vals[i];
        } else {
            PLLM_TRY(pllm_jv_list(c, 2, PLLM_JL_TUPLE, &out->l->v[i]));
            out->l->v[i].l->v[0] = d->keys[i];
            out->l->v[i].l->v[1] = d->vals[i];
        }
    }
    return PLLM_OK;
}

pllm_status pllm_jinja_call_func(pllm_jctx *c, const pllm_jfunc *fn, const pllm_jargs *a,
                                 pllm_jv *out)
{
    pllm_jv self = fn->self;
    switch (fn->id) {
    case G_RANGE:
        return fn_range(c, a, out);
    case G_NAMESPACE: {
        pllm_jns *ns = pllm_jb_alloc(c, sizeof *ns);
        if (!ns) return PLLM_ERR_NOMEM;
        memset(ns, 0, sizeof *ns);
        PLLM_TRY(fill_dict(c, "namespace", a, &ns->attrs));
        *out = (pllm_jv){.t = PLLM_JV_NS, .ns = ns};
        return PLLM_OK;
    }
    case G_DICT:
        PLLM_TRY(pllm_jv_dict(c, out));
        return fill_dict(c, "dict", a, out->d);
    case G_RAISE: {
        static const char *const params[] = {"message"};
        pllm_jv vals[1];
        bool given[1];
        PLLM_TRY(pllm_jb_bind(c, "raise_exception()", a, params, 1, 1, vals, given));
        pllm_jsb b = {0};
        PLLM_TRY(pllm_jv_write_str(c, &b, vals[0]));
        return pllm_jerr(c, PLLM_ERR_INVALID, "raise_exception: %s", b.n ? b.s : "");
    }
    case G_STRFTIME:
        return fn_strftime(c, a, out);
    case G_LIPSUM:
    case G_CYCLER:
    case G_JOINER:
        return pllm_jerr(c, PLLM_ERR_UNSUPPORTED, "the global '%s' is not supported",
                         pllm_jb_func_name(fn->id));
    case M_DICT_ITEMS:
        PLLM_TRY(pllm_jb_no_args(c, "items()", a));
        return dict_view(c, self.d, PLLM_JL_ITEMS, out);
    case M_DICT_KEYS:
        PLLM_TRY(pllm_jb_no_args(c, "keys()", a));
        return dict_view(c, self.d, PLLM_JL_KEYS, out);
    case M_DICT_VALUES:
        PLLM_TRY(pllm_jb_no_args(c, "values()", a));
        return dict_view(c, self.d, PLLM_JL_VALUES, out);
    case M_DICT_GET:
        PLLM_TRY(pllm_jb_pos_only(c, "get()", a, 1, 2));
        PLLM_TRY(pllm_jv_check_hashable(c, a->pos[0]));
        PLLM_TRY(pllm_jinja_charge(c, self.d->n / 8 + 1));
        if (pllm_jdict_get(self.d, a->pos[0], out)) return PLLM_OK;
        *out = a->n_pos == 2 ? a->pos[1] : pllm_jv_none();
        return PLLM_OK;
    case M_SEQ_COUNT:
    case M_SEQ_INDEX: {
        if (a->n_pos > 1)
            return pllm_jerr(c, PLLM_ERR_UNSUPPORTED, "%s() with start/stop is not supported",
                             pllm_jb_func_name(fn->id));
        PLLM_TRY(pllm_jb_pos_only(c, fn->id == M_SEQ_COUNT ? "count()" : "index()", a, 1, 1));
        int64_t count = 0;
        for (size_t i = 0; i < self.l->n; i++) {
            bool eq;
            PLLM_TRY(pllm_jv_eq(c, self.l->v[i], a->pos[0], &eq));
            if (!eq) continue;
            if (fn->id == M_SEQ_INDEX) {
                *out = pllm_jv_int((int64_t)i);
                return PLLM_OK;
            }
            count++;
        }
        if (fn->id == M_SEQ_INDEX) {
            if (self.l->kind == PLLM_JL_TUPLE)
                return pllm_jerr(c, PLLM_ERR_INVALID, "ValueError: tuple.index(x): x not in tuple");
            pllm_jsb b = {0};
            PLLM_TRY(pllm_jv_write_repr(c, &b, a->pos[0]));
            return pllm_jerr(c, PLLM_ERR_INVALID, "ValueError: %s is not in %s", b.s,
                             pllm_jv_type_name(self));
        }
        *out = pllm_jv_int(count);
        return PLLM_OK;
    }
    case M_LOOP_CYCLE:
        if (a->n_kw) return TYPE_ERROR(c, "cycle() got an unexpected keyword argument");
        if (!a->n_pos) return TYPE_ERROR(c, "no items for cycling given");
        *out = a->pos[self.loop->i % a->n_pos];
        return PLLM_OK;
    case M_LOOP_CHANGED: {
        if (a->n_kw) return TYPE_ERROR(c, "changed() got an unexpected keyword argument");
        pllm_jv now;
        PLLM_TRY(pllm_jv_list(c, a->n_pos, PLLM_JL_TUPLE, &now));
        for (size_t i = 0; i < a->n_pos; i++) now.l->v[i] = a->pos[i];
        pllm_jloop *l = self.loop;
        bool same = false;
        if (l->has_changed) PLLM_TRY(pllm_jv_eq(c, l->changed_last, now, &same));
        if (same) {
            *out = pllm_jv_bool(false);
            return PLLM_OK;
        }
        l->changed_last = now;
        l->has_changed = true;
        *out = pllm_jv_bool(true);
        return PLLM_OK;
    }
    default:
        if (fn->id >= M_STRIP && fn->id <= M_FORMAT)
            return pllm_jb_str_method(c, fn->id, self, a, out);
        return pllm_jerr(c, PLLM_ERR_INTERNAL, "unknown function id %d", fn->id);
    }
}

pllm_status pllm_jinja_add_globals(pllm_jctx *c, pllm_jscope *s)
{
    for (size_t i = 0; i < PLLM_ARRAY_LEN(k_globals); i++) {
        pllm_jv f;
        PLLM_TRY(pllm_jb_new_func(c, k_globals[i].id, pllm_jv_undef(), &f));
        PLLM_TRY(pllm_jscope_set(c, s, k_globals[i].name, f));
    }
    return PLLM_OK;
}
