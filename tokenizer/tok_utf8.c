/*
 * tok_utf8.c: UTF-8 classification and repair, and the GPT-2 byte alphabet.
 *
 * Well-formed sequences are those of the Unicode standard's table 3-7 (no overlongs, no
 * surrogates, nothing above U+10FFFF). Ill-formed input is repaired the way Python's
 * bytes.decode('utf-8', errors='replace') and Rust's String::from_utf8_lossy both do: each
 * maximal subpart of an ill-formed sequence (the longest prefix of a well-formed sequence
 * that the input starts, or else one byte) becomes one U+FFFD.
 */
#include "tokenizer/tokenizer_internal.h"

#include <string.h>

static const char k_replacement[3] = {(char)0xEF, (char)0xBF, (char)0xBD};

size_t tok_utf8_char(const uint8_t *s, size_t n, size_t *bad, bool *truncated)
{
    *truncated = false;
    uint8_t c = s[0];
    if (c < 0x80) return 1;
    size_t need;
    uint8_t lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (c >= 0xC2 && c <= 0xDF) {
        need = 1;
    } else if (c == 0xE0) {
        need = 2, lo = 0xA0;
    } else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) {
        need = 2;
    } else if (c == 0xED) {
        need = 2, hi = 0x9F;
    } else if (c == 0xF0) {
        need = 3, lo = 0x90;
    } else if (c >= 0xF1 && c <= 0xF3) {
        need = 3;
    } else if (c == 0xF4) {
        need = 3, hi = 0x8F;
    } else {
        *bad = 1; /* 80..C1, F5..FF never start a character */
        return 0;
    }
    for (size_t i = 1; i <= need; i++) {
        if (i >= n) {
            *bad = i;
            *truncated = true;
            return 0;
        }
        if (s[i] < lo || s[i] > hi) {
            *bad = i;
            return 0;
        }
        lo = 0x80, hi = 0xBF;
    }
    return need + 1;
}

size_t tok_utf8_valid_prefix(const uint8_t *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        /* ASCII runs 8 bytes at a time */
        while (i + 8 <= n) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (w & 0x8080808080808080ull) break;
            i += 8;
        }
        if (i >= n) break;
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        size_t bad;
        bool trunc;
        size_t len = tok_utf8_char(s + i, n - i, &bad, &trunc);
        if (!len) return i;
        i += len;
    }
    return n;
}

pllm_status tok_utf8_append_lossy(pllm_buf *out, const uint8_t *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        size_t v = tok_utf8_valid_prefix(s + i, n - i);
        if (v) PLLM_TRY(pllm_buf_append(out, s + i, v));
        i += v;
        if (i >= n) break;
        size_t bad = 0;
        bool trunc;
        (void)tok_utf8_char(s + i, n - i, &bad, &trunc);
        PLLM_TRY(pllm_buf_append(out, k_replacement, sizeof k_replacement));
        i += bad;
    }
    return PLLM_OK;
}

size_t tok_utf8_decode(const uint8_t *s, uint32_t *cp)
{
    uint8_t c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    if (c < 0xE0) {
        *cp = (uint32_t)(c & 0x1F) << 6 | (s[1] & 0x3F);
        return 2;
    }
    if (c < 0xF0) {
        *cp = (uint32_t)(c & 0x0F) << 12 | (uint32_t)(s[1] & 0x3F) << 6 | (s[2] & 0x3F);
        return 3;
    }
    *cp = (uint32_t)(c & 0x07) << 18 | (uint32_t)(s[1] & 0x3F) << 12 |
          (uint32_t)(s[2] & 0x3F) << 6 | (s[3] & 0x3F);
    return 4;
}

size_t tok_utf8_encode(uint32_t cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | cp >> 12);
        out[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | cp >> 18);
    out[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* GPT-2's bytes_to_unicode: the 188 "printable" bytes ('!'..'~', 0xA1..0xAC, 0xAE..0xFF)
 * stand for themselves; the other 68 (0x00..0x20, 0x7F..0xA0, 0xAD), in byte order, take
 * U+0100.. U+0143. */
static bool byte_is_printable(unsigned b)
{
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
}

uint32_t tok_byte_to_cp(uint8_t b)
{
    if (byte_is_printable(b)) return b;
    if (b <= 0x20) return 0x100u + b;
    if (b >= 0x7F && b <= 0xA0) return 0x100u + 33 + (b - 0x7Fu);
    return 0x100u + 67; /* 0xAD */
}

int tok_cp_to_byte(uint32_t cp)
{
    if (cp < 0x100) return byte_is_printable(cp) ? (int)cp : -1;
    if (cp > 0x143) return -1;
    uint32_t k = cp - 0x100;
    if (k <= 32) return (int)k;
    if (k <= 66) return (int)(0x7F + (k - 33));
    return 0xAD;
}
