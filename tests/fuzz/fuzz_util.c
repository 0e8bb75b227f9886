/* fuzz_util.c: helpers shared by the harnesses (see fuzz_common.h). */
#include "tests/fuzz/fuzz_common.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

char *fuzz_default_model_path(void)
{
    const char *home = getenv("PLLM_HOME");
    pllm_buf b = {0};
    if (home && *home) pllm_buf_appendf(&b, "%s/models/SmolLM2-135M-Instruct.Q4_1.gguf", home);
    else pllm_buf_appendf(&b, "%s/.cache/pllm/models/SmolLM2-135M-Instruct.Q4_1.gguf", getenv("HOME") ? getenv("HOME") : ".");
    return b.s;
}

/* The process's scratch directory: written once (at first use), read afterwards. */
static char g_scratch[PATH_MAX];

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    remove(path); /* best effort: a leftover file in a temp dir is harmless */
    return 0;
}

static void scratch_cleanup(void)
{
    if (g_scratch[0]) nftw(g_scratch, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

const char *fuzz_scratch_dir(void)
{
    if (g_scratch[0]) return g_scratch;
    struct stat sb;
    const char *base = stat("/dev/shm", &sb) == 0 && S_ISDIR(sb.st_mode) && access("/dev/shm", W_OK) == 0
                           ? "/dev/shm"
                           : (getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    snprintf(g_scratch, sizeof g_scratch, "%s/pllm-fuzz-XXXXXX", base);
    if (!mkdtemp(g_scratch)) {
        fprintf(stderr, "fuzz: cannot create a scratch directory under %s: %s\n", base, strerror(errno));
        abort();
    }
    atexit(scratch_cleanup);
    return g_scratch;
}

void fuzz_write_file(const char *dir, const char *name, const void *data, size_t size)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        fprintf(stderr, "fuzz: cannot write %s: %s\n", path, strerror(errno));
        abort();
    }
    const char *p = data;
    while (size > 0) {
        ssize_t n = write(fd, p, size);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            fprintf(stderr, "fuzz: write %s: %s\n", path, strerror(errno));
            abort();
        }
        p += n;
        size -= (size_t)n;
    }
    close(fd);
}

void fuzz_remove_file(const char *dir, const char *name)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    unlink(path);
}

void fuzz_note(const char *stage, pllm_status st)
{
    static int verbose = -1;
    if (verbose < 0) verbose = getenv("FUZZ_VERBOSE") && getenv("FUZZ_VERBOSE")[0] == '1';
    if (verbose) fprintf(stderr, "  %s: %s%s%s\n", stage, pllm_status_str(st), st ? ": " : "", st ? pllm_errmsg() : "");
}
