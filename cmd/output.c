#include "cmd/output.h"

#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* stat() of a path, or fstat() of stdin/stdout for "-". Regular files only. */
static bool regular_stat(const char *path, int std_fd, struct stat *sb)
{
    int r = strcmp(path, "-") == 0 ? fstat(std_fd, sb) : stat(path, sb);
    return r == 0 && S_ISREG(sb->st_mode);
}

bool cmd_output_exists(const char *path)
{
    struct stat sb;
    return strcmp(path, "-") != 0 && stat(path, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size > 0;
}

/* An earlier pllm report (a JSON object with "command"), which a new report may replace. */
static bool is_pllm_report(const char *path)
{
    json_t *j = json_load_file(path, 0, NULL);
    bool yes = json_is_object(j) && json_is_string(json_object_get(j, "command"));
    json_decref(j);
    return yes;
}

/* Whether a file could be written at path (created in its directory, or the existing file
 * opened for writing), checked without creating anything: 0, or 2 with the reason printed. */
static int check_writable(const char *path, const char *what)
{
    struct stat sb;
    if (stat(path, &sb) == 0) {
        if (S_ISDIR(sb.st_mode)) {
            fprintf(stderr, "pllm: %s %s is a directory; give a file name\n", what, path);
            return 2;
        }
        if (access(path, W_OK) != 0) {
            fprintf(stderr, "pllm: %s %s cannot be written: %s\n", what, path, strerror(errno));
            return 2;
        }
        return 0;
    }
    char *d = pllm_strdup(path);
    if (!d) return 0;
    const char *dir = dirname(d);
    int rc = 0;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        fprintf(stderr, "pllm: %s %s cannot be written: its directory %s %s\n", what, path, dir,
                stat(dir, &sb) != 0 ? "does not exist" : "is not a directory");
        rc = 2;
    } else if (access(dir, W_OK | X_OK) != 0) {
        fprintf(stderr, "pllm: %s %s cannot be written: directory %s: %s\n", what, path, dir,
                strerror(errno));
        rc = 2;
    }
    free(d);
    return rc;
}

int cmd_output_check(const char *out_path, const char *what, const cmd_inputs *in,
                     cmd_out_mode mode, unsigned flags)
{
    bool report = flags & CMD_OUT_REPORT;
    struct stat so;
    bool out_stdout = strcmp(out_path, "-") == 0;
    /* before the expensive part: a path that cannot be written fails now, not after the
     * model has loaded (or the run has finished) */
    if (!out_stdout) {
        int rc = check_writable(out_path, what);
        if (rc) return rc;
    }
    if (regular_stat(out_path, STDOUT_FILENO, &so)) {
        for (size_t i = 0; in && i < PLLM_ARRAY_LEN(in->path); i++) {
            const char *p = in->path[i];
            struct stat si;
            if (!p || !regular_stat(p, STDIN_FILENO, &si)) continue;
            if (si.st_dev != so.st_dev || si.st_ino != so.st_ino) continue;
            const char *src = strcmp(p, "-") == 0 ? "stdin" : p;
            bool other_name = out_stdout || strcmp(p, out_path) != 0;
            fprintf(stderr,
                    "pllm: %s%s%s is %s itself (%s%s): writing it would destroy what is being "
                    "read; write to another file\n",
                    out_stdout ? "stdout" : what, out_stdout ? "" : " ", out_stdout ? "" : out_path,
                    in->what[i], src, other_name ? ", the same file under another name" : "");
            return 2;
        }
    }
    if (out_stdout || mode != CMD_OUT_NEW || !cmd_output_exists(out_path)) return 0;
    if (report && is_pllm_report(out_path)) return 0;
    fprintf(stderr,
            "pllm: %s %s exists and is not empty; pllm does not replace a file without being "
            "told: --overwrite replaces it%s, or choose another name\n",
            what, out_path, flags & CMD_OUT_RESUMABLE ? ", --resume continues the run in it" : "");
    return 2;
}

static char *tmp_name(const char *target)
{
    char *d = pllm_strdup(target), *b = pllm_strdup(target);
    pllm_buf p = {0};
    if (d && b)
        pllm_buf_appendf(&p, "%s/.%s.%ld.tmp%s", dirname(d), basename(b), (long)getpid(),
                         pllm_path_is_zst(target) ? ".zst" : "");
    free(d);
    free(b);
    return p.s;
}

int cmd_output_open(cmd_output *o, const char *out_path, bool atomic, bool append)
{
    memset(o, 0, sizeof *o);
    const char *open_path = out_path;
    if (strcmp(out_path, "-") != 0) {
        /* write where a symbolic link points, so that the rename replaces the file, not the link */
        char real[PATH_MAX];
        o->target = pllm_strdup(realpath(out_path, real) ? real : out_path);
        if (atomic) o->tmp = o->target ? tmp_name(o->target) : NULL;
        if (!o->target || (atomic && !o->tmp)) {
            fprintf(stderr, "pllm: out of memory\n");
            cmd_output_close(o);
            return 3;
        }
        open_path = atomic ? o->tmp : out_path;
    }
    if (pllm_writer_open(&o->w, open_path, append && !atomic) != PLLM_OK) {
        fprintf(stderr, "pllm: %s\n", pllm_errmsg());
        cmd_output_close(o);
        return 3;
    }
    return 0;
}

int cmd_output_commit(cmd_output *o)
{
    int rc = 0;
    if (o->w && pllm_writer_close(o->w) != PLLM_OK) {
        fprintf(stderr, "pllm: %s\n", pllm_errmsg());
        rc = 3;
    }
    o->w = NULL;
    if (rc == 0 && o->tmp && rename(o->tmp, o->target) != 0) {
        fprintf(stderr, "pllm: cannot rename %s to %s: %s\n", o->tmp, o->target, strerror(errno));
        rc = 3;
    }
    if (rc == 0) {
        free(o->tmp);
        o->tmp = NULL;
    }
    cmd_output_close(o);
    return rc;
}

void cmd_output_close(cmd_output *o)
{
    if (o->w) pllm_writer_close(o->w);
    o->w = NULL;
    if (o->tmp) remove(o->tmp);
    free(o->tmp);
    free(o->target);
    o->tmp = o->target = NULL;
}

int cmd_output_write_json(const char *path, const json_t *doc, size_t flags)
{
    char *text = json_dumps(doc, flags);
    if (!text) {
        fprintf(stderr, "pllm: cannot write %s: out of memory\n", path);
        return 3;
    }
    int rc = cmd_output_write_text(path, text, strlen(text));
    free(text);
    return rc;
}

int cmd_output_write_text(const char *path, const char *text, size_t n)
{
    char real[PATH_MAX];
    const char *target = realpath(path, real) ? real : path;
    char *tmp = tmp_name(target);
    if (!tmp) {
        fprintf(stderr, "pllm: out of memory\n");
        return 3;
    }
    int rc = 0;
    FILE *f = fopen(tmp, "wb");
    bool ok = f && fwrite(text, 1, n, f) == n;
    if (f && fclose(f) != 0) ok = false;
    if (!ok) {
        fprintf(stderr, "pllm: cannot write %s: %s\n", path, strerror(errno));
        rc = 3;
    } else if (rename(tmp, target) != 0) {
        fprintf(stderr, "pllm: cannot rename %s to %s: %s\n", tmp, target, strerror(errno));
        rc = 3;
    }
    if (rc) remove(tmp);
    free(tmp);
    return rc;
}
