/*
 * jinja_str.c: Python's str semantics for the interpreter: code points, case mappings
 * (lower/upper/title/capitalize with the final-sigma rule, jinja2's title filter), strip,
 * split, splitlines, replace, find, count, the str methods, printf-style `%`, str.format
 * through jinja2's sandboxed formatter, and int()/float() parsing of text.
 */
#include "tokenizer/jinja_builtins.h"

#include "tokenizer/jinja_unicode.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- code points */

pllm_status pllm_jb_decode(pllm_jctx *c, const pllm_jstr *s, pllm_jb_cpbuf *out)
{
    out->v = pllm_jb_alloc(c, (s->nchars + 1) * sizeof(uint32_t));
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

pllm_status pllm_jb_substr(pllm_jctx *c, const pllm_jstr *s, size_t from, size_t to, pllm_jv *out)
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

static bool title_sep(uint32_t cp)
{
    return cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || pllm_jinja_is_space(cp);
}

/* str.lower/upper/title/capitalize and jinja2's title filter. */
pllm_status pllm_jb_change_case(pllm_jctx *c, pllm_jv in, int mode, pllm_jv *out)
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
        pllm_jb_cpbuf v;
        PLLM_TRY(pllm_jb_decode(c, s, &v));
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
    return pllm_jb_mark(c, out, s->markup);
}

/* Python's str.isspace/islower/isupper and the ASCII-only isdigit/isalpha/isalnum. */
pllm_status pllm_jb_str_predicate(pllm_jctx *c, const pllm_jstr *s, int id, bool *out)
{
    pllm_jb_cpbuf v;
    PLLM_TRY(pllm_jb_decode(c, s, &v));
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
                             pllm_jb_func_name(id));
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
pllm_status pllm_jb_strip(pllm_jctx *c, pllm_jv in, const pllm_jstr *chars, int which, pllm_jv *out)
{
    const pllm_jstr *s = in.s;
    pllm_jb_cpbuf v, set = {0};
    PLLM_TRY(pllm_jb_decode(c, s, &v));
    if (chars) PLLM_TRY(pllm_jb_decode(c, chars, &set));
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
    PLLM_TRY(pllm_jb_substr(c, s, lo, hi, out));
    return pllm_jb_mark(c, out, s->markup);
}

pllm_status pllm_jb_list_push(pllm_jctx *c, pllm_jv **arr, size_t *n, size_t *cap, pllm_jv v)
{
    if (*n == *cap) {
        size_t ncap = *cap ? *cap * 2 : 8;
        if (ncap > c->max_str / sizeof(pllm_jv))
            return pllm_jerr(c, PLLM_ERR_RANGE, "list exceeds the size limit");
        pllm_jv *na = pllm_jb_alloc(c, ncap * sizeof *na);
        if (!na) return PLLM_ERR_NOMEM;
        if (*n) memcpy(na, *arr, *n * sizeof *na);
        *arr = na;
        *cap = ncap;
    }
    (*arr)[(*n)++] = v;
    return PLLM_OK;
}

pllm_status pllm_jb_make_list(pllm_jctx *c, pllm_jv *items, size_t n, uint8_t kind, pllm_jv *out)
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
        pllm_jb_cpbuf v;
        PLLM_TRY(pllm_jb_decode(c, s, &v));
        if (!right) {
            size_t i = 0;
            while (i < v.n) {
                while (i < v.n && pllm_jinja_is_space(v.v[i])) i++;
                if (i >= v.n) break;
                if (maxsplit == 0) {
                    size_t j = v.n;
                    pllm_jv w;
                    PLLM_TRY(pllm_jb_substr(c, s, i, j, &w));
                    PLLM_TRY(pllm_jb_list_push(c, &items, &n, &cap, w));
                    break;
                }
                size_t j = i;
                while (j < v.n && !pllm_jinja_is_space(v.v[j])) j++;
                pllm_jv w;
                PLLM_TRY(pllm_jb_substr(c, s, i, j, &w));
                PLLM_TRY(pllm_jb_list_push(c, &items, &n, &cap, w));
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
                    PLLM_TRY(pllm_jb_substr(c, s, 0, i, &w));
                    PLLM_TRY(pllm_jb_list_push(c, &items, &n, &cap, w));
                    break;
                }
                size_t j = i;
                while (j > 0 && !pllm_jinja_is_space(v.v[j - 1])) j--;
                pllm_jv w;
                PLLM_TRY(pllm_jb_substr(c, s, j, i, &w));
                PLLM_TRY(pllm_jb_list_push(c, &items, &n, &cap, w));
                maxsplit--;
                i = j;
            }
            for (size_t a = 0, b = n ? n - 1 : 0; a < b; a++, b--) {
                pllm_jv t = items[a];
                items[a] = items[b];
                items[b] = t;
            }
        }
        return pllm_jb_make_list(c, items, n, PLLM_JL_LIST, out);
    }
    /* byte-wise search is exact for UTF-8 */
    if (!right) {
        size_t i = 0;
        for (;;) {
            const char *hit = maxsplit > 0 ? memmem(s->s + i, s->len - i, sep->s, sep->len) : NULL;
            size_t end = hit ? (size_t)(hit - s->s) : s->len;
            pllm_jv w;
            PLLM_TRY(pllm_jv_str(c, s->s + i, end - i, &w));
            PLLM_TRY(pllm_jb_list_push(c, &items, &n, &cap, w));
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
            PLLM_TRY(pllm_jb_list_push(c, &items, &n, &cap, w));
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
    return pllm_jb_make_list(c, items, n, PLLM_JL_LIST, out);
}

static bool is_line_break(uint32_t cp)
{
    return cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || cp == 0x1C || cp == 0x1D ||
           cp == 0x1E || cp == 0x85 || cp == 0x2028 || cp == 0x2029;
}

/* str.splitlines(keepends) */
pllm_status pllm_jb_splitlines(pllm_jctx *c, const pllm_jstr *s, bool keepends, pllm_jv *out)
{
    pllm_jb_cpbuf v;
    PLLM_TRY(pllm_jb_decode(c, s, &v));
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
        PLLM_TRY(pllm_jb_substr(c, s, i, keepends ? j : eol, &w));
        PLLM_TRY(pllm_jb_list_push(c, &items, &n, &cap, w));
        i = j;
    }
    return pllm_jb_make_list(c, items, n, PLLM_JL_LIST, out);
}

/* str.replace(old, new, count) */
pllm_status pllm_jb_replace(pllm_jctx *c, const pllm_jstr *s, const pllm_jstr *old,
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

/* Python's printf-style `str % args` for the conversions %s %r %d %i %u and %%, with an
 * optional %(key) mapping lookup; flags, width, precision and other conversions fail as
 * unsupported. args: a tuple, one value, or anything with __getitem__ used as a mapping. */
pllm_status pllm_jb_str_format(pllm_jctx *c, pllm_jv fmt, pllm_jv args, pllm_jv *out)
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
                PLLM_TRY(pllm_jb_float_to_int(c, v.f, &t));
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

/* ---------------------------------------------------------------- number parsing (int/float
 * filters) */

/* Python's float(str): whitespace, sign, digits with single underscores, '.', exponent,
 * inf/infinity/nan. *ok false when Python raises ValueError. Non-ASCII text is rejected by
 * the caller (Python also accepts other Unicode digits). */
void pllm_jb_parse_float(const char *s, size_t n, double *out, bool *ok)
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
void pllm_jb_parse_int(const char *s, size_t n, int64_t base, int64_t *out, bool *ok,
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
pllm_status pllm_jb_number_text(pllm_jctx *c, const pllm_jstr *s, const char **out, size_t *n,
                                bool *ok)
{
    *ok = true;
    if (s->nchars == s->len) {
        *out = s->s;
        *n = s->len;
        return PLLM_OK;
    }
    char *buf = pllm_jb_alloc(c, s->nchars + 1);
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

pllm_status pllm_jb_str_method(pllm_jctx *c, int id, pllm_jv self, const pllm_jargs *a,
                               pllm_jv *out)
{
    const pllm_jstr *s = self.s;
    const char *what = pllm_jb_func_name(id);
    char whatp[48];
    snprintf(whatp, sizeof whatp, "%s()", what);
    switch (id) {
    case M_STRIP:
    case M_LSTRIP:
    case M_RSTRIP: {
        PLLM_TRY(pllm_jb_pos_only(c, whatp, a, 0, 1));
        const pllm_jstr *chars = NULL;
        if (a->n_pos && a->pos[0].t != PLLM_JV_NONE) {
            if (a->pos[0].t != PLLM_JV_STR)
                return TYPE_ERROR(c, "%s arg must be None or str", what);
            chars = a->pos[0].s;
        }
        return pllm_jb_strip(c, self, chars, id == M_STRIP ? 3 : id == M_LSTRIP ? 1 : 2, out);
    }
    case M_SPLIT:
    case M_RSPLIT: {
        static const char *const params[] = {"sep", "maxsplit"};
        pllm_jv vals[2];
        bool given[2];
        PLLM_TRY(pllm_jb_bind(c, whatp, a, params, 2, 0, vals, given));
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
        PLLM_TRY(pllm_jb_bind(c, whatp, a, params, 1, 0, vals, given));
        return pllm_jb_splitlines(c, s, given[0] && pllm_jv_truthy(vals[0]), out);
    }
    case M_STARTSWITH:
    case M_ENDSWITH: {
        PLLM_TRY(pllm_jb_pos_only(c, whatp, a, 1, 1));
        bool r;
        PLLM_TRY(affix(c, s, a->pos[0], id == M_ENDSWITH, &r));
        *out = pllm_jv_bool(r);
        return PLLM_OK;
    }
    case M_UPPER:
        PLLM_TRY(pllm_jb_no_args(c, whatp, a));
        return pllm_jb_change_case(c, self, CASE_UPPER, out);
    case M_LOWER:
        PLLM_TRY(pllm_jb_no_args(c, whatp, a));
        return pllm_jb_change_case(c, self, CASE_LOWER, out);
    case M_TITLE:
        PLLM_TRY(pllm_jb_no_args(c, whatp, a));
        return pllm_jb_change_case(c, self, CASE_TITLE_METHOD, out);
    case M_CAPITALIZE:
        PLLM_TRY(pllm_jb_no_args(c, whatp, a));
        return pllm_jb_change_case(c, self, CASE_CAPITALIZE, out);
    case M_REPLACE: {
        PLLM_TRY(pllm_jb_pos_only(c, whatp, a, 2, 3));
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
        return pllm_jb_replace(c, s, o, r, count, out);
    }
    case M_FIND:
    case M_RFIND:
    case M_INDEX:
    case M_RINDEX: {
        if (a->n_pos > 1)
            return pllm_jerr(c, PLLM_ERR_UNSUPPORTED, "str.%s with start/end is not supported",
                             what);
        PLLM_TRY(pllm_jb_pos_only(c, whatp, a, 1, 1));
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
        PLLM_TRY(pllm_jb_pos_only(c, whatp, a, 1, 1));
        const pllm_jstr *sub = NULL;
        PLLM_TRY(str_arg(c, whatp, a->pos[0], &sub));
        *out = pllm_jv_int(do_count(s, sub));
        return PLLM_OK;
    }
    case M_JOIN: {
        PLLM_TRY(pllm_jb_pos_only(c, whatp, a, 1, 1));
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
        PLLM_TRY(pllm_jb_pos_only(c, whatp, a, 1, 1));
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
        PLLM_TRY(pllm_jb_no_args(c, whatp, a));
        bool r;
        PLLM_TRY(pllm_jb_str_predicate(c, s, id, &r));
        *out = pllm_jv_bool(r);
        return PLLM_OK;
    }
    case M_FORMAT:
        return str_dot_format(c, s, a, out);
    default:
        return pllm_jerr(c, PLLM_ERR_INTERNAL, "unknown str method %d", id);
    }
}
