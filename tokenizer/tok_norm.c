/*
 * tok_norm.c: normalizers, applied in order to each text fragment between added tokens
 * (Hugging Face's normalizers: Sequence, Prepend, Replace, NFC/NFD/NFKC/NFKD, Lowercase,
 * Strip).
 *
 * Unicode normalization and case mapping come from ICU (libicu, Unicode 15 in Debian 12):
 * a maintained implementation of the standard's algorithms and data, rather than tables
 * of our own. ICU works in UTF-16, so a fragment that is not pure ASCII is converted in and
 * out; pure ASCII is left alone by every normalization form, and lowercased directly.
 */
#include "tokenizer/tokenizer_internal.h"

#include <stdlib.h>
#include <string.h>
#include <unicode/utf16.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>

void tok_norm_free(tok_norm *nm)
{
    if (!nm) return;
    for (int i = 0; i < nm->n; i++) {
        free(nm->step[i].a);
        free(nm->step[i].b);
        pcre2_code_free(nm->step[i].re);
    }
    nm->n = 0;
}

pllm_status tok_norm_add(tok_norm *nm, const tok_norm_step *step, const char *src)
{
    if (nm->n == TOK_NORM_MAX) {
        free(step->a);
        free(step->b);
        pcre2_code_free(step->re);
        return pllm_errorf(PLLM_ERR_UNSUPPORTED, "%s: more than %d normalizers in sequence", src,
                           TOK_NORM_MAX);
    }
    nm->step[nm->n++] = *step;
    return PLLM_OK;
}

bool tok_is_space(uint32_t c)
{
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

static bool all_ascii(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] >= 0x80) return false;
    return true;
}

/* Lowercase as Hugging Face's NormalizedString::lowercase: each character by itself through
 * its full lowercase mapping (char::to_lowercase: 'İ' -> "i̇"), with no context (so no
 * final-sigma rule, unlike str::to_lowercase). ICU maps one character at a time. */
static pllm_status lowercase_chars(const char *s, size_t n, pllm_buf *out)
{
    out->n = 0;
    PLLM_TRY(pllm_buf_append(out, "", 0));
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t l = tok_utf8_decode((const uint8_t *)s + i, &cp);
        if (cp < 0x80) {
            char c = (char)(cp >= 'A' && cp <= 'Z' ? cp + 32 : cp);
            PLLM_TRY(pllm_buf_append(out, &c, 1));
            i += l;
            continue;
        }
        UChar src[2], dst[8];
        int32_t ls = 0, ld;
        UErrorCode err = U_ZERO_ERROR;
        U16_APPEND_UNSAFE(src, ls, (UChar32)cp);
        ld = u_strToLower(dst, 8, src, ls, "", &err);
        char u8[32];
        int32_t lu = 0;
        if (U_SUCCESS(err)) u_strToUTF8(u8, sizeof u8, &lu, dst, ld, &err);
        if (U_FAILURE(err))
            return pllm_errorf(PLLM_ERR_INTERNAL, "normalizer (ICU lowercase of U+%04X): %s", cp,
                               u_errorName(err));
        PLLM_TRY(pllm_buf_append(out, u8, (size_t)lu));
        i += l;
    }
    return PLLM_OK;
}

/* ICU call through UTF-16: mode 0..3 = NFC, NFD, NFKC, NFKD; 4 = lowercase. */
static pllm_status icu_apply(int mode, const char *s, size_t n, pllm_buf *out)
{
    pllm_status st = PLLM_OK;
    UErrorCode err = U_ZERO_ERROR;
    UChar *a = NULL, *b = NULL;
    if (n > INT32_MAX / 4)
        return pllm_errorf(PLLM_ERR_RANGE, "normalizer: %zu bytes is too long", n);
    int32_t cap = (int32_t)n + 16, la = 0;
    a = pllm_malloc((size_t)cap * sizeof *a);
    if (!a) return PLLM_ERR_NOMEM;
    u_strFromUTF8(a, cap, &la, s, (int32_t)n, &err);
    if (U_FAILURE(err)) goto icu_fail;

    int32_t bcap = la * 4 + 16, lb = 0; /* NFKD/lowercase expansions are at most x3/x4 here */
    for (int attempt = 0; attempt < 2; attempt++) {
        free(b);
        b = pllm_malloc((size_t)bcap * sizeof *b);
        if (!b) {
            st = PLLM_ERR_NOMEM;
            goto done;
        }
        err = U_ZERO_ERROR;
        if (mode == 4) {
            lb = u_strToLower(b, bcap, a, la, "", &err);
        } else {
            const UNormalizer2 *nz = mode == 0   ? unorm2_getNFCInstance(&err)
                                     : mode == 1 ? unorm2_getNFDInstance(&err)
                                     : mode == 2 ? unorm2_getNFKCInstance(&err)
                                                 : unorm2_getNFKDInstance(&err);
            if (U_FAILURE(err)) goto icu_fail;
            lb = unorm2_normalize(nz, a, la, b, bcap, &err);
        }
        if (err != U_BUFFER_OVERFLOW_ERROR) break;
        bcap = lb + 16;
    }
    if (U_FAILURE(err)) goto icu_fail;

    int32_t need = 0;
    err = U_ZERO_ERROR;
    u_strToUTF8(NULL, 0, &need, b, lb, &err);
    if (err != U_BUFFER_OVERFLOW_ERROR && U_FAILURE(err)) goto icu_fail;
    out->n = 0;
    if ((st = pllm_buf_append(out, "", 0))) goto done;
    if (out->cap < (size_t)need + 1) {
        char *p = pllm_realloc(out->s, (size_t)need + 1);
        if (!p) {
            st = PLLM_ERR_NOMEM;
            goto done;
        }
        out->s = p;
        out->cap = (size_t)need + 1;
    }
    err = U_ZERO_ERROR;
    u_strToUTF8(out->s, need + 1, &need, b, lb, &err);
    if (U_FAILURE(err)) goto icu_fail;
    out->n = (size_t)need;
    out->s[need] = 0;
    goto done;
icu_fail:
    st = pllm_errorf(PLLM_ERR_INTERNAL, "normalizer (ICU %s): %s",
                     mode == 4 ? "lowercase" : "normalize", u_errorName(err));
done:
    free(a);
    free(b);
    return st;
}

/* The first a[0..an) in s[0..n), or NULL: memchr on its first byte, then a compare. Not memmem:
 * the patterns a normalizer replaces are a character or two, and a sanitizer's memmem
 * interceptor checks the whole rest of the input on every call, which made replacing each space
 * of a 1 MiB text quadratic under ASan (tok_model: x29 for 8x the bytes, x7.8 without it). */
static const char *find_bytes(const char *s, size_t n, const char *a, size_t an)
{
    if (an == 0) return s;
    for (size_t i = 0; i + an <= n;) {
        const char *hit = memchr(s + i, a[0], n - an + 1 - i);
        if (!hit) return NULL;
        if (memcmp(hit, a, an) == 0) return hit;
        i = (size_t)(hit - s) + 1;
    }
    return NULL;
}

static pllm_status replace_all(const tok_norm_step *sp, const char *s, size_t n, pllm_buf *out)
{
    out->n = 0;
    PLLM_TRY(pllm_buf_append(out, "", 0));
    size_t from = 0, i = 0;
    while (i + sp->a_len <= n) {
        const char *hit = find_bytes(s + i, n - i, sp->a, sp->a_len);
        if (!hit) break;
        size_t at = (size_t)(hit - s);
        PLLM_TRY(pllm_buf_append(out, s + from, at - from));
        PLLM_TRY(pllm_buf_append(out, sp->b, sp->b_len));
        i = from = at + sp->a_len;
    }
    return pllm_buf_append(out, s + from, n - from);
}

static pllm_status replace_re(const tok_norm_step *sp, const char *s, size_t n, pllm_buf *out)
{
    out->n = 0;
    PLLM_TRY(pllm_buf_append(out, "", 0));
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    if (!md) return PLLM_ERR_NOMEM;
    pllm_status st = PLLM_OK;
    size_t from = 0, start = 0;
    while (start <= n) {
        int rc = pcre2_match(sp->re, (PCRE2_SPTR)s, n, start, PCRE2_NO_UTF_CHECK, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            st = pllm_errorf(PLLM_ERR_INTERNAL, "normalizer Replace regex failed (%d)", rc);
            goto done;
        }
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        if (ov[1] == ov[0]) { /* empty match: replaces nothing, move one character on */
            if (ov[0] >= n) break;
            uint32_t cp;
            start = ov[0] + tok_utf8_decode((const uint8_t *)s + ov[0], &cp);
            continue;
        }
        if ((st = pllm_buf_append(out, s + from, ov[0] - from)) ||
            (st = pllm_buf_append(out, sp->b, sp->b_len)))
            goto done;
        from = start = ov[1];
    }
    st = pllm_buf_append(out, s + from, n - from);
done:
    pcre2_match_data_free(md);
    return st;
}

static pllm_status strip(const tok_norm_step *sp, const char *s, size_t n, pllm_buf *out)
{
    size_t a = 0, b = n;
    if (sp->left)
        while (a < b) {
            uint32_t cp;
            size_t l = tok_utf8_decode((const uint8_t *)s + a, &cp);
            if (!tok_is_space(cp)) break;
            a += l;
        }
    if (sp->right)
        while (b > a) {
            size_t k = b - 1;
            while (k > a && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
            uint32_t cp;
            tok_utf8_decode((const uint8_t *)s + k, &cp);
            if (!tok_is_space(cp)) break;
            b = k;
        }
    out->n = 0;
    PLLM_TRY(pllm_buf_append(out, "", 0));
    return pllm_buf_append(out, s + a, b - a);
}

static pllm_status apply_step(const tok_norm_step *sp, const char *s, size_t n, pllm_buf *out)
{
    switch (sp->kind) {
    case TOK_NORM_PREPEND:
        out->n = 0;
        PLLM_TRY(pllm_buf_append(out, "", 0));
        if (n) PLLM_TRY(pllm_buf_append(out, sp->a, sp->a_len));
        return pllm_buf_append(out, s, n);
    case TOK_NORM_REPLACE:
        return replace_all(sp, s, n, out);
    case TOK_NORM_REPLACE_RE:
        return replace_re(sp, s, n, out);
    case TOK_NORM_NFC:
    case TOK_NORM_NFD:
    case TOK_NORM_NFKC:
    case TOK_NORM_NFKD:
        if (all_ascii(s, n)) break;
        return icu_apply((int)(sp->kind - TOK_NORM_NFC), s, n, out);
    case TOK_NORM_LOWERCASE:
        if (!all_ascii(s, n)) return lowercase_chars(s, n, out);
        out->n = 0;
        PLLM_TRY(pllm_buf_append(out, s, n));
        for (size_t i = 0; i < n; i++)
            if (out->s[i] >= 'A' && out->s[i] <= 'Z') out->s[i] = (char)(out->s[i] + 32);
        return PLLM_OK;
    case TOK_NORM_STRIP:
        return strip(sp, s, n, out);
    }
    out->n = 0;
    PLLM_TRY(pllm_buf_append(out, "", 0));
    return pllm_buf_append(out, s, n);
}

pllm_status tok_norm_apply(const tok_norm *nm, const char *s, size_t n, pllm_buf *out,
                           pllm_buf *tmp)
{
    if (nm->n == 0) {
        out->n = 0;
        PLLM_TRY(pllm_buf_append(out, "", 0));
        return pllm_buf_append(out, s, n);
    }
    /* steps alternate between out and tmp; the last one writes out */
    pllm_buf *dst = (nm->n % 2) ? out : tmp, *other = (nm->n % 2) ? tmp : out;
    const char *cur = s;
    size_t cur_n = n;
    for (int i = 0; i < nm->n; i++) {
        PLLM_TRY(apply_step(&nm->step[i], cur, cur_n, dst));
        cur = dst->s;
        cur_n = dst->n;
        pllm_buf *x = dst;
        dst = other;
        other = x;
    }
    return PLLM_OK;
}
