/*
 * devices.h: `pllm generate --device cuda:0,1,...`: one engine per GPU of this node, one output.
 *
 * The input is split with the same partition as --shard K/N (records sharing a prompt prefix
 * stay on one device, prompt tokens balanced), and each device runs as its own `pllm generate
 * --shard k/N --device cuda:D` process (this binary re-executed: a process per device keeps the
 * devices' contexts, memory and failures apart, and is what the Slurm and parallel recipes run
 * anyway). Worker k writes OUT.dev<k>.jsonl (+ its .shard.json sidecar and run record),
 * OUT.dev<k>.stats.json, its log OUT.dev<k>.log (and with --plot P.svg, P.dev<k>.svg), beside OUT;
 * when every worker has finished, `pllm merge` joins them into OUT (and --stats-json), and each
 * device's share (requests, output tokens, tokens/s) is reported. --resume resumes every worker
 * from its own files. A worker that fails is named with the tail of its log; the others' files
 * stay, so the same command with --resume finishes the job. SIGINT/SIGTERM are passed on to the
 * workers.
 */
#pragma once

#include <signal.h>
#include <stdbool.h>

typedef struct cmd_devices_run {
    const char *devices;    /* the --device value: "cuda:0,1", "cuda:0,cuda:2", ... */
    const char *out_path;   /* -o: required */
    const char *stats_json; /* --stats-json or NULL */
    const char *plot;       /* --plot P.svg or NULL: worker k draws P.dev<k>.svg */
    bool order_input;       /* --order input */
    bool overwrite, resume, quiet, shard_given;
} cmd_devices_run;

/* Whether a --device value names several devices (holds a comma). */
bool cmd_devices_is_list(const char *device);

/* Run generate's argv (from "generate" on) on every device of r->devices; the process exit code.
 * *stop (cmd_signals_install's flag) set: the workers get SIGINT. */
int cmd_devices_generate(int argc, char **argv, const cmd_devices_run *r,
                         volatile sig_atomic_t *stop);
