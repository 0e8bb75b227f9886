/*
 * devices.c: devices.h.
 */
#include "cmd/devices.h"
#include "cmd/runtime.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define MAX_DEVICES 64

bool cmd_devices_is_list(const char *device)
{
    return device && strchr(device, ',') != NULL;
}

/* "cuda:0,1,3" or "cuda:0,cuda:2": the ordinals; 0 or 2 (usage, printed). */
static int parse_list(const char *spec, int32_t *ord, int *n)
{
    *n = 0;
    const char *p = spec;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char item[64];
        if (len == 0 || len >= sizeof item - 8) {
            fprintf(stderr, "pllm: --device '%s': an empty or overlong entry in the list\n", spec);
            return 2;
        }
        /* a bare number continues the list of the first entry's kind */
        if (p[0] >= '0' && p[0] <= '9')
            snprintf(item, sizeof item, "cuda:%.*s", (int)len, p);
        else
            snprintf(item, sizeof item, "%.*s", (int)len, p);
        if (strncmp(item, "cuda:", 5) != 0) {
            fprintf(stderr,
                    "pllm: --device '%s': a list names CUDA devices (cuda:0,1 or cuda:0,cuda:1); "
                    "'%s' is not one\n",
                    spec, item);
            return 2;
        }
        cmd_device d;
        int rc = cmd_device_select(&d, item);
        if (rc) return rc;
        for (int i = 0; i < *n; i++)
            if (ord[i] == d.ordinal) {
                fprintf(stderr, "pllm: --device '%s': cuda:%d is named twice\n", spec, d.ordinal);
                return 2;
            }
        if (*n == MAX_DEVICES) {
            fprintf(stderr, "pllm: --device '%s': more than %d devices\n", spec, MAX_DEVICES);
            return 2;
        }
        ord[(*n)++] = d.ordinal;
        p += len;
        if (*p == ',') p++;
        if (end && !*p) {
            fprintf(stderr, "pllm: --device '%s': the list ends with a comma\n", spec);
            return 2;
        }
    }
    return 0;
}

/* OUT without a .zst and then a .jsonl/.json suffix. */
static char *stem_of(const char *out)
{
    char *s = strdup(out);
    if (!s) return NULL;
    size_t n = strlen(s);
    if (n > 4 && !strcmp(s + n - 4, ".zst")) s[n -= 4] = 0;
    if (n > 6 && !strcmp(s + n - 6, ".jsonl"))
        s[n - 6] = 0;
    else if (n > 5 && !strcmp(s + n - 5, ".json"))
        s[n - 5] = 0;
    return s;
}

static char *fmt(const char *a, int k, const char *b)
{
    size_t n = strlen(a) + strlen(b) + 32;
    char *s = malloc(n);
    if (s) snprintf(s, n, "%s.dev%d%s", a, k, b);
    return s;
}

/* Spawn exe with args, stdout and stderr to log (NULL: inherited); the pid or -1. */
static pid_t spawn(const char *exe, char **args, const char *log, bool append)
{
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    if (log) {
        posix_spawn_file_actions_addopen(&fa, 2, log,
                                         O_WRONLY | O_CREAT | (append ? O_APPEND : O_TRUNC), 0644);
        posix_spawn_file_actions_adddup2(&fa, 2, 1);
    }
    pid_t pid;
    int e = posix_spawn(&pid, exe, &fa, NULL, args, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (e) {
        fprintf(stderr, "pllm: cannot start %s: %s\n", exe, strerror(e));
        return -1;
    }
    return pid;
}

/* Wait for the pids; rcs[i] gets each exit code (128 + signal when killed). SIGINT and SIGTERM
 * the parent receives (the flag set by cmd_signals_install) are passed on once. */
static void wait_all(pid_t *pids, int *rcs, int n, volatile sig_atomic_t *stop)
{
    int left = 0;
    for (int i = 0; i < n; i++) left += pids[i] > 0;
    bool forwarded = false;
    while (left > 0) {
        if (stop && *stop && !forwarded) {
            for (int i = 0; i < n; i++)
                if (pids[i] > 0) kill(pids[i], SIGINT);
            forwarded = true;
        }
        int st;
        pid_t p = waitpid(-1, &st, WNOHANG);
        if (p == 0 || (p < 0 && errno == EINTR)) {
            struct timespec ts = {0, 20 * 1000 * 1000};
            nanosleep(&ts, NULL);
            continue;
        }
        if (p < 0) break;
        for (int i = 0; i < n; i++)
            if (pids[i] == p) {
                rcs[i] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
                pids[i] = 0;
                left--;
            }
    }
}

/* The last few lines of a log, indented. */
static void print_tail(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return;
    enum { N = 6 };
    char *ring[N] = {0};
    char *line = NULL;
    size_t lcap = 0;
    int n = 0;
    while (getline(&line, &lcap, f) >= 0) {
        free(ring[n % N]);
        ring[n % N] = strdup(line);
        n++;
    }
    free(line);
    fclose(f);
    for (int i = n > N ? n - N : 0; i < n; i++)
        if (ring[i % N]) fprintf(stderr, "    | %s", ring[i % N]);
    for (int i = 0; i < N; i++) free(ring[i]);
}

int cmd_devices_generate(int argc, char **argv, const cmd_devices_run *r,
                         volatile sig_atomic_t *stop)
{
    int32_t ord[MAX_DEVICES];
    int n = 0, rc;
    if ((rc = parse_list(r->devices, ord, &n)) != 0) return rc;
    if (r->shard_given) {
        fprintf(stderr,
                "pllm: --device %s splits the input over the devices itself; --shard "
                "cannot be given with a device list\n",
                r->devices);
        return 2;
    }
    if (!strcmp(r->out_path, "-")) {
        fprintf(stderr,
                "pllm: --device %s writes one output per device and merges them: give "
                "-o FILE\n",
                r->devices);
        return 2;
    }
    char exe[4096];
    ssize_t el = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (el <= 0) {
        fprintf(stderr, "pllm: cannot find this program (/proc/self/exe): %s\n", strerror(errno));
        return 3;
    }
    exe[el] = 0;
    char *stem = stem_of(r->out_path);
    char *outs[MAX_DEVICES] = {0}, *stats[MAX_DEVICES] = {0}, *logs[MAX_DEVICES] = {0},
         *plots[MAX_DEVICES] = {0};
    /* --plot P.svg: each worker draws its own run, P.dev<k>.svg */
    char *plot_stem = r->plot ? strdup(r->plot) : NULL;
    if (plot_stem) {
        size_t pn = strlen(plot_stem);
        if (pn > 4 && !strcmp(plot_stem + pn - 4, ".svg")) plot_stem[pn - 4] = 0;
    }
    char shard[MAX_DEVICES][32], dev[MAX_DEVICES][32];
    pid_t pids[MAX_DEVICES] = {0};
    int rcs[MAX_DEVICES];
    char **args = calloc((size_t)argc + 16, sizeof *args);
    rc = 3;
    if (!stem || !args || (r->plot && !plot_stem)) goto out;
    for (int k = 0; k < n; k++) {
        if (!(outs[k] = fmt(stem, k, ".jsonl")) || !(stats[k] = fmt(stem, k, ".stats.json")) ||
            !(logs[k] = fmt(stem, k, ".log")) ||
            (plot_stem && !(plots[k] = fmt(plot_stem, k, ".svg"))))
            goto out;
        snprintf(shard[k], sizeof shard[k], "%d/%d", k, n);
        snprintf(dev[k], sizeof dev[k], "cuda:%d", ord[k]);
    }
    if (!r->quiet)
        fprintf(stderr, "pllm: %d devices, one worker each (pllm generate --shard k/%d); logs %s\n",
                n, n, logs[0]);
    for (int k = 0; k < n; k++) {
        /* the user's arguments, then the worker's own: a later option wins */
        int a = 0;
        args[a++] = exe;
        for (int i = 0; i < argc; i++) args[a++] = argv[i];
        char *extra[] = {"--device", dev[k],  "--shard",      shard[k],
                         "-o",       outs[k], "--stats-json", stats[k]};
        for (size_t i = 0; i < sizeof extra / sizeof *extra; i++) args[a++] = extra[i];
        if (plots[k]) args[a++] = "--plot", args[a++] = plots[k];
        args[a] = NULL;
        rcs[k] = -1;
        pids[k] = spawn(exe, args, logs[k], r->resume);
        if (pids[k] < 0) {
            pids[k] = 0;
            rcs[k] = 3;
        } else if (!r->quiet) {
            fprintf(stderr, "pllm:   worker %d: %s -> %s%s%s\n", k, dev[k], outs[k],
                    plots[k] ? ", drawn in " : "", plots[k] ? plots[k] : "");
        }
    }
    wait_all(pids, rcs, n, stop);
    int bad = 0;
    for (int k = 0; k < n; k++) {
        /* exit 1: some requests failed, their error lines are in the output: still merge */
        if (rcs[k] == 0 || rcs[k] == 1) continue;
        bad = bad ? bad : rcs[k];
        fprintf(stderr, "pllm: worker %d (%s) exited with %d; the end of %s:\n", k, dev[k], rcs[k],
                logs[k]);
        print_tail(logs[k]);
    }
    if (!bad && stop && *stop) bad = 130; /* interrupted: the workers stopped or had finished */
    if (bad) {
        fprintf(stderr,
                "pllm: not merged: the finished workers' outputs stay beside %s; the same command "
                "with --resume finishes the job\n",
                r->out_path);
        rc = bad;
        goto out;
    }
    /* merge, as `pllm merge` does it (its report on stderr) */
    {
        int a = 0;
        args[a++] = exe;
        args[a++] = "merge";
        for (int k = 0; k < n; k++) args[a++] = outs[k];
        args[a++] = "-o";
        args[a++] = (char *)r->out_path;
        args[a++] = "--order";
        args[a++] = r->order_input ? "input" : "completion";
        if (r->stats_json) args[a++] = "--stats-json", args[a++] = (char *)r->stats_json;
        if (r->overwrite || r->resume || access(r->out_path, F_OK) == 0)
            args[a++] = "--overwrite"; /* generate's own check already ruled on it */
        if (r->quiet) args[a++] = "-q";
        args[a] = NULL;
        pid_t m = spawn(exe, args, NULL, false);
        int mrc = 3;
        if (m > 0) wait_all(&m, &mrc, 1, stop);
        rc = mrc;
    }
    /* each device's share */
    json_t *shares = json_array();
    int64_t all_out = 0, outs_tok[MAX_DEVICES] = {0};
    json_t *st[MAX_DEVICES] = {0};
    for (int k = 0; k < n; k++) {
        st[k] = json_load_file(stats[k], 0, NULL);
        outs_tok[k] = json_integer_value(json_object_get(st[k], "total_output_tokens"));
        all_out += outs_tok[k];
    }
    for (int k = 0; k < n; k++) {
        const double dur = json_number_value(json_object_get(st[k], "duration"));
        const int64_t req = json_integer_value(json_object_get(st[k], "completed"));
        const double tps = json_number_value(json_object_get(st[k], "output_throughput"));
        if (!r->quiet)
            fprintf(stderr,
                    "pllm: %-8s %lld requests, %lld output tokens in %.2f s (%.1f tok/s), %.1f%% "
                    "of the output\n",
                    dev[k], (long long)req, (long long)outs_tok[k], dur, tps,
                    all_out ? 100.0 * (double)outs_tok[k] / (double)all_out : 0.0);
        json_array_append_new(shares, json_pack("{s:s, s:s, s:I, s:I, s:f, s:f}", "device", dev[k],
                                                "output", outs[k], "completed", (json_int_t)req,
                                                "total_output_tokens", (json_int_t)outs_tok[k],
                                                "duration", dur, "output_throughput", tps));
        json_decref(st[k]);
    }
    if (r->stats_json && rc != 3) { /* the merged statistics gain the shares */
        json_t *m = json_load_file(r->stats_json, 0, NULL);
        if (m) {
            json_object_set(m, "devices", shares);
            if (json_dump_file(m, r->stats_json, JSON_INDENT(2)) != 0) {
                fprintf(stderr, "pllm: cannot write %s\n", r->stats_json);
                rc = 3;
            }
            json_decref(m);
        }
    }
    json_decref(shares);
out:
    for (int k = 0; k < n; k++) free(outs[k]), free(stats[k]), free(logs[k]), free(plots[k]);
    free(stem);
    free(plot_stem);
    free(args);
    return rc;
}
