#include "tokenizer/jinja_unicode.h"

size_t pllm_jinja_utf8_seq(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    if (n == 0) return 0;
    unsigned char c = u[0];
    if (c < 0x80) return 1;
    size_t len;
    uint32_t cp, min;
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2, cp = c & 0x1F, min = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3, cp = c & 0x0F, min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4, cp = c & 0x07, min = 0x10000;
    } else {
        return 0;
    }
    if (n < len) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((u[i] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (u[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return len;
}

uint32_t pllm_jinja_utf8_decode(const char *s, size_t *len)
{
    const unsigned char *u = (const unsigned char *)s;
    unsigned char c = u[0];
    if (c < 0x80) {
        *len = 1;
        return c;
    }
    if (c < 0xE0) {
        *len = 2;
        return ((uint32_t)(c & 0x1F) << 6) | (u[1] & 0x3F);
    }
    if (c < 0xF0) {
        *len = 3;
        return ((uint32_t)(c & 0x0F) << 12) | ((uint32_t)(u[1] & 0x3F) << 6) | (u[2] & 0x3F);
    }
    *len = 4;
    return ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(u[1] & 0x3F) << 12) |
           ((uint32_t)(u[2] & 0x3F) << 6) | (u[3] & 0x3F);
}

size_t pllm_jinja_utf8_encode(uint32_t cp, char *out)
{
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

bool pllm_jinja_utf8_valid(const char *s, size_t n, size_t *bad_at)
{
    size_t i = 0;
    while (i < n) {
        if ((unsigned char)s[i] < 0x80) {
            i++;
            continue;
        }
        size_t l = pllm_jinja_utf8_seq(s + i, n - i);
        if (l == 0) {
            if (bad_at) *bad_at = i;
            return false;
        }
        i += l;
    }
    return true;
}

size_t pllm_jinja_utf8_count(const char *s, size_t n)
{
    size_t count = 0;
    for (size_t i = 0; i < n; i++)
        if (((unsigned char)s[i] & 0xC0) != 0x80) count++;
    return count;
}

static bool in_ranges(const pllm_jinja_range *r, size_t n, uint32_t cp)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cp < r[mid].lo)
            hi = mid;
        else if (cp > r[mid].hi)
            lo = mid + 1;
        else
            return true;
    }
    return false;
}

bool pllm_jinja_is_space(uint32_t cp)
{
    if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x1F);
    return in_ranges(pllm_jinja_space_ranges, pllm_jinja_space_ranges_n, cp);
}

bool pllm_jinja_is_printable(uint32_t cp)
{
    if (cp < 0x80) return cp >= 0x20 && cp < 0x7F;
    return !in_ranges(pllm_jinja_nonprint_ranges, pllm_jinja_nonprint_ranges_n, cp);
}

bool pllm_jinja_is_lower(uint32_t cp)
{
    return in_ranges(pllm_jinja_lower_ranges, pllm_jinja_lower_ranges_n, cp);
}
bool pllm_jinja_is_upper(uint32_t cp)
{
    return in_ranges(pllm_jinja_upper_ranges, pllm_jinja_upper_ranges_n, cp);
}
bool pllm_jinja_is_title(uint32_t cp)
{
    return in_ranges(pllm_jinja_title_ranges, pllm_jinja_title_ranges_n, cp);
}
bool pllm_jinja_is_cased(uint32_t cp)
{
    return in_ranges(pllm_jinja_cased_ranges, pllm_jinja_cased_ranges_n, cp);
}
bool pllm_jinja_is_case_ignorable(uint32_t cp)
{
    return in_ranges(pllm_jinja_ignorable_ranges, pllm_jinja_ignorable_ranges_n, cp);
}

int pllm_jinja_decimal(uint32_t cp)
{
    if (cp < 0x80) return cp >= '0' && cp <= '9' ? (int)(cp - '0') : -1;
    const pllm_jinja_range *r = pllm_jinja_decimal_ranges;
    size_t lo = 0, hi = pllm_jinja_decimal_ranges_n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cp < r[mid].lo)
            hi = mid;
        else if (cp > r[mid].hi)
            lo = mid + 1;
        else
            return (int)(cp - r[mid].lo);
    }
    return -1;
}

static const pllm_jinja_casemap *find_map(const pllm_jinja_casemap *m, size_t n, uint32_t cp)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cp < m[mid].cp)
            hi = mid;
        else if (cp > m[mid].cp)
            lo = mid + 1;
        else
            return &m[mid];
    }
    return NULL;
}

static int apply_map(const pllm_jinja_casemap *e, uint32_t cp, uint32_t out[3])
{
    if (!e) {
        out[0] = cp;
        return 1;
    }
    int n = 0;
    for (int i = 0; i < 3 && e->to[i]; i++) out[n++] = e->to[i];
    return n;
}

int pllm_jinja_to_lower(uint32_t cp, uint32_t out[3])
{
    if (cp < 0x80) {
        out[0] = (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
        return 1;
    }
    return apply_map(find_map(pllm_jinja_lower_map, pllm_jinja_lower_map_n, cp), cp, out);
}

int pllm_jinja_to_upper(uint32_t cp, uint32_t out[3])
{
    if (cp < 0x80) {
        out[0] = (cp >= 'a' && cp <= 'z') ? cp - 32 : cp;
        return 1;
    }
    return apply_map(find_map(pllm_jinja_upper_map, pllm_jinja_upper_map_n, cp), cp, out);
}

int pllm_jinja_to_title(uint32_t cp, uint32_t out[3])
{
    const pllm_jinja_casemap *e = find_map(pllm_jinja_title_map, pllm_jinja_title_map_n, cp);
    if (e) return apply_map(e, cp, out);
    return pllm_jinja_to_upper(cp, out);
}
