/*
 * tok_bench: pllm tokenizer encode speed on a JSONL corpus, single-threaded.
 *
 *     tok_bench CORPUS.jsonl REPS MODEL.gguf
 *     tok_bench CORPUS.jsonl REPS --hf tokenizer.json [tokenizer_config.json]
 *     tok_bench CORPUS.jsonl REPS --vocab-merges vocab.json merges.txt
 *     tok_bench CORPUS.jsonl REPS --spm tokenizer.model
 *
 * CORPUS has one {"text": "..."} per line. Each repetition encodes every text once
 * (add_special = false, parse_special = true, as the parity test); the best repetition is
 * reported as one JSON line on stdout:
 *     {"texts": N, "bytes": B, "tokens": T, "seconds": S, "mb_per_s": M, "tokens_per_s": K}
 * bench/tok_bench.py runs this next to Hugging Face tokenizers and prints the ratio.
 */
#include "model/gguf.h"
#include "tokenizer/tokenizer.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The tokenizer named by argv[0..argc) (see the usage above). */
static pllm_status open_tokenizer(int argc, char **argv, pllm_tokenizer **t)
{
    if (argc >= 2 && !strcmp(argv[0], "--hf"))
        return pllm_tokenizer_from_hf(t, argv[1], argc > 2 ? argv[2] : NULL);
    if (argc == 3 && !strcmp(argv[0], "--vocab-merges"))
        return pllm_tokenizer_from_vocab_merges(t, argv[1], argv[2]);
    if (argc == 2 && !strcmp(argv[0], "--spm"))
        return pllm_tokenizer_from_sentencepiece(t, argv[1]);
    if (argc != 1) return pllm_errorf(PLLM_ERR_INVALID, "bad tokenizer arguments");
    pllm_gguf *g = NULL;
    pllm_status st = pllm_gguf_open(&g, argv[0]);
    if (!st) st = pllm_tokenizer_from_gguf(t, g);
    pllm_gguf_close(g);
    return st;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr,
                "usage: %s CORPUS.jsonl REPS MODEL.gguf | --hf tokenizer.json [config] | "
                "--vocab-merges vocab.json merges.txt | --spm tokenizer.model\n",
                argv[0]);
        return 2;
    }
    int reps = atoi(argv[2]);
    if (reps < 1) reps = 1;
    pllm_tokenizer *t = NULL;
    double tb = pllm_now();
    if (open_tokenizer(argc - 3, argv + 3, &t) != PLLM_OK) {
        fprintf(stderr, "tok_bench: %s\n", pllm_errmsg());
        return 1;
    }
    double build_s = pllm_now() - tb;

    FILE *f = fopen(argv[1], "r");
    if (!f) {
        perror(argv[1]);
        pllm_tokenizer_free(t);
        return 1;
    }
    char **texts = NULL;
    size_t *lens = NULL, n = 0, cap = 0, bytes = 0;
    char *line = NULL;
    size_t lcap = 0;
    ssize_t len;
    while ((len = getline(&line, &lcap, f)) >= 0) {
        json_t *j = json_loadb(line, (size_t)len, JSON_ALLOW_NUL, NULL);
        json_t *s = j ? json_object_get(j, "text") : NULL;
        if (json_is_string(s)) {
            if (n == cap) {
                cap = cap ? 2 * cap : 1024;
                texts = realloc(texts, cap * sizeof *texts);
                lens = realloc(lens, cap * sizeof *lens);
                if (!texts || !lens) return 1;
            }
            lens[n] = json_string_length(s);
            texts[n] = malloc(lens[n] + 1);
            memcpy(texts[n], json_string_value(s), lens[n] + 1);
            bytes += lens[n++];
        }
        json_decref(j);
    }
    free(line);
    fclose(f);

    pllm_tokens toks = {0};
    pllm_encode_opts o = {.add_special = false, .parse_special = true};
    double best = 1e30;
    size_t n_tokens = 0;
    for (int r = 0; r < reps; r++) {
        size_t total = 0;
        double t0 = pllm_now();
        for (size_t i = 0; i < n; i++) {
            toks.n = 0;
            if (pllm_tokenizer_encode(t, texts[i], lens[i], &o, &toks) != PLLM_OK) {
                fprintf(stderr, "tok_bench: text %zu: %s\n", i, pllm_errmsg());
                return 1;
            }
            total += toks.n;
        }
        double dt = pllm_now() - t0;
        if (dt < best) best = dt;
        n_tokens = total;
    }
    printf(
        "{\"texts\": %zu, \"bytes\": %zu, \"tokens\": %zu, \"seconds\": %.6f, \"mb_per_s\": %.3f, "
        "\"tokens_per_s\": %.0f, \"build_seconds\": %.4f}\n",
        n, bytes, n_tokens, best, (double)bytes / best / 1e6, (double)n_tokens / best, build_s);
    for (size_t i = 0; i < n; i++) free(texts[i]);
    free(texts);
    free(lens);
    pllm_tokens_free(&toks);
    pllm_tokenizer_free(t);
    return 0;
}
