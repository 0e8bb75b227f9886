/*
 * tok_bench: pllm tokenizer encode speed on a JSONL corpus, single-threaded.
 *
 *     tok_bench MODEL.gguf CORPUS.jsonl [REPS]
 *
 * CORPUS has one {"text": "..."} per line. Each repetition encodes every text once
 * (add_special = false, parse_special = true, as the parity test); the best repetition is
 * reported as one JSON line on stdout:
 *     {"texts": N, "bytes": B, "tokens": T, "seconds": S, "mb_per_s": M, "tokens_per_s": K}
 * bench/tok_bench.py runs this next to Hugging Face tokenizers and prints the ratio.
 */
#include "engine/gguf.h"
#include "tokenizer/tokenizer.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODEL.gguf CORPUS.jsonl [REPS]\n", argv[0]);
        return 2;
    }
    int reps = argc > 3 ? atoi(argv[3]) : 5;
    if (reps < 1) reps = 1;
    pllm_gguf *g = NULL;
    pllm_tokenizer *t = NULL;
    if (pllm_gguf_open(&g, argv[1]) != PLLM_OK || pllm_tokenizer_from_gguf(&t, g) != PLLM_OK) {
        fprintf(stderr, "tok_bench: %s\n", pllm_errmsg());
        pllm_gguf_close(g);
        return 1;
    }
    pllm_gguf_close(g);

    FILE *f = fopen(argv[2], "r");
    if (!f) {
        perror(argv[2]);
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
        "\"tokens_per_s\": %.0f}\n",
        n, bytes, n_tokens, best, (double)bytes / best / 1e6, (double)n_tokens / best);
    for (size_t i = 0; i < n; i++) free(texts[i]);
    free(texts);
    free(lens);
    pllm_tokens_free(&toks);
    pllm_tokenizer_free(t);
    return 0;
}
