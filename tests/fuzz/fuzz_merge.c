/*
 * fuzz_merge.c: pllm merge (datasets/merge.h) and the shard sidecar (datasets/shard.h) on
 * arbitrary shard files: truncated, duplicated, damaged lines, bad or contradictory sidecars.
 *
 * Input: a flag byte, then up to four segments separated by NUL bytes: segments 0..2 are shard
 * output files a.jsonl, b.jsonl, c.jsonl (flag bit 2: c.jsonl is a.jsonl again, a file given
 * twice); segment 3 is a.jsonl's sidecar (a.jsonl.shard.json), flag bit 1: b.jsonl gets the same
 * sidecar text (a duplicated shard). Flag bit 0: --order input.
 * Properties: an error has a message; after a successful merge the output holds only whole
 * lines, each a JSON object with a key no other line has, without the input_index shard runs
 * add (when it sits where they put it), lines read = written + duplicates + damaged, and the
 * statistics count every written line once (completed + failed = written). The sidecar text
 * is also parsed directly: an error has a message, and an accepted one has 0 <= K < N.
 */
#include "tests/fuzz/fuzz_common.h"

#include "datasets/merge.h"
#include "datasets/shard.h"

#include <string.h>
#include <unistd.h>

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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    uint8_t flags = data[0];
    const uint8_t *seg[4] = {0};
    size_t len[4] = {0};
    int n_seg = 0;
    size_t start = 1;
    for (size_t i = 1; i <= size && n_seg < 4; i++)
        if (i == size || (data[i] == 0 && n_seg < 3)) {
            seg[n_seg] = data + start;
            len[n_seg] = i - start;
            n_seg++;
            start = i + 1;
        }
    const char *names[3] = {"a.jsonl", "b.jsonl", "c.jsonl"};
    char *paths[3], *sidecars[3];
    for (int i = 0; i < 3; i++) {
        paths[i] = path_of(names[i]);
        sidecars[i] = pllm_shard_sidecar_path(paths[i]);
        unlink(sidecars[i]);
        fuzz_write_file(fuzz_scratch_dir(), names[i], i < n_seg ? seg[i] : NULL,
                        i < n_seg ? len[i] : 0);
    }
    if (n_seg == 4) {
        pllm_shard_meta m;
        pllm_status st = pllm_shard_meta_parse(&m, (const char *)seg[3], len[3], "sidecar");
        FUZZ_ERR_HAS_MSG(st);
        if (st == PLLM_OK)
            FUZZ_CHECK(m.spec.k >= 0 && m.spec.k < m.spec.n, "shard %d/%d", m.spec.k, m.spec.n);
        pllm_shard_meta_free(&m);
        char *name = pllm_shard_sidecar_path("a.jsonl");
        fuzz_write_file(fuzz_scratch_dir(), name, seg[3], len[3]);
        free(name);
        if (flags & 2) {
            name = pllm_shard_sidecar_path("b.jsonl");
            fuzz_write_file(fuzz_scratch_dir(), name, seg[3], len[3]);
            free(name);
        }
    }
    const char *in[3] = {paths[0], paths[1], (flags & 4) ? paths[0] : paths[2]};
    char *out = path_of("merged.jsonl");
    pllm_merge_params p = {.paths = in, .n_paths = 3, .out_path = out, .order_input = flags & 1};
    pllm_merge_result res;
    pllm_status st = pllm_merge_run(&p, &res);
    FUZZ_ERR_HAS_MSG(st);
    if (st == PLLM_OK) {
        FUZZ_CHECK(res.n_lines == res.n_written + res.n_duplicates + res.n_bad,
                   "lines %lld != written %lld + duplicates %lld + damaged %lld",
                   (long long)res.n_lines, (long long)res.n_written, (long long)res.n_duplicates,
                   (long long)res.n_bad);
        int64_t done = json_integer_value(json_object_get(res.stats, "completed")) +
                       json_integer_value(json_object_get(res.stats, "failed"));
        FUZZ_CHECK(done == res.n_written, "completed + failed %lld != written %lld",
                   (long long)done, (long long)res.n_written);
        FILE *f = fopen(out, "rb");
        FUZZ_CHECK(f != NULL, "no output");
        pllm_buf all = {0};
        char chunk[4096];
        size_t got;
        while ((got = fread(chunk, 1, sizeof chunk, f)) > 0) pllm_buf_append(&all, chunk, got);
        fclose(f);
        FUZZ_CHECK(all.n == 0 || all.s[all.n - 1] == '\n', "output ends mid-line");
        json_t *keys = json_object();
        int64_t n_out = 0;
        for (size_t i = 0; i < all.n;) {
            const char *nl = memchr(all.s + i, '\n', all.n - i);
            size_t n = (size_t)(nl - (all.s + i));
            json_t *o = json_loadb(all.s + i, n, 0, NULL);
            FUZZ_CHECK(json_is_object(o), "output line %lld is not a JSON object",
                       (long long)n_out);
            char *k = pllm_output_key(o);
            FUZZ_CHECK(k != NULL, "output line names no request");
            const json_t *ix = json_object_get(o, "index");
            pllm_buf kk = {0};
            if (json_is_integer(ix) && !json_object_get(o, "custom_id"))
                pllm_buf_appendf(&kk, "%s\x1f%lld", k, (long long)json_integer_value(ix));
            else
                pllm_buf_appendf(&kk, "%s", k);
            FUZZ_CHECK(!json_object_get(keys, kk.s), "key written twice");
            json_object_set_new(keys, kk.s, json_true());
            pllm_buf_free(&kk);
            free(k);
            json_decref(o);
            n_out++;
            i += n + 1;
        }
        FUZZ_CHECK(n_out == res.n_written, "%lld lines in the output, %lld written",
                   (long long)n_out, (long long)res.n_written);
        json_decref(keys);
        pllm_buf_free(&all);
    }
    pllm_merge_result_free(&res);
    free(out);
    for (int i = 0; i < 3; i++) {
        free(paths[i]);
        free(sidecars[i]);
    }
    return 0;
}
