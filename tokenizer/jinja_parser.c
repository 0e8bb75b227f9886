/*
 * jinja_parser.c: tokens -> AST, following jinja2/parser.py production by production (the
 * operator precedence, where filters and tests bind, tuples without parentheses, the
 * single-argument form of tests), plus the loopcontrols extension (break, continue) and
 * transformers' {% generation %} tag. Unknown filters and tests fail here, as they fail at
 * jinja2's compile time; tags jinja2 has but pllm does not run (include, extends, block,
 * import, call, autoescape, recursive loops, *args) fail naming the construct and its line.
 */
#include "tokenizer/jinja.h"

#include "tokenizer/jinja_unicode.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define MAX_NESTING 100

typedef struct parser {
    pllm_jtemplate *t;
    pllm_jarena *a;
    const char *name;
    pllm_jtoks toks;
    size_t i;
    int depth;      /* expression / block nesting */
    int loop_depth; /* enclosing for loops in the current macro (break/continue) */
} parser;

/* ---------------------------------------------------------------- helpers */

static const pllm_jtok *cur(const parser *p)
{
    return &p->toks.v[p->i];
}
static const pllm_jtok *peek(const parser *p, size_t k)
{
    size_t j = p->i + k;
    return j < p->toks.n ? &p->toks.v[j] : &p->toks.v[p->toks.n - 1];
}
static void advance(parser *p)
{
    if (p->i + 1 < p->toks.n) p->i++;
}

static bool tok_is(const pllm_jtok *t, uint8_t type, const char *text)
{
    if (t->type != type) return false;
    if (!text) return true;
    size_t n = strlen(text);
    return t->len == n && memcmp(t->text, text, n) == 0;
}
static bool is_name(const parser *p, const char *s)
{
    return tok_is(cur(p), PLLM_JT_NAME, s);
}
static bool is_op(const parser *p, const char *s)
{
    return tok_is(cur(p), PLLM_JT_OP, s);
}

static void describe(const pllm_jtok *t, char *buf, size_t cap)
{
    switch (t->type) {
    case PLLM_JT_EOF:
        snprintf(buf, cap, "end of template");
        break;
    case PLLM_JT_DATA:
        snprintf(buf, cap, "template data / text");
        break;
    case PLLM_JT_VAR_BEGIN:
        snprintf(buf, cap, "begin of print statement");
        break;
    case PLLM_JT_VAR_END:
        snprintf(buf, cap, "end of print statement");
        break;
    case PLLM_JT_BLOCK_BEGIN:
        snprintf(buf, cap, "begin of statement block");
        break;
    case PLLM_JT_BLOCK_END:
        snprintf(buf, cap, "end of statement block");
        break;
    case PLLM_JT_STRING:
        snprintf(buf, cap, "string");
        break;
    case PLLM_JT_INT:
        snprintf(buf, cap, "integer");
        break;
    case PLLM_JT_FLOAT:
        snprintf(buf, cap, "float");
        break;
    default:
        snprintf(buf, cap, "%.*s", (int)PLLM_MIN(t->len, 60), t->text);
        break;
    }
}

static pllm_status fail_at(parser *p, int line, pllm_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static pllm_status fail_at(parser *p, int line, pllm_status st, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return pllm_errorf(st, "%s:%d: %s", p->name, line, msg);
}

#define SYNTAX(p, ...)                                                                             \
    fail_at((p), cur(p)->line, PLLM_ERR_FORMAT, "template syntax error: " __VA_ARGS__)

static pllm_status expect_type(parser *p, uint8_t type, const char *what)
{
    if (cur(p)->type != type) {
        char got[80];
        describe(cur(p), got, sizeof got);
        return SYNTAX(p, "expected token '%s', got '%s'", what, got);
    }
    advance(p);
    return PLLM_OK;
}

static pllm_status expect_op(parser *p, const char *op)
{
    if (!is_op(p, op)) {
        char got[80];
        describe(cur(p), got, sizeof got);
        return SYNTAX(p, "expected token '%s', got '%s'", op, got);
    }
    advance(p);
    return PLLM_OK;
}

static pllm_status expect_name(parser *p, const char *nm)
{
    if (!is_name(p, nm)) {
        char got[80];
        describe(cur(p), got, sizeof got);
        return SYNTAX(p, "expected token '%s', got '%s'", nm, got);
    }
    advance(p);
    return PLLM_OK;
}

static char *dup_tok(parser *p, const pllm_jtok *t)
{
    char *s = pllm_jarena_strndup(p->a, t->text, t->len);
    if (!s) pllm_error_prefix(PLLM_ERR_NOMEM, "%s: ", p->name);
    return s;
}

static pllm_status new_node(parser *p, int kind, int line, pllm_jnode **out)
{
    pllm_jnode *n = pllm_jarena_alloc(p->a, sizeof *n);
    if (!n) return pllm_error_prefix(PLLM_ERR_NOMEM, "%s: ", p->name);
    memset(n, 0, sizeof *n);
    n->kind = (uint8_t)kind;
    n->line = line;
    n->fn = -1;
    n->value = pllm_jv_undef();
    *out = n;
    return PLLM_OK;
}

/* A growable node list in the arena. */
typedef struct nvec {
    pllm_jnode **v;
    size_t n, cap;
} nvec;

static pllm_status nvec_push(parser *p, nvec *v, pllm_jnode *n)
{
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 4;
        pllm_jnode **nv = pllm_jarena_alloc(p->a, cap * sizeof *nv);
        if (!nv) return pllm_error_prefix(PLLM_ERR_NOMEM, "%s: ", p->name);
        if (v->n) memcpy(nv, v->v, v->n * sizeof *nv);
        v->v = nv;
        v->cap = cap;
    }
    v->v[v->n++] = n;
    return PLLM_OK;
}

static pllm_jnodes nvec_done(nvec v)
{
    return (pllm_jnodes){.v = v.v, .n = v.n};
}

static pllm_status enter(parser *p)
{
    if (++p->depth > MAX_NESTING)
        return fail_at(p, cur(p)->line, PLLM_ERR_RANGE, "template nested too deeply (limit %d)",
                       MAX_NESTING);
    return PLLM_OK;
}

/* ---------------------------------------------------------------- expressions */

static pllm_status parse_expression(parser *p, bool with_condexpr, pllm_jnode **out);
static pllm_status parse_unary(parser *p, bool with_filter, pllm_jnode **out);
static pllm_status parse_primary(parser *p, bool with_namespace, pllm_jnode **out);
static pllm_status parse_postfix(parser *p, pllm_jnode *node, pllm_jnode **out);
static pllm_status parse_filter_expr(parser *p, pllm_jnode *node, pllm_jnode **out);
static pllm_status parse_filter(parser *p, pllm_jnode *node, bool start_inline, pllm_jnode **out);

typedef struct end_rules {
    const char *names[2];
} end_rules;

static bool is_tuple_end(const parser *p, const end_rules *extra)
{
    uint8_t ty = cur(p)->type;
    if (ty == PLLM_JT_VAR_END || ty == PLLM_JT_BLOCK_END || is_op(p, ")")) return true;
    if (extra)
        for (int k = 0; k < 2; k++)
            if (extra->names[k] && is_name(p, extra->names[k])) return true;
    return false;
}

/* parse_tuple: simplified parses primaries only (assignment targets). */
static pllm_status parse_tuple(parser *p, bool simplified, bool with_condexpr,
                               const end_rules *extra, bool explicit_parens, bool with_namespace,
                               pllm_jnode **out)
{
    int line = cur(p)->line;
    nvec args = {0};
    bool is_tuple = false;
    for (;;) {
        if (args.n) PLLM_TRY(expect_op(p, ","));
        if (is_tuple_end(p, extra)) break;
        pllm_jnode *e;
        if (simplified)
            PLLM_TRY(parse_primary(p, with_namespace, &e));
        else
            PLLM_TRY(parse_expression(p, with_condexpr, &e));
        PLLM_TRY(nvec_push(p, &args, e));
        if (is_op(p, ","))
            is_tuple = true;
        else
            break;
        line = cur(p)->line;
    }
    if (!is_tuple) {
        if (args.n) {
            *out = args.v[0];
            return PLLM_OK;
        }
        if (!explicit_parens) {
            char got[80];
            describe(cur(p), got, sizeof got);
            return SYNTAX(p, "Expected an expression, got '%s'", got);
        }
    }
    PLLM_TRY(new_node(p, PLLM_JE_TUPLE, line, out));
    (*out)->args = nvec_done(args);
    return PLLM_OK;
}

static pllm_status parse_condexpr(parser *p, pllm_jnode **out);
static pllm_status parse_or(parser *p, pllm_jnode **out);

static pllm_status parse_expression(parser *p, bool with_condexpr, pllm_jnode **out)
{
    PLLM_TRY(enter(p));
    pllm_status st = with_condexpr ? parse_condexpr(p, out) : parse_or(p, out);
    p->depth--;
    return st;
}

static pllm_status parse_condexpr(parser *p, pllm_jnode **out)
{
    int line = cur(p)->line;
    pllm_jnode *expr1;
    PLLM_TRY(parse_or(p, &expr1));
    while (is_name(p, "if")) {
        advance(p);
        pllm_jnode *expr2 = NULL, *expr3 = NULL, *n = NULL;
        PLLM_TRY(parse_or(p, &expr2));
        if (is_name(p, "else")) {
            advance(p);
            PLLM_TRY(enter(p));
            PLLM_TRY(parse_condexpr(p, &expr3));
            p->depth--;
        }
        PLLM_TRY(new_node(p, PLLM_JE_COND, line, &n));
        n->a = expr2; /* test */
        n->b = expr1;
        n->c = expr3;
        expr1 = n;
        line = cur(p)->line;
    }
    *out = expr1;
    return PLLM_OK;
}

static pllm_status parse_and(parser *p, pllm_jnode **out);
static pllm_status parse_not(parser *p, pllm_jnode **out);
static pllm_status parse_compare(parser *p, pllm_jnode **out);
static pllm_status parse_math1(parser *p, pllm_jnode **out);
static pllm_status parse_concat(parser *p, pllm_jnode **out);
static pllm_status parse_math2(parser *p, pllm_jnode **out);
static pllm_status parse_pow(parser *p, pllm_jnode **out);

static pllm_status binary(parser *p, int kind, int op, int line, pllm_jnode *l, pllm_jnode *r,
                          pllm_jnode **out)
{
    PLLM_TRY(new_node(p, kind, line, out));
    (*out)->op = (uint8_t)op;
    (*out)->a = l;
    (*out)->b = r;
    return PLLM_OK;
}

static pllm_status parse_or(parser *p, pllm_jnode **out)
{
    int line = cur(p)->line;
    pllm_jnode *left, *right;
    PLLM_TRY(parse_and(p, &left));
    while (is_name(p, "or")) {
        advance(p);
        PLLM_TRY(parse_and(p, &right));
        PLLM_TRY(binary(p, PLLM_JE_OR, 0, line, left, right, &left));
        line = cur(p)->line;
    }
    *out = left;
    return PLLM_OK;
}

static pllm_status parse_and(parser *p, pllm_jnode **out)
{
    int line = cur(p)->line;
    pllm_jnode *left, *right;
    PLLM_TRY(parse_not(p, &left));
    while (is_name(p, "and")) {
        advance(p);
        PLLM_TRY(parse_not(p, &right));
        PLLM_TRY(binary(p, PLLM_JE_AND, 0, line, left, right, &left));
        line = cur(p)->line;
    }
    *out = left;
    return PLLM_OK;
}

static pllm_status parse_not(parser *p, pllm_jnode **out)
{
    if (is_name(p, "not")) {
        int line = cur(p)->line;
        advance(p);
        pllm_jnode *inner;
        PLLM_TRY(enter(p));
        PLLM_TRY(parse_not(p, &inner));
        p->depth--;
        PLLM_TRY(new_node(p, PLLM_JE_NOT, line, out));
        (*out)->a = inner;
        return PLLM_OK;
    }
    return parse_compare(p, out);
}

static pllm_status parse_compare(parser *p, pllm_jnode **out)
{
    int line = cur(p)->line;
    pllm_jnode *expr;
    PLLM_TRY(parse_math1(p, &expr));
    nvec operands = {0};
    uint8_t ops[64];
    static const struct {
        const char *s;
        int op;
    } cmp[] = {{"==", PLLM_JOP_EQ}, {"!=", PLLM_JOP_NE}, {"<", PLLM_JOP_LT},
               {"<=", PLLM_JOP_LE}, {">", PLLM_JOP_GT},  {">=", PLLM_JOP_GE}};
    for (;;) {
        int op = -1;
        for (size_t k = 0; k < PLLM_ARRAY_LEN(cmp); k++)
            if (is_op(p, cmp[k].s)) op = cmp[k].op;
        if (op >= 0) {
            advance(p);
        } else if (is_name(p, "in")) {
            advance(p);
            op = PLLM_JOP_IN;
        } else if (is_name(p, "not") && tok_is(peek(p, 1), PLLM_JT_NAME, "in")) {
            advance(p);
            advance(p);
            op = PLLM_JOP_NOTIN;
        } else {
            break;
        }
        if (operands.n >= PLLM_ARRAY_LEN(ops)) return SYNTAX(p, "comparison chain too long");
        pllm_jnode *rhs;
        PLLM_TRY(parse_math1(p, &rhs));
        ops[operands.n] = (uint8_t)op;
        PLLM_TRY(nvec_push(p, &operands, rhs));
        line = cur(p)->line;
    }
    if (!operands.n) {
        *out = expr;
        return PLLM_OK;
    }
    PLLM_TRY(new_node(p, PLLM_JE_COMPARE, line, out));
    (*out)->a = expr;
    (*out)->args = nvec_done(operands);
    (*out)->ops = pllm_jarena_alloc(p->a, operands.n);
    if (!(*out)->ops) return pllm_error_prefix(PLLM_ERR_NOMEM, "%s: ", p->name);
    memcpy((*out)->ops, ops, operands.n);
    return PLLM_OK;
}

static pllm_status parse_math1(parser *p, pllm_jnode **out)
{
    int line = cur(p)->line;
    pllm_jnode *left, *right;
    PLLM_TRY(parse_concat(p, &left));
    while (is_op(p, "+") || is_op(p, "-")) {
        int op = is_op(p, "+") ? PLLM_JOP_ADD : PLLM_JOP_SUB;
        advance(p);
        PLLM_TRY(parse_concat(p, &right));
        PLLM_TRY(binary(p, PLLM_JE_BINOP, op, line, left, right, &left));
        line = cur(p)->line;
    }
    *out = left;
    return PLLM_OK;
}

static pllm_status parse_concat(parser *p, pllm_jnode **out)
{
    int line = cur(p)->line;
    pllm_jnode *first;
    PLLM_TRY(parse_math2(p, &first));
    if (!is_op(p, "~")) {
        *out = first;
        return PLLM_OK;
    }
    nvec args = {0};
    PLLM_TRY(nvec_push(p, &args, first));
    while (is_op(p, "~")) {
        advance(p);
        pllm_jnode *e;
        PLLM_TRY(parse_math2(p, &e));
        PLLM_TRY(nvec_push(p, &args, e));
    }
    PLLM_TRY(new_node(p, PLLM_JE_CONCAT, line, out));
    (*out)->args = nvec_done(args);
    return PLLM_OK;
}

static pllm_status parse_math2(parser *p, pllm_jnode **out)
{
    int line = cur(p)->line;
    pllm_jnode *left, *right;
    PLLM_TRY(parse_pow(p, &left));
    for (;;) {
        int op = is_op(p, "*")    ? PLLM_JOP_MUL
                 : is_op(p, "/")  ? PLLM_JOP_DIV
                 : is_op(p, "//") ? PLLM_JOP_FLOORDIV
                 : is_op(p, "%")  ? PLLM_JOP_MOD
                                  : -1;
        if (op < 0) break;
        advance(p);
        PLLM_TRY(parse_pow(p, &right));
        PLLM_TRY(binary(p, PLLM_JE_BINOP, op, line, left, right, &left));
        line = cur(p)->line;
    }
    *out = left;
    return PLLM_OK;
}

static pllm_status parse_pow(parser *p, pllm_jnode **out)
{
    int line = cur(p)->line;
    pllm_jnode *left, *right;
    PLLM_TRY(parse_unary(p, true, &left));
    while (is_op(p, "**")) {
        advance(p);
        PLLM_TRY(parse_unary(p, true, &right));
        PLLM_TRY(binary(p, PLLM_JE_BINOP, PLLM_JOP_POW, line, left, right, &left));
        line = cur(p)->line;
    }
    *out = left;
    return PLLM_OK;
}

static pllm_status parse_unary(parser *p, bool with_filter, pllm_jnode **out)
{
    int line = cur(p)->line;
    pllm_jnode *node = NULL;
    PLLM_TRY(enter(p));
    if (is_op(p, "-") || is_op(p, "+")) {
        int kind = is_op(p, "-") ? PLLM_JE_NEG : PLLM_JE_POS;
        advance(p);
        pllm_jnode *inner;
        PLLM_TRY(parse_unary(p, false, &inner));
        PLLM_TRY(new_node(p, kind, line, &node));
        node->a = inner;
    } else {
        PLLM_TRY(parse_primary(p, false, &node));
    }
    PLLM_TRY(parse_postfix(p, node, &node));
    if (with_filter) PLLM_TRY(parse_filter_expr(p, node, &node));
    p->depth--;
    *out = node;
    return PLLM_OK;
}

static pllm_status parse_list(parser *p, pllm_jnode **out)
{
    int line = cur(p)->line;
    PLLM_TRY(expect_op(p, "["));
    nvec items = {0};
    while (!is_op(p, "]")) {
        if (items.n) PLLM_TRY(expect_op(p, ","));
        if (is_op(p, "]")) break;
        pllm_jnode *e;
        PLLM_TRY(parse_expression(p, true, &e));
        PLLM_TRY(nvec_push(p, &items, e));
    }
    PLLM_TRY(expect_op(p, "]"));
    PLLM_TRY(new_node(p, PLLM_JE_LIST, line, out));
    (*out)->args = nvec_done(items);
    return PLLM_OK;
}

static pllm_status parse_dict(parser *p, pllm_jnode **out)
{
    int line = cur(p)->line;
    PLLM_TRY(expect_op(p, "{"));
    nvec keys = {0}, vals = {0};
    while (!is_op(p, "}")) {
        if (keys.n) PLLM_TRY(expect_op(p, ","));
        if (is_op(p, "}")) break;
        pllm_jnode *k, *v;
        PLLM_TRY(parse_expression(p, true, &k));
        PLLM_TRY(expect_op(p, ":"));
        PLLM_TRY(parse_expression(p, true, &v));
        PLLM_TRY(nvec_push(p, &keys, k));
        PLLM_TRY(nvec_push(p, &vals, v));
    }
    PLLM_TRY(expect_op(p, "}"));
    PLLM_TRY(new_node(p, PLLM_JE_DICT, line, out));
    (*out)->args = nvec_done(keys);
    (*out)->kw = nvec_done(vals);
    return PLLM_OK;
}

static pllm_status parse_primary(parser *p, bool with_namespace, pllm_jnode **out)
{
    const pllm_jtok *t = cur(p);
    int line = t->line;
    if (t->type == PLLM_JT_NAME) {
        advance(p);
        if (tok_is(t, PLLM_JT_NAME, "true") || tok_is(t, PLLM_JT_NAME, "True") ||
            tok_is(t, PLLM_JT_NAME, "false") || tok_is(t, PLLM_JT_NAME, "False")) {
            PLLM_TRY(new_node(p, PLLM_JE_CONST, line, out));
            (*out)->value = pllm_jv_bool(t->text[0] == 't' || t->text[0] == 'T');
            return PLLM_OK;
        }
        if (tok_is(t, PLLM_JT_NAME, "none") || tok_is(t, PLLM_JT_NAME, "None")) {
            PLLM_TRY(new_node(p, PLLM_JE_CONST, line, out));
            (*out)->value = pllm_jv_none();
            return PLLM_OK;
        }
        if (with_namespace && is_op(p, ".")) {
            advance(p);
            if (cur(p)->type != PLLM_JT_NAME) return expect_type(p, PLLM_JT_NAME, "name");
            PLLM_TRY(new_node(p, PLLM_JE_NSREF, line, out));
            if (!((*out)->name = dup_tok(p, t)) || !((*out)->attr = dup_tok(p, cur(p))))
                return PLLM_ERR_NOMEM;
            advance(p);
            return PLLM_OK;
        }
        PLLM_TRY(new_node(p, PLLM_JE_NAME, line, out));
        if (!((*out)->name = dup_tok(p, t))) return PLLM_ERR_NOMEM;
        /* the name as a string value, for the undefined it may evaluate to */
        pllm_jstr *nm = pllm_jstr_new(p->a, t->text, t->len);
        if (!nm) return pllm_error_prefix(PLLM_ERR_NOMEM, "%s: ", p->name);
        (*out)->value = (pllm_jv){.t = PLLM_JV_STR, .s = nm};
        return PLLM_OK;
    }
    if (t->type == PLLM_JT_STRING) {
        /* adjacent string literals concatenate */
        size_t total = 0, j = p->i;
        while (p->toks.v[j].type == PLLM_JT_STRING) total += p->toks.v[j++].len;
        char *buf = pllm_jarena_alloc(p->a, total + 1);
        if (!buf) return pllm_error_prefix(PLLM_ERR_NOMEM, "%s: ", p->name);
        size_t o = 0;
        while (cur(p)->type == PLLM_JT_STRING) {
            memcpy(buf + o, cur(p)->text, cur(p)->len);
            o += cur(p)->len;
            advance(p);
        }
        pllm_jstr *s = pllm_jstr_new(p->a, buf, o);
        if (!s) return pllm_error_prefix(PLLM_ERR_NOMEM, "%s: ", p->name);
        PLLM_TRY(new_node(p, PLLM_JE_CONST, line, out));
        (*out)->value = (pllm_jv){.t = PLLM_JV_STR, .s = s};
        return PLLM_OK;
    }
    if (t->type == PLLM_JT_INT || t->type == PLLM_JT_FLOAT) {
        advance(p);
        PLLM_TRY(new_node(p, PLLM_JE_CONST, line, out));
        (*out)->value = t->type == PLLM_JT_INT ? pllm_jv_int(t->i) : pllm_jv_float(t->f);
        if (t->type == PLLM_JT_FLOAT && isinf(t->f)) {
            /* jinja2 writes str(inf) into its generated code: see PLLM_JE_FAIL */
            (*out)->kind = PLLM_JE_FAIL;
            (*out)->op = 1;
            (*out)->text = "inf";
        }
        return PLLM_OK;
    }
    if (is_op(p, "(")) {
        advance(p);
        PLLM_TRY(parse_tuple(p, false, true, NULL, true, false, out));
        return expect_op(p, ")");
    }
    if (is_op(p, "[")) return parse_list(p, out);
    if (is_op(p, "{")) return parse_dict(p, out);
    char got[80];
    describe(t, got, sizeof got);
    return SYNTAX(p, "unexpected '%s'", got);
}

/* Call arguments: positional then keyword; *args and **kwargs are not supported. */
static pllm_status parse_call_args(parser *p, pllm_jnode *node)
{
    int line = cur(p)->line;
    PLLM_TRY(expect_op(p, "("));
    nvec args = {0}, kw = {0};
    const char *names[64];
    bool require_comma = false;
    while (!is_op(p, ")")) {
        if (require_comma) {
            PLLM_TRY(expect_op(p, ","));
            if (is_op(p, ")")) break;
        }
        if (is_op(p, "*") || is_op(p, "**"))
            return fail_at(p, cur(p)->line, PLLM_ERR_UNSUPPORTED,
                           "*args / **kwargs in calls are not supported");
        if (cur(p)->type == PLLM_JT_NAME && tok_is(peek(p, 1), PLLM_JT_OP, "=")) {
            if (kw.n >= PLLM_ARRAY_LEN(names)) return SYNTAX(p, "too many keyword arguments");
            names[kw.n] = dup_tok(p, cur(p));
            if (!names[kw.n]) return PLLM_ERR_NOMEM;
            advance(p);
            advance(p);
            pllm_jnode *v;
            PLLM_TRY(parse_expression(p, true, &v));
            PLLM_TRY(nvec_push(p, &kw, v));
        } else {
            if (kw.n)
                return fail_at(
                    p, line, PLLM_ERR_FORMAT,
                    "template syntax error: invalid syntax for function call expression");
            pllm_jnode *v;
            PLLM_TRY(parse_expression(p, true, &v));
            PLLM_TRY(nvec_push(p, &args, v));
        }
        require_comma = true;
    }
    PLLM_TRY(expect_op(p, ")"));
    node->args = nvec_done(args);
    node->kw = nvec_done(kw);
    if (kw.n) {
        node->kw_names = pllm_jarena_alloc(p->a, kw.n * sizeof(char *));
        if (!node->kw_names) return pllm_error_prefix(PLLM_ERR_NOMEM, "%s: ", p->name);
        memcpy(node->kw_names, names, kw.n * sizeof(char *));
    }
    return PLLM_OK;
}

static pllm_status parse_call(parser *p, pllm_jnode *callee, pllm_jnode **out)
{
    PLLM_TRY(new_node(p, PLLM_JE_CALL, cur(p)->line, out));
    (*out)->a = callee;
    return parse_call_args(p, *out);
}

static pllm_status parse_subscribed(parser *p, pllm_jnode **out)
{
    int line = cur(p)->line;
    pllm_jnode *parts[3] = {NULL, NULL, NULL};
    if (is_op(p, ":")) {
        advance(p);
    } else {
        pllm_jnode *e;
        PLLM_TRY(parse_expression(p, true, &e));
        if (!is_op(p, ":")) {
            *out = e;
            return PLLM_OK;
        }
        advance(p);
        parts[0] = e;
    }
    if (is_op(p, ":")) {
        /* stop omitted */
    } else if (!is_op(p, "]") && !is_op(p, ",")) {
        PLLM_TRY(parse_expression(p, true, &parts[1]));
    }
    if (is_op(p, ":")) {
        advance(p);
        if (!is_op(p, "]") && !is_op(p, ",")) PLLM_TRY(parse_expression(p, true, &parts[2]));
    }
    PLLM_TRY(new_node(p, PLLM_JE_SLICE, line, out));
    (*out)->a = parts[0];
    (*out)->b = parts[1];
    (*out)->c = parts[2];
    return PLLM_OK;
}

static pllm_status parse_subscript(parser *p, pllm_jnode *node, pllm_jnode **out)
{
    const pllm_jtok *t = cur(p);
    int line = t->line;
    advance(p);
    if (tok_is(t, PLLM_JT_OP, ".")) {
        const pllm_jtok *attr = cur(p);
        advance(p);
        if (attr->type == PLLM_JT_NAME) {
            PLLM_TRY(new_node(p, PLLM_JE_GETATTR, line, out));
            (*out)->a = node;
            if (!((*out)->name = dup_tok(p, attr))) return PLLM_ERR_NOMEM;
            return PLLM_OK;
        }
        if (attr->type != PLLM_JT_INT)
            return fail_at(p, attr->line, PLLM_ERR_FORMAT,
                           "template syntax error: expected name or number");
        pllm_jnode *k = NULL;
        PLLM_TRY(new_node(p, PLLM_JE_CONST, attr->line, &k));
        k->value = pllm_jv_int(attr->i);
        PLLM_TRY(new_node(p, PLLM_JE_GETITEM, line, out));
        (*out)->a = node;
        (*out)->b = k;
        return PLLM_OK;
    }
    /* '[' */
    nvec args = {0};
    while (!is_op(p, "]")) {
        if (args.n) PLLM_TRY(expect_op(p, ","));
        pllm_jnode *e = NULL;
        PLLM_TRY(parse_subscribed(p, &e));
        PLLM_TRY(nvec_push(p, &args, e));
    }
    PLLM_TRY(expect_op(p, "]"));
    pllm_jnode *key = NULL;
    if (args.n == 1) {
        key = args.v[0];
    } else {
        for (size_t k = 0; k < args.n; k++)
            if (args.v[k]->kind == PLLM_JE_SLICE)
                return fail_at(p, line, PLLM_ERR_UNSUPPORTED,
                               "multi-dimensional slices are not supported");
        PLLM_TRY(new_node(p, PLLM_JE_TUPLE, line, &key));
        key->args = nvec_done(args);
    }
    PLLM_TRY(new_node(p, PLLM_JE_GETITEM, line, out));
    (*out)->a = node;
    (*out)->b = key;
    return PLLM_OK;
}

static pllm_status parse_postfix(parser *p, pllm_jnode *node, pllm_jnode **out)
{
    for (;;) {
        if (is_op(p, ".") || is_op(p, "[")) {
            PLLM_TRY(parse_subscript(p, node, &node));
        } else if (is_op(p, "(")) {
            PLLM_TRY(parse_call(p, node, &node));
        } else {
            break;
        }
    }
    *out = node;
    return PLLM_OK;
}

/* A dotted name after `|` or `is`. */
static pllm_status parse_dotted(parser *p, char *buf, size_t cap)
{
    if (cur(p)->type != PLLM_JT_NAME) return expect_type(p, PLLM_JT_NAME, "name");
    snprintf(buf, cap, "%.*s", (int)cur(p)->len, cur(p)->text);
    advance(p);
    while (is_op(p, ".")) {
        advance(p);
        if (cur(p)->type != PLLM_JT_NAME) return expect_type(p, PLLM_JT_NAME, "name");
        size_t l = strlen(buf);
        snprintf(buf + l, cap - l, ".%.*s", (int)cur(p)->len, cur(p)->text);
        advance(p);
    }
    return PLLM_OK;
}

/* Filter and test names resolve here; an unknown one is reported by check_names() (jinja2
 * reports it when compiling, except inside if-statements and conditional expressions, where
 * it only fails if evaluated). */
static pllm_status resolve_builtin(parser *p, pllm_jbuiltin_kind kind, const char *nm, int line,
                                   int *id)
{
    (void)p;
    (void)line;
    *id = pllm_jinja_builtin_lookup(kind, nm);
    return PLLM_OK;
}

static pllm_status parse_filter(parser *p, pllm_jnode *node, bool start_inline, pllm_jnode **out)
{
    while (is_op(p, "|") || start_inline) {
        if (!start_inline) advance(p);
        int line = cur(p)->line;
        char nm[256];
        PLLM_TRY(parse_dotted(p, nm, sizeof nm));
        pllm_jnode *f = NULL;
        PLLM_TRY(new_node(p, PLLM_JE_FILTER, line, &f));
        f->a = node;
        if (!(f->name = pllm_jarena_strndup(p->a, nm, strlen(nm))))
            return pllm_error_prefix(PLLM_ERR_NOMEM, "%s: ", p->name);
        PLLM_TRY(resolve_builtin(p, PLLM_JB_FILTER, nm, line, &f->fn));
        if (is_op(p, "(")) PLLM_TRY(parse_call_args(p, f));
        node = f;
        start_inline = false;
    }
    *out = node;
    return PLLM_OK;
}

static pllm_status parse_test(parser *p, pllm_jnode *node, pllm_jnode **out)
{
    int line = cur(p)->line;
    advance(p); /* is */
    bool negated = false;
    if (is_name(p, "not")) {
        advance(p);
        negated = true;
    }
    char nm[256];
    PLLM_TRY(parse_dotted(p, nm, sizeof nm));
    pllm_jnode *t = NULL;
    PLLM_TRY(new_node(p, PLLM_JE_TEST, line, &t));
    t->a = node;
    if (!(t->name = pllm_jarena_strndup(p->a, nm, strlen(nm))))
        return pllm_error_prefix(PLLM_ERR_NOMEM, "%s: ", p->name);
    uint8_t ty = cur(p)->type;
    if (is_op(p, "(")) {
        PLLM_TRY(parse_call_args(p, t));
    } else if ((ty == PLLM_JT_NAME || ty == PLLM_JT_STRING || ty == PLLM_JT_INT ||
                ty == PLLM_JT_FLOAT || is_op(p, "[") || is_op(p, "{")) &&
               !is_name(p, "else") && !is_name(p, "or") && !is_name(p, "and")) {
        if (is_name(p, "is")) return SYNTAX(p, "You cannot chain multiple tests with is");
        pllm_jnode *arg;
        PLLM_TRY(enter(p));
        PLLM_TRY(parse_primary(p, false, &arg));
        PLLM_TRY(parse_postfix(p, arg, &arg));
        p->depth--;
        nvec args = {0};
        PLLM_TRY(nvec_push(p, &args, arg));
        t->args = nvec_done(args);
    }
    /* jinja2 resolves test names when compiling, after the whole expression parsed */
    PLLM_TRY(resolve_builtin(p, PLLM_JB_TEST, nm, line, &t->fn));
    if (negated) {
        pllm_jnode *n = NULL;
        PLLM_TRY(new_node(p, PLLM_JE_NOT, line, &n));
        n->a = t;
        t = n;
    }
    *out = t;
    return PLLM_OK;
}

static pllm_status parse_filter_expr(parser *p, pllm_jnode *node, pllm_jnode **out)
{
    for (;;) {
        if (is_op(p, "|")) {
            PLLM_TRY(parse_filter(p, node, false, &node));
        } else if (is_name(p, "is")) {
            PLLM_TRY(parse_test(p, node, &node));
        } else if (is_op(p, "(")) {
            PLLM_TRY(parse_call(p, node, &node));
        } else {
            break;
        }
    }
    *out = node;
    return PLLM_OK;
}

/* ---------------------------------------------------------------- statements */

static bool can_assign(const pllm_jnode *n)
{
    if (n->kind == PLLM_JE_NAME || n->kind == PLLM_JE_NSREF) return true;
    if (n->kind == PLLM_JE_TUPLE) {
        for (size_t i = 0; i < n->args.n; i++)
            if (!can_assign(n->args.v[i])) return false;
        return true;
    }
    return false;
}

static pllm_status parse_assign_target(parser *p, bool name_only, const end_rules *extra,
                                       bool with_namespace, pllm_jnode **out)
{
    if (name_only) {
        if (cur(p)->type != PLLM_JT_NAME) return expect_type(p, PLLM_JT_NAME, "name");
        PLLM_TRY(new_node(p, PLLM_JE_NAME, cur(p)->line, out));
        if (!((*out)->name = dup_tok(p, cur(p)))) return PLLM_ERR_NOMEM;
        advance(p);
        return PLLM_OK;
    }
    PLLM_TRY(parse_tuple(p, true, true, extra, false, with_namespace, out));
    if (!can_assign(*out))
        return fail_at(p, (*out)->line, PLLM_ERR_FORMAT,
                       "template syntax error: can't assign to this expression");
    return PLLM_OK;
}

static pllm_status subparse(parser *p, const char *const *end_tokens, pllm_jnodes *out);

/* Parse a block body up to one of end_tokens (left current unless drop_needle). */
static pllm_status parse_statements(parser *p, const char *const *end_tokens, bool drop_needle,
                                    pllm_jnodes *out)
{
    if (is_op(p, ":")) advance(p);
    PLLM_TRY(expect_type(p, PLLM_JT_BLOCK_END, "end of statement block"));
    PLLM_TRY(enter(p));
    PLLM_TRY(subparse(p, end_tokens, out));
    p->depth--;
    if (cur(p)->type == PLLM_JT_EOF) {
        char want[128] = "";
        for (int k = 0; end_tokens[k]; k++) {
            size_t l = strlen(want);
            snprintf(want + l, sizeof want - l, "%s'%s'", k ? " or " : "", end_tokens[k]);
        }
        return fail_at(
            p, cur(p)->line, PLLM_ERR_FORMAT,
            "template syntax error: unexpected end of template, expected %s (unterminated block)",
            want);
    }
    if (drop_needle) advance(p);
    return PLLM_OK;
}

static bool uses_name(const pllm_jnode *n, const char *nm);

static pllm_status parse_for(parser *p, pllm_jnode **out)
{
    int line = cur(p)->line;
    advance(p);
    pllm_jnode *n = NULL;
    PLLM_TRY(new_node(p, PLLM_JN_FOR, line, &n));
    end_rules in_rule = {{"in", NULL}}, rec_rule = {{"recursive", NULL}};
    PLLM_TRY(parse_assign_target(p, false, &in_rule, false, &n->a));
    if (uses_name(n->a, "loop"))
        return fail_at(
            p, line, PLLM_ERR_FORMAT,
            "template syntax error: Can't assign to special loop variable in for-loop target");
    PLLM_TRY(expect_name(p, "in"));
    PLLM_TRY(parse_tuple(p, false, false, &rec_rule, false, false, &n->b));
    if (is_name(p, "if")) {
        advance(p);
        PLLM_TRY(parse_expression(p, true, &n->c));
    }
    if (is_name(p, "recursive"))
        return fail_at(p, cur(p)->line, PLLM_ERR_UNSUPPORTED,
                       "recursive for loops are not supported");
    static const char *const body_end[] = {"endfor", "else", NULL};
    static const char *const else_end[] = {"endfor", NULL};
    p->loop_depth++;
    PLLM_TRY(parse_statements(p, body_end, false, &n->body));
    p->loop_depth--;
    bool is_else = is_name(p, "else");
    advance(p);
    if (is_else) PLLM_TRY(parse_statements(p, else_end, true, &n->orelse));
    *out = n;
    return PLLM_OK;
}

static pllm_status parse_if(parser *p, pllm_jnode **out)
{
    static const char *const body_end[] = {"elif", "else", "endif", NULL};
    static const char *const else_end[] = {"endif", NULL};
    pllm_jnode *result = NULL, *node = NULL;
    PLLM_TRY(new_node(p, PLLM_JN_IF, cur(p)->line, &result));
    advance(p);
    node = result;
    for (;;) {
        PLLM_TRY(parse_tuple(p, false, false, NULL, false, false, &node->a));
        PLLM_TRY(parse_statements(p, body_end, false, &node->body));
        if (is_name(p, "elif")) {
            advance(p);
            pllm_jnode *elif = NULL;
            PLLM_TRY(new_node(p, PLLM_JN_IF, cur(p)->line, &elif));
            nvec one = {0};
            PLLM_TRY(nvec_push(p, &one, elif));
            node->orelse = nvec_done(one);
            node = elif;
            continue;
        }
        if (is_name(p, "else")) {
            advance(p);
            PLLM_TRY(parse_statements(p, else_end, true, &node->orelse));
        } else {
            advance(p); /* endif */
        }
        break;
    }
    *out = result;
    return PLLM_OK;
}

static pllm_status parse_set(parser *p, pllm_jnode **out)
{
    int line = cur(p)->line;
    advance(p);
    pllm_jnode *target;
    PLLM_TRY(parse_assign_target(p, false, NULL, true, &target));
    if (is_op(p, "=")) {
        advance(p);
        PLLM_TRY(new_node(p, PLLM_JN_SET, line, out));
        (*out)->a = target;
        return parse_tuple(p, false, true, NULL, false, false, &(*out)->b);
    }
    static const char *const end[] = {"endset", NULL};
    PLLM_TRY(new_node(p, PLLM_JN_SET_BLOCK, line, out));
    (*out)->a = target;
    pllm_jnode *chain = NULL;
    if (is_op(p, "|")) PLLM_TRY(parse_filter(p, NULL, false, &chain));
    (*out)->c = chain;
    return parse_statements(p, end, true, &(*out)->body);
}

/* Does the subtree use a name (for the macro specials varargs / kwargs / caller)? */
static bool uses_name(const pllm_jnode *n, const char *nm)
{
    if (!n) return false;
    if (n->kind == PLLM_JE_NAME && strcmp(n->name, nm) == 0) return true;
    if (uses_name(n->a, nm) || uses_name(n->b, nm) || uses_name(n->c, nm)) return true;
    const pllm_jnodes *lists[] = {&n->body, &n->orelse, &n->args, &n->kw};
    for (size_t k = 0; k < PLLM_ARRAY_LEN(lists); k++)
        for (size_t i = 0; i < lists[k]->n; i++)
            if (uses_name(lists[k]->v[i], nm)) return true;
    return false;
}

static pllm_status parse_macro(parser *p, pllm_jnode **out)
{
    int line = cur(p)->line;
    advance(p);
    pllm_jnode *n = NULL, *nm = NULL;
    PLLM_TRY(new_node(p, PLLM_JN_MACRO, line, &n));
    PLLM_TRY(parse_assign_target(p, true, NULL, false, &nm));
    n->name = nm->name;
    PLLM_TRY(expect_op(p, "("));
    const char *names[64];
    size_t n_names = 0;
    nvec defaults = {0};
    while (!is_op(p, ")")) {
        if (n_names) PLLM_TRY(expect_op(p, ","));
        pllm_jnode *arg;
        PLLM_TRY(parse_assign_target(p, true, NULL, false, &arg));
        if (n_names >= PLLM_ARRAY_LEN(names)) return SYNTAX(p, "too many macro parameters");
        names[n_names++] = arg->name;
        if (is_op(p, "=")) {
            advance(p);
            pllm_jnode *d;
            PLLM_TRY(parse_expression(p, true, &d));
            PLLM_TRY(nvec_push(p, &defaults, d));
        } else if (defaults.n) {
            return SYNTAX(p, "non-default argument follows default argument");
        }
    }
    PLLM_TRY(expect_op(p, ")"));
    n->names = pllm_jarena_alloc(p->a, (n_names ? n_names : 1) * sizeof(char *));
    if (!n->names) return pllm_error_prefix(PLLM_ERR_NOMEM, "%s: ", p->name);
    memcpy(n->names, names, n_names * sizeof(char *));
    n->n_names = n_names;
    n->args = nvec_done(defaults);
    static const char *const end[] = {"endmacro", NULL};
    int saved_loops = p->loop_depth;
    p->loop_depth = 0;
    PLLM_TRY(parse_statements(p, end, true, &n->body));
    p->loop_depth = saved_loops;
    static const char *const specials[] = {"varargs", "kwargs", "caller"};
    for (size_t k = 0; k < PLLM_ARRAY_LEN(specials); k++)
        if (uses_name(n, specials[k]))
            return fail_at(p, line, PLLM_ERR_UNSUPPORTED,
                           "macro '%s' uses '%s', which is not supported", n->name, specials[k]);
    *out = n;
    return PLLM_OK;
}

static pllm_status parse_statement(parser *p, pllm_jnode **out);

static pllm_status parse_with(parser *p, pllm_jnode **out)
{
    /* {% with a = x, b = y %}body{% endwith %} */
    int line = cur(p)->line;
    advance(p);
    pllm_jnode *n = NULL;
    PLLM_TRY(new_node(p, PLLM_JN_WITH, line, &n));
    nvec targets = {0}, values = {0};
    while (cur(p)->type != PLLM_JT_BLOCK_END) {
        if (targets.n) PLLM_TRY(expect_op(p, ","));
        pllm_jnode *t, *v;
        PLLM_TRY(parse_assign_target(p, false, NULL, false, &t));
        PLLM_TRY(expect_op(p, "="));
        PLLM_TRY(parse_expression(p, true, &v));
        PLLM_TRY(nvec_push(p, &targets, t));
        PLLM_TRY(nvec_push(p, &values, v));
    }
    n->args = nvec_done(targets);
    n->kw = nvec_done(values);
    static const char *const end[] = {"endwith", NULL};
    PLLM_TRY(parse_statements(p, end, true, &n->body));
    *out = n;
    return PLLM_OK;
}

static pllm_status parse_statement(parser *p, pllm_jnode **out)
{
    const pllm_jtok *t = cur(p);
    int line = t->line;
    if (t->type != PLLM_JT_NAME) return SYNTAX(p, "tag name expected");
    if (is_name(p, "for")) return parse_for(p, out);
    if (is_name(p, "if")) return parse_if(p, out);
    if (is_name(p, "set")) return parse_set(p, out);
    if (is_name(p, "macro")) return parse_macro(p, out);
    if (is_name(p, "with")) return parse_with(p, out);
    if (is_name(p, "print")) {
        advance(p);
        nvec items = {0};
        while (cur(p)->type != PLLM_JT_BLOCK_END) {
            if (items.n) PLLM_TRY(expect_op(p, ","));
            pllm_jnode *e = NULL, *pr = NULL;
            PLLM_TRY(parse_expression(p, true, &e));
            PLLM_TRY(new_node(p, PLLM_JN_PRINT, line, &pr));
            pr->a = e;
            PLLM_TRY(nvec_push(p, &items, pr));
        }
        /* the prints render in place, like a {% generation %} body (op 1: same jinja2 frame) */
        PLLM_TRY(new_node(p, PLLM_JN_GENERATION, line, out));
        (*out)->op = 1;
        (*out)->body = nvec_done(items);
        return PLLM_OK;
    }
    if (is_name(p, "filter")) {
        advance(p);
        PLLM_TRY(new_node(p, PLLM_JN_FILTER_BLOCK, line, out));
        PLLM_TRY(parse_filter(p, NULL, true, &(*out)->c));
        static const char *const end[] = {"endfilter", NULL};
        return parse_statements(p, end, true, &(*out)->body);
    }
    if (is_name(p, "break") || is_name(p, "continue")) {
        bool brk = is_name(p, "break");
        if (p->loop_depth == 0)
            return fail_at(p, line, PLLM_ERR_FORMAT, "template syntax error: '%s' outside loop",
                           brk ? "break" : "continue");
        advance(p);
        return new_node(p, brk ? PLLM_JN_BREAK : PLLM_JN_CONTINUE, line, out);
    }
    if (is_name(p, "generation")) {
        advance(p);
        PLLM_TRY(new_node(p, PLLM_JN_GENERATION, line, out));
        static const char *const end[] = {"endgeneration", NULL};
        int saved_loops = p->loop_depth;
        p->loop_depth = 0; /* the body is a nested function in jinja2: no break/continue */
        PLLM_TRY(parse_statements(p, end, true, &(*out)->body));
        p->loop_depth = saved_loops;
        return PLLM_OK;
    }
    static const char *const unsupported[] = {"block",  "extends",    "include", "from",
                                              "import", "autoescape", "call"};
    for (size_t k = 0; k < PLLM_ARRAY_LEN(unsupported); k++)
        if (is_name(p, unsupported[k]))
            return fail_at(p, line, PLLM_ERR_UNSUPPORTED, "the '%s' tag is not supported",
                           unsupported[k]);
    return fail_at(p, line, PLLM_ERR_FORMAT,
                   "template syntax error: Encountered unknown tag '%.*s'", (int)t->len, t->text);
}

static pllm_status subparse(parser *p, const char *const *end_tokens, pllm_jnodes *out)
{
    nvec body = {0};
    for (;;) {
        const pllm_jtok *t = cur(p);
        if (t->type == PLLM_JT_EOF) break;
        if (t->type == PLLM_JT_DATA) {
            pllm_jnode *n = NULL;
            PLLM_TRY(new_node(p, PLLM_JN_TEXT, t->line, &n));
            n->text = t->text;
            n->text_len = t->len;
            PLLM_TRY(nvec_push(p, &body, n));
            advance(p);
        } else if (t->type == PLLM_JT_VAR_BEGIN) {
            advance(p);
            pllm_jnode *n = NULL, *e = NULL;
            PLLM_TRY(new_node(p, PLLM_JN_PRINT, t->line, &n));
            PLLM_TRY(parse_tuple(p, false, true, NULL, false, false, &e));
            n->a = e;
            PLLM_TRY(expect_type(p, PLLM_JT_VAR_END, "end of print statement"));
            PLLM_TRY(nvec_push(p, &body, n));
        } else if (t->type == PLLM_JT_BLOCK_BEGIN) {
            advance(p);
            if (end_tokens) {
                for (int k = 0; end_tokens[k]; k++)
                    if (is_name(p, end_tokens[k])) {
                        *out = nvec_done(body);
                        return PLLM_OK;
                    }
            }
            pllm_jnode *n = NULL;
            PLLM_TRY(parse_statement(p, &n));
            PLLM_TRY(nvec_push(p, &body, n));
            PLLM_TRY(expect_type(p, PLLM_JT_BLOCK_END, "end of statement block"));
        } else {
            char got[80];
            describe(t, got, sizeof got);
            return SYNTAX(p, "unexpected '%s'", got);
        }
    }
    *out = nvec_done(body);
    return PLLM_OK;
}

/* jinja2's compile-time check: an unknown filter or test fails unless it sits in a "soft
 * frame" (an if statement or a conditional expression, not inside a nested loop, macro or
 * block body there). */
static pllm_status check_names(parser *p, const pllm_jnode *n, bool soft);

static pllm_status check_list(parser *p, const pllm_jnodes *l, bool soft)
{
    for (size_t i = 0; i < l->n; i++) PLLM_TRY(check_names(p, l->v[i], soft));
    return PLLM_OK;
}

static pllm_status check_names(parser *p, const pllm_jnode *n, bool soft)
{
    if (!n) return PLLM_OK;
    switch (n->kind) {
    case PLLM_JN_IF:
        PLLM_TRY(check_names(p, n->a, true));
        PLLM_TRY(check_list(p, &n->body, true));
        return check_list(p, &n->orelse, true);
    case PLLM_JE_COND:
        PLLM_TRY(check_names(p, n->a, true));
        PLLM_TRY(check_names(p, n->b, true));
        return check_names(p, n->c, true);
    case PLLM_JN_FOR:
        PLLM_TRY(check_names(p, n->b, soft));
        PLLM_TRY(check_names(p, n->c, false));
        PLLM_TRY(check_list(p, &n->body, false));
        return check_list(p, &n->orelse, false);
    case PLLM_JN_MACRO:
        PLLM_TRY(check_list(p, &n->args, false));
        return check_list(p, &n->body, false);
    case PLLM_JN_SET_BLOCK:
    case PLLM_JN_FILTER_BLOCK:
        PLLM_TRY(check_names(p, n->c, false));
        return check_list(p, &n->body, false);
    case PLLM_JN_WITH:
        PLLM_TRY(check_list(p, &n->kw, soft));
        return check_list(p, &n->body, false);
    case PLLM_JN_GENERATION:
        return check_list(p, &n->body, n->op == 1 ? soft : false);
    case PLLM_JE_FILTER:
    case PLLM_JE_TEST:
        if (n->fn == -1 && !soft)
            return fail_at(p, n->line, PLLM_ERR_FORMAT, "no %s named '%s'",
                           n->kind == PLLM_JE_FILTER ? "filter" : "test", n->name);
        break;
    default:
        break;
    }
    PLLM_TRY(check_names(p, n->a, soft));
    PLLM_TRY(check_names(p, n->b, soft));
    PLLM_TRY(check_names(p, n->c, soft));
    PLLM_TRY(check_list(p, &n->body, soft));
    PLLM_TRY(check_list(p, &n->orelse, soft));
    PLLM_TRY(check_list(p, &n->args, soft));
    return check_list(p, &n->kw, soft);
}

pllm_status pllm_jinja_parse(pllm_jtemplate *t, const char *src, size_t len)
{
    size_t bad;
    if (!pllm_jinja_utf8_valid(src, len, &bad))
        return pllm_errorf(PLLM_ERR_FORMAT, "%s: template is not valid UTF-8 (byte %zu)", t->name,
                           bad);
    /* jinja2 normalizes \r\n and \r to \n and drops one trailing newline
     * (keep_trailing_newline=False) before lexing */
    char *norm = pllm_jarena_alloc(&t->arena, len + 1);
    if (!norm) return pllm_error_prefix(PLLM_ERR_NOMEM, "%s: ", t->name);
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            norm[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else {
            norm[n++] = src[i];
        }
    }
    if (n > 0 && norm[n - 1] == '\n') n--;
    norm[n] = 0;
    parser p = {.t = t, .a = &t->arena, .name = t->name};
    PLLM_TRY(pllm_jinja_lex(&t->arena, t->name, norm, n, &p.toks));
    PLLM_TRY(subparse(&p, NULL, &t->body));
    if (cur(&p)->type != PLLM_JT_EOF) return SYNTAX(&p, "unexpected tokens after the template");
    /* jinja2 optimizes (folds constants) before it compiles (and checks filter names) */
    PLLM_TRY(pllm_jinja_fold(t));
    return check_list(&p, &t->body, false);
}
