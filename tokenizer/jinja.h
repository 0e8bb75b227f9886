/*
 * jinja.h: internals of the chat-template interpreter (chat_template.h is the public API).
 * Shared by jinja_*.c only.
 *
 * Pipeline: source -> lexer (jinja_lexer.c: tokens, with jinja2's whitespace control:
 * trim_blocks, lstrip_blocks, {%- -%}) -> parser (jinja_parser.c: an AST of pllm_jnode, with
 * filter and test names resolved; jinja_eval.c also folds constants like jinja2's optimizer)
 * -> evaluator (jinja_eval.c: statements and expressions over pllm_jv values, scopes;
 * jinja_builtins.c: attribute access, operators, globals; jinja_filters.c: filters, tests,
 * generators; jinja_str.c: str methods and formatting; jinja_value.c: values, str()/repr(),
 * JSON, equality and ordering with Python's rules).
 *
 * Memory: a parsed template owns one arena (AST, constants). A render allocates every value
 * in a second arena, freed as a whole when the render ends: values are never freed one by one,
 * so there is no reference counting and no leak on any error path. The render arena has a byte
 * budget, and loops, macro recursion and output size are bounded: a template can fail, never
 * hang or exhaust the machine.
 *
 * Semantics follow jinja2 3.1 as transformers runs it (ImmutableSandboxedEnvironment,
 * trim_blocks, lstrip_blocks, loopcontrols, undefined = jinja2.Undefined): see chat_template.h.
 */
#pragma once

#include "model/common.h"

#include <stdint.h>

/* ---------------------------------------------------------------- arena */

typedef struct pllm_jarena_chunk pllm_jarena_chunk;
typedef struct pllm_jarena {
    pllm_jarena_chunk *head;
    size_t used;  /* bytes handed out (plus chunk headers) */
    size_t limit; /* budget; 0 = unlimited */
} pllm_jarena;

/* 16-byte aligned; NULL (with an error message) when the budget is exhausted. */
void *pllm_jarena_alloc(pllm_jarena *a, size_t n);
void pllm_jarena_free(pllm_jarena *a);
char *pllm_jarena_strndup(pllm_jarena *a, const char *s, size_t n);

/* ---------------------------------------------------------------- values */

typedef enum pllm_jv_type {
    PLLM_JV_UNDEF, /* jinja2.Undefined: prints "", iterates empty, falsy; anything else fails */
    PLLM_JV_NONE,
    PLLM_JV_BOOL,
    PLLM_JV_INT, /* int64; overflow is an error (Python ints are unbounded) */
    PLLM_JV_FLOAT,
    PLLM_JV_STR,
    PLLM_JV_LIST, /* list, tuple, range and dict views (pllm_jlist.kind) */
    PLLM_JV_DICT,
    PLLM_JV_NS,    /* namespace(): the one mutable object */
    PLLM_JV_MACRO, /* {% macro %} with its defining scope */
    PLLM_JV_FUNC,  /* builtin global or bound method */
    PLLM_JV_LOOP,  /* the `loop` variable */
    PLLM_JV_GEN,   /* a lazy generator (select, map, ...): iterable once */
} pllm_jv_type;

typedef struct pllm_jstr pllm_jstr;
typedef struct pllm_jlist pllm_jlist;
typedef struct pllm_jdict pllm_jdict;
typedef struct pllm_jns pllm_jns;
typedef struct pllm_jmacro pllm_jmacro;
typedef struct pllm_jfunc pllm_jfunc;
typedef struct pllm_jloop pllm_jloop;
typedef struct pllm_jgen pllm_jgen;
typedef struct pllm_jundef pllm_jundef;

typedef struct pllm_jv {
    uint8_t t; /* pllm_jv_type */
    union {
        bool b;
        int64_t i;
        double f;
        pllm_jstr *s;
        pllm_jlist *l;
        pllm_jdict *d;
        pllm_jns *ns;
        pllm_jmacro *m;
        pllm_jfunc *fn;
        pllm_jloop *loop;
        pllm_jgen *gen;
        pllm_jundef *u; /* NULL: a plain undefined with no context */
    };
} pllm_jv;

struct pllm_jstr {
    size_t len;    /* bytes, excluding the NUL */
    size_t nchars; /* code points (== len when ASCII) */
    bool markup;   /* markupsafe.Markup (from |safe or |escape) */
    char s[];      /* valid UTF-8, NUL-terminated */
};

typedef enum pllm_jlist_kind {
    PLLM_JL_LIST,
    PLLM_JL_TUPLE,
    PLLM_JL_RANGE,  /* range(start, stop, step), materialized (the sandbox caps it at 100000) */
    PLLM_JL_KEYS,   /* dict.keys() */
    PLLM_JL_VALUES, /* dict.values() */
    PLLM_JL_ITEMS,  /* dict.items(): items are 2-tuples */
} pllm_jlist_kind;

struct pllm_jlist {
    size_t n;
    uint8_t kind;
    int64_t r_start, r_stop, r_step; /* PLLM_JL_RANGE only, for repr */
    pllm_jv *v;                      /* [n] */
};

struct pllm_jdict {
    size_t n, cap;
    pllm_jv *keys, *vals; /* [n], insertion order; keys are hashable values */
};

struct pllm_jns {
    pllm_jdict attrs; /* string keys */
};

typedef struct pllm_jnode pllm_jnode;
typedef struct pllm_jscope pllm_jscope;

struct pllm_jmacro {
    const pllm_jnode *def; /* PLLM_JN_MACRO */
    pllm_jscope *closure;  /* the scope it was defined in, read live at call time */
};

struct pllm_jfunc {
    int id;       /* pllm_jbuiltin_fn */
    pllm_jv self; /* bound object for methods; undefined for globals */
};

struct pllm_jloop {
    const pllm_jv *items; /* [n] */
    size_t n, i;          /* i: current index0 */
    bool has_changed;
    pllm_jv changed_last;
};

/* An undefined value remembers how it was reached, for jinja2's error message. */
struct pllm_jundef {
    const char *hint;     /* full message, or NULL */
    const char *obj_type; /* "dict object", ... or NULL when a name was not found */
    pllm_jv name;         /* the missing name / attribute / key */
};

/* ---------------------------------------------------------------- AST */

typedef enum pllm_jnode_kind {
    /* statements */
    PLLM_JN_TEXT,      /* text */
    PLLM_JN_PRINT,     /* a: expression */
    PLLM_JN_IF,        /* a: test, body, orelse (an elif is a nested IF in orelse) */
    PLLM_JN_FOR,       /* a: target, b: iterable, c: filter test or NULL, body, orelse */
    PLLM_JN_SET,       /* a: target, b: value */
    PLLM_JN_SET_BLOCK, /* a: target, c: filter chain (input NULL) or NULL, body */
    PLLM_JN_MACRO,     /* name, params: names/n_names, args: defaults (last ones), body */
    PLLM_JN_BREAK,
    PLLM_JN_CONTINUE,
    PLLM_JN_FILTER_BLOCK, /* c: filter chain (innermost input NULL), body */
    PLLM_JN_WITH,         /* args: targets, kw: values (evaluated outside), body in a new scope */
    PLLM_JN_GENERATION,   /* body rendered in place (transformers' {% generation %}, and the
                             expressions of a {% print a, b %}) */
    /* expressions */
    PLLM_JE_CONST,   /* value */
    PLLM_JE_NAME,    /* name */
    PLLM_JE_NSREF,   /* name.attr as an assignment target: name, attr */
    PLLM_JE_GETATTR, /* a.attr */
    PLLM_JE_GETITEM, /* a[b] */
    PLLM_JE_SLICE,   /* a:b:c, each may be NULL (only inside GETITEM) */
    PLLM_JE_CALL,    /* a(args, kw) */
    PLLM_JE_FILTER,  /* a|fn(args, kw); a is NULL in filter blocks */
    PLLM_JE_TEST,    /* a is fn(args, kw) */
    PLLM_JE_NOT,     /* not a */
    PLLM_JE_NEG,     /* -a */
    PLLM_JE_POS,     /* +a */
    PLLM_JE_BINOP,   /* a op b: op is a pllm_jop */
    PLLM_JE_CONCAT,  /* args[0] ~ args[1] ~ ... */
    PLLM_JE_AND,     /* a and b */
    PLLM_JE_OR,      /* a or b */
    PLLM_JE_COMPARE, /* a ops[0] args[0] ops[1] args[1] ... */
    PLLM_JE_COND,    /* b if a else c (c may be NULL) */
    PLLM_JE_LIST,    /* [args] */
    PLLM_JE_TUPLE,   /* (args) */
    PLLM_JE_DICT,    /* {args[i]: kw[i]} */
    PLLM_JE_FAIL,    /* fails with `text` when evaluated (see pllm_jinja_fold) */
} pllm_jnode_kind;

typedef enum pllm_jop {
    PLLM_JOP_ADD,
    PLLM_JOP_SUB,
    PLLM_JOP_MUL,
    PLLM_JOP_DIV,
    PLLM_JOP_FLOORDIV,
    PLLM_JOP_MOD,
    PLLM_JOP_POW,
    PLLM_JOP_EQ,
    PLLM_JOP_NE,
    PLLM_JOP_LT,
    PLLM_JOP_LE,
    PLLM_JOP_GT,
    PLLM_JOP_GE,
    PLLM_JOP_IN,
    PLLM_JOP_NOTIN,
} pllm_jop;

typedef struct pllm_jnodes {
    pllm_jnode **v;
    size_t n;
} pllm_jnodes;

struct pllm_jnode {
    uint8_t kind; /* pllm_jnode_kind */
    uint8_t op;   /* PLLM_JE_BINOP */
    int line;
    int fn;                /* PLLM_JE_FILTER / PLLM_JE_TEST: builtin id */
    pllm_jnode *a, *b, *c; /* see the kinds */
    pllm_jnodes body, orelse;
    pllm_jnodes args;      /* call/filter/test positional args; list/tuple items; dict keys;
                              compare operands; concat parts; macro defaults */
    pllm_jnodes kw;        /* keyword values; dict values */
    const char **kw_names; /* [kw.n] */
    uint8_t *ops;          /* PLLM_JE_COMPARE: [args.n] pllm_jop */
    const char **names;    /* PLLM_JN_MACRO parameters [n_names] */
    size_t n_names;
    const char *name; /* name, attribute, filter/test/macro name */
    const char *attr; /* PLLM_JE_NSREF */
    const char *text; /* PLLM_JN_TEXT */
    size_t text_len;
    pllm_jv value; /* PLLM_JE_CONST */
};

/* ---------------------------------------------------------------- lexer / parser */

typedef enum pllm_jtok_type {
    PLLM_JT_EOF,
    PLLM_JT_DATA,
    PLLM_JT_VAR_BEGIN,
    PLLM_JT_VAR_END,
    PLLM_JT_BLOCK_BEGIN,
    PLLM_JT_BLOCK_END,
    PLLM_JT_NAME,
    PLLM_JT_STRING,
    PLLM_JT_INT,
    PLLM_JT_FLOAT,
    PLLM_JT_OP, /* text holds the operator spelling */
} pllm_jtok_type;

typedef struct pllm_jtok {
    uint8_t type;
    int line;
    const char *text; /* DATA / NAME / OP / STRING (decoded) */
    size_t len;
    int64_t i;
    double f;
} pllm_jtok;

typedef struct pllm_jtoks {
    pllm_jtok *v;
    size_t n, cap;
} pllm_jtoks;

/* Tokenize src (already newline-normalized, see pllm_jinja_parse). Tokens point into the
 * arena. Errors name the template and line. */
pllm_status pllm_jinja_lex(pllm_jarena *a, const char *name, const char *src, size_t len,
                           pllm_jtoks *out);

typedef struct pllm_jtemplate {
    pllm_jarena arena;
    char *name;
    pllm_jnodes body;
} pllm_jtemplate;

/* Parse a whole template into t->body (allocations in t->arena). */
pllm_status pllm_jinja_parse(pllm_jtemplate *t, const char *src, size_t len);

/* ---------------------------------------------------------------- builtins */

typedef enum pllm_jbuiltin_kind {
    PLLM_JB_FILTER,
    PLLM_JB_TEST,
} pllm_jbuiltin_kind;

/* Id of a filter or test by name; -1 when jinja2 has no such one, -2 when jinja2 has it but
 * pllm does not implement it. */
int pllm_jinja_builtin_lookup(pllm_jbuiltin_kind kind, const char *name);

/* ---------------------------------------------------------------- evaluation */

/* Growable string in the render arena. */
typedef struct pllm_jsb {
    char *s;
    size_t n, cap;
} pllm_jsb;

struct pllm_jscope {
    pllm_jscope *parent;
    size_t n, cap;
    const char **names; /* [n] */
    pllm_jv *vals;      /* [n] */
};

typedef struct pllm_jctx {
    pllm_jarena *arena;
    const char *name;          /* template name for messages */
    int line;                  /* line of the node being evaluated */
    uint64_t steps, max_steps; /* loop iterations + macro calls */
    int depth, max_depth;      /* macro call depth */
    size_t max_str;            /* largest string or list an operation may build */
    pllm_jscope *globals;
    pllm_jsb *out; /* current output sink */
    int loop_depth;
    bool const_mode;       /* folding constants at parse time (jinja2's as_const rules) */
    int const_slice_undef; /* slices that as_const turned into undefined */
    int nest;              /* recursion through nested values (repr, ==, generators) */
} pllm_jctx;

/* Charge work units against the budget (loop iterations, macro calls, element visits,
 * comparisons): what keeps a hostile template from running for hours. */
pllm_status pllm_jinja_charge(pllm_jctx *c, uint64_t units);
/* Enter / leave a recursion through nested values; fails beyond PLLM_JINJA_MAX_NEST. */
#define PLLM_JINJA_MAX_NEST 400
pllm_status pllm_jinja_nest_enter(pllm_jctx *c);
static inline void pllm_jinja_nest_leave(pllm_jctx *c)
{
    c->nest--;
}

/* Record "name:line: message" for the current node and return st. */
pllm_status pllm_jerr(pllm_jctx *c, pllm_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

pllm_status pllm_jsb_append(pllm_jctx *c, pllm_jsb *b, const char *s, size_t n);
pllm_status pllm_jsb_appendc(pllm_jctx *c, pllm_jsb *b, const char *s); /* NUL-terminated */
pllm_status pllm_jsb_cp(pllm_jctx *c, pllm_jsb *b, uint32_t cp);        /* one code point */

static inline pllm_jv pllm_jv_undef(void)
{
    return (pllm_jv){.t = PLLM_JV_UNDEF, .u = NULL};
}
static inline pllm_jv pllm_jv_none(void)
{
    return (pllm_jv){.t = PLLM_JV_NONE, .i = 0};
}
static inline pllm_jv pllm_jv_bool(bool b)
{
    return (pllm_jv){.t = PLLM_JV_BOOL, .b = b};
}
static inline pllm_jv pllm_jv_int(int64_t i)
{
    return (pllm_jv){.t = PLLM_JV_INT, .i = i};
}
static inline pllm_jv pllm_jv_float(double f)
{
    return (pllm_jv){.t = PLLM_JV_FLOAT, .f = f};
}

/* Strings (s must be valid UTF-8). */
pllm_status pllm_jv_str(pllm_jctx *c, const char *s, size_t n, pllm_jv *out);
pllm_status pllm_jv_strc(pllm_jctx *c, const char *s, pllm_jv *out);
pllm_status pllm_jv_str_sb(pllm_jctx *c, const pllm_jsb *b, pllm_jv *out);
/* Same, allocating from an arena without a render context (parser constants). */
pllm_jstr *pllm_jstr_new(pllm_jarena *a, const char *s, size_t n);
/* Byte offset of code point index i (0 <= i <= nchars). */
size_t pllm_jstr_offset(const pllm_jstr *s, size_t i);

pllm_status pllm_jv_list(pllm_jctx *c, size_t n, uint8_t kind, pllm_jv *out); /* items undefined */
pllm_status pllm_jv_dict(pllm_jctx *c, pllm_jv *out);
/* Insert or replace (Python dict semantics: replacing keeps the first key's position). */
pllm_status pllm_jdict_set(pllm_jctx *c, pllm_jdict *d, pllm_jv key, pllm_jv val);
/* Look a key up; false when absent. Errors (unhashable key) return through st. */
bool pllm_jdict_get(const pllm_jdict *d, pllm_jv key, pllm_jv *val);
pllm_status pllm_jv_check_hashable(pllm_jctx *c, pllm_jv key);

pllm_status pllm_jv_undef_attr(pllm_jctx *c, pllm_jv obj, pllm_jv name, pllm_jv *out);
pllm_status pllm_jv_undef_hint(pllm_jctx *c, const char *hint, pllm_jv *out);
/* The UndefinedError raised by an operation on u. */
pllm_status pllm_jv_undef_fail(pllm_jctx *c, pllm_jv u);

const char *pllm_jv_type_name(pllm_jv v); /* Python's type name: 'str', 'int', 'dict', ... */
bool pllm_jv_truthy(pllm_jv v);

/* str(v) appended to b (jinja2's output conversion; undefined is ""). */
pllm_status pllm_jv_write_str(pllm_jctx *c, pllm_jsb *b, pllm_jv v);
/* repr(v) appended to b. */
pllm_status pllm_jv_write_repr(pllm_jctx *c, pllm_jsb *b, pllm_jv v);
/* str(v) as a string value (a str value is returned as is). */
pllm_status pllm_jv_to_str(pllm_jctx *c, pllm_jv v, pllm_jv *out);
/* Python's repr() of a float. */
void pllm_jv_float_repr(double f, char *buf, size_t cap);

typedef struct pllm_jjson_opts {
    int indent;           /* < 0: none */
    const char *indent_s; /* indent given as a string (overrides indent) */
    const char *item_sep, *key_sep;
    bool sort_keys;
    bool ensure_ascii;
} pllm_jjson_opts;
/* json.dumps(v, ...) appended to b. */
pllm_status pllm_jv_write_json(pllm_jctx *c, pllm_jsb *b, pllm_jv v, const pllm_jjson_opts *o);

/* Python ==, and <, <=, >, >= (TypeError for unorderable types). */
pllm_status pllm_jv_eq(pllm_jctx *c, pllm_jv a, pllm_jv b, bool *eq);
pllm_status pllm_jv_lt(pllm_jctx *c, pllm_jv a, pllm_jv b, bool *lt);
/* Comparison operators (PLLM_JOP_EQ .. PLLM_JOP_NOTIN). */
pllm_status pllm_jinja_compare(pllm_jctx *c, int op, pllm_jv a, pllm_jv b, bool *res);
/* Python's `a in b`. */
pllm_status pllm_jv_contains(pllm_jctx *c, pllm_jv container, pllm_jv item, bool *in);

/* Iteration over any iterable value (str: characters, dict: keys, generator: pulls). */
typedef struct pllm_jiter {
    pllm_jv v;
    size_t pos;
} pllm_jiter;
pllm_status pllm_jiter_init(pllm_jctx *c, pllm_jv v, pllm_jiter *it);
/* *done is set when exhausted. */
pllm_status pllm_jiter_next(pllm_jctx *c, pllm_jiter *it, pllm_jv *out, bool *done);
/* Drain an iterable into a fresh array. */
pllm_status pllm_jv_collect(pllm_jctx *c, pllm_jv v, pllm_jv **items, size_t *n);

/* Scopes. */
pllm_status pllm_jscope_new(pllm_jctx *c, pllm_jscope *parent, pllm_jscope **out);
pllm_status pllm_jscope_set(pllm_jctx *c, pllm_jscope *s, const char *name, pllm_jv v);
bool pllm_jscope_lookup(const pllm_jscope *s, const char *name, pllm_jv *out);

/* Call arguments. */
typedef struct pllm_jargs {
    const pllm_jv *pos;
    size_t n_pos;
    const char *const *kw_names;
    const pllm_jv *kw;
    size_t n_kw;
} pllm_jargs;

/* Bind args to parameters (Python rules: too many, unknown or duplicate keywords fail).
 * vals[i] is set for given parameters, and given[i] says which were. what names the callee. */
pllm_status pllm_jargs_bind(pllm_jctx *c, const char *what, const pllm_jargs *args,
                            const char *const *params, size_t n_params, size_t n_required,
                            pllm_jv *vals, bool *given);

/* Builtins (jinja_builtins.c). */
pllm_status pllm_jinja_call_filter(pllm_jctx *c, int id, pllm_jv in, const pllm_jargs *args,
                                   pllm_jv *out);
pllm_status pllm_jinja_call_test(pllm_jctx *c, int id, pllm_jv in, const pllm_jargs *args,
                                 bool *out);
/* obj.name (jinja2's sandboxed getattr: Python attribute, then item, else undefined). */
pllm_status pllm_jinja_getattr(pllm_jctx *c, pllm_jv obj, const char *name, pllm_jv *out);
/* obj[key] (item, then attribute for string keys, else undefined). */
pllm_status pllm_jinja_getitem(pllm_jctx *c, pllm_jv obj, pllm_jv key, pllm_jv *out);
pllm_status pllm_jinja_slice(pllm_jctx *c, pllm_jv obj, const pllm_jv *start, const pllm_jv *stop,
                             const pllm_jv *step, pllm_jv *out);
/* Call a builtin function value. */
pllm_status pllm_jinja_call_func(pllm_jctx *c, const pllm_jfunc *fn, const pllm_jargs *args,
                                 pllm_jv *out);
/* Pull the next item of a generator. */
pllm_status pllm_jinja_gen_next(pllm_jctx *c, pllm_jgen *g, pllm_jv *out, bool *done);
/* Add the environment's globals (range, namespace, raise_exception, ...) to a scope. */
pllm_status pllm_jinja_add_globals(pllm_jctx *c, pllm_jscope *s);
/* Binary operators (+ - * / // % **). */
pllm_status pllm_jinja_binop(pllm_jctx *c, int op, pllm_jv a, pllm_jv b, pllm_jv *out);
/* Call a macro value (jinja_eval.c). */
pllm_status pllm_jinja_call_macro(pllm_jctx *c, const pllm_jmacro *m, const pllm_jargs *args,
                                  pllm_jv *out);

/* Filters jinja2 cannot fold at compile time (they take the context: map, select, ...). */
bool pllm_jinja_filter_needs_context(int id);

/* jinja2's optimizer: fold constant expressions (and constant {{ }} outputs to text), with
 * as_const semantics, where slices go through the sandbox's getitem (jinja_eval.c). */
pllm_status pllm_jinja_fold(pllm_jtemplate *t);

/* Render a parsed template with the given variables scope (jinja_eval.c). */
pllm_status pllm_jinja_render(pllm_jctx *c, const pllm_jtemplate *t, pllm_jsb *out);
