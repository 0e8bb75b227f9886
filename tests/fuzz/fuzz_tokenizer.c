/*
 * fuzz_tokenizer.c: the default model's tokenizer (SmolLM2, byte-level BPE, built once per
 * process from the GGUF file under $PLLM_HOME) on arbitrary bytes.
 *
 * The first input byte picks the mode and options, the rest is the payload:
 *   mode 0 (encode): encode the payload with add_special / parse_special from the flag bits.
 *     Every id is in the vocabulary; without special tokens (neither option) and for valid
 *     UTF-8 whose every byte has a byte token, decode(encode(x)) == x byte for byte (byte-level
 *     BPE loses nothing; SmolLM2's vocabulary lacks the bytes 0x04 0x06 0x13 0x14 0x16 0x1d,
 *     which Hugging Face drops as well); for any input, the decoded text is valid UTF-8.
 *   mode 1 (decode): the payload as little-endian u16/u32 ids (some out of range on purpose):
 *     decode() and the incremental detokenizer (push one at a time, then finish) must agree
 *     exactly when every id is valid, and both produce valid UTF-8; an invalid id is an error
 *     with a message, never a read out of bounds.
 */
#include "tests/fuzz/fuzz_common.h"

#include "model/gguf.h"
#include "tokenizer/tokenizer.h"

#include <string.h>

static pllm_gguf *g_gguf;
static pllm_tokenizer *g_tok;
static bool g_byte_ok[256]; /* the byte has a token (its GPT-2 byte-level character is in the vocabulary) */

/* GPT-2's byte -> unicode code point map (printable bytes map to themselves). */
static uint32_t byte_char(int b)
{
    if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)) return (uint32_t)b;
    int n = 0;
    for (int x = 0; x < b; x++)
        if (!((x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF))) n++;
    return 256u + (uint32_t)n;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    char *path = fuzz_default_model_path();
    if (pllm_gguf_open(&g_gguf, path) != PLLM_OK || pllm_tokenizer_from_gguf(&g_tok, g_gguf) != PLLM_OK) {
        fprintf(stderr, "fuzz_tokenizer: cannot load the default model's tokenizer from %s: %s\n"
                        "run scripts/setup.sh (or set PLLM_HOME)\n", path, pllm_errmsg());
        abort();
    }
    free(path);
    for (int b = 0; b < 256; b++) {
        uint32_t cp = byte_char(b);
        char u[4] = {0};
        if (cp < 0x80) u[0] = (char)cp;
        else u[0] = (char)(0xC0 | cp >> 6), u[1] = (char)(0x80 | (cp & 0x3F));
        g_byte_ok[b] = pllm_tokenizer_find(g_tok, u) >= 0;
    }
    return 0;
}

/* Strict UTF-8 validity (no surrogates, no overlongs, at most U+10FFFF). */
static bool utf8_valid(const uint8_t *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        uint8_t c = s[i];
        size_t len;
        uint32_t cp;
        if (c < 0x80) { i++; continue; }
        if (c >= 0xC2 && c <= 0xDF) { len = 2; cp = c & 0x1F; }
        else if (c >= 0xE0 && c <= 0xEF) { len = 3; cp = c & 0x0F; }
        else if (c >= 0xF0 && c <= 0xF4) { len = 4; cp = c & 0x07; }
        else return false;
        if (i + len > n) return false;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return false;
            cp = cp << 6 | (s[i + k] & 0x3F);
        }
        if ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
            return false;
        i += len;
    }
    return true;
}

static void fuzz_encode(uint8_t flags, const uint8_t *p, size_t n)
{
    pllm_encode_opts eo = {.add_special = flags & 2, .parse_special = flags & 4};
    pllm_tokens ids = {0};
    pllm_status st = pllm_tokenizer_encode(g_tok, (const char *)p, n, &eo, &ids);
    FUZZ_CHECK(st == PLLM_OK, "encode failed: %s", pllm_errmsg());
    int32_t nv = pllm_tokenizer_n_vocab(g_tok);
    for (size_t i = 0; i < ids.n; i++) FUZZ_CHECK(ids.ids[i] >= 0 && ids.ids[i] < nv, "id %d", ids.ids[i]);
    bool any_ok = false, representable = true;
    for (size_t i = 0; i < n; i++) {
        any_ok |= g_byte_ok[p[i]];
        representable &= g_byte_ok[p[i]];
    }
    FUZZ_CHECK(!any_ok || ids.n > 0, "text with encodable bytes encoded to nothing");
    pllm_buf out = {0};
    st = pllm_tokenizer_decode(g_tok, ids.ids, ids.n, false, &out);
    FUZZ_CHECK(st == PLLM_OK, "decode of encode failed: %s", pllm_errmsg());
    FUZZ_CHECK(utf8_valid((const uint8_t *)out.s, out.n), "decoded text is not valid UTF-8");
    if (!eo.add_special && !eo.parse_special && utf8_valid(p, n) && representable)
        FUZZ_CHECK(out.n == n && (n == 0 || memcmp(out.s, p, n) == 0), "decode(encode(x)) != x (%zu vs %zu bytes)", out.n,
                   n);
    pllm_buf_free(&out);
    pllm_tokens_free(&ids);
}

static void fuzz_decode(uint8_t flags, const uint8_t *p, size_t n)
{
    int32_t nv = pllm_tokenizer_n_vocab(g_tok);
    bool wide = flags & 2, skip = flags & 4;
    size_t w = wide ? 4 : 2, m = n / w;
    int32_t *ids = malloc((m ? m : 1) * sizeof *ids);
    if (!ids) abort();
    bool all_valid = true;
    for (size_t i = 0; i < m; i++) {
        uint32_t v = 0;
        memcpy(&v, p + i * w, w);
        /* u16 ids land in [0, 65536): mostly valid for a 49152 vocabulary; u32 ids are mostly
         * folded into [-8, n_vocab + 8) so both in-range and just-out-of-range ids occur */
        ids[i] = wide ? (int32_t)(v % (uint32_t)(nv + 16)) - 8 : (int32_t)v;
        if (wide && (v >> 31)) ids[i] = (int32_t)v;
        if (ids[i] < 0 || ids[i] >= nv) all_valid = false;
    }
    pllm_buf batch = {0}, inc = {0};
    pllm_status st = pllm_tokenizer_decode(g_tok, ids, m, skip, &batch);
    FUZZ_ERR_HAS_MSG(st);
    FUZZ_CHECK(all_valid ? st == PLLM_OK : st != PLLM_OK, "decode status %d with all_valid=%d", (int)st, all_valid);
    if (st == PLLM_OK) FUZZ_CHECK(utf8_valid((const uint8_t *)batch.s, batch.n), "decode gave invalid UTF-8");
    pllm_detok d;
    pllm_detok_init(&d, g_tok, skip);
    pllm_status ist = PLLM_OK;
    for (size_t i = 0; i < m && ist == PLLM_OK; i++) ist = pllm_detok_push(&d, ids[i], &inc);
    FUZZ_ERR_HAS_MSG(ist);
    if (ist == PLLM_OK) ist = pllm_detok_finish(&d, &inc);
    FUZZ_CHECK(all_valid ? ist == PLLM_OK : true, "detok failed on valid ids: %s", pllm_errmsg());
    if (all_valid) {
        FUZZ_CHECK(utf8_valid((const uint8_t *)inc.s, inc.n), "detok gave invalid UTF-8");
        FUZZ_CHECK(inc.n == batch.n && (inc.n == 0 || memcmp(inc.s, batch.s, inc.n) == 0),
                   "incremental detokenizer (%zu bytes) != decode (%zu bytes)", inc.n, batch.n);
    }
    pllm_buf_free(&batch);
    pllm_buf_free(&inc);
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0) return 0;
    uint8_t flags = data[0];
    if (flags & 1) fuzz_decode(flags, data + 1, size - 1);
    else fuzz_encode(flags, data + 1, size - 1);
    return 0;
}
