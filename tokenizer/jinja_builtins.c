/*
 * jinja_builtins.c: what the environment provides: filters (jinja2/filters.py, with
 * transformers' tojson), tests (jinja2/tests.py), globals (range, namespace, dict,
 * raise_exception, strftime_now), the attributes and methods of str/list/dict/loop values
 * behind the sandbox's getattr/getitem, binary operators, and lazy generators (select, map,
 * items, unique, reversed).
 *
 * The rule everywhere: reproduce Python's result exactly, or fail with an error naming the
 * construct. Where Python would print an object's address, or where a feature is outside the
 * subset (printf-style `%`, str.format, ...), the render fails rather than guesses.
 */
#include "tokenizer/jinja.h"

#include "tokenizer/jinja_unicode.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---------------------------------------------------------------- ids and names */

enum filter_id {
    F_ABS,
    F_ATTR,
    F_CAPITALIZE,
    F_DEFAULT,
    F_DICTSORT,
    F_ESCAPE,
    F_FIRST,
    F_FLOAT,
    F_FORMAT,
    F_INDENT,
    F_INT,
    F_ITEMS,
    F_JOIN,
    F_BATCH,
    F_LAST,
    F_LENGTH,
    F_LIST,
    F_LOWER,
    F_MAP,
    F_MAX,
    F_MIN,
    F_REJECT,
    F_REJECTATTR,
    F_REPLACE,
    F_REVERSE,
    F_ROUND,
    F_SAFE,
    F_SELECT,
    F_SELECTATTR,
    F_SORT,
    F_STRING,
    F_SUM,
    F_TITLE,
    F_TOJSON,
    F_TRIM,
    F_UNIQUE,
    F_UPPER,
};

enum test_id {
    T_ODD,
    T_EVEN,
    T_DIVISIBLEBY,
    T_DEFINED,
    T_UNDEFINED,
    T_NONE,
    T_BOOLEAN,
    T_FALSE,
    T_TRUE,
    T_INTEGER,
    T_FLOAT,
    T_LOWER,
    T_UPPER,
    T_STRING,
    T_MAPPING,
    T_NUMBER,
    T_SEQUENCE,
    T_ITERABLE,
    T_CALLABLE,
    T_SAMEAS,
    T_ESCAPED,
    T_IN,
    T_EQ,
    T_NE,
    T_GT,
    T_GE,
    T_LT,
    T_LE,
};

/* Functions: globals, then bound methods. */
enum func_id {
    G_RANGE,
    G_NAMESPACE,
    G_DICT,
    G_RAISE,
    G_STRFTIME,
    G_LIPSUM,
    G_CYCLER,
    G_JOINER,
    M_STRIP,
    M_LSTRIP,
    M_RSTRIP,
    M_SPLIT,
    M_RSPLIT,
    M_SPLITLINES,
    M_STARTSWITH,
    M_ENDSWITH,
    M_UPPER,
    M_LOWER,
    M_TITLE,
    M_CAPITALIZE,
    M_REPLACE,
    M_FIND,
    M_RFIND,
    M_INDEX,
    M_RINDEX,
    M_COUNT,
    M_JOIN,
    M_REMOVEPREFIX,
    M_REMOVESUFFIX,
    M_ISSPACE,
    M_ISLOWER,
    M_ISUPPER,
    M_ISDIGIT,
    M_ISALPHA,
    M_ISALNUM,
    M_FORMAT,
    M_DICT_ITEMS,
    M_DICT_KEYS,
    M_DICT_VALUES,
    M_DICT_GET,
    M_SEQ_COUNT,
    M_SEQ_INDEX,
    M_LOOP_CYCLE,
    M_LOOP_CHANGED,
};

typedef struct named {
    const char *name;
    int id;
} named;

static const named k_filters[] = {
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

static const named k_tests[] = {
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

static const named k_globals[] = {
    {"range", G_RANGE},           {"namespace", G_NAMESPACE},   {"dict", G_DICT},
    {"raise_exception", G_RAISE}, {"strftime_now", G_STRFTIME}, {"lipsum", G_LIPSUM},
    {"cycler", G_CYCLER},         {"joiner", G_JOINER},
};

static const named k_str_methods[] = {
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

static int find_named(const named *t, size_t n, const char *name)
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
        int id = find_named(k_filters, PLLM_ARRAY_LEN(k_filters), name);
        if (id >= 0) return id;
        return in_list(k_filters_unsupported, PLLM_ARRAY_LEN(k_filters_unsupported), name) ? -2
                                                                                           : -1;
    }
    int id = find_named(k_tests, PLLM_ARRAY_LEN(k_tests), name);
    if (id >= 0) return id;
    return in_list(k_tests_unsupported, PLLM_ARRAY_LEN(k_tests_unsupported), name) ? -2 : -1;
}

bool pllm_jinja_filter_needs_context(int id)
{
    return id == F_MAP || id == F_SELECT || id == F_REJECT || id == F_SELECTATTR ||
           id == F_REJECTATTR;
}

static const char *func_name(int id)
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

#define TYPE_ERROR(c, ...) pllm_jerr((c), PLLM_ERR_INVALID, "TypeError: " __VA_ARGS__)
#define OVERFLOW(c)                                                                                \
    pllm_jerr((c), PLLM_ERR_UNSUPPORTED, "integer overflow (pllm supports 64-bit integers)")

static void *jalloc(pllm_jctx *c, size_t n)
{
    void *p = pllm_jarena_alloc(c->arena, n ? n : 1);
    if (!p) pllm_error_prefix(PLLM_ERR_NOMEM, "%s:%d: ", c->name, c->line);
    return p;
}

static bool is_int_like(pllm_jv v)
{
    return v.t == PLLM_JV_INT || v.t == PLLM_JV_BOOL;
}
static int64_t as_int(pllm_jv v)
{
    return v.t == PLLM_JV_BOOL ? (int64_t)v.b : v.i;
}
static bool is_num(pllm_jv v)
{
    return is_int_like(v) || v.t == PLLM_JV_FLOAT;
}
static double as_float(pllm_jv v)
{
    return v.t == PLLM_JV_FLOAT ? v.f : (double)as_int(v);
}

static pllm_status new_func(pllm_jctx *c, int id, pllm_jv self, pllm_jv *out)
{
    pllm_jfunc *f = jalloc(c, sizeof *f);
    if (!f) return PLLM_ERR_NOMEM;
    f->id = id;
    f->self = self;
    *out = (pllm_jv){.t = PLLM_JV_FUNC, .fn = f};
    return PLLM_OK;
}

/* soft_str(): the value if it is a string, else str(value). */
static pllm_status soft_str(pllm_jctx *c, pllm_jv v, pllm_jv *out)
{
    return pllm_jv_to_str(c, v, out);
}

static pllm_status mark(pllm_jctx *c, pllm_jv *v, bool markup)
{
    if (!markup || v->s->markup) return PLLM_OK;
    pllm_jv copy;
    PLLM_TRY(pllm_jv_str(c, v->s->s, v->s->len, &copy));
    copy.s->markup = true;
    *v = copy;
    return PLLM_OK;
}

/* markupsafe.escape() of a plain string. */
static pllm_status html_escape(pllm_jctx *c, const pllm_jstr *s, pllm_jv *out)
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

static pllm_status bind(pllm_jctx *c, const char *what, const pllm_jargs *a,
                        const char *const *params, size_t n, size_t required, pllm_jv *vals,
                        bool *given)
{
    return pllm_jargs_bind(c, what, a, params, n, required, vals, given);
}

static pllm_status no_args(pllm_jctx *c, const char *what, const pllm_jargs *a)
{
    if (a->n_pos || a->n_kw) return TYPE_ERROR(c, "%s takes no arguments", what);
    return PLLM_OK;
}

/* Positional-only parameters (most str methods). */
static pllm_status pos_only(pllm_jctx *c, const char *what, const pllm_jargs *a, size_t min,
                            size_t max)
{
    if (a->n_kw) return TYPE_ERROR(c, "%s takes no keyword arguments", what);
    if (a->n_pos < min || a->n_pos > max)
        return TYPE_ERROR(c, "%s takes %zu to %zu arguments (%zu given)", what, min, max, a->n_pos);
    return PLLM_OK;
}

/* ---------------------------------------------------------------- code points */

typedef struct cpbuf {
    uint32_t *v;
    size_t n;
} cpbuf;

static pllm_status decode(pllm_jctx *c, const pllm_jstr *s, cpbuf *out)
{
    out->v = jalloc(c, (s->nchars + 1) * sizeof(uint32_t));
    if (!out->v) return PLLM_ERR_NOMEM;
    size_t i = 0, k = 0;
    while (i < s->len) {
        size_t l;
        out->v[k++] = pllm_jinja_utf8_decode(s->s + i, &l);
        i += l;
    }
    out->n = k;
    return PLLM_OK;
}

/* The byte range of code points [from, to) of s. */
static void cp_range(const pllm_jstr *s, size_t from, size_t to, size_t *b0, size_t *b1)
{
    *b0 = pllm_jstr_offset(s, from);
    if (s->nchars == s->len) {
        *b1 = to;
        return;
    }
    size_t off = *b0, i = from;
    while (i < to && off < s->len) {
        off++;
        while (off < s->len && ((unsigned char)s->s[off] & 0xC0) == 0x80) off++;
        i++;
    }
    *b1 = off;
}

static pllm_status substr(pllm_jctx *c, const pllm_jstr *s, size_t from, size_t to, pllm_jv *out)
{
    size_t b0, b1;
    cp_range(s, from, to, &b0, &b1);
    return pllm_jv_str(c, s->s + b0, b1 - b0, out);
}

/* CPython's final-sigma rule inside v[lo, hi). */
static bool final_sigma(const uint32_t *v, size_t lo, size_t hi, size_t i)
{
    size_t j = i;
    uint32_t ch = 0;
    bool found = false;
    while (j > lo) {
        j--;
        ch = v[j];
        if (!pllm_jinja_is_case_ignorable(ch)) {
            found = true;
            break;
        }
    }
    if (!found || !pllm_jinja_is_cased(ch)) return false;
    for (j = i + 1; j < hi; j++) {
        if (!pllm_jinja_is_case_ignorable(v[j])) return !pllm_jinja_is_cased(v[j]);
    }
    return true;
}

static pllm_status put_lower(pllm_jctx *c, pllm_jsb *b, const uint32_t *v, size_t lo, size_t hi,
                             size_t i)
{
    if (v[i] == 0x3A3) return pllm_jsb_cp(c, b, final_sigma(v, lo, hi, i) ? 0x3C2 : 0x3C3);
    uint32_t m[3];
    int n = pllm_jinja_to_lower(v[i], m);
    for (int k = 0; k < n; k++) PLLM_TRY(pllm_jsb_cp(c, b, m[k]));
    return PLLM_OK;
}

static pllm_status put_map(pllm_jctx *c, pllm_jsb *b, uint32_t cp, int (*fn)(uint32_t, uint32_t *))
{
    uint32_t m[3];
    int n = fn(cp, m);
    for (int k = 0; k < n; k++) PLLM_TRY(pllm_jsb_cp(c, b, m[k]));
    return PLLM_OK;
}

enum { CASE_LOWER, CASE_UPPER, CASE_TITLE_METHOD, CASE_CAPITALIZE, CASE_TITLE_FILTER };

static bool title_sep(uint32_t cp)
{
    return cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || pllm_jinja_is_space(cp);
}

/* str.lower/upper/title/capitalize and jinja2's title filter. */
static pllm_status change_case(pllm_jctx *c, pllm_jv in, int mode, pllm_jv *out)
{
    const pllm_jstr *s = in.s;
    pllm_jsb b = {0};
    if (s->nchars == s->len && mode != CASE_TITLE_FILTER && mode != CASE_TITLE_METHOD &&
        mode != CASE_CAPITALIZE) {
        PLLM_TRY(pllm_jsb_append(c, &b, s->s, s->len));
        for (size_t i = 0; i < b.n; i++) {
            char ch = b.s[i];
            if (mode == CASE_LOWER && ch >= 'A' && ch <= 'Z') b.s[i] = (char)(ch + 32);
            if (mode == CASE_UPPER && ch >= 'a' && ch <= 'z') b.s[i] = (char)(ch - 32);
        }
    } else {
        cpbuf v;
        PLLM_TRY(decode(c, s, &v));
        switch (mode) {
        case CASE_LOWER:
            for (size_t i = 0; i < v.n; i++) PLLM_TRY(put_lower(c, &b, v.v, 0, v.n, i));
            break;
        case CASE_UPPER:
            for (size_t i = 0; i < v.n; i++) PLLM_TRY(put_map(c, &b, v.v[i], pllm_jinja_to_upper));
            break;
        case CASE_CAPITALIZE:
            for (size_t i = 0; i < v.n; i++) {
                if (i == 0)
                    PLLM_TRY(put_map(c, &b, v.v[i], pllm_jinja_to_title));
                else
                    PLLM_TRY(put_lower(c, &b, v.v, 0, v.n, i));
            }
            break;
        case CASE_TITLE_METHOD: {
            bool prev_cased = false;
            for (size_t i = 0; i < v.n; i++) {
                if (prev_cased)
                    PLLM_TRY(put_lower(c, &b, v.v, 0, v.n, i));
                else
                    PLLM_TRY(put_map(c, &b, v.v[i], pllm_jinja_to_title));
                prev_cased = pllm_jinja_is_cased(v.v[i]);
            }
            break;
        }
        default: {
            /* "".join(item[0].upper() + item[1:].lower() for item in re.split(r"([-\s({\[<]+)", s)
             * if item) */
            size_t i = 0;
            while (i < v.n) {
                size_t j = i;
                bool sep = title_sep(v.v[i]);
                while (j < v.n && title_sep(v.v[j]) == sep) j++;
                if (sep) {
                    for (size_t k = i; k < j; k++)
                        PLLM_TRY(put_map(c, &b, v.v[k], pllm_jinja_to_upper));
                } else {
                    PLLM_TRY(put_map(c, &b, v.v[i], pllm_jinja_to_upper));
                    for (size_t k = i + 1; k < j; k++) PLLM_TRY(put_lower(c, &b, v.v, i + 1, j, k));
                }
                i = j;
            }
            break;
        }
        }
    }
    PLLM_TRY(pllm_jv_str_sb(c, &b, out));
    return mark(c, out, s->markup);
}

/* Python's str.isspace/islower/isupper and the ASCII-only isdigit/isalpha/isalnum. */
static pllm_status str_predicate(pllm_jctx *c, const pllm_jstr *s, int id, bool *out)
{
    cpbuf v;
    PLLM_TRY(decode(c, s, &v));
    if (id == M_ISLOWER || id == M_ISUPPER) {
        bool cased = false;
        for (size_t i = 0; i < v.n; i++) {
            uint32_t ch = v.v[i];
            bool up = pllm_jinja_is_upper(ch), lo = pllm_jinja_is_lower(ch),
                 ti = pllm_jinja_is_title(ch);
            if (id == M_ISLOWER) {
                if (up || ti) {
                    *out = false;
                    return PLLM_OK;
                }
                if (lo) cased = true;
            } else {
                if (lo || ti) {
                    *out = false;
                    return PLLM_OK;
                }
                if (up) cased = true;
            }
        }
        *out = cased;
        return PLLM_OK;
    }
    if (v.n == 0) {
        *out = false;
        return PLLM_OK;
    }
    for (size_t i = 0; i < v.n; i++) {
        uint32_t ch = v.v[i];
        if (id == M_ISSPACE) {
            if (!pllm_jinja_is_space(ch)) {
                *out = false;
                return PLLM_OK;
            }
            continue;
        }
        if (ch >= 0x80)
            return pllm_jerr(c, PLLM_ERR_UNSUPPORTED, "str.%s() on non-ASCII text is not supported",
                             func_name(id));
        bool digit = ch >= '0' && ch <= '9', alpha = (ch | 32) >= 'a' && (ch | 32) <= 'z';
        bool ok = id == M_ISDIGIT ? digit : id == M_ISALPHA ? alpha : (digit || alpha);
        if (!ok) {
            *out = false;
            return PLLM_OK;
        }
    }
    *out = true;
    return PLLM_OK;
}

/* ---------------------------------------------------------------- strip / split / replace */

/* chars: NULL for whitespace. which: 1 left, 2 right, 3 both. */
static pllm_status do_strip(pllm_jctx *c, pllm_jv in, const pllm_jstr *chars, int which,
                            pllm_jv *out)
{
    const pllm_jstr *s = in.s;
    cpbuf v, set = {0};
    PLLM_TRY(decode(c, s, &v));
    if (chars) PLLM_TRY(decode(c, chars, &set));
    size_t lo = 0, hi = v.n;
    for (;;) {
        bool strip_ok = false;
        if ((which & 1) && lo < hi) {
            uint32_t ch = v.v[lo];
            bool hit = !chars ? pllm_jinja_is_space(ch) : false;
            for (size_t k = 0; chars && k < set.n; k++) hit |= set.v[k] == ch;
            if (hit) {
                lo++;
                strip_ok = true;
            }
        }
        if (!strip_ok) break;
    }
    for (;;) {
        bool strip_ok = false;
        if ((which & 2) && hi > lo) {
            uint32_t ch = v.v[hi - 1];
            bool hit = !chars ? pllm_jinja_is_space(ch) : false;
            for (size_t k = 0; chars && k < set.n; k++) hit |= set.v[k] == ch;
            if (hit) {
                hi--;
                strip_ok = true;
            }
        }
        if (!strip_ok) break;
    }
    PLLM_TRY(substr(c, s, lo, hi, out));
    return mark(c, out, s->markup);
}

static pllm_status list_push(pllm_jctx *c, pllm_jv **arr, size_t *n, size_t *cap, pllm_jv v)
{
    if (*n == *cap) {
        size_t ncap = *cap ? *cap * 2 : 8;
        if (ncap > c->max_str / sizeof(pllm_jv))
            return pllm_jerr(c, PLLM_ERR_RANGE, "list exceeds the size limit");
        pllm_jv *na = jalloc(c, ncap * sizeof *na);
        if (!na) return PLLM_ERR_NOMEM;
        if (*n) memcpy(na, *arr, *n * sizeof *na);
        *arr = na;
        *cap = ncap;
    }
    (*arr)[(*n)++] = v;
    return PLLM_OK;
}

static pllm_status make_list(pllm_jctx *c, pllm_jv *items, size_t n, uint8_t kind, pllm_jv *out)
{
    PLLM_TRY(pllm_jv_list(c, n, kind, out));
    if (n) memcpy(out->l->v, items, n * sizeof *items);
    return PLLM_OK;
}

/* str.split / str.rsplit. sep NULL: whitespace runs. */
static pllm_status do_split(pllm_jctx *c, const pllm_jstr *s, const pllm_jstr *sep,
                            int64_t maxsplit, bool right, pllm_jv *out)
{
    pllm_jv *items = NULL;
    size_t n = 0, cap = 0;
    if (sep && sep->len == 0) return pllm_jerr(c, PLLM_ERR_INVALID, "ValueError: empty separator");
    if (maxsplit < 0) maxsplit = INT64_MAX;
    if (!sep) {
        cpbuf v;
        PLLM_TRY(decode(c, s, &v));
        if (!right) {
            size_t i = 0;
            while (i < v.n) {
                while (i < v.n && pllm_jinja_is_space(v.v[i])) i++;
                if (i >= v.n) break;
                if (maxsplit == 0) {
                    size_t j = v.n;
                    pllm_jv w;
                    PLLM_TRY(substr(c, s, i, j, &w));
                    PLLM_TRY(list_push(c, &items, &n, &cap, w));
                    break;
                }
                size_t j = i;
                while (j < v.n && !pllm_jinja_is_space(v.v[j])) j++;
                pllm_jv w;
                PLLM_TRY(substr(c, s, i, j, &w));
                PLLM_TRY(list_push(c, &items, &n, &cap, w));
                maxsplit--;
                i = j;
            }
        } else {
            size_t i = v.n;
            while (i > 0) {
                while (i > 0 && pllm_jinja_is_space(v.v[i - 1])) i--;
                if (i == 0) break;
                if (maxsplit == 0) {
                    pllm_jv w;
                    PLLM_TRY(substr(c, s, 0, i, &w));
                    PLLM_TRY(list_push(c, &items, &n, &cap, w));
                    break;
                }
                size_t j = i;
                while (j > 0 && !pllm_jinja_is_space(v.v[j - 1])) j--;
                pllm_jv w;
                PLLM_TRY(substr(c, s, j, i, &w));
                PLLM_TRY(list_push(c, &items, &n, &cap, w));
                maxsplit--;
                i = j;
            }
            for (size_t a = 0, b = n ? n - 1 : 0; a < b; a++, b--) {
                pllm_jv t = items[a];
                items[a] = items[b];
                items[b] = t;
            }
        }
        return make_list(c, items, n, PLLM_JL_LIST, out);
    }
    /* byte-wise search is exact for UTF-8 */
    if (!right) {
        size_t i = 0;
        for (;;) {
            const char *hit = maxsplit > 0 ? memmem(s->s + i, s->len - i, sep->s, sep->len) : NULL;
            size_t end = hit ? (size_t)(hit - s->s) : s->len;
            pllm_jv w;
            PLLM_TRY(pllm_jv_str(c, s->s + i, end - i, &w));
            PLLM_TRY(list_push(c, &items, &n, &cap, w));
            if (!hit) break;
            i = end + sep->len;
            maxsplit--;
        }
    } else {
        size_t end = s->len;
        for (;;) {
            const char *hit = NULL;
            if (maxsplit > 0 && end >= sep->len) {
                for (size_t k = end - sep->len + 1; k-- > 0;) {
                    if (memcmp(s->s + k, sep->s, sep->len) == 0) {
                        hit = s->s + k;
                        break;
                    }
                }
            }
            size_t start = hit ? (size_t)(hit - s->s) + sep->len : 0;
            pllm_jv w;
            PLLM_TRY(pllm_jv_str(c, s->s + start, end - start, &w));
            PLLM_TRY(list_push(c, &items, &n, &cap, w));
            if (!hit) break;
            end = (size_t)(hit - s->s);
            maxsplit--;
        }
        for (size_t a = 0, b = n ? n - 1 : 0; a < b; a++, b--) {
            pllm_jv t = items[a];
            items[a] = items[b];
            items[b] = t;
        }
    }
    return make_list(c, items, n, PLLM_JL_LIST, out);
}

static bool is_line_break(uint32_t cp)
{
    return cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || cp == 0x1C || cp == 0x1D ||
           cp == 0x1E || cp == 0x85 || cp == 0x2028 || cp == 0x2029;
}

/* str.splitlines(keepends) */
static pllm_status do_splitlines(pllm_jctx *c, const pllm_jstr *s, bool keepends, pllm_jv *out)
{
    cpbuf v;
    PLLM_TRY(decode(c, s, &v));
    pllm_jv *items = NULL;
    size_t n = 0, cap = 0, i = 0;
    while (i < v.n) {
        size_t j = i;
        while (j < v.n && !is_line_break(v.v[j])) j++;
        size_t eol = j;
        if (j < v.n) {
            if (v.v[j] == '\r' && j + 1 < v.n && v.v[j + 1] == '\n')
                j += 2;
            else
                j++;
        }
        pllm_jv w;
        PLLM_TRY(substr(c, s, i, keepends ? j : eol, &w));
        PLLM_TRY(list_push(c, &items, &n, &cap, w));
        i = j;
    }
    return make_list(c, items, n, PLLM_JL_LIST, out);
}

/* str.replace(old, new, count) */
static pllm_status do_replace(pllm_jctx *c, const pllm_jstr *s, const pllm_jstr *old,
                              const pllm_jstr *rep, int64_t count, pllm_jv *out)
{
    pllm_jsb b = {0};
    if (count < 0) count = INT64_MAX;
    if (old->len == 0) {
        /* insert rep before every character and at the end */
        size_t i = 0;
        while (i <= s->len) {
            if (count > 0) {
                PLLM_TRY(pllm_jsb_append(c, &b, rep->s, rep->len));
                count--;
            }
            if (i == s->len) break;
            size_t l = pllm_jinja_utf8_seq(s->s + i, s->len - i);
            if (!l) l = 1;
            PLLM_TRY(pllm_jsb_append(c, &b, s->s + i, l));
            i += l;
        }
        return pllm_jv_str_sb(c, &b, out);
    }
    size_t i = 0;
    while (i < s->len) {
        const char *hit = count > 0 ? memmem(s->s + i, s->len - i, old->s, old->len) : NULL;
        if (!hit) break;
        size_t at = (size_t)(hit - s->s);
        PLLM_TRY(pllm_jsb_append(c, &b, s->s + i, at - i));
        PLLM_TRY(pllm_jsb_append(c, &b, rep->s, rep->len));
        i = at + old->len;
        count--;
    }
    PLLM_TRY(pllm_jsb_append(c, &b, s->s + i, s->len - i));
    return pllm_jv_str_sb(c, &b, out);
}

/* Code point index of the first (or last) occurrence of sub, -1 when absent. */
static int64_t do_find(const pllm_jstr *s, const pllm_jstr *sub, bool last)
{
    const char *hit = NULL;
    if (!last) {
        hit = sub->len == 0 ? s->s : memmem(s->s, s->len, sub->s, sub->len);
    } else if (sub->len <= s->len) {
        for (size_t k = s->len - sub->len + 1; k-- > 0;) {
            if (memcmp(s->s + k, sub->s, sub->len) == 0) {
                hit = s->s + k;
                break;
            }
        }
    }
    if (!hit) return -1;
    return (int64_t)pllm_jinja_utf8_count(s->s, (size_t)(hit - s->s));
}

static int64_t do_count(const pllm_jstr *s, const pllm_jstr *sub)
{
    if (sub->len == 0) return (int64_t)s->nchars + 1;
    int64_t n = 0;
    size_t i = 0;
    const char *hit;
    while (i <= s->len && (hit = memmem(s->s + i, s->len - i, sub->s, sub->len)) != NULL) {
        n++;
        i = (size_t)(hit - s->s) + sub->len;
    }
    return n;
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
        return mark(c, out, seq.s->markup);
    }
    size_t n = seq.l->n;
    if (n && (uint64_t)times > c->max_str / sizeof(pllm_jv) / n)
        return pllm_jerr(c, PLLM_ERR_RANGE, "list exceeds the size limit");
    PLLM_TRY(pllm_jv_list(c, n * (size_t)times, seq.l->kind, out));
    for (int64_t i = 0; i < times; i++)
        if (n) memcpy(out->l->v + (size_t)i * n, seq.l->v, n * sizeof(pllm_jv));
    return PLLM_OK;
}

/* Python's printf-style `str % args` for the conversions %s %r %d %i %u and %%, with an
 * optional %(key) mapping lookup; flags, width, precision and other conversions fail as
 * unsupported. args: a tuple, one value, or anything with __getitem__ used as a mapping. */
static pllm_status float_to_int(pllm_jctx *c, double f, pllm_jv *out);

static pllm_status str_format(pllm_jctx *c, pllm_jv fmt, pllm_jv args, pllm_jv *out)
{
    if (fmt.s->markup)
        return pllm_jerr(c, PLLM_ERR_UNSUPPORTED,
                         "printf-style formatting of Markup strings is not supported");
    bool is_tuple = args.t == PLLM_JV_LIST && args.l->kind == PLLM_JL_TUPLE;
    bool mapping = !is_tuple && (args.t == PLLM_JV_DICT || args.t == PLLM_JV_UNDEF ||
                                 (args.t == PLLM_JV_LIST &&
                                  (args.l->kind == PLLM_JL_LIST || args.l->kind == PLLM_JL_RANGE)));
    int64_t arglen = is_tuple ? (int64_t)args.l->n : -1, argidx = is_tuple ? 0 : -2;
    const char *f = fmt.s->s;
    size_t n = fmt.s->len, i = 0;
    pllm_jsb b = {0};
    while (i < n) {
        const char *pct = memchr(f + i, '%', n - i);
        size_t end = pct ? (size_t)(pct - f) : n;
        PLLM_TRY(pllm_jsb_append(c, &b, f + i, end - i));
        if (!pct) break;
        i = end + 1;
        if (i >= n) return pllm_jerr(c, PLLM_ERR_INVALID, "ValueError: incomplete format");
        pllm_jv v;
        bool have = false;
        if (f[i] == '(') {
            size_t k = i + 1;
            int depth = 1;
            while (k < n && depth) {
                if (f[k] == '(') depth++;
                if (f[k] == ')') depth--;
                if (depth) k++;
            }
            if (k >= n) return pllm_jerr(c, PLLM_ERR_INVALID, "ValueError: incomplete format key");
            if (!mapping) return TYPE_ERROR(c, "format requires a mapping");
            pllm_jv key;
            PLLM_TRY(pllm_jv_str(c, f + i + 1, k - i - 1, &key));
            if (args.t == PLLM_JV_UNDEF) return pllm_jv_undef_fail(c, args);
            if (args.t != PLLM_JV_DICT)
                return TYPE_ERROR(c, "%s indices must be integers or slices, not str",
                                  pllm_jv_type_name(args));
            PLLM_TRY(pllm_jinja_charge(c, args.d->n / 8 + 1));
            if (!pllm_jdict_get(args.d, key, &v))
                return pllm_jerr(c, PLLM_ERR_INVALID, "KeyError: '%s'", key.s->s);
            have = true; /* CPython: args = dict[key], then consumed by this conversion */
            arglen = -1;
            argidx = -1;
            i = k + 1;
            if (i >= n) return pllm_jerr(c, PLLM_ERR_INVALID, "ValueError: incomplete format");
        }
        char conv = f[i];
        size_t conv_len = pllm_jinja_utf8_seq(f + i, n - i);
        if (!conv_len) conv_len = 1;
        i += conv_len;
        if (conv == '%') {
            PLLM_TRY(pllm_jsb_append(c, &b, "%", 1));
            continue;
        }
        if (conv != 's' && conv != 'r' && conv != 'd' && conv != 'i' && conv != 'u')
            return pllm_jerr(
                c, PLLM_ERR_UNSUPPORTED,
                "printf-style format '%%%.*s' is not supported (only %%s %%r %%d %%i %%u %%%%)",
                (int)conv_len, f + i - conv_len);
        if (!have) {
            if (arglen < 0 && argidx == -2) {
                v = args;
                argidx = -1;
            } else if (argidx >= 0 && argidx < arglen) {
                v = args.l->v[argidx++];
            } else {
                return TYPE_ERROR(c, "not enough arguments for format string");
            }
        }
        if (conv == 's') {
            PLLM_TRY(pllm_jv_write_str(c, &b, v));
        } else if (conv == 'r') {
            PLLM_TRY(pllm_jv_write_repr(c, &b, v));
        } else {
            int64_t iv;
            if (is_int_like(v)) {
                iv = as_int(v);
            } else if (v.t == PLLM_JV_FLOAT) {
                if (isnan(v.f))
                    return pllm_jerr(c, PLLM_ERR_INVALID,
                                     "ValueError: cannot convert float NaN to integer");
                if (isinf(v.f))
                    return pllm_jerr(c, PLLM_ERR_INVALID,
                                     "OverflowError: cannot convert float infinity to integer");
                pllm_jv t;
                PLLM_TRY(float_to_int(c, v.f, &t));
                iv = t.i;
            } else {
                if (v.t == PLLM_JV_UNDEF) return pllm_jv_undef_fail(c, v);
                return TYPE_ERROR(c, "%%%c format: a real number is required, not %s", conv,
                                  pllm_jv_type_name(v));
            }
            char tmp[32];
            snprintf(tmp, sizeof tmp, "%lld", (long long)iv);
            PLLM_TRY(pllm_jsb_appendc(c, &b, tmp));
        }
    }
    if (argidx < arglen && !mapping)
        return TYPE_ERROR(c, "not all arguments converted during string formatting");
    return pllm_jv_str_sb(c, &b, out);
}

/* str.format(*args, **kwargs) through jinja2's SandboxedFormatter: fields {}, {0}, {name},
 * with .attr / [key] lookups (sandboxed getattr/getitem) and !s / !r; a format spec after ':'
 * fails as unsupported. */
static pllm_status str_dot_format(pllm_jctx *c, const pllm_jstr *fmt, const pllm_jargs *a,
                                  pllm_jv *out)
{
    const char *f = fmt->s;
    size_t n = fmt->len, i = 0;
    int numbering = 0; /* 1 automatic, 2 manual */
    size_t auto_idx = 0;
    pllm_jsb b = {0};
    while (i < n) {
        char ch = f[i];
        if (ch == '}') {
            if (i + 1 < n && f[i + 1] == '}') {
                PLLM_TRY(pllm_jsb_append(c, &b, "}", 1));
                i += 2;
                continue;
            }
            return pllm_jerr(c, PLLM_ERR_INVALID,
                             "ValueError: Single '}' encountered in format string");
        }
        if (ch != '{') {
            size_t j = i;
            while (j < n && f[j] != '{' && f[j] != '}') j++;
            PLLM_TRY(pllm_jsb_append(c, &b, f + i, j - i));
            i = j;
            continue;
        }
        if (i + 1 < n && f[i + 1] == '{') {
            PLLM_TRY(pllm_jsb_append(c, &b, "{", 1));
            i += 2;
            continue;
        }
        /* a replacement field: name [!conv] [:spec] } */
        size_t j = i + 1;
        int brackets = 0;
        while (j < n && (brackets || (f[j] != '}' && f[j] != '!' && f[j] != ':'))) {
            if (f[j] == '[') brackets++;
            if (f[j] == ']' && brackets) brackets--;
            if (f[j] == '{')
                return pllm_jerr(c, PLLM_ERR_UNSUPPORTED,
                                 "nested fields in str.format are not supported");
            j++;
        }
        if (j >= n)
            return pllm_jerr(c, PLLM_ERR_INVALID, "ValueError: expected '}' before end of string");
        size_t name_end = j;
        char conv = 0;
        if (f[j] == '!') {
            if (j + 1 >= n)
                return pllm_jerr(
                    c, PLLM_ERR_INVALID,
                    "ValueError: end of string while looking for conversion specifier");
            conv = f[j + 1];
            j += 2;
            if (j >= n || (f[j] != '}' && f[j] != ':'))
                return pllm_jerr(c, PLLM_ERR_INVALID,
                                 "ValueError: expected ':' after conversion specifier");
        }
        if (f[j] == ':') {
            size_t k = j + 1;
            while (k < n && f[k] != '}') k++;
            if (k >= n)
                return pllm_jerr(c, PLLM_ERR_INVALID,
                                 "ValueError: expected '}' before end of string");
            if (k > j + 1)
                return pllm_jerr(c, PLLM_ERR_UNSUPPORTED,
                                 "format specs in str.format are not supported");
            j = k;
        }
        /* the argument: up to the first '.' or '[' */
        size_t k = i + 1;
        while (k < name_end && f[k] != '.' && f[k] != '[') k++;
        pllm_jv v;
        if (k == i + 1) {
            if (numbering == 2)
                return pllm_jerr(c, PLLM_ERR_INVALID,
                                 "ValueError: cannot switch from manual field specification to "
                                 "automatic field numbering");
            numbering = 1;
            if (auto_idx >= a->n_pos)
                return pllm_jerr(
                    c, PLLM_ERR_INVALID,
                    "IndexError: Replacement index %zu out of range for positional args tuple",
                    auto_idx);
            v = a->pos[auto_idx++];
        } else {
            bool digits = true;
            for (size_t q = i + 1; q < k; q++) digits &= f[q] >= '0' && f[q] <= '9';
            if (digits) {
                if (numbering == 1)
                    return pllm_jerr(c, PLLM_ERR_INVALID,
                                     "ValueError: cannot switch from automatic field numbering to "
                                     "manual field specification");
                numbering = 2;
                size_t idx = (size_t)strtoull(f + i + 1, NULL, 10);
                if (k - i - 1 > 9 || idx >= a->n_pos)
                    return pllm_jerr(
                        c, PLLM_ERR_INVALID,
                        "IndexError: Replacement index %zu out of range for positional args tuple",
                        idx);
                v = a->pos[idx];
            } else {
                size_t q = 0;
                while (q < a->n_kw && (strlen(a->kw_names[q]) != k - i - 1 ||
                                       memcmp(a->kw_names[q], f + i + 1, k - i - 1)))
                    q++;
                if (q == a->n_kw)
                    return pllm_jerr(c, PLLM_ERR_INVALID, "KeyError: '%.*s'", (int)(k - i - 1),
                                     f + i + 1);
                v = a->kw[q];
            }
        }
        /* .attr and [key] parts */
        while (k < name_end) {
            if (f[k] == '.') {
                size_t e = k + 1;
                while (e < name_end && f[e] != '.' && f[e] != '[') e++;
                if (e == k + 1)
                    return pllm_jerr(c, PLLM_ERR_INVALID,
                                     "ValueError: Empty attribute in format string");
                char *attr = pllm_jarena_strndup(c->arena, f + k + 1, e - k - 1);
                if (!attr) return pllm_error_prefix(PLLM_ERR_NOMEM, "%s:%d: ", c->name, c->line);
                PLLM_TRY(pllm_jinja_getattr(c, v, attr, &v));
                k = e;
            } else {
                size_t e = k + 1;
                while (e < name_end && f[e] != ']') e++;
                if (e >= name_end)
                    return pllm_jerr(c, PLLM_ERR_INVALID,
                                     "ValueError: Missing ']' in format string");
                bool digits = e > k + 1;
                for (size_t q = k + 1; q < e; q++) digits &= f[q] >= '0' && f[q] <= '9';
                pllm_jv key;
                if (digits && e - k - 1 < 18)
                    key = pllm_jv_int(strtoll(f + k + 1, NULL, 10));
                else
                    PLLM_TRY(pllm_jv_str(c, f + k + 1, e - k - 1, &key));
                PLLM_TRY(pllm_jinja_getitem(c, v, key, &v));
                k = e + 1;
                if (k < name_end && f[k] != '.' && f[k] != '[')
                    return pllm_jerr(
                        c, PLLM_ERR_INVALID,
                        "ValueError: Only '.' or '[' may follow ']' in format field specifier");
            }
        }
        if (conv == 'r')
            PLLM_TRY(pllm_jv_write_repr(c, &b, v));
        else if (conv == 0 || conv == 's')
            PLLM_TRY(pllm_jv_write_str(c, &b, v));
        else if (conv == 'a')
            return pllm_jerr(c, PLLM_ERR_UNSUPPORTED, "the !a conversion is not supported");
        else
            return pllm_jerr(c, PLLM_ERR_INVALID, "ValueError: Unknown conversion specifier %c",
                             conv);
        i = j + 1;
    }
    return pllm_jv_str_sb(c, &b, out);
}

pllm_status pllm_jinja_binop(pllm_jctx *c, int op, pllm_jv a, pllm_jv b, pllm_jv *out)
{
    /* the left operand's method runs first: str % Undefined formats, it does not fail */
    if (op == PLLM_JOP_MOD && a.t == PLLM_JV_STR) return str_format(c, a, b, out);
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
            *out = pllm_jv_float(pow(fx, fy));
            return PLLM_OK;
        }
    }
    if (op == PLLM_JOP_ADD) {
        if (a.t == PLLM_JV_STR && b.t == PLLM_JV_STR) {
            pllm_jv ea = a, eb = b;
            bool markup = a.s->markup || b.s->markup;
            /* markupsafe: adding a plain string to Markup escapes the plain one */
            if (markup && !a.s->markup) PLLM_TRY(html_escape(c, a.s, &ea));
            if (markup && !b.s->markup) PLLM_TRY(html_escape(c, b.s, &eb));
            pllm_jsb buf = {0};
            PLLM_TRY(pllm_jsb_append(c, &buf, ea.s->s, ea.s->len));
            PLLM_TRY(pllm_jsb_append(c, &buf, eb.s->s, eb.s->len));
            PLLM_TRY(pllm_jv_str_sb(c, &buf, out));
            return mark(c, out, markup);
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
    char *hint = jalloc(c, 160);
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
        return new_func(c, M_LOOP_CYCLE, obj, out);
    else if (!strcmp(name, "changed"))
        return new_func(c, M_LOOP_CHANGED, obj, out);
    else
        *found = false;
    return PLLM_OK;
}

/* Python's getattr(obj, name) under the immutable sandbox: *found false when the object has
 * no such attribute. Attributes pllm does not model fail with an error. */
static pllm_status py_getattr(pllm_jctx *c, pllm_jv obj, const char *name, bool *found,
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
        id = find_named(k_str_methods, PLLM_ARRAY_LEN(k_str_methods), name);
        if (id >= 0) {
            if (obj.s->markup)
                return pllm_jerr(c, PLLM_ERR_UNSUPPORTED,
                                 "methods of Markup (safe) strings are not supported");
            *found = true;
            return new_func(c, id, obj, out);
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
            return new_func(c, id, obj, out);
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
                return new_func(c, name[0] == 'c' ? M_SEQ_COUNT : M_SEQ_INDEX, obj, out);
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
        PLLM_TRY(substr(c, obj.s, (size_t)i, (size_t)i + 1, out));
        return mark(c, out, obj.s->markup);
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
    PLLM_TRY(py_getattr(c, obj, name, &found, out));
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
        PLLM_TRY(py_getattr(c, obj, key.s->s, &found, out));
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
            PLLM_TRY(substr(c, obj.s, (size_t)lo, (size_t)(lo + count), out));
            return mark(c, out, obj.s->markup);
        }
        cpbuf cp;
        PLLM_TRY(decode(c, obj.s, &cp));
        pllm_jsb b = {0};
        for (int64_t k = 0; k < count; k++) PLLM_TRY(pllm_jsb_cp(c, &b, cp.v[lo + k * stepn]));
        PLLM_TRY(pllm_jv_str_sb(c, &b, out));
        return mark(c, out, obj.s->markup);
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
    if (lower && v.t == PLLM_JV_STR) PLLM_TRY(change_case(c, v, CASE_LOWER, &v));
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
    return make_list(c, parts, n, PLLM_JL_LIST, out);
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
    pllm_jgen *g = jalloc(c, sizeof *g);
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
        return pllm_jerr(c, PLLM_ERR_INVALID, "TemplateRuntimeError: No %s named %s.", what, b.s);
    }
    *id = pllm_jinja_builtin_lookup(kind, name.s->s);
    if (*id == -1)
        return pllm_jerr(c, PLLM_ERR_INVALID, "TemplateRuntimeError: No %s named '%s'.", what,
                         name.s->s);
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
        PLLM_TRY(bind(c, "unique()", a, params, 2, 0, vals, given));
        g->case_sensitive = given[0] && pllm_jv_truthy(vals[0]);
        g->attr = given[1] ? vals[1] : pllm_jv_none();
        g->has_attr = true;
        return PLLM_OK;
    }
    case GEN_BATCH: {
        static const char *const params[] = {"linecount", "fill_with"};
        pllm_jv vals[2];
        bool given[2];
        PLLM_TRY(bind(c, "batch()", a, params, 2, 1, vals, given));
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
            PLLM_TRY(list_push(c, &tmp, &n, &cap, g->items[0]));
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
            g->items = jalloc(c, sizeof(pllm_jv));
            if (!g->items) return PLLM_ERR_NOMEM;
            g->items[0] = item;
            g->n_items = 1;
            return make_list(c, tmp, n, PLLM_JL_LIST, out);
        }
        PLLM_TRY(list_push(c, &tmp, &n, &cap, item));
    }
    if (n == 0) {
        *done = true;
        return PLLM_OK;
    }
    if (g->has_dflt) {
        if (!is_int_like(g->attr))
            return TYPE_ERROR(c, "can't multiply sequence by non-int of type '%s'",
                              pllm_jv_type_name(g->attr));
        while ((int64_t)n < as_int(g->attr)) PLLM_TRY(list_push(c, &tmp, &n, &cap, g->dflt));
    }
    return make_list(c, tmp, n, PLLM_JL_LIST, out);
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
            PLLM_TRY(list_push(c, &g->seen, &g->n_seen, &g->cap_seen, key));
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
    sort_item *tmp = jalloc(c, (n ? n : 1) * sizeof *tmp);
    if (!tmp) return PLLM_ERR_NOMEM;
    return merge_sort(c, items, tmp, n, reverse);
}

/* ---------------------------------------------------------------- number parsing (int/float
 * filters) */

/* Python's float(str): whitespace, sign, digits with single underscores, '.', exponent,
 * inf/infinity/nan. *ok false when Python raises ValueError. Non-ASCII text is rejected by
 * the caller (Python also accepts other Unicode digits). */
static void parse_py_float(const char *s, size_t n, double *out, bool *ok)
{
    *ok = false;
    char buf[512];
    size_t i = 0, k = 0;
    while (i < n && pllm_jinja_is_space((unsigned char)s[i])) i++;
    while (n > i && pllm_jinja_is_space((unsigned char)s[n - 1])) n--;
    if (i < n && (s[i] == '+' || s[i] == '-')) buf[k++] = s[i++];
    size_t rest = n - i;
    const char *r = s + i;
    const char *words[] = {"inf", "infinity", "nan"};
    for (size_t w = 0; w < 3; w++) {
        if (rest == strlen(words[w]) && strncasecmp(r, words[w], rest) == 0) {
            double v = w == 2 ? NAN : INFINITY;
            *out = (k && buf[0] == '-') ? -v : v;
            *ok = true;
            return;
        }
    }
    bool digits = false, dot = false, exp = false, prev_digit = false;
    for (; i < n; i++) {
        char ch = s[i];
        if (k + 2 >= sizeof buf) return;
        if (ch >= '0' && ch <= '9') {
            buf[k++] = ch;
            digits = true;
            prev_digit = true;
            continue;
        }
        if (ch == '_') {
            if (!prev_digit || i + 1 >= n || !(s[i + 1] >= '0' && s[i + 1] <= '9')) return;
            prev_digit = false;
            continue;
        }
        prev_digit = false;
        if (ch == '.' && !dot && !exp) {
            dot = true;
            buf[k++] = ch;
            continue;
        }
        if ((ch == 'e' || ch == 'E') && digits && !exp) {
            exp = true;
            buf[k++] = 'e';
            if (i + 1 < n && (s[i + 1] == '+' || s[i + 1] == '-')) buf[k++] = s[++i];
            if (i + 1 >= n || !(s[i + 1] >= '0' && s[i + 1] <= '9')) return;
            continue;
        }
        return;
    }
    if (!digits) return;
    buf[k] = 0;
    *out = strtod(buf, NULL);
    *ok = true;
}

/* Python's int(str, base). *ok false on ValueError; *overflow when beyond int64. */
static void parse_py_int(const char *s, size_t n, int64_t base, int64_t *out, bool *ok,
                         bool *overflow)
{
    *ok = false;
    *overflow = false;
    if (base != 0 && (base < 2 || base > 36)) return;
    size_t i = 0;
    while (i < n && pllm_jinja_is_space((unsigned char)s[i])) i++;
    while (n > i && pllm_jinja_is_space((unsigned char)s[n - 1])) n--;
    bool neg = false;
    if (i < n && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
    bool prefixed = false;
    if (i + 1 < n && s[i] == '0') {
        char p = (char)(s[i + 1] | 32);
        int pb = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;
        if (pb && (base == 0 || base == pb)) {
            base = pb;
            i += 2;
            prefixed = true;
        }
    }
    if (base == 0) {
        base = 10;
        /* base 0 forbids leading zeros in non-zero decimals */
        if (i < n && s[i] == '0') {
            for (size_t j = i; j < n; j++)
                if (s[j] != '0' && s[j] != '_') return;
        }
    }
    unsigned __int128 v = 0;
    bool any = false, prev_digit = prefixed; /* "0x_1" is valid */
    for (; i < n; i++) {
        char ch = s[i];
        if (ch == '_') {
            if (!prev_digit || i + 1 >= n) return;
            prev_digit = false;
            continue;
        }
        int d = (ch >= '0' && ch <= '9')                 ? ch - '0'
                : ((ch | 32) >= 'a' && (ch | 32) <= 'z') ? (ch | 32) - 'a' + 10
                                                         : 99;
        if (d >= base) return;
        v = v * (unsigned)base + (unsigned)d;
        if (v > (unsigned __int128)INT64_MAX + 1) *overflow = true;
        any = true;
        prev_digit = true;
    }
    if (!any || !prev_digit) return;
    if (!neg && v > (unsigned __int128)INT64_MAX) *overflow = true;
    *out = neg ? (int64_t)(0 - (uint64_t)v) : (int64_t)v;
    *ok = true;
}

/* CPython's _PyUnicode_TransformDecimalAndSpaceToASCII before int()/float() parse a string:
 * decimal digits of every script become ASCII digits, whitespace a space; any other non-ASCII
 * character makes the text invalid (*ok false). */
static pllm_status number_text(pllm_jctx *c, const pllm_jstr *s, const char **out, size_t *n,
                               bool *ok)
{
    *ok = true;
    if (s->nchars == s->len) {
        *out = s->s;
        *n = s->len;
        return PLLM_OK;
    }
    char *buf = jalloc(c, s->nchars + 1);
    if (!buf) return PLLM_ERR_NOMEM;
    size_t k = 0;
    for (size_t i = 0; i < s->len;) {
        size_t l;
        uint32_t cp = pllm_jinja_utf8_decode(s->s + i, &l);
        i += l;
        if (cp < 0x80) {
            buf[k++] = (char)cp;
        } else if (pllm_jinja_is_space(cp)) {
            buf[k++] = ' ';
        } else {
            int d = pllm_jinja_decimal(cp);
            if (d < 0) {
                *ok = false;
                return PLLM_OK;
            }
            buf[k++] = (char)('0' + d);
        }
    }
    *out = buf;
    *n = k;
    return PLLM_OK;
}

static pllm_status float_to_int(pllm_jctx *c, double f, pllm_jv *out)
{
    double t = trunc(f);
    if (!(t >= -9223372036854775808.0 && t < 9223372036854775808.0)) return OVERFLOW(c);
    *out = pllm_jv_int((int64_t)t);
    return PLLM_OK;
}

static pllm_status filter_int(pllm_jctx *c, pllm_jv in, const pllm_jargs *a, pllm_jv *out)
{
    static const char *const params[] = {"default", "base"};
    pllm_jv vals[2];
    bool given[2];
    PLLM_TRY(bind(c, "int()", a, params, 2, 0, vals, given));
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
        return float_to_int(c, in.f, out);
    case PLLM_JV_STR: {
        const char *txt;
        size_t tn;
        bool valid;
        PLLM_TRY(number_text(c, in.s, &txt, &tn, &valid));
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
        parse_py_int(txt, tn, base, &iv, &ok, &overflow);
        if (ok && overflow) return OVERFLOW(c);
        if (ok) {
            *out = pllm_jv_int(iv);
            return PLLM_OK;
        }
        double f;
        parse_py_float(txt, tn, &f, &ok);
        if (!ok || isinf(f) || isnan(f)) {
            *out = dflt;
            return PLLM_OK;
        }
        return float_to_int(c, f, out);
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
    PLLM_TRY(bind(c, "float()", a, params, 1, 0, vals, given));
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
        PLLM_TRY(number_text(c, in.s, &txt, &tn, &ok));
        double f = 0;
        if (ok) parse_py_float(txt, tn, &f, &ok);
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
    PLLM_TRY(bind(c, "round()", a, params, 2, 0, vals, given));
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
    PLLM_TRY(bind(c, "join()", a, params, 2, 0, vals, given));
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
    PLLM_TRY(bind(c, "tojson()", a, params, 4, 0, vals, given));
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
    PLLM_TRY(bind(c, "indent()", a, params, 3, 0, vals, given));
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
    PLLM_TRY(do_splitlines(c, withnl.s, false, &lines));
    pllm_jsb b = {0};
    if (first) PLLM_TRY(pllm_jsb_append(c, &b, ind.s, ind.n));
    for (size_t i = 0; i < lines.l->n; i++) {
        const pllm_jstr *line = lines.l->v[i].s;
        if (i) PLLM_TRY(pllm_jsb_append(c, &b, "\n", 1));
        if (i && (blank || line->len)) PLLM_TRY(pllm_jsb_append(c, &b, ind.s, ind.n));
        PLLM_TRY(pllm_jsb_append(c, &b, line->s, line->len));
    }
    PLLM_TRY(pllm_jv_str_sb(c, &b, out));
    return mark(c, out, s.s->markup);
}

static pllm_status filter_minmax(pllm_jctx *c, pllm_jv in, const pllm_jargs *a, bool is_max,
                                 pllm_jv *out)
{
    static const char *const params[] = {"case_sensitive", "attribute"};
    pllm_jv vals[2];
    bool given[2];
    PLLM_TRY(bind(c, is_max ? "max()" : "min()", a, params, 2, 0, vals, given));
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
    PLLM_TRY(bind(c, "sort()", a, params, 3, 0, vals, given));
    bool reverse = given[0] && pllm_jv_truthy(vals[0]);
    bool lower = !(given[1] && pllm_jv_truthy(vals[1]));
    pllm_jv attr = given[2] ? vals[2] : pllm_jv_none();
    pllm_jv *items;
    size_t n;
    PLLM_TRY(pllm_jv_collect(c, in, &items, &n));
    sort_item *si = jalloc(c, (n ? n : 1) * sizeof *si);
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
    PLLM_TRY(bind(c, "dictsort()", a, params, 3, 0, vals, given));
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
    sort_item *si = jalloc(c, (n ? n : 1) * sizeof *si);
    if (!si) return PLLM_ERR_NOMEM;
    for (size_t i = 0; i < n; i++) {
        PLLM_TRY(pllm_jv_list(c, 2, PLLM_JL_TUPLE, &si[i].val));
        si[i].val.l->v[0] = in.d->keys[i];
        si[i].val.l->v[1] = in.d->vals[i];
        pllm_jv k = pos ? in.d->vals[i] : in.d->keys[i];
        if (lower && k.t == PLLM_JV_STR) PLLM_TRY(change_case(c, k, CASE_LOWER, &k));
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
    PLLM_TRY(bind(c, "sum()", a, params, 2, 0, vals, given));
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
            PLLM_TRY(substr(c, in.s, in.s->nchars - 1, in.s->nchars, out));
            return mark(c, out, in.s->markup);
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
        PLLM_TRY(no_args(c, "abs()", a));
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
        PLLM_TRY(bind(c, "attr()", a, params, 1, 1, vals, given));
        if (in.t == PLLM_JV_UNDEF) return pllm_jv_undef_fail(c, in);
        if (vals[0].t != PLLM_JV_STR) return TYPE_ERROR(c, "attribute name must be string");
        bool found;
        PLLM_TRY(py_getattr(c, in, vals[0].s->s, &found, out));
        if (found) return PLLM_OK;
        return pllm_jv_undef_attr(c, in, vals[0], out);
    }
    case F_CAPITALIZE:
    case F_LOWER:
    case F_UPPER:
    case F_TITLE: {
        PLLM_TRY(no_args(c, "filter", a));
        pllm_jv s;
        PLLM_TRY(soft_str(c, in, &s));
        int mode = id == F_CAPITALIZE ? CASE_CAPITALIZE
                   : id == F_LOWER    ? CASE_LOWER
                   : id == F_UPPER    ? CASE_UPPER
                                      : CASE_TITLE_FILTER;
        return change_case(c, s, mode, out);
    }
    case F_DEFAULT: {
        static const char *const params[] = {"default_value", "boolean"};
        pllm_jv vals[2];
        bool given[2];
        PLLM_TRY(bind(c, "default()", a, params, 2, 0, vals, given));
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
        PLLM_TRY(no_args(c, "escape()", a));
        if (in.t == PLLM_JV_STR && in.s->markup) {
            *out = in;
            return PLLM_OK;
        }
        {
            pllm_jv s;
            PLLM_TRY(pllm_jv_to_str(c, in, &s));
            return html_escape(c, s.s, out);
        }
    case F_FIRST: {
        PLLM_TRY(no_args(c, "first()", a));
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
        /* soft_str(value) % (kwargs or args) */
        if (a->n_pos && a->n_kw)
            return pllm_jerr(c, PLLM_ERR_INVALID,
                             "FilterArgumentError: can't handle positional and keyword arguments "
                             "at the same time");
        pllm_jv fmt, args;
        PLLM_TRY(soft_str(c, in, &fmt));
        if (a->n_kw) {
            PLLM_TRY(pllm_jv_dict(c, &args));
            for (size_t k = 0; k < a->n_kw; k++) {
                pllm_jv key;
                PLLM_TRY(pllm_jv_strc(c, a->kw_names[k], &key));
                PLLM_TRY(pllm_jdict_set(c, args.d, key, a->kw[k]));
            }
        } else {
            PLLM_TRY(make_list(c, (pllm_jv *)a->pos, a->n_pos, PLLM_JL_TUPLE, &args));
        }
        return str_format(c, fmt, args, out);
    }
    case F_INDENT:
        return filter_indent(c, in, a, out);
    case F_INT:
        return filter_int(c, in, a, out);
    case F_ITEMS:
        PLLM_TRY(no_args(c, "items()", a));
        return new_gen(c, GEN_ITEMS, in, NULL, out);
    case F_JOIN:
        return filter_join(c, in, a, out);
    case F_LAST:
        PLLM_TRY(no_args(c, "last()", a));
        return filter_last(c, in, out);
    case F_LENGTH: {
        PLLM_TRY(no_args(c, "length()", a));
        int64_t n = 0;
        PLLM_TRY(filter_len(c, in, &n));
        *out = pllm_jv_int(n);
        return PLLM_OK;
    }
    case F_LIST: {
        PLLM_TRY(no_args(c, "list()", a));
        pllm_jv *items;
        size_t n;
        PLLM_TRY(pllm_jv_collect(c, in, &items, &n));
        return make_list(c, items, n, PLLM_JL_LIST, out);
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
        PLLM_TRY(bind(c, "replace()", a, params, 3, 2, vals, given));
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
        return do_replace(c, s.s, o.s, r.s, count, out);
    }
    case F_REVERSE:
        PLLM_TRY(no_args(c, "reverse()", a));
        return filter_reverse(c, in, out);
    case F_ROUND:
        return filter_round(c, in, a, out);
    case F_SAFE:
        PLLM_TRY(no_args(c, "safe()", a));
        PLLM_TRY(pllm_jv_to_str(c, in, out));
        return mark(c, out, true);
    case F_SORT:
        return filter_sort(c, in, a, out);
    case F_STRING:
        PLLM_TRY(no_args(c, "string()", a));
        return soft_str(c, in, out);
    case F_SUM:
        return filter_sum(c, in, a, out);
    case F_TOJSON:
        return filter_tojson(c, in, a, out);
    case F_TRIM: {
        static const char *const params[] = {"chars"};
        pllm_jv vals[1];
        bool given[1];
        PLLM_TRY(bind(c, "trim()", a, params, 1, 0, vals, given));
        const pllm_jstr *chars = NULL;
        if (given[0] && vals[0].t != PLLM_JV_NONE) {
            if (vals[0].t != PLLM_JV_STR) return TYPE_ERROR(c, "strip arg must be None or str");
            chars = vals[0].s;
        }
        pllm_jv s;
        PLLM_TRY(soft_str(c, in, &s));
        return do_strip(c, s, chars, 3, out);
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
        PLLM_TRY(bind(c, "test", a, one, 1, 1, vals, given));
    else
        PLLM_TRY(no_args(c, "test", a));
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
        return str_predicate(c, s.s, id == T_LOWER ? M_ISLOWER : M_ISUPPER, out);
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
    PLLM_TRY(pos_only(c, "range()", a, 1, 3));
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
    PLLM_TRY(pos_only(c, "strftime_now()", a, 1, 1));
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

static pllm_status str_arg(pllm_jctx *c, const char *what, pllm_jv v, const pllm_jstr **out)
{
    if (v.t != PLLM_JV_STR)
        return TYPE_ERROR(c, "%s argument must be str, not %s", what, pllm_jv_type_name(v));
    *out = v.s;
    return PLLM_OK;
}

/* startswith / endswith with a string or a tuple of strings */
static pllm_status affix(pllm_jctx *c, const pllm_jstr *s, pllm_jv arg, bool end, bool *out)
{
    *out = false;
    const pllm_jv *cands = &arg;
    size_t n = 1;
    if (arg.t == PLLM_JV_LIST && arg.l->kind == PLLM_JL_TUPLE) {
        cands = arg.l->v;
        n = arg.l->n;
    }
    for (size_t i = 0; i < n; i++) {
        if (cands[i].t != PLLM_JV_STR)
            return TYPE_ERROR(c, "%s first arg must be str or a tuple of str, not %s",
                              end ? "endswith" : "startswith", pllm_jv_type_name(cands[i]));
        const pllm_jstr *p = cands[i].s;
        if (p->len > s->len) continue;
        if (memcmp(end ? s->s + s->len - p->len : s->s, p->s, p->len) == 0) *out = true;
    }
    return PLLM_OK;
}

static pllm_status str_method(pllm_jctx *c, int id, pllm_jv self, const pllm_jargs *a, pllm_jv *out)
{
    const pllm_jstr *s = self.s;
    const char *what = func_name(id);
    char whatp[48];
    snprintf(whatp, sizeof whatp, "%s()", what);
    switch (id) {
    case M_STRIP:
    case M_LSTRIP:
    case M_RSTRIP: {
        PLLM_TRY(pos_only(c, whatp, a, 0, 1));
        const pllm_jstr *chars = NULL;
        if (a->n_pos && a->pos[0].t != PLLM_JV_NONE) {
            if (a->pos[0].t != PLLM_JV_STR)
                return TYPE_ERROR(c, "%s arg must be None or str", what);
            chars = a->pos[0].s;
        }
        return do_strip(c, self, chars, id == M_STRIP ? 3 : id == M_LSTRIP ? 1 : 2, out);
    }
    case M_SPLIT:
    case M_RSPLIT: {
        static const char *const params[] = {"sep", "maxsplit"};
        pllm_jv vals[2];
        bool given[2];
        PLLM_TRY(bind(c, whatp, a, params, 2, 0, vals, given));
        const pllm_jstr *sep = NULL;
        if (given[0] && vals[0].t != PLLM_JV_NONE) PLLM_TRY(str_arg(c, whatp, vals[0], &sep));
        int64_t maxsplit = -1;
        if (given[1]) {
            if (!is_int_like(vals[1]))
                return TYPE_ERROR(c, "'%s' object cannot be interpreted as an integer",
                                  pllm_jv_type_name(vals[1]));
            maxsplit = as_int(vals[1]);
        }
        return do_split(c, s, sep, maxsplit, id == M_RSPLIT, out);
    }
    case M_SPLITLINES: {
        static const char *const params[] = {"keepends"};
        pllm_jv vals[1];
        bool given[1];
        PLLM_TRY(bind(c, whatp, a, params, 1, 0, vals, given));
        return do_splitlines(c, s, given[0] && pllm_jv_truthy(vals[0]), out);
    }
    case M_STARTSWITH:
    case M_ENDSWITH: {
        PLLM_TRY(pos_only(c, whatp, a, 1, 1));
        bool r;
        PLLM_TRY(affix(c, s, a->pos[0], id == M_ENDSWITH, &r));
        *out = pllm_jv_bool(r);
        return PLLM_OK;
    }
    case M_UPPER:
        PLLM_TRY(no_args(c, whatp, a));
        return change_case(c, self, CASE_UPPER, out);
    case M_LOWER:
        PLLM_TRY(no_args(c, whatp, a));
        return change_case(c, self, CASE_LOWER, out);
    case M_TITLE:
        PLLM_TRY(no_args(c, whatp, a));
        return change_case(c, self, CASE_TITLE_METHOD, out);
    case M_CAPITALIZE:
        PLLM_TRY(no_args(c, whatp, a));
        return change_case(c, self, CASE_CAPITALIZE, out);
    case M_REPLACE: {
        PLLM_TRY(pos_only(c, whatp, a, 2, 3));
        const pllm_jstr *o = NULL, *r = NULL;
        PLLM_TRY(str_arg(c, whatp, a->pos[0], &o));
        PLLM_TRY(str_arg(c, whatp, a->pos[1], &r));
        int64_t count = -1;
        if (a->n_pos == 3) {
            if (!is_int_like(a->pos[2]))
                return TYPE_ERROR(c, "'%s' object cannot be interpreted as an integer",
                                  pllm_jv_type_name(a->pos[2]));
            count = as_int(a->pos[2]);
        }
        return do_replace(c, s, o, r, count, out);
    }
    case M_FIND:
    case M_RFIND:
    case M_INDEX:
    case M_RINDEX: {
        if (a->n_pos > 1)
            return pllm_jerr(c, PLLM_ERR_UNSUPPORTED, "str.%s with start/end is not supported",
                             what);
        PLLM_TRY(pos_only(c, whatp, a, 1, 1));
        const pllm_jstr *sub = NULL;
        PLLM_TRY(str_arg(c, whatp, a->pos[0], &sub));
        int64_t r = do_find(s, sub, id == M_RFIND || id == M_RINDEX);
        if (r < 0 && (id == M_INDEX || id == M_RINDEX))
            return pllm_jerr(c, PLLM_ERR_INVALID, "ValueError: substring not found");
        *out = pllm_jv_int(r);
        return PLLM_OK;
    }
    case M_COUNT: {
        if (a->n_pos > 1)
            return pllm_jerr(c, PLLM_ERR_UNSUPPORTED, "str.count with start/end is not supported");
        PLLM_TRY(pos_only(c, whatp, a, 1, 1));
        const pllm_jstr *sub = NULL;
        PLLM_TRY(str_arg(c, whatp, a->pos[0], &sub));
        *out = pllm_jv_int(do_count(s, sub));
        return PLLM_OK;
    }
    case M_JOIN: {
        PLLM_TRY(pos_only(c, whatp, a, 1, 1));
        pllm_jiter it;
        PLLM_TRY(pllm_jiter_init(c, a->pos[0], &it));
        pllm_jsb b = {0};
        for (size_t i = 0;; i++) {
            pllm_jv x;
            bool done;
            PLLM_TRY(pllm_jiter_next(c, &it, &x, &done));
            if (done) break;
            if (x.t != PLLM_JV_STR)
                return TYPE_ERROR(c, "sequence item %zu: expected str instance, %s found", i,
                                  pllm_jv_type_name(x));
            if (i) PLLM_TRY(pllm_jsb_append(c, &b, s->s, s->len));
            PLLM_TRY(pllm_jsb_append(c, &b, x.s->s, x.s->len));
        }
        return pllm_jv_str_sb(c, &b, out);
    }
    case M_REMOVEPREFIX:
    case M_REMOVESUFFIX: {
        PLLM_TRY(pos_only(c, whatp, a, 1, 1));
        const pllm_jstr *p = NULL;
        PLLM_TRY(str_arg(c, whatp, a->pos[0], &p));
        bool hit = p->len <= s->len &&
                   memcmp(id == M_REMOVEPREFIX ? s->s : s->s + s->len - p->len, p->s, p->len) == 0;
        if (!hit) return pllm_jv_str(c, s->s, s->len, out);
        if (id == M_REMOVEPREFIX) return pllm_jv_str(c, s->s + p->len, s->len - p->len, out);
        return pllm_jv_str(c, s->s, s->len - p->len, out);
    }
    case M_ISSPACE:
    case M_ISLOWER:
    case M_ISUPPER:
    case M_ISDIGIT:
    case M_ISALPHA:
    case M_ISALNUM: {
        PLLM_TRY(no_args(c, whatp, a));
        bool r;
        PLLM_TRY(str_predicate(c, s, id, &r));
        *out = pllm_jv_bool(r);
        return PLLM_OK;
    }
    case M_FORMAT:
        return str_dot_format(c, s, a, out);
    default:
        return pllm_jerr(c, PLLM_ERR_INTERNAL, "unknown str method %d", id);
    }
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
        pllm_jns *ns = jalloc(c, sizeof *ns);
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
        PLLM_TRY(bind(c, "raise_exception()", a, params, 1, 1, vals, given));
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
                         func_name(fn->id));
    case M_DICT_ITEMS:
        PLLM_TRY(no_args(c, "items()", a));
        return dict_view(c, self.d, PLLM_JL_ITEMS, out);
    case M_DICT_KEYS:
        PLLM_TRY(no_args(c, "keys()", a));
        return dict_view(c, self.d, PLLM_JL_KEYS, out);
    case M_DICT_VALUES:
        PLLM_TRY(no_args(c, "values()", a));
        return dict_view(c, self.d, PLLM_JL_VALUES, out);
    case M_DICT_GET:
        PLLM_TRY(pos_only(c, "get()", a, 1, 2));
        PLLM_TRY(pllm_jv_check_hashable(c, a->pos[0]));
        PLLM_TRY(pllm_jinja_charge(c, self.d->n / 8 + 1));
        if (pllm_jdict_get(self.d, a->pos[0], out)) return PLLM_OK;
        *out = a->n_pos == 2 ? a->pos[1] : pllm_jv_none();
        return PLLM_OK;
    case M_SEQ_COUNT:
    case M_SEQ_INDEX: {
        if (a->n_pos > 1)
            return pllm_jerr(c, PLLM_ERR_UNSUPPORTED, "%s() with start/stop is not supported",
                             func_name(fn->id));
        PLLM_TRY(pos_only(c, fn->id == M_SEQ_COUNT ? "count()" : "index()", a, 1, 1));
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
        if (fn->id >= M_STRIP && fn->id <= M_FORMAT) return str_method(c, fn->id, self, a, out);
        return pllm_jerr(c, PLLM_ERR_INTERNAL, "unknown function id %d", fn->id);
    }
}

pllm_status pllm_jinja_add_globals(pllm_jctx *c, pllm_jscope *s)
{
    for (size_t i = 0; i < PLLM_ARRAY_LEN(k_globals); i++) {
        pllm_jv f;
        PLLM_TRY(new_func(c, k_globals[i].id, pllm_jv_undef(), &f));
        PLLM_TRY(pllm_jscope_set(c, s, k_globals[i].name, f));
    }
    return PLLM_OK;
}
