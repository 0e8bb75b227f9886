/*
 * sampler_tool: runs pllm_sample on JSON cases for tests/sampler_ref.py.
 *
 * stdin: one JSON object per line, one of
 *   {"logits": [x | "nan" | "inf" | "-inf", ...], "params": {...}, "prompt": [...],
 *    "output": [...], "banned": [...]}
 *       params: temperature, top_k, top_p, min_p, repetition_penalty, presence_penalty,
 *       frequency_penalty, logprobs (numbers), seed (a decimal string: full uint64 range).
 *       The RNG step is len(output), as in pllm_sample.
 *       -> {"token": t, "logprob": x, "top_ids": [...], "top_logprobs": [...]}
 *   the same with "repeat": N: samples steps len(output) .. len(output)+N-1, padding the
 *       history with prompt[0] (or 0 without a prompt) so that only the step changes; needs
 *       presence_penalty == frequency_penalty == 0.
 *       -> {"tokens": [...]}
 *   {"rng": [["seed", step], ...]} -> {"u": [...]} (pllm_rng_uniform, printed with %.17g)
 * stdout: one JSON object per input line. Exit 1 with a message on malformed input.
 */
#include "model/sampling.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(size_t line, const char *what)
{
    fprintf(stderr, "sampler_tool: line %zu: %s\n", line, what);
    return 1;
}

static bool parse_u64(json_t *v, uint64_t *out)
{
    if (json_is_integer(v) && json_integer_value(v) >= 0) {
        *out = (uint64_t)json_integer_value(v);
        return true;
    }
    if (!json_is_string(v)) return false;
    const char *s = json_string_value(v);
    char *end;
    errno = 0;
    unsigned long long x = strtoull(s, &end, 10);
    if (errno || end == s || *end) return false;
    *out = (uint64_t)x;
    return true;
}

/* An int32 array from a JSON array (missing: empty). Returns false on a bad element. */
static bool parse_ids(json_t *arr, int32_t **ids, int32_t *n)
{
    *ids = NULL;
    *n = 0;
    if (!arr) return true;
    if (!json_is_array(arr)) return false;
    size_t len = json_array_size(arr);
    *ids = malloc(sizeof(int32_t) * (len + 1));
    if (!*ids) return false;
    for (size_t i = 0; i < len; i++) {
        json_t *v = json_array_get(arr, i);
        if (!json_is_integer(v)) return false;
        (*ids)[i] = (int32_t)json_integer_value(v);
    }
    *n = (int32_t)len;
    return true;
}

static bool parse_float(json_t *v, float *out)
{
    if (json_is_number(v)) {
        *out = (float)json_number_value(v);
        return true;
    }
    if (!json_is_string(v)) return false;
    const char *s = json_string_value(v);
    if (!strcmp(s, "nan")) *out = NAN;
    else if (!strcmp(s, "inf")) *out = INFINITY;
    else if (!strcmp(s, "-inf")) *out = -INFINITY;
    else return false;
    return true;
}

static bool parse_params(json_t *o, pllm_sampling_params *p)
{
    pllm_sampling_defaults(p);
    if (!o) return true;
    if (!json_is_object(o)) return false;
    struct { const char *key; float *dst; } fl[] = {
        {"temperature", &p->temperature},
        {"top_p", &p->top_p},
        {"min_p", &p->min_p},
        {"repetition_penalty", &p->repetition_penalty},
        {"presence_penalty", &p->presence_penalty},
        {"frequency_penalty", &p->frequency_penalty},
    };
    for (size_t i = 0; i < PLLM_ARRAY_LEN(fl); i++) {
        json_t *v = json_object_get(o, fl[i].key);
        if (v && !parse_float(v, fl[i].dst)) return false;
    }
    json_t *v = json_object_get(o, "top_k");
    if (v) {
        if (!json_is_integer(v)) return false;
        p->top_k = (int32_t)json_integer_value(v);
    }
    v = json_object_get(o, "logprobs");
    if (v) {
        if (!json_is_integer(v)) return false;
        p->logprobs = (int32_t)json_integer_value(v);
    }
    v = json_object_get(o, "seed");
    if (v && !parse_u64(v, &p->seed)) return false;
    return true;
}

/* A logprob as JSON: a number, or "-inf". */
static void print_logprob(const char *sep, float x)
{
    if (isinf(x)) printf("%s\"-inf\"", sep);
    else printf("%s%.9g", sep, (double)x);
}

static int run_rng(json_t *arr, size_t line)
{
    if (!json_is_array(arr)) return fail(line, "rng must be an array of [seed, step]");
    printf("{\"u\": [");
    for (size_t i = 0; i < json_array_size(arr); i++) {
        json_t *pair = json_array_get(arr, i);
        uint64_t seed, step;
        if (!json_is_array(pair) || json_array_size(pair) != 2 || !parse_u64(json_array_get(pair, 0), &seed) ||
            !parse_u64(json_array_get(pair, 1), &step))
            return fail(line, "bad rng pair");
        printf("%s%.17g", i ? ", " : "", pllm_rng_uniform(seed, step));
    }
    printf("]}\n");
    return 0;
}

static int run_case(json_t *c, size_t line)
{
    int rc = 1;
    float *logits = NULL, *work = NULL, *top_lp = NULL;
    int32_t *prompt = NULL, *output = NULL, *banned = NULL, *top_ids = NULL, *hist = NULL;
    void *scratch = NULL;
    int32_t n_prompt, n_output, n_banned;
    pllm_sampling_params p;

    json_t *jl = json_object_get(c, "logits");
    if (!json_is_array(jl) || json_array_size(jl) == 0) {
        fail(line, "logits must be a non-empty array");
        goto done;
    }
    int32_t n = (int32_t)json_array_size(jl);
    logits = malloc(sizeof(float) * (size_t)n);
    work = malloc(sizeof(float) * (size_t)n);
    scratch = malloc(pllm_sample_scratch_bytes(n));
    if (!logits || !work || !scratch) goto done;
    for (int32_t i = 0; i < n; i++)
        if (!parse_float(json_array_get(jl, (size_t)i), &logits[i])) {
            fail(line, "bad logit");
            goto done;
        }
    if (!parse_params(json_object_get(c, "params"), &p)) {
        fail(line, "bad params");
        goto done;
    }
    if (pllm_sampling_validate(&p) != PLLM_OK) {
        fprintf(stderr, "sampler_tool: line %zu: %s\n", line, pllm_errmsg());
        goto done;
    }
    if (!parse_ids(json_object_get(c, "prompt"), &prompt, &n_prompt) ||
        !parse_ids(json_object_get(c, "output"), &output, &n_output) ||
        !parse_ids(json_object_get(c, "banned"), &banned, &n_banned)) {
        fail(line, "bad id array");
        goto done;
    }
    top_ids = malloc(sizeof(int32_t) * 21);
    top_lp = malloc(sizeof(float) * 21);
    if (!top_ids || !top_lp) goto done;
    pllm_sample_result res = {.top_ids = top_ids, .top_logprobs = top_lp};
    pllm_sample_ctx ctx = {prompt, n_prompt, output, n_output, banned, n_banned, 0};

    json_t *jr = json_object_get(c, "repeat");
    if (jr) {
        if (!json_is_integer(jr) || json_integer_value(jr) < 1) {
            fail(line, "repeat must be a positive integer");
            goto done;
        }
        if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
            fail(line, "repeat needs presence_penalty == frequency_penalty == 0");
            goto done;
        }
        int32_t reps = (int32_t)json_integer_value(jr);
        hist = malloc(sizeof(int32_t) * ((size_t)n_output + (size_t)reps));
        if (!hist) goto done;
        if (n_output) memcpy(hist, output, sizeof(int32_t) * (size_t)n_output);
        for (int32_t i = n_output; i < n_output + reps; i++) hist[i] = n_prompt ? prompt[0] : 0;
        ctx.output = hist;
        printf("{\"tokens\": [");
        for (int32_t r = 0; r < reps; r++) {
            memcpy(work, logits, sizeof(float) * (size_t)n);
            ctx.n_output = n_output + r;
            pllm_sample(&res, work, n, &p, &ctx, scratch);
            printf("%s%d", r ? "," : "", res.token);
        }
        printf("]}\n");
        rc = 0;
        goto done;
    }

    memcpy(work, logits, sizeof(float) * (size_t)n);
    pllm_sample(&res, work, n, &p, &ctx, scratch);
    printf("{\"token\": %d, \"logprob\": ", res.token);
    print_logprob("", res.logprob);
    printf(", \"top_ids\": [");
    for (int32_t i = 0; i < res.n_top; i++) printf("%s%d", i ? ", " : "", top_ids[i]);
    printf("], \"top_logprobs\": [");
    for (int32_t i = 0; i < res.n_top; i++) print_logprob(i ? ", " : "", top_lp[i]);
    printf("]}\n");
    rc = 0;
done:
    free(logits);
    free(work);
    free(scratch);
    free(prompt);
    free(output);
    free(banned);
    free(top_ids);
    free(top_lp);
    free(hist);
    return rc;
}

int main(void)
{
    char *buf = NULL;
    size_t cap = 0, line = 0;
    ssize_t len;
    int rc = 0;
    while (rc == 0 && (len = getline(&buf, &cap, stdin)) >= 0) {
        line++;
        if (len <= 1) continue;
        json_error_t err;
        json_t *c = json_loads(buf, 0, &err);
        if (!c || !json_is_object(c)) {
            rc = fail(line, c ? "not an object" : err.text);
        } else if (json_object_get(c, "rng")) {
            rc = run_rng(json_object_get(c, "rng"), line);
        } else {
            rc = run_case(c, line);
        }
        json_decref(c);
        fflush(stdout);
    }
    free(buf);
    return rc;
}
