/*
 * jinja_eval.c: executes the AST. Statements write to the context's current output sink;
 * expressions produce pllm_jv values.
 *
 * Scoping reproduces jinja2's compiled code: a for loop runs each iteration in a fresh scope
 * whose parent is the enclosing one (a `set` in the body is gone at the next iteration and
 * after the loop; a read before the iteration's own `set` sees the outer value), as do macro
 * calls (parent: the scope the macro was defined in, read live), {% set %}...{% endset %} and
 * {% filter %} bodies, {% with %} and {% generation %}; `if` does not create a scope. Name
 * lookup walks the chain up to the render variables and the environment globals.
 */
#include "tokenizer/jinja.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

enum { FLOW_NORMAL, FLOW_BREAK, FLOW_CONTINUE };

static pllm_status exec_body(pllm_jctx *c, const pllm_jnodes *body, pllm_jscope *s, int *flow);
static pllm_status eval(pllm_jctx *c, const pllm_jnode *n, pllm_jscope *s, pllm_jv *out);

/* ---------------------------------------------------------------- helpers */

static pllm_status eval_args(pllm_jctx *c, const pllm_jnode *n, pllm_jscope *s, pllm_jargs *args)
{
    pllm_jv *pos = NULL, *kw = NULL;
    if (n->args.n) {
        pos = pllm_jarena_alloc(c->arena, n->args.n * sizeof *pos);
        if (!pos) return pllm_error_prefix(PLLM_ERR_NOMEM, "%s:%d: ", c->name, c->line);
        for (size_t i = 0; i < n->args.n; i++) PLLM_TRY(eval(c, n->args.v[i], s, &pos[i]));
    }
    if (n->kw.n) {
        kw = pllm_jarena_alloc(c->arena, n->kw.n * sizeof *kw);
        if (!kw) return pllm_error_prefix(PLLM_ERR_NOMEM, "%s:%d: ", c->name, c->line);
        for (size_t i = 0; i < n->kw.n; i++) PLLM_TRY(eval(c, n->kw.v[i], s, &kw[i]));
    }
    *args = (pllm_jargs){
        .pos = pos, .n_pos = n->args.n, .kw_names = n->kw_names, .kw = kw, .n_kw = n->kw.n};
    return PLLM_OK;
}

/* A filter or test jinja2 does not have (reached at run time) or pllm does not implement. */
static pllm_status check_builtin(pllm_jctx *c, const pllm_jnode *n)
{
    if (n->fn >= 0) return PLLM_OK;
    const char *what = n->kind == PLLM_JE_FILTER ? "filter" : "test";
    if (n->fn == -2)
        return pllm_jerr(c, PLLM_ERR_UNSUPPORTED, "%s '%s' is not supported by pllm", what,
                         n->name);
    return pllm_jerr(c, PLLM_ERR_INVALID, "TemplateRuntimeError: No %s named '%s' found.", what,
                     n->name);
}

static pllm_status step(pllm_jctx *c)
{
    return pllm_jinja_charge(c, 1);
}

/* Render a body into a fresh string (set blocks, filter blocks, macros). */
static pllm_status capture(pllm_jctx *c, const pllm_jnodes *body, pllm_jscope *s, pllm_jv *out,
                           int *flow)
{
    pllm_jsb buf = {0};
    pllm_jsb *saved = c->out;
    c->out = &buf;
    pllm_status st = exec_body(c, body, s, flow);
    c->out = saved;
    PLLM_TRY(st);
    return pllm_jv_str_sb(c, &buf, out);
}

/* ---------------------------------------------------------------- assignment */

static pllm_status assign(pllm_jctx *c, const pllm_jnode *target, pllm_jv v, pllm_jscope *s)
{
    switch (target->kind) {
    case PLLM_JE_NAME:
        return pllm_jscope_set(c, s, target->name, v);
    case PLLM_JE_NSREF: {
        pllm_jv ns;
        if (!pllm_jscope_lookup(s, target->name, &ns) || ns.t != PLLM_JV_NS)
            return pllm_jerr(
                c, PLLM_ERR_INVALID,
                "TemplateRuntimeError: cannot assign attribute on non-namespace object");
        pllm_jv key;
        PLLM_TRY(pllm_jv_strc(c, target->attr, &key));
        return pllm_jdict_set(c, &ns.ns->attrs, key, v);
    }
    case PLLM_JE_TUPLE: {
        pllm_jv *items;
        size_t n;
        PLLM_TRY(pllm_jv_collect(c, v, &items, &n));
        size_t want = target->args.n;
        if (n < want)
            return pllm_jerr(c, PLLM_ERR_INVALID,
                             "ValueError: not enough values to unpack (expected %zu, got %zu)",
                             want, n);
        if (n > want)
            return pllm_jerr(c, PLLM_ERR_INVALID,
                             "ValueError: too many values to unpack (expected %zu)", want);
        for (size_t i = 0; i < want; i++) PLLM_TRY(assign(c, target->args.v[i], items[i], s));
        return PLLM_OK;
    }
    default:
        return pllm_jerr(c, PLLM_ERR_INTERNAL, "invalid assignment target");
    }
}

/* ---------------------------------------------------------------- macros */

pllm_status pllm_jinja_call_macro(pllm_jctx *c, const pllm_jmacro *m, const pllm_jargs *args,
                                  pllm_jv *out)
{
    const pllm_jnode *def = m->def;
    if (c->depth >= c->max_depth)
        return pllm_jerr(c, PLLM_ERR_RANGE,
                         "macro calls nested deeper than %d (runaway recursion?)", c->max_depth);
    PLLM_TRY(step(c));
    if (args->n_pos > def->n_names)
        return pllm_jerr(c, PLLM_ERR_INVALID,
                         "TypeError: macro '%s' takes not more than %zu argument(s)", def->name,
                         def->n_names);
    pllm_jscope *s;
    PLLM_TRY(pllm_jscope_new(c, m->closure, &s));
    bool given[64] = {false};
    pllm_jv vals[64];
    for (size_t i = 0; i < args->n_pos; i++) {
        vals[i] = args->pos[i];
        given[i] = true;
    }
    for (size_t k = 0; k < args->n_kw; k++) {
        size_t i = 0;
        while (i < def->n_names && strcmp(def->names[i], args->kw_names[k]) != 0) i++;
        if (i == def->n_names)
            return pllm_jerr(c, PLLM_ERR_INVALID,
                             "TypeError: macro '%s' takes no keyword argument '%s'", def->name,
                             args->kw_names[k]);
        if (given[i])
            return pllm_jerr(c, PLLM_ERR_INVALID,
                             "TypeError: macro '%s' got multiple values for argument '%s'",
                             def->name, def->names[i]);
        vals[i] = args->kw[k];
        given[i] = true;
    }
    /* parameters bind in order; a missing one takes its default (evaluated now, in the macro's
     * scope) or is undefined */
    size_t first_default = def->n_names - def->args.n;
    int saved_line = c->line;
    for (size_t i = 0; i < def->n_names; i++) {
        pllm_jv v = pllm_jv_undef();
        if (given[i])
            v = vals[i];
        else if (i >= first_default)
            PLLM_TRY(eval(c, def->args.v[i - first_default], s, &v));
        PLLM_TRY(pllm_jscope_set(c, s, def->names[i], v));
    }
    c->line = saved_line;
    c->depth++;
    int flow = FLOW_NORMAL;
    int saved_loops = c->loop_depth;
    c->loop_depth = 0;
    pllm_status st = capture(c, &def->body, s, out, &flow);
    c->loop_depth = saved_loops;
    c->depth--;
    c->line = saved_line;
    return st;
}

/* ---------------------------------------------------------------- expressions */

static pllm_status eval_unary(pllm_jctx *c, const pllm_jnode *n, pllm_jv v, pllm_jv *out)
{
    bool neg = n->kind == PLLM_JE_NEG;
    switch (v.t) {
    case PLLM_JV_UNDEF:
        return pllm_jv_undef_fail(c, v);
    case PLLM_JV_BOOL:
        *out = pllm_jv_int(neg ? -(int64_t)v.b : v.b);
        return PLLM_OK;
    case PLLM_JV_INT:
        if (neg && v.i == INT64_MIN)
            return pllm_jerr(c, PLLM_ERR_UNSUPPORTED,
                             "integer overflow (pllm supports 64-bit integers)");
        *out = pllm_jv_int(neg ? -v.i : v.i);
        return PLLM_OK;
    case PLLM_JV_FLOAT:
        *out = pllm_jv_float(neg ? -v.f : v.f);
        return PLLM_OK;
    default:
        return pllm_jerr(c, PLLM_ERR_INVALID, "TypeError: bad operand type for unary %c: '%s'",
                         neg ? '-' : '+', pllm_jv_type_name(v));
    }
}

static pllm_status eval_inner(pllm_jctx *c, const pllm_jnode *n, pllm_jscope *s, pllm_jv *out)
{
    switch (n->kind) {
    case PLLM_JE_CONST:
        *out = n->value;
        return PLLM_OK;
    case PLLM_JE_NAME:
        if (c->const_mode) return pllm_jerr(c, PLLM_ERR_INVALID, "not a constant");
        if (pllm_jscope_lookup(s, n->name, out)) return PLLM_OK;
        {
            pllm_jundef *u = pllm_jarena_alloc(c->arena, sizeof *u);
            if (!u) return pllm_error_prefix(PLLM_ERR_NOMEM, "%s:%d: ", c->name, c->line);
            u->hint = NULL;
            u->obj_type = NULL;
            u->name = n->value; /* the name as a string constant (made by the parser) */
            *out = (pllm_jv){.t = PLLM_JV_UNDEF, .u = u};
        }
        return PLLM_OK;
    case PLLM_JE_GETATTR: {
        pllm_jv obj;
        PLLM_TRY(eval(c, n->a, s, &obj));
        if (obj.t == PLLM_JV_UNDEF) return pllm_jv_undef_fail(c, obj);
        return pllm_jinja_getattr(c, obj, n->name, out);
    }
    case PLLM_JE_GETITEM: {
        pllm_jv obj;
        PLLM_TRY(eval(c, n->a, s, &obj));
        if (n->b->kind == PLLM_JE_SLICE) {
            pllm_jv parts[3];
            const pllm_jv *pp[3] = {NULL, NULL, NULL};
            const pllm_jnode *sn[3] = {n->b->a, n->b->b, n->b->c};
            for (int k = 0; k < 3; k++) {
                if (!sn[k]) continue;
                PLLM_TRY(eval(c, sn[k], s, &parts[k]));
                pp[k] = &parts[k];
            }
            if (obj.t == PLLM_JV_UNDEF) return pllm_jv_undef_fail(c, obj);
            return pllm_jinja_slice(c, obj, pp[0], pp[1], pp[2], out);
        }
        pllm_jv key;
        PLLM_TRY(eval(c, n->b, s, &key));
        if (obj.t == PLLM_JV_UNDEF) return pllm_jv_undef_fail(c, obj);
        return pllm_jinja_getitem(c, obj, key, out);
    }
    case PLLM_JE_CALL: {
        if (c->const_mode) return pllm_jerr(c, PLLM_ERR_INVALID, "not a constant");
        pllm_jv callee;
        PLLM_TRY(eval(c, n->a, s, &callee));
        pllm_jargs args;
        PLLM_TRY(eval_args(c, n, s, &args));
        switch (callee.t) {
        case PLLM_JV_MACRO:
            return pllm_jinja_call_macro(c, callee.m, &args, out);
        case PLLM_JV_FUNC:
            return pllm_jinja_call_func(c, callee.fn, &args, out);
        case PLLM_JV_UNDEF:
            return pllm_jv_undef_fail(c, callee);
        default:
            return pllm_jerr(c, PLLM_ERR_INVALID, "TypeError: '%s' object is not callable",
                             pllm_jv_type_name(callee));
        }
    }
    case PLLM_JE_FILTER: {
        if (c->const_mode && (n->fn < 0 || pllm_jinja_filter_needs_context(n->fn)))
            return pllm_jerr(c, PLLM_ERR_INVALID, "not a constant");
        pllm_jv in;
        if (n->a)
            PLLM_TRY(eval(c, n->a, s, &in));
        else
            return pllm_jerr(c, PLLM_ERR_INTERNAL, "filter without input");
        pllm_jargs args;
        PLLM_TRY(eval_args(c, n, s, &args));
        PLLM_TRY(check_builtin(c, n));
        return pllm_jinja_call_filter(c, n->fn, in, &args, out);
    }
    case PLLM_JE_TEST: {
        if (c->const_mode && n->fn < 0) return pllm_jerr(c, PLLM_ERR_INVALID, "not a constant");
        pllm_jv in;
        PLLM_TRY(eval(c, n->a, s, &in));
        pllm_jargs args;
        PLLM_TRY(eval_args(c, n, s, &args));
        PLLM_TRY(check_builtin(c, n));
        bool r;
        PLLM_TRY(pllm_jinja_call_test(c, n->fn, in, &args, &r));
        *out = pllm_jv_bool(r);
        return PLLM_OK;
    }
    case PLLM_JE_NOT: {
        pllm_jv v;
        PLLM_TRY(eval(c, n->a, s, &v));
        *out = pllm_jv_bool(!pllm_jv_truthy(v));
        return PLLM_OK;
    }
    case PLLM_JE_NEG:
    case PLLM_JE_POS: {
        pllm_jv v;
        PLLM_TRY(eval(c, n->a, s, &v));
        return eval_unary(c, n, v, out);
    }
    case PLLM_JE_BINOP: {
        pllm_jv l, r;
        PLLM_TRY(eval(c, n->a, s, &l));
        PLLM_TRY(eval(c, n->b, s, &r));
        return pllm_jinja_binop(c, n->op, l, r, out);
    }
    case PLLM_JE_CONCAT: {
        pllm_jsb b = {0};
        for (size_t i = 0; i < n->args.n; i++) {
            pllm_jv v;
            PLLM_TRY(eval(c, n->args.v[i], s, &v));
            PLLM_TRY(pllm_jv_write_str(c, &b, v));
        }
        return pllm_jv_str_sb(c, &b, out);
    }
    case PLLM_JE_AND:
    case PLLM_JE_OR: {
        PLLM_TRY(eval(c, n->a, s, out));
        bool t = pllm_jv_truthy(*out);
        if (n->kind == PLLM_JE_AND ? !t : t) return PLLM_OK;
        return eval(c, n->b, s, out);
    }
    case PLLM_JE_COMPARE: {
        pllm_jv left;
        PLLM_TRY(eval(c, n->a, s, &left));
        for (size_t i = 0; i < n->args.n; i++) {
            pllm_jv right;
            PLLM_TRY(eval(c, n->args.v[i], s, &right));
            bool r;
            PLLM_TRY(pllm_jinja_compare(c, n->ops[i], left, right, &r));
            if (!r) {
                *out = pllm_jv_bool(false);
                return PLLM_OK;
            }
            left = right;
        }
        *out = pllm_jv_bool(true);
        return PLLM_OK;
    }
    case PLLM_JE_COND: {
        pllm_jv t;
        PLLM_TRY(eval(c, n->a, s, &t));
        if (pllm_jv_truthy(t)) return eval(c, n->b, s, out);
        if (n->c) return eval(c, n->c, s, out);
        /* as_const gives up here (the undefined is made at run time) */
        if (c->const_mode) return pllm_jerr(c, PLLM_ERR_INVALID, "not a constant");
        char *hint = pllm_jarena_alloc(c->arena, 128);
        if (!hint) return pllm_error_prefix(PLLM_ERR_NOMEM, "%s:%d: ", c->name, c->line);
        snprintf(hint, 128,
                 "the inline if-expression on line %d evaluated to false and no else section was "
                 "defined.",
                 n->line);
        return pllm_jv_undef_hint(c, hint, out);
    }
    case PLLM_JE_LIST:
    case PLLM_JE_TUPLE: {
        PLLM_TRY(pllm_jv_list(c, n->args.n, n->kind == PLLM_JE_LIST ? PLLM_JL_LIST : PLLM_JL_TUPLE,
                              out));
        for (size_t i = 0; i < n->args.n; i++) PLLM_TRY(eval(c, n->args.v[i], s, &out->l->v[i]));
        return PLLM_OK;
    }
    case PLLM_JE_DICT: {
        PLLM_TRY(pllm_jv_dict(c, out));
        for (size_t i = 0; i < n->args.n; i++) {
            pllm_jv k, v;
            PLLM_TRY(eval(c, n->args.v[i], s, &k));
            PLLM_TRY(eval(c, n->kw.v[i], s, &v));
            PLLM_TRY(pllm_jdict_set(c, out->d, k, v));
        }
        return PLLM_OK;
    }
    case PLLM_JE_FAIL:
        /* op 1: a folded non-finite float constant, fine for a folded output, but jinja2
         * writes repr() into its generated code, where `nan` / `inf` are unknown names */
        if (n->op == 1) {
            if (c->const_mode) {
                *out = n->value;
                return PLLM_OK;
            }
            return pllm_jerr(c, PLLM_ERR_INVALID, "NameError: name '%s' is not defined", n->text);
        }
        return pllm_jerr(c, PLLM_ERR_UNSUPPORTED, "%s", n->text);
    default:
        return pllm_jerr(c, PLLM_ERR_INTERNAL, "unexpected node kind %d in an expression", n->kind);
    }
}

static pllm_status eval(pllm_jctx *c, const pllm_jnode *n, pllm_jscope *s, pllm_jv *out)
{
    int saved = c->line;
    c->line = n->line;
    pllm_status st = eval_inner(c, n, s, out);
    if (st == PLLM_OK) c->line = saved;
    return st;
}

/* Apply a filter chain whose innermost input is NULL to `in` (filter and set blocks). */
static pllm_status apply_chain(pllm_jctx *c, const pllm_jnode *f, pllm_jv in, pllm_jscope *s,
                               pllm_jv *out)
{
    pllm_jv v = in;
    if (f->a) PLLM_TRY(apply_chain(c, f->a, in, s, &v));
    int saved = c->line;
    c->line = f->line;
    pllm_jargs args;
    PLLM_TRY(eval_args(c, f, s, &args));
    PLLM_TRY(check_builtin(c, f));
    PLLM_TRY(pllm_jinja_call_filter(c, f->fn, v, &args, out));
    c->line = saved;
    return PLLM_OK;
}

/* ---------------------------------------------------------------- statements */

static pllm_status exec_for(pllm_jctx *c, const pllm_jnode *n, pllm_jscope *s, int *flow)
{
    pllm_jv iterable;
    PLLM_TRY(eval(c, n->b, s, &iterable));
    c->line = n->line;
    pllm_jv *items;
    size_t count;
    PLLM_TRY(pllm_jv_collect(c, iterable, &items, &count));
    if (n->c) {
        /* `for x in xs if test`: the loop (and loop.length) only sees the items that pass */
        pllm_jv *kept = pllm_jarena_alloc(c->arena, (count ? count : 1) * sizeof *kept);
        if (!kept) return pllm_error_prefix(PLLM_ERR_NOMEM, "%s:%d: ", c->name, c->line);
        size_t k = 0;
        for (size_t i = 0; i < count; i++) {
            PLLM_TRY(step(c));
            pllm_jscope *fs;
            PLLM_TRY(pllm_jscope_new(c, s, &fs));
            PLLM_TRY(assign(c, n->a, items[i], fs));
            pllm_jv t;
            PLLM_TRY(eval(c, n->c, fs, &t));
            if (pllm_jv_truthy(t)) kept[k++] = items[i];
        }
        items = kept;
        count = k;
    }
    pllm_jloop *loop = pllm_jarena_alloc(c->arena, sizeof *loop);
    if (!loop) return pllm_error_prefix(PLLM_ERR_NOMEM, "%s:%d: ", c->name, c->line);
    memset(loop, 0, sizeof *loop);
    loop->items = items;
    loop->n = count;
    /* jinja2 clears its "no iteration" flag at the end of the body: the else block runs
     * unless some iteration reached the end (every iteration leaving by continue or break
     * counts as none) */
    bool completed = false;
    c->loop_depth++;
    for (size_t i = 0; i < count; i++) {
        c->line = n->line;
        PLLM_TRY(step(c));
        loop->i = i;
        pllm_jscope *is;
        PLLM_TRY(pllm_jscope_new(c, s, &is));
        PLLM_TRY(assign(c, n->a, items[i], is));
        PLLM_TRY(pllm_jscope_set(c, is, "loop", (pllm_jv){.t = PLLM_JV_LOOP, .loop = loop}));
        int f = FLOW_NORMAL;
        PLLM_TRY(exec_body(c, &n->body, is, &f));
        if (f == FLOW_NORMAL) completed = true;
        if (f == FLOW_BREAK) break;
    }
    c->loop_depth--;
    if (completed || !n->orelse.n) return PLLM_OK;
    pllm_jscope *es;
    PLLM_TRY(pllm_jscope_new(c, s, &es));
    return exec_body(c, &n->orelse, es, flow);
}

static pllm_status exec_stmt(pllm_jctx *c, const pllm_jnode *n, pllm_jscope *s, int *flow)
{
    c->line = n->line;
    switch (n->kind) {
    case PLLM_JN_TEXT:
        return pllm_jsb_append(c, c->out, n->text, n->text_len);
    case PLLM_JN_PRINT: {
        pllm_jv v;
        PLLM_TRY(eval(c, n->a, s, &v));
        c->line = n->line;
        return pllm_jv_write_str(c, c->out, v);
    }
    case PLLM_JN_IF: {
        pllm_jv t;
        PLLM_TRY(eval(c, n->a, s, &t));
        return exec_body(c, pllm_jv_truthy(t) ? &n->body : &n->orelse, s, flow);
    }
    case PLLM_JN_FOR:
        return exec_for(c, n, s, flow);
    case PLLM_JN_SET: {
        pllm_jv v;
        PLLM_TRY(eval(c, n->b, s, &v));
        return assign(c, n->a, v, s);
    }
    case PLLM_JN_SET_BLOCK: {
        pllm_jscope *bs;
        PLLM_TRY(pllm_jscope_new(c, s, &bs));
        pllm_jv v;
        PLLM_TRY(capture(c, &n->body, bs, &v, flow));
        if (*flow != FLOW_NORMAL) return PLLM_OK;
        if (n->c) PLLM_TRY(apply_chain(c, n->c, v, s, &v));
        c->line = n->line;
        return assign(c, n->a, v, s);
    }
    case PLLM_JN_FILTER_BLOCK: {
        pllm_jscope *bs;
        PLLM_TRY(pllm_jscope_new(c, s, &bs));
        pllm_jv v;
        PLLM_TRY(capture(c, &n->body, bs, &v, flow));
        if (*flow != FLOW_NORMAL) return PLLM_OK;
        PLLM_TRY(apply_chain(c, n->c, v, s, &v));
        return pllm_jv_write_str(c, c->out, v);
    }
    case PLLM_JN_WITH: {
        pllm_jv *vals = pllm_jarena_alloc(c->arena, (n->kw.n ? n->kw.n : 1) * sizeof *vals);
        if (!vals) return pllm_error_prefix(PLLM_ERR_NOMEM, "%s:%d: ", c->name, c->line);
        for (size_t i = 0; i < n->kw.n; i++) PLLM_TRY(eval(c, n->kw.v[i], s, &vals[i]));
        pllm_jscope *ws;
        PLLM_TRY(pllm_jscope_new(c, s, &ws));
        for (size_t i = 0; i < n->args.n; i++) PLLM_TRY(assign(c, n->args.v[i], vals[i], ws));
        return exec_body(c, &n->body, ws, flow);
    }
    case PLLM_JN_GENERATION: {
        pllm_jscope *gs;
        PLLM_TRY(pllm_jscope_new(c, s, &gs));
        return exec_body(c, &n->body, gs, flow);
    }
    case PLLM_JN_MACRO: {
        pllm_jmacro *m = pllm_jarena_alloc(c->arena, sizeof *m);
        if (!m) return pllm_error_prefix(PLLM_ERR_NOMEM, "%s:%d: ", c->name, c->line);
        m->def = n;
        m->closure = s;
        return pllm_jscope_set(c, s, n->name, (pllm_jv){.t = PLLM_JV_MACRO, .m = m});
    }
    case PLLM_JN_BREAK:
        *flow = FLOW_BREAK;
        return PLLM_OK;
    case PLLM_JN_CONTINUE:
        *flow = FLOW_CONTINUE;
        return PLLM_OK;
    default:
        return pllm_jerr(c, PLLM_ERR_INTERNAL, "unexpected node kind %d in a statement", n->kind);
    }
}

static pllm_status exec_body(pllm_jctx *c, const pllm_jnodes *body, pllm_jscope *s, int *flow)
{
    for (size_t i = 0; i < body->n; i++) {
        PLLM_TRY(exec_stmt(c, body->v[i], s, flow));
        if (*flow != FLOW_NORMAL) return PLLM_OK;
    }
    return PLLM_OK;
}

pllm_status pllm_jinja_render(pllm_jctx *c, const pllm_jtemplate *t, pllm_jsb *out)
{
    pllm_jscope *root;
    PLLM_TRY(pllm_jscope_new(c, c->globals, &root));
    c->out = out;
    int flow = FLOW_NORMAL;
    return exec_body(c, &t->body, root, &flow);
}

/* ---------------------------------------------------------------- constant folding */

/* Constants jinja2 can embed in generated code (compiler.has_safe_repr). */
static bool safe_repr(pllm_jv v)
{
    switch (v.t) {
    case PLLM_JV_NONE:
    case PLLM_JV_BOOL:
    case PLLM_JV_INT:
    case PLLM_JV_FLOAT:
    case PLLM_JV_STR:
        return true;
    case PLLM_JV_LIST:
        if (v.l->kind != PLLM_JL_LIST && v.l->kind != PLLM_JL_TUPLE && v.l->kind != PLLM_JL_RANGE)
            return false;
        for (size_t i = 0; i < v.l->n; i++)
            if (!safe_repr(v.l->v[i])) return false;
        return true;
    case PLLM_JV_DICT:
        for (size_t i = 0; i < v.d->n; i++)
            if (!safe_repr(v.d->keys[i]) || !safe_repr(v.d->vals[i])) return false;
        return true;
    default:
        return false;
    }
}

/* The first non-finite float in repr() order: "nan" or "inf"; NULL when none. */
static const char *non_finite(pllm_jv v)
{
    switch (v.t) {
    case PLLM_JV_FLOAT:
        return isnan(v.f) ? "nan" : isinf(v.f) ? "inf" : NULL;
    case PLLM_JV_LIST:
        for (size_t i = 0; i < v.l->n; i++) {
            const char *b = non_finite(v.l->v[i]);
            if (b) return b;
        }
        return NULL;
    case PLLM_JV_DICT:
        for (size_t i = 0; i < v.d->n; i++) {
            const char *b = non_finite(v.d->keys[i]);
            if (!b) b = non_finite(v.d->vals[i]);
            if (b) return b;
        }
        return NULL;
    default:
        return NULL;
    }
}

/* Copy a safe_repr value into the template's arena. */
static bool copy_const(pllm_jarena *a, pllm_jv v, pllm_jv *out)
{
    *out = v;
    switch (v.t) {
    case PLLM_JV_STR: {
        pllm_jstr *s = pllm_jstr_new(a, v.s->s, v.s->len);
        if (!s) return false;
        s->markup = v.s->markup;
        out->s = s;
        return true;
    }
    case PLLM_JV_LIST: {
        pllm_jlist *l = pllm_jarena_alloc(a, sizeof *l);
        if (!l) return false;
        *l = *v.l;
        l->v = pllm_jarena_alloc(a, (v.l->n ? v.l->n : 1) * sizeof(pllm_jv));
        if (!l->v) return false;
        for (size_t i = 0; i < v.l->n; i++)
            if (!copy_const(a, v.l->v[i], &l->v[i])) return false;
        out->l = l;
        return true;
    }
    case PLLM_JV_DICT: {
        pllm_jdict *d = pllm_jarena_alloc(a, sizeof *d);
        if (!d) return false;
        size_t n = v.d->n ? v.d->n : 1;
        d->n = d->cap = v.d->n;
        d->keys = pllm_jarena_alloc(a, n * sizeof(pllm_jv));
        d->vals = pllm_jarena_alloc(a, n * sizeof(pllm_jv));
        if (!d->keys || !d->vals) return false;
        for (size_t i = 0; i < v.d->n; i++)
            if (!copy_const(a, v.d->keys[i], &d->keys[i]) ||
                !copy_const(a, v.d->vals[i], &d->vals[i]))
                return false;
        out->d = d;
        return true;
    }
    default:
        return true;
    }
}

typedef struct folder {
    pllm_jtemplate *t;
    pllm_jctx c;
    pllm_jarena tmp;
    bool oom;
} folder;

/* as_const(): evaluate n with constants only; false when jinja2 would raise Impossible.
 * *uncertain: the evaluation failed on something pllm does not support after a slice took
 * as_const's sandboxed path, so jinja2 may have folded it where pllm cannot. */
static bool try_const(folder *f, const pllm_jnode *n, pllm_jv *out, bool *uncertain)
{
    f->c.line = n->line;
    f->c.steps = 0;
    f->c.const_slice_undef = 0;
    pllm_status st = eval(&f->c, n, NULL, out);
    *uncertain = st == PLLM_ERR_UNSUPPORTED && f->c.const_slice_undef > 0;
    if (st != PLLM_OK) {
        pllm_error_clear();
        return false;
    }
    return true;
}

static pllm_jnode *fail_node(folder *f, const pllm_jnode *n)
{
    pllm_jnode *k = pllm_jarena_alloc(&f->t->arena, sizeof *k);
    if (!k) {
        f->oom = true;
        return NULL;
    }
    memset(k, 0, sizeof *k);
    k->kind = PLLM_JE_FAIL;
    k->line = n->line;
    k->fn = -1;
    k->value = pllm_jv_undef();
    k->text = "a constant expression slicing a non-sequence combined with an unsupported feature";
    return k;
}

static void fold_expr(folder *f, pllm_jnode **slot);

static void fold_list(folder *f, pllm_jnodes *l)
{
    for (size_t i = 0; i < l->n; i++) fold_expr(f, &l->v[i]);
}

/* Optimizer.generic_visit: children first, then the node itself. */
static void fold_expr(folder *f, pllm_jnode **slot)
{
    pllm_jnode *n = *slot;
    if (!n || f->oom) return;
    if (n->kind == PLLM_JE_CONST || n->kind == PLLM_JE_NAME || n->kind == PLLM_JE_NSREF) return;
    fold_expr(f, &n->a);
    fold_expr(f, &n->b);
    fold_expr(f, &n->c);
    fold_list(f, &n->args);
    fold_list(f, &n->kw);
    if (n->kind == PLLM_JE_SLICE) return; /* folded as part of its subscript */
    pllm_jv v;
    bool uncertain;
    if (!try_const(f, n, &v, &uncertain)) {
        if (uncertain) {
            pllm_jnode *k = fail_node(f, n);
            if (k) *slot = k;
        }
        return;
    }
    if (!safe_repr(v)) return;
    pllm_jnode *k = pllm_jarena_alloc(&f->t->arena, sizeof *k);
    if (!k || !copy_const(&f->t->arena, v, &v)) {
        f->oom = true;
        return;
    }
    memset(k, 0, sizeof *k);
    k->kind = PLLM_JE_CONST;
    k->line = n->line;
    k->fn = -1;
    k->value = v;
    const char *bad = non_finite(v);
    if (bad) {
        k->kind = PLLM_JE_FAIL;
        k->op = 1;
        k->text = bad;
    }
    *slot = k;
}

static void fold_body(folder *f, pllm_jnodes *body);

static void fold_stmt(folder *f, pllm_jnode **slot)
{
    pllm_jnode *n = *slot;
    if (f->oom) return;
    switch (n->kind) {
    case PLLM_JN_PRINT: {
        fold_expr(f, &n->a);
        /* CodeGenerator.visit_Output: a constant output becomes text (str() of the value) */
        pllm_jv v;
        bool uncertain;
        if (!try_const(f, n->a, &v, &uncertain)) {
            if (uncertain) {
                pllm_jnode *k = fail_node(f, n->a);
                if (k) n->a = k;
            }
            return;
        }
        pllm_jsb b = {0};
        if (pllm_jv_write_str(&f->c, &b, v) != PLLM_OK) {
            pllm_error_clear();
            return;
        }
        char *text = pllm_jarena_strndup(&f->t->arena, b.n ? b.s : "", b.n);
        if (!text) {
            f->oom = true;
            return;
        }
        n->kind = PLLM_JN_TEXT;
        n->text = text;
        n->text_len = b.n;
        n->a = NULL;
        return;
    }
    case PLLM_JN_FOR:
        fold_expr(f, &n->b);
        fold_expr(f, &n->c);
        break;
    case PLLM_JN_SET:
        fold_expr(f, &n->b);
        break;
    case PLLM_JN_SET_BLOCK:
    case PLLM_JN_FILTER_BLOCK:
        fold_expr(f, &n->c);
        break;
    case PLLM_JN_WITH:
        fold_list(f, &n->kw);
        break;
    case PLLM_JN_MACRO:
        fold_list(f, &n->args);
        break;
    case PLLM_JN_IF:
        fold_expr(f, &n->a);
        break;
    default:
        break;
    }
    fold_body(f, &n->body);
    fold_body(f, &n->orelse);
}

static void fold_body(folder *f, pllm_jnodes *body)
{
    for (size_t i = 0; i < body->n; i++) fold_stmt(f, &body->v[i]);
}

pllm_status pllm_jinja_fold(pllm_jtemplate *t)
{
    folder f = {.t = t, .tmp = {.limit = (size_t)64 << 20}};
    f.c = (pllm_jctx){
        .arena = &f.tmp,
        .name = t->name,
        .max_steps = 1000000,
        .max_depth = 100,
        .max_str = (size_t)16 << 20,
        .const_mode = true,
    };
    fold_body(&f, &t->body);
    pllm_jarena_free(&f.tmp);
    if (f.oom) return pllm_errorf(PLLM_ERR_NOMEM, "%s: out of memory folding constants", t->name);
    return PLLM_OK;
}
