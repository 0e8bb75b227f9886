/*
 * tok_tool: encode/decode JSONL through pllm's tokenizer, for the Python parity tests.
 *
 *     tok_tool MODEL.gguf < in.jsonl > out.jsonl
 *     tok_tool --hf tokenizer.json [tokenizer_config.json] < in.jsonl > out.jsonl
 *     tok_tool --vocab-merges vocab.json merges.txt < ...
 *     tok_tool --spm tokenizer.model < ...
 *     tok_tool --dir MODEL_DIR < ...
 *
 * Input, one JSON object per line:
 *     {"text": "..."}            the text (a JSON string: valid UTF-8)
 *     {"bytes": [104, 255, ...]} raw bytes instead, for invalid UTF-8 (values 0..255)
 *     optional "add_special" (default false) and "parse_special" (default true)
 *     optional "ids": [...]      decode these ids instead of the encoded ones
 *     {"info": true}             the tokenizer's facts instead: {"n_vocab", "bos", "eos",
 *                                "stop_ids", "special_ids" (is_special), "describe"}
 *     {"pretok": "..."}          the text normalized and pre-tokenized (no added-token
 *                                matching): {"pieces": [...]} (internal API)
 * Output, one line per input line, same order:
 *     {"ids": [...],             the encoding (absent when "ids" was given)
 *      "decoded": "...",         pllm_tokenizer_decode(ids, skip_special = false)
 *      "decoded_skip": "...",    pllm_tokenizer_decode(ids, skip_special = true)
 *      "detok": "...",           the concatenated pllm_detok_push outputs + finish
 *      "detok_skip": "...",      the same with skip_special
 *      "detok_max_pending": k}   the largest number of bytes the detokenizer held back
 * or {"error": "..."} for a line that failed (the exit status is then 1).
 */
#include "model/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_internal.h" /* pretok: the normalizer and pre-tokenizer alone */

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static json_t *decode_str(const pllm_tokenizer *t, const int32_t *ids, size_t n, bool skip)
{
    pllm_buf b = {0};
    if (pllm_tokenizer_decode(t, ids, n, skip, &b) != PLLM_OK) return NULL;
    json_t *s = json_stringn(b.s ? b.s : "", b.n);
    pllm_buf_free(&b);
    return s;
}

static json_t *detok_str(const pllm_tokenizer *t, const int32_t *ids, size_t n, bool skip,
                         size_t *max_pending)
{
    pllm_buf b = {0};
    pllm_detok d;
    pllm_detok_init(&d, t, skip);
    for (size_t i = 0; i < n; i++) {
        if (pllm_detok_push(&d, ids[i], &b) != PLLM_OK) goto fail;
        if (d.n_pending > *max_pending) *max_pending = d.n_pending;
    }
    if (pllm_detok_finish(&d, &b) != PLLM_OK) goto fail;
    json_t *s = json_stringn(b.s ? b.s : "", b.n);
    pllm_buf_free(&b);
    return s;
fail:
    pllm_buf_free(&b);
    return NULL;
}

static json_t *info(const pllm_tokenizer *t)
{
    json_t *o = json_object(), *stop = json_array(), *special = json_array();
    int32_t n = 0;
    const int32_t *ids = pllm_tokenizer_stop_ids(t, &n);
    for (int32_t i = 0; i < n; i++) json_array_append_new(stop, json_integer(ids[i]));
    for (int32_t id = 0; id < pllm_tokenizer_n_vocab(t); id++)
        if (pllm_tokenizer_is_special(t, id)) json_array_append_new(special, json_integer(id));
    json_object_set_new(o, "n_vocab", json_integer(pllm_tokenizer_n_vocab(t)));
    json_object_set_new(o, "bos", json_integer(pllm_tokenizer_bos(t)));
    json_object_set_new(o, "eos", json_integer(pllm_tokenizer_eos(t)));
    json_object_set_new(o, "stop_ids", stop);
    json_object_set_new(o, "special_ids", special);
    json_object_set_new(o, "describe", json_string(pllm_tokenizer_describe(t)));
    return o;
}

static pllm_status add_piece(void *ctx, const char *s, size_t n)
{
    return json_array_append_new(ctx, json_stringn(s, n)) ? PLLM_ERR_NOMEM : PLLM_OK;
}

static json_t *pretok(const pllm_tokenizer *t, json_t *text)
{
    tok_ws ws = {0};
    pllm_buf norm = {0}, tmp = {0};
    json_t *pieces = json_array(), *res = NULL;
    const char *s = json_string_value(text);
    size_t n = json_string_length(text);
    if (tok_norm_apply(&t->norm, s, n, &norm, &tmp) == PLLM_OK &&
        (t->pre.n ? tok_pretok_split(&t->pre, &ws, norm.s, norm.n, true, add_piece, pieces)
                  : add_piece(pieces, norm.s, norm.n)) == PLLM_OK) {
        res = json_object();
        json_object_set_new(res, "pieces", pieces);
        pieces = NULL;
    }
    json_decref(pieces);
    tok_ws_free(&ws);
    pllm_buf_free(&norm);
    pllm_buf_free(&tmp);
    return res;
}

static json_t *process(const pllm_tokenizer *t, json_t *in, char *err, size_t errcap)
{
    if (json_is_true(json_object_get(in, "info"))) return info(t);
    if (json_is_string(json_object_get(in, "pretok"))) {
        json_t *r = pretok(t, json_object_get(in, "pretok"));
        if (!r) snprintf(err, errcap, "%s", pllm_errmsg());
        return r;
    }
    pllm_buf text = {0};
    pllm_tokens ids = {0};
    json_t *res = NULL;
    json_t *jt = json_object_get(in, "text"), *jb = json_object_get(in, "bytes"),
           *jids = json_object_get(in, "ids");
    pllm_encode_opts o = {.add_special = json_is_true(json_object_get(in, "add_special")),
                          .parse_special = !json_is_false(json_object_get(in, "parse_special"))};
    if (jids) {
        if (!json_is_array(jids)) goto bad;
        for (size_t i = 0; i < json_array_size(jids); i++) {
            json_t *v = json_array_get(jids, i);
            if (!json_is_integer(v) || pllm_tokens_push(&ids, (int32_t)json_integer_value(v)))
                goto bad;
        }
    } else {
        if (json_is_string(jt)) {
            if (pllm_buf_append(&text, json_string_value(jt), json_string_length(jt))) goto fail;
        } else if (json_is_array(jb)) {
            for (size_t i = 0; i < json_array_size(jb); i++) {
                json_t *v = json_array_get(jb, i);
                if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 255)
                    goto bad;
                char c = (char)json_integer_value(v);
                if (pllm_buf_append(&text, &c, 1)) goto fail;
            }
        } else {
            goto bad;
        }
        if (pllm_tokenizer_encode(t, text.s ? text.s : "", text.n, &o, &ids)) goto fail;
    }
    res = json_object();
    if (!jids) {
        json_t *a = json_array();
        for (size_t i = 0; i < ids.n; i++) json_array_append_new(a, json_integer(ids.ids[i]));
        json_object_set_new(res, "ids", a);
    }
    size_t maxp = 0;
    json_t *d0 = decode_str(t, ids.ids, ids.n, false), *d1 = decode_str(t, ids.ids, ids.n, true);
    json_t *s0 = detok_str(t, ids.ids, ids.n, false, &maxp),
           *s1 = detok_str(t, ids.ids, ids.n, true, &maxp);
    if (!d0 || !d1 || !s0 || !s1) {
        json_decref(d0), json_decref(d1), json_decref(s0), json_decref(s1);
        json_decref(res);
        res = NULL;
        goto fail;
    }
    json_object_set_new(res, "decoded", d0);
    json_object_set_new(res, "decoded_skip", d1);
    json_object_set_new(res, "detok", s0);
    json_object_set_new(res, "detok_skip", s1);
    json_object_set_new(res, "detok_max_pending", json_integer((json_int_t)maxp));
    goto done;
bad:
    snprintf(err, errcap,
             "bad input line (want \"text\" string, \"bytes\" array of 0..255, or \"ids\" array)");
    goto done;
fail:
    snprintf(err, errcap, "%s", pllm_errmsg());
done:
    pllm_buf_free(&text);
    pllm_tokens_free(&ids);
    return res;
}

/* Build the tokenizer the arguments name (see the usage above). */
static pllm_status open_tokenizer(int argc, char **argv, pllm_tokenizer **t)
{
    if (argc >= 3 && !strcmp(argv[1], "--hf"))
        return pllm_tokenizer_from_hf(t, argv[2], argc > 3 ? argv[3] : NULL);
    if (argc == 4 && !strcmp(argv[1], "--vocab-merges"))
        return pllm_tokenizer_from_vocab_merges(t, argv[2], argv[3]);
    if (argc == 3 && !strcmp(argv[1], "--spm"))
        return pllm_tokenizer_from_sentencepiece(t, argv[2]);
    if (argc == 3 && !strcmp(argv[1], "--dir")) return pllm_tokenizer_from_dir(t, argv[2]);
    if (argc != 2) return pllm_errorf(PLLM_ERR_INVALID, "bad arguments");
    pllm_gguf *g = NULL;
    pllm_status st = pllm_gguf_open(&g, argv[1]);
    if (!st) st = pllm_tokenizer_from_gguf(t, g);
    pllm_gguf_close(g); /* the tokenizer keeps its own copy */
    return st;
}

int main(int argc, char **argv)
{
    pllm_tokenizer *t = NULL;
    if (argc < 2) {
        fprintf(stderr,
                "usage: %s MODEL.gguf | --hf tokenizer.json [tokenizer_config.json] | "
                "--vocab-merges vocab.json merges.txt | --spm tokenizer.model | --dir DIR "
                "< in.jsonl > out.jsonl\n",
                argv[0]);
        return 2;
    }
    if (open_tokenizer(argc, argv, &t) != PLLM_OK) {
        fprintf(stderr, "tok_tool: %s\n", pllm_errmsg());
        return 1;
    }
    fprintf(stderr, "tok_tool: %s\n", pllm_tokenizer_describe(t));

    int rc = 0;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    long lineno = 0;
    while ((len = getline(&line, &cap, stdin)) >= 0) {
        lineno++;
        json_error_t jerr;
        json_t *in = json_loadb(line, (size_t)len, JSON_ALLOW_NUL, &jerr);
        char err[1024] = "";
        json_t *res = NULL;
        if (!in || !json_is_object(in))
            snprintf(err, sizeof err, "line %ld: not a JSON object: %s", lineno,
                     in ? "" : jerr.text);
        else
            res = process(t, in, err, sizeof err);
        if (!res) {
            res = json_object();
            json_object_set_new(res, "error", json_string(err));
            rc = 1;
        }
        char *out = json_dumps(res, JSON_COMPACT | JSON_ENSURE_ASCII);
        fputs(out, stdout);
        fputc('\n', stdout);
        free(out);
        json_decref(res);
        json_decref(in);
    }
    free(line);
    pllm_tokenizer_free(t);
    return rc;
}
