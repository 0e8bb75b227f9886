/*
 * jinja_unicode.h: the UTF-8 and Unicode helpers the Jinja interpreter needs to behave like
 * Python's str: decoding, code point counting, whitespace (str.isspace), full case mappings
 * (str.lower/upper/title/capitalize, with the final-sigma rule), the islower/isupper tests and
 * printability for repr(). Tables come from jinja_unicode_data.c, generated from CPython by
 * jinja_unicode_gen.py.
 *
 * All functions are pure; strings are byte ranges that the caller has validated as UTF-8.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct pllm_jinja_casemap {
    uint32_t cp;
    uint32_t to[3]; /* 1..3 code points; unused slots are 0 */
} pllm_jinja_casemap;

typedef struct pllm_jinja_range {
    uint32_t lo, hi; /* inclusive */
} pllm_jinja_range;

/* Generated tables (jinja_unicode_data.c), each sorted by code point. */
extern const pllm_jinja_casemap pllm_jinja_lower_map[], pllm_jinja_upper_map[],
    pllm_jinja_title_map[];
extern const size_t pllm_jinja_lower_map_n, pllm_jinja_upper_map_n, pllm_jinja_title_map_n;
extern const pllm_jinja_range pllm_jinja_lower_ranges[], pllm_jinja_upper_ranges[],
    pllm_jinja_title_ranges[], pllm_jinja_cased_ranges[], pllm_jinja_ignorable_ranges[],
    pllm_jinja_nonprint_ranges[], pllm_jinja_space_ranges[], pllm_jinja_decimal_ranges[];
extern const size_t pllm_jinja_lower_ranges_n, pllm_jinja_upper_ranges_n, pllm_jinja_title_ranges_n,
    pllm_jinja_cased_ranges_n, pllm_jinja_ignorable_ranges_n, pllm_jinja_nonprint_ranges_n,
    pllm_jinja_space_ranges_n, pllm_jinja_decimal_ranges_n;

/* Length in bytes of the valid UTF-8 sequence at s[0..n) (1..4), or 0 when it is invalid
 * (overlong, surrogate, out of range, truncated). Python's strict UTF-8 rules. */
size_t pllm_jinja_utf8_seq(const char *s, size_t n);
/* Decode the sequence at s (already validated); *len receives its byte length. */
uint32_t pllm_jinja_utf8_decode(const char *s, size_t *len);
/* Encode cp into out[4]; returns the byte count. */
size_t pllm_jinja_utf8_encode(uint32_t cp, char *out);
/* Validate s[0..n); on failure *bad_at receives the offset of the first bad byte. */
bool pllm_jinja_utf8_valid(const char *s, size_t n, size_t *bad_at);
/* Number of code points in a valid UTF-8 string. */
size_t pllm_jinja_utf8_count(const char *s, size_t n);

bool pllm_jinja_is_space(uint32_t cp);     /* str.isspace() */
bool pllm_jinja_is_printable(uint32_t cp); /* str.isprintable() */
bool pllm_jinja_is_lower(uint32_t cp);     /* single-char islower() */
bool pllm_jinja_is_upper(uint32_t cp);     /* single-char isupper() */
bool pllm_jinja_is_title(uint32_t cp);     /* titlecase letter that is not uppercase */
bool pllm_jinja_is_cased(uint32_t cp);
bool pllm_jinja_is_case_ignorable(uint32_t cp);
/* unicodedata.decimal(cp): 0..9, or -1 when cp is not a decimal digit. */
int pllm_jinja_decimal(uint32_t cp);

/* Full case mappings of one code point into out[3]; return the count (1..3). */
int pllm_jinja_to_lower(uint32_t cp, uint32_t out[3]);
int pllm_jinja_to_upper(uint32_t cp, uint32_t out[3]);
int pllm_jinja_to_title(uint32_t cp, uint32_t out[3]);
