/*
 * merge.c: `pllm merge SHARD_OUTPUTS... -o OUT`: one output with every request exactly once
 * and the merged statistics, from the outputs of `pllm generate --shard K/N` runs (or any
 * outputs of pllm generate). The work is datasets/merge.c; this is its command line.
 *
 * Exit codes: 0 every shard and record is there; 1 the output was written but something is
 * missing (a shard no file covers, a shard that never finished, a record of --input that no
 * output holds, damaged lines); 2 usage; 3 an input could not be read, the shards are of
 * different partitions, or the output could not be written.
 */
#include "cmd/commands.h"
#include "cmd/options.h"
#include "cmd/shared.h"
#include "datasets/merge.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

int cmd_merge(int argc, char **argv)
{
    const char *out_path = "-", *order_s = "completion", *stats_json = NULL, *input = NULL,
               *format_s = "auto";
    bool overwrite = false, quiet = false;
    cmd_opt opts[] = {
        {"output", 'o', CMD_OPT_STR, &out_path, "FILE", "- (stdout)",
         "the merged output (.zst compresses)", NULL},
        {"order", 0, CMD_OPT_STR, &order_s, "ORDER", "completion",
         "completion (the files in the order given) or input (the input's order, from the "
         "input_index shard runs write)",
         NULL},
        {"stats-json", 0, CMD_OPT_STR, &stats_json, "FILE", "none",
         "write the merged statistics as JSON to FILE", NULL},
        {"input", 0, CMD_OPT_STR, &input, "FILE", "none",
         "the prompts the shards ran: name every record no output holds", NULL},
        {"format", 0, CMD_OPT_STR, &format_s, "FMT", "auto",
         "--input's format: auto, pllm, openai, sharegpt", NULL},
        {"overwrite", 0, CMD_OPT_FLAG, &overwrite, NULL, "off", "replace an existing -o FILE",
         NULL},
        {"quiet", 'q', CMD_OPT_FLAG, &quiet, NULL, "off", "no report on stderr (problems still)",
         NULL},
    };
    const cmd_spec spec = {
        .usage = "pllm merge [OPTIONS] OUTPUT... -o OUT",
        .summary =
            "Join the outputs of pllm generate --shard K/N runs into one output holding every "
            "request exactly once\n(duplicates from a requeued shard removed; a missing "
            "shard, an unfinished shard or, with --input,\na missing record named), and "
            "merge their statistics: exact counters add, TTFT/TPOT/E2E percentiles are\n"
            "recomputed from the records, throughput is over the wall-clock span of all "
            "shards. Each shard's\nsidecar (OUTPUT.shard.json) is read when present.",
        .opts = opts,
        .n_opts = PLLM_ARRAY_LEN(opts),
        .min_pos = 1,
        .max_pos = 4096};
    static const char *pos[4096];
    int n_pos;
    int rc = cmd_parse(&spec, argc, argv, pos, &n_pos);
    if (rc) return rc == 1 ? 0 : 2;
    pllm_merge_params p = {.paths = pos,
                           .n_paths = (size_t)n_pos,
                           .out_path = out_path,
                           .input_path = input,
                           .log = stderr};
    if (!strcmp(order_s, "input"))
        p.order_input = true;
    else if (strcmp(order_s, "completion")) {
        fprintf(stderr, "pllm: --order '%s' is not one of completion, input\n", order_s);
        return 2;
    }
    if (pllm_format_parse(format_s, &p.input_format) != PLLM_OK) {
        fprintf(stderr, "pllm: %s\n", pllm_errmsg());
        return 2;
    }
    if (strcmp(out_path, "-")) {
        struct stat so, si;
        bool exists = stat(out_path, &so) == 0;
        for (int i = 0; exists && i < n_pos; i++)
            if (stat(pos[i], &si) == 0 && si.st_dev == so.st_dev && si.st_ino == so.st_ino) {
                fprintf(stderr, "pllm: -o %s is one of the files to merge\n", out_path);
                return 2;
            }
        if (exists && !overwrite) {
            fprintf(stderr, "pllm: %s exists; give --overwrite to replace it\n", out_path);
            return 2;
        }
    }
    pllm_merge_result res;
    if (pllm_merge_run(&p, &res) != PLLM_OK) {
        fprintf(stderr, "pllm: merge: %s\n", pllm_errmsg());
        return 3;
    }
    if (stats_json && json_dump_file(res.stats, stats_json, JSON_INDENT(2)) != 0) {
        fprintf(stderr, "pllm: cannot write %s\n", stats_json);
        rc = 3;
    }
    if (!quiet) {
        const json_t *c = json_object_get(res.stats, "counters");
        fprintf(stderr,
                "pllm merge: %lld lines from %d files -> %lld written (%lld duplicates removed, "
                "%lld damaged lines skipped)\n"
                "pllm merge: %lld completed, %lld failed; %lld input, %lld output, %lld cached "
                "tokens; engine steps %lld\n",
                (long long)res.n_lines, n_pos, (long long)res.n_written,
                (long long)res.n_duplicates, (long long)res.n_bad,
                (long long)json_integer_value(json_object_get(res.stats, "completed")),
                (long long)json_integer_value(json_object_get(res.stats, "failed")),
                (long long)json_integer_value(json_object_get(res.stats, "total_input_tokens")),
                (long long)json_integer_value(json_object_get(res.stats, "total_output_tokens")),
                (long long)json_integer_value(json_object_get(res.stats, "total_cached_tokens")),
                (long long)json_integer_value(json_object_get(c, "steps")));
        const json_t *d = json_object_get(res.stats, "duration");
        if (json_is_number(d))
            fprintf(stderr,
                    "pllm merge: wall-clock span %.2f s: %.2f req/s, %.2f output tok/s; median "
                    "TTFT %.1f ms, p99 E2EL %.1f ms\n",
                    json_number_value(d),
                    json_number_value(json_object_get(res.stats, "request_throughput")),
                    json_number_value(json_object_get(res.stats, "output_throughput")),
                    json_number_value(json_object_get(res.stats, "median_ttft_ms")),
                    json_number_value(json_object_get(res.stats, "p99_e2el_ms")));
    }
    bool incomplete = res.n_missing_shards || res.n_incomplete_shards || res.n_missing || res.n_bad;
    if (incomplete)
        fprintf(stderr,
                "pllm merge: incomplete: %d missing shards, %d unfinished shards, %lld missing "
                "records, %lld damaged lines\n",
                res.n_missing_shards, res.n_incomplete_shards, (long long)res.n_missing,
                (long long)res.n_bad);
    pllm_merge_result_free(&res);
    return rc ? rc : incomplete ? 1 : 0;
}
