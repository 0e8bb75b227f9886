/*
 * jinja_builtins.h: what jinja_builtins.c, jinja_str.c and jinja_filters.c share (builtin ids,
 * argument helpers, Python str helpers). Internal to those three files.
 */
#pragma once

#include "tokenizer/jinja.h"

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

typedef struct pllm_jb_named {
    const char *name;
    int id;
} pllm_jb_named;

#define TYPE_ERROR(c, ...) pllm_jerr((c), PLLM_ERR_INVALID, "TypeError: " __VA_ARGS__)
#define OVERFLOW(c)                                                                                \
    pllm_jerr((c), PLLM_ERR_UNSUPPORTED, "integer overflow (pllm supports 64-bit integers)")

static inline bool is_int_like(pllm_jv v)
{
    return v.t == PLLM_JV_INT || v.t == PLLM_JV_BOOL;
}

static inline int64_t as_int(pllm_jv v)
{
    return v.t == PLLM_JV_BOOL ? (int64_t)v.b : v.i;
}

static inline bool is_num(pllm_jv v)
{
    return is_int_like(v) || v.t == PLLM_JV_FLOAT;
}

static inline double as_float(pllm_jv v)
{
    return v.t == PLLM_JV_FLOAT ? v.f : (double)as_int(v);
}

typedef struct pllm_jb_cpbuf {
    uint32_t *v;
    size_t n;
} pllm_jb_cpbuf;

enum { CASE_LOWER, CASE_UPPER, CASE_TITLE_METHOD, CASE_CAPITALIZE, CASE_TITLE_FILTER };

/* jinja_builtins.c */
void *pllm_jb_alloc(pllm_jctx *c, size_t n);
int pllm_jb_find_named(const pllm_jb_named *t, size_t n, const char *name);
const char *pllm_jb_func_name(int id);
pllm_status pllm_jb_new_func(pllm_jctx *c, int id, pllm_jv self, pllm_jv *out);
pllm_status pllm_jb_soft_str(pllm_jctx *c, pllm_jv v, pllm_jv *out); /* str(v) unless a str */
pllm_status pllm_jb_mark(pllm_jctx *c, pllm_jv *v, bool markup);     /* copy flagged as Markup */
pllm_status pllm_jb_html_escape(pllm_jctx *c, const pllm_jstr *s, pllm_jv *out);
pllm_status pllm_jb_bind(pllm_jctx *c, const char *what, const pllm_jargs *a,
                         const char *const *params, size_t n, size_t required, pllm_jv *vals,
                         bool *given);
pllm_status pllm_jb_no_args(pllm_jctx *c, const char *what, const pllm_jargs *a);
pllm_status pllm_jb_pos_only(pllm_jctx *c, const char *what, const pllm_jargs *a, size_t min,
                             size_t max);
pllm_status pllm_jb_list_push(pllm_jctx *c, pllm_jv **arr, size_t *n, size_t *cap, pllm_jv v);
pllm_status pllm_jb_make_list(pllm_jctx *c, pllm_jv *items, size_t n, uint8_t kind, pllm_jv *out);
pllm_status pllm_jb_float_to_int(pllm_jctx *c, double f, pllm_jv *out); /* int(f), 64-bit */
/* Python's getattr(obj, name) under the immutable sandbox: *found false when absent. */
pllm_status pllm_jb_py_getattr(pllm_jctx *c, pllm_jv obj, const char *name, bool *found,
                               pllm_jv *out);

/* jinja_str.c */
pllm_status pllm_jb_decode(pllm_jctx *c, const pllm_jstr *s, pllm_jb_cpbuf *out);
pllm_status pllm_jb_substr(pllm_jctx *c, const pllm_jstr *s, size_t from, size_t to, pllm_jv *out);
pllm_status pllm_jb_change_case(pllm_jctx *c, pllm_jv in, int mode, pllm_jv *out);
pllm_status pllm_jb_str_predicate(pllm_jctx *c, const pllm_jstr *s, int id, bool *out);
/* which: 1 left, 2 right, 3 both; chars NULL for whitespace */
pllm_status pllm_jb_strip(pllm_jctx *c, pllm_jv in, const pllm_jstr *chars, int which,
                          pllm_jv *out);
pllm_status pllm_jb_splitlines(pllm_jctx *c, const pllm_jstr *s, bool keepends, pllm_jv *out);
pllm_status pllm_jb_replace(pllm_jctx *c, const pllm_jstr *s, const pllm_jstr *old,
                            const pllm_jstr *rep, int64_t count, pllm_jv *out);
pllm_status pllm_jb_str_format(pllm_jctx *c, pllm_jv fmt, pllm_jv args,
                               pllm_jv *out); /* fmt % args */
pllm_status pllm_jb_str_method(pllm_jctx *c, int id, pllm_jv self, const pllm_jargs *a,
                               pllm_jv *out);
void pllm_jb_parse_float(const char *s, size_t n, double *out, bool *ok);
void pllm_jb_parse_int(const char *s, size_t n, int64_t base, int64_t *out, bool *ok,
                       bool *overflow);
pllm_status pllm_jb_number_text(pllm_jctx *c, const pllm_jstr *s, const char **out, size_t *n,
                                bool *ok);
