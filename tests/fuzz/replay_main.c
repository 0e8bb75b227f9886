/*
 * replay_main.c: a main() for the fuzz harnesses without libFuzzer. Each argument is a file
 * or a directory (its regular files, sorted, one level deep); the harness runs once on each.
 * Exit status 0 when every input ran (a finding aborts the process, naming the input on
 * stderr first). With no argument, reads one input from stdin.
 *
 *     fuzz_replay_gguf tests/fuzz/regressions/gguf tests/fuzz/seeds/gguf
 */
#include "tests/fuzz/fuzz_common.h"

#include <dirent.h>
#include <errno.h>
#include <string.h>
#include <sys/stat.h>

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: cannot open %s: %s\n", path, strerror(errno));
        return 1;
    }
    pllm_buf b = {0};
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (pllm_buf_append(&b, chunk, n) != PLLM_OK) abort();
    }
    fclose(f);
    fprintf(stderr, "replay: %s (%zu bytes)\n", path, b.n);
    /* an exact-size heap copy, so ASan sees reads past the end as libFuzzer's runs do */
    uint8_t *copy = malloc(b.n ? b.n : 1);
    if (!copy) abort();
    if (b.n) memcpy(copy, b.s, b.n);
    LLVMFuzzerTestOneInput(copy, b.n);
    free(copy);
    pllm_buf_free(&b);
    return 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int run_path(const char *path, int *n_run)
{
    struct stat sb;
    if (stat(path, &sb) != 0) {
        fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
        return 1;
    }
    if (!S_ISDIR(sb.st_mode)) {
        (*n_run)++;
        return run_file(path);
    }
    DIR *d = opendir(path);
    if (!d) return 1;
    char **names = NULL;
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char **nn = realloc(names, (n + 1) * sizeof *names);
        if (!nn) abort();
        names = nn;
        pllm_buf p = {0};
        pllm_buf_appendf(&p, "%s/%s", path, e->d_name);
        names[n++] = p.s;
    }
    closedir(d);
    qsort(names, n, sizeof *names, cmp_str);
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        if (stat(names[i], &sb) == 0 && S_ISREG(sb.st_mode)) {
            (*n_run)++;
            rc |= run_file(names[i]);
        }
        free(names[i]);
    }
    free(names);
    return rc;
}

int main(int argc, char **argv)
{
    LLVMFuzzerInitialize(&argc, &argv);
    int rc = 0, n_run = 0;
    if (argc < 2) {
        pllm_buf b = {0};
        char chunk[65536];
        size_t n;
        while ((n = fread(chunk, 1, sizeof chunk, stdin)) > 0) pllm_buf_append(&b, chunk, n);
        LLVMFuzzerTestOneInput((const uint8_t *)(b.s ? b.s : ""), b.n);
        pllm_buf_free(&b);
        return 0;
    }
    for (int i = 1; i < argc; i++) rc |= run_path(argv[i], &n_run);
    fprintf(stderr, "replay: %d inputs, %s\n", n_run, rc ? "some could not be read" : "all ran");
    return rc;
}
