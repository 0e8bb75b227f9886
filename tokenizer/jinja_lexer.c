/*
 * jinja_lexer.c: template source -> tokens, reproducing jinja2's lexer (jinja2/lexer.py) with
 * trim_blocks and lstrip_blocks on:
 *   - text before a tag: `{%-`/`{{-`/`{#-` strip all whitespace before it; otherwise, for block
 *     and comment tags (not `{{`) unless marked `{%+`, whitespace between the last newline (or
 *     the start of a line) and the tag is removed (lstrip_blocks);
 *   - tag ends: `-%}` eats all whitespace after it, `%}` / `#}` eat one newline (trim_blocks),
 *     `+%}` eats nothing; `-}}` eats all whitespace, `}}` nothing;
 *   - whitespace is Python's (Unicode str.isspace, as the `\s` of jinja2's regexes);
 *   - inside tags: numbers (with `_`, 0b/0o/0x), names, strings (Python unicode-escape rules),
 *     operators; a tag only ends when brackets are balanced.
 * The source given here is already newline-normalized (see jinja_parser.c).
 */
#include "tokenizer/jinja.h"

#include "tokenizer/jinja_unicode.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct lexer {
    pllm_jarena *a;
    const char *name;
    const char *src;
    size_t len, pos;
    size_t line_pos; /* position up to which lines were counted */
    int line;
    bool line_starting; /* the previous match ended with a newline */
    pllm_jtoks *out;
    char stack[256]; /* expected closing brackets */
    int depth;
} lexer;

static int line_at(lexer *lx, size_t pos)
{
    if (pos < lx->line_pos) {
        lx->line_pos = 0;
        lx->line = 1;
    }
    for (size_t i = lx->line_pos; i < pos && i < lx->len; i++)
        if (lx->src[i] == '\n') lx->line++;
    lx->line_pos = pos;
    return lx->line;
}

static pllm_status lex_err(lexer *lx, size_t pos, const char *msg)
{
    return pllm_errorf(PLLM_ERR_FORMAT, "%s:%d: template syntax error: %s", lx->name,
                       line_at(lx, pos), msg);
}

static pllm_status emit(lexer *lx, pllm_jtok tok)
{
    pllm_jtoks *t = lx->out;
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 64;
        pllm_jtok *v = pllm_jarena_alloc(lx->a, cap * sizeof *v);
        if (!v) return pllm_error_prefix(PLLM_ERR_NOMEM, "%s: ", lx->name);
        if (t->n) memcpy(v, t->v, t->n * sizeof *v);
        t->v = v;
        t->cap = cap;
    }
    t->v[t->n++] = tok;
    return PLLM_OK;
}

static pllm_status emit_simple(lexer *lx, uint8_t type, size_t pos)
{
    return emit(lx, (pllm_jtok){.type = type, .line = line_at(lx, pos)});
}

/* Length of the whitespace character at p (0 when none). */
static size_t space_at(const char *s, size_t n, size_t p)
{
    if (p >= n) return 0;
    unsigned char ch = (unsigned char)s[p];
    if (ch < 0x80) return pllm_jinja_is_space(ch) ? 1 : 0;
    size_t l;
    uint32_t cp = pllm_jinja_utf8_decode(s + p, &l);
    return pllm_jinja_is_space(cp) ? l : 0;
}

static size_t skip_space(const char *s, size_t n, size_t p)
{
    size_t l;
    while ((l = space_at(s, n, p)) > 0) p += l;
    return p;
}

/* Length of text[0..n) after Python's str.rstrip(). */
static size_t rstrip_len(const char *s, size_t n)
{
    while (n > 0) {
        size_t k = n - 1;
        while (k > 0 && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
        if (space_at(s, n, k) != n - k) break;
        n = k;
    }
    return n;
}

static bool starts(const lexer *lx, size_t p, const char *lit)
{
    size_t n = strlen(lit);
    return p + n <= lx->len && memcmp(lx->src + p, lit, n) == 0;
}

enum { TAG_NONE, TAG_RAW, TAG_VAR, TAG_COMMENT, TAG_BLOCK };

/* At p: does a tag begin? Sets *sign ('-', '+' or 0) and *end (position after the begin
 * token; for raw, after the whole `{% raw %}`). */
static int tag_at(const lexer *lx, size_t p, char *sign, size_t *end)
{
    if (lx->src[p] != '{' || p + 1 >= lx->len) return TAG_NONE;
    char k = lx->src[p + 1];
    if (k != '{' && k != '%' && k != '#') return TAG_NONE;
    size_t q = p + 2;
    *sign = 0;
    if (q < lx->len && (lx->src[q] == '-' || lx->src[q] == '+')) *sign = lx->src[q++];
    if (k == '%') {
        /* raw: {%(-|+|)\s*raw\s*(?:-%}\s*|%}) */
        size_t r = skip_space(lx->src, lx->len, q);
        if (starts(lx, r, "raw")) {
            r = skip_space(lx->src, lx->len, r + 3);
            if (starts(lx, r, "-%}")) {
                *end = skip_space(lx->src, lx->len, r + 3);
                return TAG_RAW;
            }
            if (starts(lx, r, "%}")) {
                *end = r + 2;
                return TAG_RAW;
            }
        }
    }
    *end = q;
    return k == '{' ? TAG_VAR : k == '#' ? TAG_COMMENT : TAG_BLOCK;
}

/* Emit the text before a tag with its whitespace control applied. */
static pllm_status emit_text(lexer *lx, size_t from, size_t to, char sign, bool lstrip_ok)
{
    const char *text = lx->src + from;
    size_t n = to - from;
    if (sign == '-') {
        n = rstrip_len(text, n);
    } else if (sign != '+' && lstrip_ok) {
        size_t l_pos = n;
        while (l_pos > 0 && text[l_pos - 1] != '\n') l_pos--;
        if ((l_pos > 0 || lx->line_starting) && l_pos < n && skip_space(text, n, l_pos) == n)
            n = l_pos;
    }
    if (n == 0) return PLLM_OK;
    pllm_jtok t = {.type = PLLM_JT_DATA, .line = line_at(lx, from), .text = text, .len = n};
    return emit(lx, t);
}

/* ---------------------------------------------------------------- inside tags */

static bool is_digit(char ch)
{
    return ch >= '0' && ch <= '9';
}
static bool is_hex(char ch)
{
    return is_digit(ch) || (ch >= 'a' && ch <= 'f') || (ch >= 'A' && ch <= 'F');
}
static bool is_name_start(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_';
}
static bool is_name_char(char ch)
{
    return is_name_start(ch) || is_digit(ch);
}

/* (\d+_)*\d+ at p: end position, or p when no match. */
static size_t match_digits(const char *s, size_t n, size_t p)
{
    size_t q = p, last = p;
    while (q < n && is_digit(s[q])) {
        while (q < n && is_digit(s[q])) q++;
        last = q;
        if (q + 1 < n && s[q] == '_' && is_digit(s[q + 1]))
            q++;
        else
            break;
    }
    return last;
}

/* jinja2's float_re at p: end position or p. */
static size_t match_float(const lexer *lx, size_t p)
{
    const char *s = lx->src;
    size_t n = lx->len;
    if (p > 0 && s[p - 1] == '.') return p;
    size_t q = match_digits(s, n, p);
    if (q == p) return p;
    /* (\.digits)? e[+-]?digits */
    size_t f = q;
    if (f < n && s[f] == '.') {
        size_t g = match_digits(s, n, f + 1);
        if (g > f + 1) f = g;
    }
    if (f < n && (s[f] == 'e' || s[f] == 'E')) {
        size_t e = f + 1;
        if (e < n && (s[e] == '+' || s[e] == '-')) e++;
        size_t g = match_digits(s, n, e);
        if (g > e) return g;
    }
    /* \.digits */
    if (q < n && s[q] == '.') {
        size_t g = match_digits(s, n, q + 1);
        if (g > q + 1) return g;
    }
    return p;
}

/* jinja2's integer_re at p (alternatives in its order): end position or p; *base set. */
static size_t match_int(const lexer *lx, size_t p, int *base)
{
    const char *s = lx->src;
    size_t n = lx->len;
    if (p + 1 < n && s[p] == '0') {
        char k = s[p + 1];
        int b = (k == 'b' || k == 'B')   ? 2
                : (k == 'o' || k == 'O') ? 8
                : (k == 'x' || k == 'X') ? 16
                                         : 0;
        if (b) {
            size_t q = p + 2;
            for (;;) {
                size_t r = q;
                if (r < n && s[r] == '_') r++;
                if (r >= n) break;
                char ch = s[r];
                bool ok = b == 2   ? (ch == '0' || ch == '1')
                          : b == 8 ? (ch >= '0' && ch <= '7')
                                   : is_hex(ch);
                if (!ok) break;
                q = r + 1;
            }
            if (q > p + 2) {
                *base = b;
                return q;
            }
        }
    }
    *base = 10;
    if (p < n && s[p] >= '1' && s[p] <= '9') {
        size_t q = p + 1;
        for (;;) {
            size_t r = q;
            if (r < n && s[r] == '_') r++;
            if (r < n && is_digit(s[r]))
                q = r + 1;
            else
                break;
        }
        return q;
    }
    if (p < n && s[p] == '0') {
        size_t q = p + 1;
        for (;;) {
            size_t r = q;
            if (r < n && s[r] == '_') r++;
            if (r < n && s[r] == '0')
                q = r + 1;
            else
                break;
        }
        return q;
    }
    return p;
}

static pllm_status lex_number(lexer *lx, size_t p, size_t end, bool is_float, int base)
{
    char buf[128];
    size_t k = 0;
    size_t start = (!is_float && base != 10) ? p + 2 : p;
    for (size_t i = start; i < end; i++) {
        if (lx->src[i] == '_') continue;
        if (k + 1 >= sizeof buf) return lex_err(lx, p, "number literal too long");
        buf[k++] = lx->src[i];
    }
    buf[k] = 0;
    pllm_jtok t = {.line = line_at(lx, p)};
    if (is_float) {
        t.type = PLLM_JT_FLOAT;
        t.f = strtod(buf, NULL);
    } else {
        t.type = PLLM_JT_INT;
        unsigned __int128 v = 0;
        for (size_t i = 0; i < k; i++) {
            int d = is_digit(buf[i]) ? buf[i] - '0' : (buf[i] | 32) - 'a' + 10;
            v = v * (unsigned)base + (unsigned)d;
            if (v > (unsigned __int128)INT64_MAX)
                return pllm_errorf(
                    PLLM_ERR_UNSUPPORTED,
                    "%s:%d: integer literal too large (pllm supports 64-bit integers)", lx->name,
                    line_at(lx, p));
        }
        t.i = (int64_t)v;
    }
    return emit(lx, t);
}

static int hexval(char ch)
{
    return is_digit(ch) ? ch - '0' : (ch | 32) - 'a' + 10;
}

/* Decode a string literal body the way jinja2 does
 * (value.encode("ascii", "backslashreplace").decode("unicode-escape")). */
static pllm_status lex_string(lexer *lx, size_t p, size_t body, size_t body_end)
{
    const char *s = lx->src;
    char *out = pllm_jarena_alloc(lx->a, (body_end - body) * 4 + 1);
    if (!out) return pllm_error_prefix(PLLM_ERR_NOMEM, "%s: ", lx->name);
    size_t o = 0, i = body;
    while (i < body_end) {
        if (s[i] != '\\') {
            out[o++] = s[i++];
            continue;
        }
        i++; /* the string regex guarantees a character after a backslash */
        unsigned char x = (unsigned char)s[i];
        if (x >= 0x80) {
            /* backslashreplace turned the character into its \x/\u/\U spelling, which the
             * escaped backslash leaves literal */
            size_t l;
            uint32_t cp = pllm_jinja_utf8_decode(s + i, &l);
            char tmp[16];
            int tl = cp <= 0xFF     ? snprintf(tmp, sizeof tmp, "\\x%02x", cp)
                     : cp <= 0xFFFF ? snprintf(tmp, sizeof tmp, "\\u%04x", cp)
                                    : snprintf(tmp, sizeof tmp, "\\U%08x", cp);
            memcpy(out + o, tmp, (size_t)tl);
            o += (size_t)tl;
            i += l;
            continue;
        }
        i++;
        uint32_t cp;
        switch (x) {
        case '\n':
            continue;
        case '\\':
            out[o++] = '\\';
            continue;
        case '\'':
            out[o++] = '\'';
            continue;
        case '"':
            out[o++] = '"';
            continue;
        case 'a':
            out[o++] = '\a';
            continue;
        case 'b':
            out[o++] = '\b';
            continue;
        case 'f':
            out[o++] = '\f';
            continue;
        case 'n':
            out[o++] = '\n';
            continue;
        case 'r':
            out[o++] = '\r';
            continue;
        case 't':
            out[o++] = '\t';
            continue;
        case 'v':
            out[o++] = '\v';
            continue;
        case 'x':
        case 'u':
        case 'U': {
            int nd = x == 'x' ? 2 : x == 'u' ? 4 : 8;
            cp = 0;
            for (int k = 0; k < nd; k++) {
                if (i >= body_end || !is_hex(s[i])) {
                    char msg[64];
                    snprintf(msg, sizeof msg, "truncated \\%c escape in a string", x);
                    return lex_err(lx, p, msg);
                }
                cp = cp * 16 + (uint32_t)hexval(s[i++]);
            }
            break;
        }
        case 'N':
            return lex_err(lx, p, "\\N{...} escapes are not supported");
        default:
            if (x >= '0' && x <= '7') {
                cp = x - '0';
                for (int k = 0; k < 2 && i < body_end && s[i] >= '0' && s[i] <= '7'; k++)
                    cp = cp * 8 + (uint32_t)(s[i++] - '0');
                break;
            }
            out[o++] = '\\';
            out[o++] = (char)x;
            continue;
        }
        if (cp > 0x10FFFF) return lex_err(lx, p, "illegal Unicode character in a string escape");
        if (cp >= 0xD800 && cp <= 0xDFFF)
            return pllm_errorf(PLLM_ERR_UNSUPPORTED,
                               "%s:%d: surrogate escapes in strings are not supported", lx->name,
                               line_at(lx, p));
        o += pllm_jinja_utf8_encode(cp, out + o);
    }
    out[o] = 0;
    pllm_jtok t = {.type = PLLM_JT_STRING, .line = line_at(lx, p), .text = out, .len = o};
    return emit(lx, t);
}

static const char *const k_ops2[] = {"//", "**", "==", "!=", ">=", "<="};
static const char k_ops1[] = "+-/*%~[](){}<>=.:|,;";

/* Tokens of a {{ }} or {% %} tag starting at lx->pos, through its end. */
static pllm_status lex_tag(lexer *lx, bool is_block, size_t tag_start)
{
    const char *s = lx->src;
    size_t n = lx->len;
    lx->depth = 0;
    for (;;) {
        size_t p = lx->pos;
        if (p >= n)
            return lex_err(lx, tag_start,
                           is_block ? "unterminated '{%' tag" : "unterminated '{{' tag");
        /* the end of the tag, when brackets are balanced */
        if (lx->depth == 0) {
            if (is_block) {
                if (starts(lx, p, "+%}")) {
                    PLLM_TRY(emit_simple(lx, PLLM_JT_BLOCK_END, p));
                    lx->pos = p + 3;
                    lx->line_starting = false;
                    return PLLM_OK;
                }
                if (starts(lx, p, "-%}")) {
                    PLLM_TRY(emit_simple(lx, PLLM_JT_BLOCK_END, p));
                    size_t e = skip_space(s, n, p + 3);
                    lx->line_starting = e > p + 3 ? s[e - 1] == '\n' : false;
                    lx->pos = e;
                    return PLLM_OK;
                }
                if (starts(lx, p, "%}")) {
                    PLLM_TRY(emit_simple(lx, PLLM_JT_BLOCK_END, p));
                    size_t e = p + 2;
                    lx->line_starting = false;
                    if (e < n && s[e] == '\n') {
                        e++;
                        lx->line_starting = true;
                    }
                    lx->pos = e;
                    return PLLM_OK;
                }
            } else {
                if (starts(lx, p, "-}}")) {
                    PLLM_TRY(emit_simple(lx, PLLM_JT_VAR_END, p));
                    size_t e = skip_space(s, n, p + 3);
                    lx->line_starting = e > p + 3 ? s[e - 1] == '\n' : false;
                    lx->pos = e;
                    return PLLM_OK;
                }
                if (starts(lx, p, "}}")) {
                    PLLM_TRY(emit_simple(lx, PLLM_JT_VAR_END, p));
                    lx->pos = p + 2;
                    lx->line_starting = false;
                    return PLLM_OK;
                }
            }
        }
        size_t ws = skip_space(s, n, p);
        if (ws > p) {
            lx->pos = ws;
            continue;
        }
        size_t e = match_float(lx, p);
        if (e > p) {
            PLLM_TRY(lex_number(lx, p, e, true, 10));
            lx->pos = e;
            continue;
        }
        int base;
        e = match_int(lx, p, &base);
        if (e > p) {
            PLLM_TRY(lex_number(lx, p, e, false, base));
            lx->pos = e;
            continue;
        }
        char ch = s[p];
        if (is_name_start(ch)) {
            e = p + 1;
            while (e < n && is_name_char(s[e])) e++;
            if (e < n && (unsigned char)s[e] >= 0x80 && !space_at(s, n, e))
                return pllm_errorf(PLLM_ERR_UNSUPPORTED,
                                   "%s:%d: non-ASCII identifiers are not supported", lx->name,
                                   line_at(lx, p));
            pllm_jtok t = {
                .type = PLLM_JT_NAME, .line = line_at(lx, p), .text = s + p, .len = e - p};
            PLLM_TRY(emit(lx, t));
            lx->pos = e;
            continue;
        }
        if (ch == '\'' || ch == '"') {
            size_t q = p + 1;
            while (q < n && s[q] != ch) q += (s[q] == '\\' && q + 1 < n) ? 2 : 1;
            if (q >= n) return lex_err(lx, p, "unterminated string literal");
            PLLM_TRY(lex_string(lx, p, p + 1, q));
            lx->pos = q + 1;
            continue;
        }
        size_t oplen = 0;
        for (size_t k = 0; k < PLLM_ARRAY_LEN(k_ops2); k++)
            if (starts(lx, p, k_ops2[k])) oplen = 2;
        if (!oplen && ch && strchr(k_ops1, ch)) oplen = 1;
        if (!oplen) {
            if ((unsigned char)ch >= 0x80) /* jinja2 accepts Unicode identifiers */
                return pllm_errorf(
                    PLLM_ERR_UNSUPPORTED,
                    "%s:%d: non-ASCII characters inside tags (identifiers) are not supported",
                    lx->name, line_at(lx, p));
            char msg[64];
            snprintf(msg, sizeof msg, "unexpected char '%c'", ch);
            return lex_err(lx, p, msg);
        }
        if (oplen == 1 && (ch == '(' || ch == '[' || ch == '{')) {
            if (lx->depth >= (int)sizeof lx->stack)
                return pllm_errorf(PLLM_ERR_RANGE, "%s:%d: brackets nested too deeply (limit %d)",
                                   lx->name, line_at(lx, p), (int)sizeof lx->stack);
            lx->stack[lx->depth++] = ch == '(' ? ')' : ch == '[' ? ']' : '}';
        } else if (oplen == 1 && (ch == ')' || ch == ']' || ch == '}')) {
            char msg[64];
            if (lx->depth == 0) {
                snprintf(msg, sizeof msg, "unexpected '%c'", ch);
                return lex_err(lx, p, msg);
            }
            char want = lx->stack[--lx->depth];
            if (want != ch) {
                snprintf(msg, sizeof msg, "unexpected '%c', expected '%c'", ch, want);
                return lex_err(lx, p, msg);
            }
        }
        pllm_jtok t = {.type = PLLM_JT_OP, .line = line_at(lx, p), .text = s + p, .len = oplen};
        PLLM_TRY(emit(lx, t));
        lx->pos = p + oplen;
    }
}

pllm_status pllm_jinja_lex(pllm_jarena *a, const char *name, const char *src, size_t len,
                           pllm_jtoks *out)
{
    lexer lx = {
        .a = a, .name = name, .src = src, .len = len, .line = 1, .line_starting = true, .out = out};
    memset(out, 0, sizeof *out);
    while (lx.pos < len) {
        /* find the next tag */
        size_t p = lx.pos, end = 0;
        char sign = 0;
        int kind = TAG_NONE;
        for (; p + 1 < len; p++) {
            if (src[p] == '{' && (kind = tag_at(&lx, p, &sign, &end)) != TAG_NONE) break;
        }
        if (kind == TAG_NONE) {
            pllm_jtok t = {.type = PLLM_JT_DATA,
                           .line = line_at(&lx, lx.pos),
                           .text = src + lx.pos,
                           .len = len - lx.pos};
            PLLM_TRY(emit(&lx, t));
            break;
        }
        PLLM_TRY(emit_text(&lx, lx.pos, p, sign, kind != TAG_VAR));
        lx.line_starting = false;
        if ((kind == TAG_COMMENT || kind == TAG_RAW) && end >= len) {
            /* jinja2's lexer stops quietly when a comment or raw block opens at the very end
             * (its "missing end" rule needs one more character to match) */
            break;
        }
        if (kind == TAG_COMMENT) {
            /* (.*?)((?:\+#}|\-#}\s*|#}\n?)) */
            size_t q = end;
            for (;; q++) {
                if (q + 1 >= len) return lex_err(&lx, p, "missing end of comment tag");
                if (starts(&lx, q, "+#}")) {
                    lx.pos = q + 3;
                    break;
                }
                if (starts(&lx, q, "-#}")) {
                    size_t e = skip_space(src, len, q + 3);
                    lx.line_starting = e > q + 3 ? src[e - 1] == '\n' : false;
                    lx.pos = e;
                    break;
                }
                if (starts(&lx, q, "#}")) {
                    lx.pos = q + 2;
                    if (lx.pos < len && src[lx.pos] == '\n') {
                        lx.pos++;
                        lx.line_starting = true;
                    }
                    break;
                }
            }
            continue;
        }
        if (kind == TAG_RAW) {
            if (end > 0 && src[end - 1] == '\n') lx.line_starting = true;
            /* (.*?)((?:{%(\-|\+|))\s*endraw\s*(?:\+%}|\-%}\s*|%}\n?)) */
            size_t q = end;
            for (;; q++) {
                if (q + 1 >= len) return lex_err(&lx, p, "missing end of raw directive");
                if (src[q] != '{' || src[q + 1] != '%') continue;
                size_t r = q + 2;
                char rsign = 0;
                if (r < len && (src[r] == '-' || src[r] == '+')) rsign = src[r++];
                r = skip_space(src, len, r);
                if (!starts(&lx, r, "endraw")) continue;
                r = skip_space(src, len, r + 6);
                size_t e;
                bool nl = false;
                if (starts(&lx, r, "+%}")) {
                    e = r + 3;
                } else if (starts(&lx, r, "-%}")) {
                    e = skip_space(src, len, r + 3);
                    nl = e > r + 3 && src[e - 1] == '\n';
                } else if (starts(&lx, r, "%}")) {
                    e = r + 2;
                    if (e < len && src[e] == '\n') {
                        e++;
                        nl = true;
                    }
                } else {
                    continue;
                }
                PLLM_TRY(emit_text(&lx, end, q, rsign, true));
                lx.pos = e;
                lx.line_starting = nl;
                break;
            }
            continue;
        }
        PLLM_TRY(emit_simple(&lx, kind == TAG_VAR ? PLLM_JT_VAR_BEGIN : PLLM_JT_BLOCK_BEGIN, p));
        lx.pos = end;
        PLLM_TRY(lex_tag(&lx, kind == TAG_BLOCK, p));
    }
    return emit_simple(&lx, PLLM_JT_EOF, len);
}
