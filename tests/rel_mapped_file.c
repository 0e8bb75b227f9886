/*
 * rel_mapped_file.c: a model file truncated or rewritten while it is mapped (model/mapped_file.h,
 * used by the GGUF reader). Each case really provokes the fault:
 *   - unpolled mapping, file truncated, a read past the new end: the process ends by SIGBUS
 *     after a message naming the file and the byte offset (checked in a child process);
 *   - polled mapping: the same read returns zeros, the mapping is marked damaged, check()
 *     reports "truncated" with both sizes; pages still inside the file keep their bytes;
 *   - same-size rewrite in place: check() reports "modified";
 *   - replacement by rename: nothing to report, the old bytes stay mapped;
 *   - a fault in a mapping the guard does not know still ends the process (the handler chains);
 *   - four threads reading while the file is cut: no crash, only that mapping damaged;
 *   - more mappings than guard slots: the extra ones work unguarded and check() still works;
 *   - through the GGUF reader: pllm_gguf_check_file() after truncation names the file.
 */
#include "model/gguf.h"
#include "model/mapped_file.h"
#include "tests/testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/common_interface_defs.h>
#endif

/* In a child meant to die of a fault: under ASan (run with handle_sigbus=0 so that SIGBUS stays
 * the real signal, scripts/ci-extra.sh) any report it prints is part of the expected death, so it
 * goes to the child's stderr, not to the report files CI fails on. */
static void expected_death_child(void)
{
#ifdef __SANITIZE_ADDRESS__
    __sanitizer_set_report_path("stderr");
#endif
}

#define PAGE 4096
#define NPAGES 16

static char g_dir[512];

static void make_file(const char *path, size_t size, uint8_t seed)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    PLLM_ASSERT(fd >= 0);
    uint8_t buf[PAGE];
    for (size_t off = 0; off < size; off += PAGE) {
        for (size_t i = 0; i < PAGE; i++) buf[i] = (uint8_t)(seed + (off + i) * 7 % 251 + 1); /* never 0 */
        size_t n = size - off < PAGE ? size - off : PAGE;
        PLLM_ASSERT(write(fd, buf, n) == (ssize_t)n);
    }
    close(fd);
}

static uint8_t expect_byte(size_t off, uint8_t seed) { return (uint8_t)(seed + off * 7 % 251 + 1); }

static uint8_t read_byte(const pllm_mapped_file *m, size_t off) { return ((const volatile uint8_t *)m->data)[off]; }

/* The child ended by the fault: SIGBUS (the default action), or, under AddressSanitizer, its
 * report of the BUS signal (then exit 1 or SIGABRT with abort_on_error). */
static bool died_of_sigbus(int status, const char *err)
{
    if (strstr(err, "AddressSanitizer") && strstr(err, "BUS"))
        return WIFSIGNALED(status) ? WTERMSIG(status) == SIGABRT || WTERMSIG(status) == SIGBUS
                                   : WEXITSTATUS(status) != 0 && WEXITSTATUS(status) < 10;
    return WIFSIGNALED(status) && WTERMSIG(status) == SIGBUS;
}

static void path_of(char *out, size_t cap, const char *name) { snprintf(out, cap, "%s/%s", g_dir, name); }

/* Unpolled: the read past the end kills the process by SIGBUS, after a message. */
static void case_unpolled(void)
{
    char path[600];
    path_of(path, sizeof path, "unpolled.bin");
    make_file(path, NPAGES * PAGE, 1);
    int pfd[2];
    PLLM_ASSERT(pipe(pfd) == 0);
    pid_t pid = fork();
    PLLM_ASSERT(pid >= 0);
    if (pid == 0) {
        dup2(pfd[1], 2);
        close(pfd[0]);
        expected_death_child();
        pllm_mapped_file m;
        if (pllm_mapped_file_open(&m, path) != PLLM_OK) _exit(10);
        if (truncate(path, PAGE) != 0) _exit(11);
        volatile uint8_t x = read_byte(&m, 8 * PAGE + 5);
        (void)x;
        _exit(0); /* not reached: the read faults */
    }
    close(pfd[1]);
    char msg[4096] = {0};
    size_t n = 0;
    ssize_t r;
    while (n < sizeof msg - 1 && (r = read(pfd[0], msg + n, sizeof msg - 1 - n)) > 0) n += (size_t)r;
    close(pfd[0]);
    int status;
    waitpid(pid, &status, 0);
    printf("unpolled: child %s %d; stderr: %s", WIFSIGNALED(status) ? "signal" : "exit",
           WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status), msg);
    CHECK(died_of_sigbus(status, msg));
    CHECK(strstr(msg, "pllm: fatal: ") && strstr(msg, "unpolled.bin") && strstr(msg, "byte offset 32773") &&
          strstr(msg, "truncated or rewritten"));
}

/* Polled: zeros, damaged, a clear check() error; bytes before the cut unchanged. */
static void case_polled(void)
{
    char path[600];
    path_of(path, sizeof path, "polled.bin");
    make_file(path, NPAGES * PAGE, 2);
    pllm_mapped_file m;
    CHECK_OK(pllm_mapped_file_open(&m, path));
    CHECK_OK(pllm_mapped_file_poll(&m));
    CHECK(read_byte(&m, 9 * PAGE + 1) == expect_byte(9 * PAGE + 1, 2));
    PLLM_ASSERT(truncate(path, 3 * PAGE + 100) == 0);
    CHECK(read_byte(&m, 9 * PAGE + 1) == 0); /* faulted, now zeros */
    CHECK(pllm_mapped_file_damaged(&m));
    CHECK(read_byte(&m, 15 * PAGE) == 0);    /* the rest of the mapping too, without more faults */
    CHECK(read_byte(&m, 100) == expect_byte(100, 2));
    pllm_status st = pllm_mapped_file_check(&m);
    printf("polled: %s\n", pllm_errmsg());
    CHECK(st == PLLM_ERR_IO && strstr(pllm_errmsg(), "polled.bin") && strstr(pllm_errmsg(), "truncated") &&
          strstr(pllm_errmsg(), "65536 bytes when opened") && strstr(pllm_errmsg(), "12388 now"));
    pllm_mapped_file_close(&m);
    pllm_mapped_file_close(&m); /* twice is harmless */
}

static void case_rewrite_same_size(void)
{
    char path[600];
    path_of(path, sizeof path, "rewrite.bin");
    make_file(path, NPAGES * PAGE, 3);
    pllm_mapped_file m;
    CHECK_OK(pllm_mapped_file_open(&m, path));
    CHECK_OK(pllm_mapped_file_poll(&m));
    int fd = open(path, O_WRONLY);
    PLLM_ASSERT(fd >= 0);
    PLLM_ASSERT(pwrite(fd, "XXXX", 4, 5 * PAGE) == 4);
    struct timespec ts[2] = {{.tv_nsec = UTIME_OMIT}, {.tv_sec = 1000000000, .tv_nsec = 0}};
    PLLM_ASSERT(futimens(fd, ts) == 0); /* a distinct mtime, whatever the clock's granularity */
    close(fd);
    pllm_status st = pllm_mapped_file_check(&m);
    printf("rewrite: %s\n", pllm_errmsg());
    CHECK(st == PLLM_ERR_IO && strstr(pllm_errmsg(), "modified while in use"));
    pllm_mapped_file_close(&m);
}

static void case_rename(void)
{
    char path[600], other[600];
    path_of(path, sizeof path, "renamed.bin");
    path_of(other, sizeof other, "renamed.new");
    make_file(path, NPAGES * PAGE, 4);
    pllm_mapped_file m;
    CHECK_OK(pllm_mapped_file_open(&m, path));
    CHECK_OK(pllm_mapped_file_poll(&m));
    make_file(other, PAGE, 9);
    PLLM_ASSERT(rename(other, path) == 0);
    CHECK_OK(pllm_mapped_file_check(&m));
    CHECK(read_byte(&m, 12 * PAGE + 3) == expect_byte(12 * PAGE + 3, 4));
    pllm_mapped_file_close(&m);
}

/* A mapping the guard does not know: the fault is not swallowed. */
static void case_foreign(void)
{
    char path[600], gpath[600];
    path_of(path, sizeof path, "foreign.bin");
    path_of(gpath, sizeof gpath, "guarded.bin");
    make_file(path, NPAGES * PAGE, 5);
    make_file(gpath, PAGE, 5);
    int pfd[2];
    PLLM_ASSERT(pipe(pfd) == 0);
    pid_t pid = fork();
    PLLM_ASSERT(pid >= 0);
    if (pid == 0) {
        dup2(pfd[1], 2);
        close(pfd[0]);
        expected_death_child();
        pllm_mapped_file g; /* installs the handler */
        if (pllm_mapped_file_open(&g, gpath) != PLLM_OK) _exit(10);
        (void)pllm_mapped_file_poll(&g);
        int fd = open(path, O_RDONLY);
        const volatile uint8_t *p = mmap(NULL, NPAGES * PAGE, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) _exit(11);
        if (truncate(path, PAGE) != 0) _exit(12);
        volatile uint8_t x = p[10 * PAGE];
        (void)x;
        _exit(0);
    }
    close(pfd[1]);
    char msg[8192] = {0};
    size_t n = 0;
    ssize_t r;
    while (n < sizeof msg - 1 && (r = read(pfd[0], msg + n, sizeof msg - 1 - n)) > 0) n += (size_t)r;
    close(pfd[0]);
    int status;
    waitpid(pid, &status, 0);
    printf("foreign: child %s %d\n", WIFSIGNALED(status) ? "signal" : "exit",
           WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    CHECK(died_of_sigbus(status, msg));
    CHECK(strstr(msg, "pllm: fatal") == NULL);
}

typedef struct reader_arg {
    const pllm_mapped_file *m;
    atomic_int *stop;
    uint64_t sum;
} reader_arg;

static void *reader(void *p)
{
    reader_arg *a = p;
    size_t off = 0;
    while (!atomic_load(a->stop)) {
        a->sum += read_byte(a->m, off);
        off = (off + 4099) % (NPAGES * PAGE);
    }
    return NULL;
}

static void case_threads(void)
{
    char p1[600], p2[600];
    path_of(p1, sizeof p1, "t1.bin");
    path_of(p2, sizeof p2, "t2.bin");
    make_file(p1, NPAGES * PAGE, 6);
    make_file(p2, NPAGES * PAGE, 7);
    pllm_mapped_file m1, m2;
    CHECK_OK(pllm_mapped_file_open(&m1, p1));
    CHECK_OK(pllm_mapped_file_open(&m2, p2));
    CHECK_OK(pllm_mapped_file_poll(&m1));
    CHECK_OK(pllm_mapped_file_poll(&m2));
    atomic_int stop = 0;
    pthread_t th[4];
    reader_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (reader_arg){.m = i % 2 ? &m2 : &m1, .stop = &stop};
        pthread_create(&th[i], NULL, reader, &args[i]);
    }
    usleep(20000);
    PLLM_ASSERT(truncate(p1, 2 * PAGE) == 0);
    usleep(50000);
    atomic_store(&stop, 1);
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    CHECK(pllm_mapped_file_damaged(&m1));
    CHECK(!pllm_mapped_file_damaged(&m2));
    CHECK(pllm_mapped_file_check(&m1) == PLLM_ERR_IO);
    CHECK_OK(pllm_mapped_file_check(&m2));
    printf("threads: reads went on while the file was cut; only its mapping is damaged\n");
    pllm_mapped_file_close(&m1);
    pllm_mapped_file_close(&m2);
}

static void case_many(void)
{
    char path[600];
    path_of(path, sizeof path, "many.bin");
    make_file(path, PAGE, 8);
    enum { N = PLLM_MAPPED_FILE_SLOTS + 20 };
    static pllm_mapped_file m[N];
    int unguarded = 0;
    for (int i = 0; i < N; i++) {
        CHECK_OK(pllm_mapped_file_open(&m[i], path));
        unguarded += m[i].slot < 0;
    }
    CHECK(unguarded >= 20);
    CHECK_OK(pllm_mapped_file_check(&m[N - 1]));
    CHECK(read_byte(&m[N - 1], 7) == expect_byte(7, 8));
    for (int i = 0; i < N; i++) pllm_mapped_file_close(&m[i]);
    /* the slots are free again */
    pllm_mapped_file again;
    CHECK_OK(pllm_mapped_file_open(&again, path));
    CHECK(again.slot >= 0);
    pllm_mapped_file_close(&again);
    printf("many: %d mappings past the %d slots work unguarded\n", unguarded, PLLM_MAPPED_FILE_SLOTS);
}

/* A GGUF file with one F32 tensor large enough to span pages. */
static void case_gguf(void)
{
    char path[600];
    path_of(path, sizeof path, "t.gguf");
    pllm_buf b = {0};
    uint32_t u32;
    uint64_t u64;
#define PUT(v) pllm_buf_append(&b, &(v), sizeof(v))
    pllm_buf_append(&b, "GGUF", 4);
    u32 = 3, PUT(u32);
    u64 = 1, PUT(u64); /* tensors */
    u64 = 0, PUT(u64); /* kv */
    u64 = 1, PUT(u64);
    pllm_buf_append(&b, "w", 1);
    u32 = 1, PUT(u32);
    u64 = 8 * PAGE, PUT(u64); /* ne[0]: 8 pages of f32 */
    u32 = 0, PUT(u32);        /* F32 */
    u64 = 0, PUT(u64);        /* offset */
    while (b.n % 32) pllm_buf_append(&b, "", 1);
    size_t data_at = b.n;
    for (size_t i = 0; i < 8 * PAGE; i++) {
        float f = 1.0f + (float)(i % 100);
        PUT(f);
    }
#undef PUT
    FILE *f = fopen(path, "wb");
    PLLM_ASSERT(f && fwrite(b.s, 1, b.n, f) == b.n);
    fclose(f);
    pllm_gguf *g;
    CHECK_OK(pllm_gguf_open(&g, path));
    CHECK_OK(pllm_gguf_check_file(g));
    const pllm_gguf_tensor *t = pllm_gguf_find_tensor(g, "w");
    CHECK(t && ((const float *)t->data)[7 * PAGE] == 1.0f + (float)(7 * PAGE % 100));
    PLLM_ASSERT(truncate(path, (off_t)(data_at + PAGE)) == 0);
    CHECK(((const volatile float *)t->data)[7 * PAGE] == 0.0f);
    pllm_status st = pllm_gguf_check_file(g);
    printf("gguf: %s\n", pllm_errmsg());
    CHECK(st == PLLM_ERR_IO && strstr(pllm_errmsg(), "t.gguf") && strstr(pllm_errmsg(), "bus error"));
    pllm_gguf_close(g);
    /* a file cut before it is opened is a format error at open, not a fault */
    st = pllm_gguf_open(&g, path);
    printf("gguf reopen: %s\n", pllm_errmsg());
    CHECK(st == PLLM_ERR_FORMAT && strstr(pllm_errmsg(), "out of bounds"));
    pllm_buf_free(&b);
}

int main(void)
{
    snprintf(g_dir, sizeof g_dir, "%s/rel_mapped_XXXXXX", pllm_test_env("PLLM_TEST_TMP", "/tmp"));
    PLLM_ASSERT(mkdtemp(g_dir));
    case_unpolled();
    case_polled();
    case_rewrite_same_size();
    case_rename();
    case_foreign();
    case_threads();
    case_many();
    case_gguf();
    return pllm_test_finish("rel_mapped_file");
}
