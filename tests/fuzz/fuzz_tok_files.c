/*
 * fuzz_tok_files.c: the tokenizer builders that read files of a Hugging Face model directory:
 * tokenizer.json (+ tokenizer_config.json), vocab.json + merges.txt, and SentencePiece .model
 * files (a protobuf reader). The first input byte picks the builder; the rest is the file (or,
 * for the pairs, the two files separated by "\n#pllm-file#\n").
 *
 * What a builder accepts must work: a fixed text (ASCII, multi-byte, special-looking, invalid
 * UTF-8) encodes to ids inside the vocabulary, and decode and the incremental detokenizer
 * agree on those ids.
 */
#include "tests/fuzz/fuzz_common.h"

#include "tokenizer/tokenizer.h"

#include <string.h>

static const char SEP[] = "\n#pllm-file#\n";

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_scratch_dir();
    return 0;
}

static char *path_of(const char *name)
{
    pllm_buf b = {0};
    pllm_buf_appendf(&b, "%s/%s", fuzz_scratch_dir(), name);
    return b.s;
}

/* Write the one or two files of the input; returns how many were written. */
static int write_parts(const uint8_t *p, size_t n, const char *first, const char *second)
{
    const char *dir = fuzz_scratch_dir();
    const uint8_t *q = second ? memmem(p, n, SEP, sizeof SEP - 1) : NULL;
    fuzz_write_file(dir, first, p, q ? (size_t)(q - p) : n);
    if (!second) return 1;
    if (q) {
        const uint8_t *r = q + sizeof SEP - 1;
        fuzz_write_file(dir, second, r, (size_t)(p + n - r));
        return 2;
    }
    fuzz_remove_file(dir, second);
    return 1;
}

static void exercise(const pllm_tokenizer *t)
{
    static const char text[] = "Hello world <s> </s> <|endoftext|> 12345 caf\xc3\xa9 \xe4\xb8\xad \xf0\x9f\x98\x80 \xff\xfe\n\t  x";
    int32_t nv = pllm_tokenizer_n_vocab(t);
    FUZZ_CHECK(nv > 0, "n_vocab %d", nv);
    for (int special = 0; special < 2; special++) {
        pllm_tokens ids = {0};
        pllm_encode_opts eo = {.add_special = special, .parse_special = special};
        pllm_status st = pllm_tokenizer_encode(t, text, sizeof text - 1, &eo, &ids);
        FUZZ_CHECK(st == PLLM_OK, "encode failed: %s", pllm_errmsg());
        for (size_t i = 0; i < ids.n; i++) FUZZ_CHECK(ids.ids[i] >= 0 && ids.ids[i] < nv, "id %d of %d", ids.ids[i], nv);
        pllm_buf a = {0}, b = {0};
        FUZZ_CHECK(pllm_tokenizer_decode(t, ids.ids, ids.n, special, &a) == PLLM_OK, "decode: %s", pllm_errmsg());
        pllm_detok d;
        pllm_detok_init(&d, t, special);
        for (size_t i = 0; i < ids.n; i++) FUZZ_CHECK(pllm_detok_push(&d, ids.ids[i], &b) == PLLM_OK, "detok push");
        FUZZ_CHECK(pllm_detok_finish(&d, &b) == PLLM_OK, "detok finish");
        FUZZ_CHECK(a.n == b.n && (a.n == 0 || memcmp(a.s, b.s, a.n) == 0), "decode (%zu bytes) != detok (%zu bytes)", a.n, b.n);
        pllm_buf_free(&a);
        pllm_buf_free(&b);
        pllm_tokens_free(&ids);
    }
    int32_t n_stop;
    const int32_t *stop = pllm_tokenizer_stop_ids(t, &n_stop);
    for (int32_t i = 0; i < n_stop; i++) FUZZ_CHECK(stop[i] >= 0 && stop[i] < nv, "stop id %d", stop[i]);
    FUZZ_CHECK(pllm_tokenizer_bos(t) < nv && pllm_tokenizer_eos(t) < nv, "bos/eos");
    (void)pllm_tokenizer_describe(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0) return 0;
    pllm_tokenizer *t = NULL;
    pllm_status st;
    const uint8_t *p = data + 1;
    size_t n = size - 1;
    switch (data[0] % 3) {
    case 0: {
        int k = write_parts(p, n, "tokenizer.json", "tokenizer_config.json");
        char *a = path_of("tokenizer.json"), *b = path_of("tokenizer_config.json");
        st = pllm_tokenizer_from_hf(&t, a, k == 2 ? b : NULL);
        free(a);
        free(b);
        break;
    }
    case 1: {
        write_parts(p, n, "vocab.json", "merges.txt");
        char *a = path_of("vocab.json"), *b = path_of("merges.txt");
        st = pllm_tokenizer_from_vocab_merges(&t, a, b);
        free(a);
        free(b);
        break;
    }
    default: {
        write_parts(p, n, "tokenizer.model", NULL);
        char *a = path_of("tokenizer.model");
        st = pllm_tokenizer_from_sentencepiece(&t, a);
        free(a);
        break;
    }
    }
    FUZZ_ERR_HAS_MSG(st);
    fuzz_note("build", st);
    if (st == PLLM_OK) {
        exercise(t);
        pllm_tokenizer_free(t);
    }
    return 0;
}
