/*
 * engine_prefix_store.c: the persistent prefix cache's store (engine/prefix_store.h) under
 * faults: round trip; every flipped byte and every truncation of an entry detected, reported,
 * ignored and removed, never trusted; an entry for other tokens ignored; a writer killed in
 * the middle of a write (at a fixed point, and at random times) leaves no entry that is not
 * whole, and its temporary file is removed later; two writers on one directory with a small
 * cap, reading each other's entries, see only whole, correct blocks and keep the cap; the cap
 * evicts least recently used entries first, across stores (runs).
 */
#include "engine/prefix_store.h"
#include "tests/testutil.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BS  16
#define RAW 6000 /* bytes per block (any size works) */

static char g_dir[512];
static int g_warnings;

static void on_warn(void *arg, const char *msg)
{
    (void)arg;
    g_warnings++;
    if (g_warnings <= 3) fprintf(stderr, "  (warning seen: %s)\n", msg);
}

/* Block i of a deterministic sequence: its tokens and KV bytes (compressible, not constant). */
static void block_tokens(int32_t i, int32_t *t)
{
    for (int32_t j = 0; j < BS; j++) t[j] = 1000 + i * BS + j;
}
static void block_kv(int32_t i, uint8_t *kv)
{
    uint64_t r = 0x1234 + (uint64_t)i;
    for (size_t j = 0; j < RAW; j++)
        kv[j] = (uint8_t)(j % 7 == 0 ? pllm_test_rand(&r) : (uint64_t)i);
}

typedef struct chain {
    int32_t tokens[256][BS];
    pllm_prefix_key keys[256];
} chain;

static uint64_t g_ns = 0xabcdef0123456789ull;

static void make_chain(chain *c, int32_t n)
{
    pllm_prefix_key parent = pllm_prefix_root_key();
    for (int32_t i = 0; i < n; i++) {
        block_tokens(i, c->tokens[i]);
        c->keys[i] = pllm_prefix_key_next(parent, c->tokens[i], BS, g_ns);
        parent = c->keys[i];
    }
}

static pllm_prefix_expect expect_of(const chain *c, int32_t i)
{
    return (pllm_prefix_expect){.ns = g_ns,
                                .key = c->keys[i],
                                .parent = i ? c->keys[i - 1] : pllm_prefix_root_key(),
                                .depth = i,
                                .block_size = BS,
                                .tokens = c->tokens[i],
                                .raw_bytes = RAW};
}

static pllm_prefix_store_params params(size_t cap)
{
    return (pllm_prefix_store_params){.dir = g_dir,
                                      .max_bytes = cap,
                                      .ns = g_ns,
                                      .block_size = BS,
                                      .raw_bytes = RAW,
                                      .stale_seconds = -1, /* every temporary file is stale */
                                      .warn = on_warn};
}

static pllm_status create_store(pllm_prefix_store **s, size_t cap)
{
    pllm_prefix_store_params p = params(cap);
    return pllm_prefix_store_create(s, &p);
}

static void clear_dir(void)
{
    DIR *d = opendir(g_dir);
    for (struct dirent *de; d && (de = readdir(d));)
        if (de->d_name[0] != '.' || strncmp(de->d_name, ".tmp-", 5) == 0 ||
            strcmp(de->d_name, ".lock") == 0)
            if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
                unlinkat(dirfd(d), de->d_name, 0);
    if (d) closedir(d);
}

/* Entries and temporary files in the directory, and the entries' bytes. */
static void count_dir(int *n_entries, int *n_tmp, size_t *bytes)
{
    *n_entries = *n_tmp = 0;
    *bytes = 0;
    DIR *d = opendir(g_dir);
    for (struct dirent *de; d && (de = readdir(d));) {
        struct stat sb;
        if (fstatat(dirfd(d), de->d_name, &sb, 0) != 0 || !S_ISREG(sb.st_mode)) continue;
        if (strncmp(de->d_name, ".tmp-", 5) == 0) (*n_tmp)++;
        if (strstr(de->d_name, ".kvb")) {
            (*n_entries)++;
            *bytes += (size_t)sb.st_size;
        }
    }
    if (d) closedir(d);
}

static uint8_t *read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(*n + 1);
    if (fread(b, 1, *n, f) != *n) *n = 0;
    fclose(f);
    return b;
}

static void write_file(const char *path, const uint8_t *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f) return;
    fwrite(b, 1, n, f);
    fclose(f);
}

/* Every entry file in the directory is one of chain's blocks and loads whole and correct. */
static int verify_all(const chain *c, int32_t n, pllm_prefix_store *s, int *n_present)
{
    int bad = 0;
    *n_present = 0;
    uint8_t *kv = malloc(RAW), *want = malloc(RAW);
    for (int32_t i = 0; i < n; i++) {
        if (!pllm_prefix_store_has(s, c->keys[i])) continue;
        (*n_present)++;
        pllm_prefix_expect x = expect_of(c, i);
        bool hit = false;
        CHECK_OK(pllm_prefix_store_get(s, &x, kv, &hit));
        block_kv(i, want);
        if (!hit || memcmp(kv, want, RAW) != 0) bad++;
    }
    free(kv);
    free(want);
    return bad;
}

static void test_roundtrip_and_corruption(void)
{
    clear_dir();
    static chain c;
    make_chain(&c, 4);
    pllm_prefix_store *s = NULL;
    pllm_prefix_store_params p = params(0);
    CHECK_OK(pllm_prefix_store_create(&s, &p));
    if (!s) return;
    uint8_t kv[RAW], got[RAW];
    block_kv(1, kv);
    pllm_prefix_expect x = expect_of(&c, 1);
    bool hit = true;
    CHECK_OK(pllm_prefix_store_get(s, &x, got, &hit));
    CHECK(!hit);
    CHECK_OK(pllm_prefix_store_put(s, &x, kv));
    CHECK_OK(pllm_prefix_store_get(s, &x, got, &hit));
    CHECK(hit && memcmp(got, kv, RAW) == 0);
    CHECK_OK(pllm_prefix_store_put(s, &x, NULL)); /* already there: kv not read */
    pllm_prefix_store_stats st;
    pllm_prefix_store_get_stats(s, &st);
    CHECK(st.writes == 1 && st.skipped == 1 && st.hits == 1 && st.misses == 1);

    /* the same file asked for as another block: a mismatch, ignored, not removed */
    int32_t other[BS];
    memcpy(other, c.tokens[1], sizeof other);
    other[5]++;
    pllm_prefix_expect y = x;
    y.tokens = other;
    CHECK_OK(pllm_prefix_store_get(s, &y, got, &hit));
    CHECK(!hit);
    y = x;
    y.depth = 2;
    CHECK_OK(pllm_prefix_store_get(s, &y, got, &hit));
    CHECK(!hit);
    CHECK(pllm_prefix_store_has(s, x.key));
    pllm_prefix_store_get_stats(s, &st);
    CHECK(st.mismatched == 2 && st.corrupt == 0);

    char *path = pllm_prefix_store_path(s, x.key);
    size_t n = 0;
    uint8_t *orig = read_file(path, &n);
    CHECK(orig && n > PLLM_PREFIX_HEADER_BYTES(BS));
    /* every flipped byte (each bit position in turn): detected, reported, removed */
    int missed = 0, warned0 = g_warnings;
    int64_t corrupt0 = st.corrupt;
    for (size_t off = 0; orig && off < n; off++) {
        orig[off] ^= (uint8_t)(1u << (off % 8));
        write_file(path, orig, n);
        orig[off] ^= (uint8_t)(1u << (off % 8));
        hit = true;
        CHECK_OK(pllm_prefix_store_get(s, &x, got, &hit));
        if (hit) {
            missed++;
            if (missed < 4) fprintf(stderr, "flipped byte at offset %zu was trusted\n", off);
        }
        if (pllm_prefix_store_has(s, x.key)) missed++; /* not removed */
    }
    CHECK(missed == 0);
    pllm_prefix_store_get_stats(s, &st);
    CHECK(st.corrupt - corrupt0 == (int64_t)n);
    CHECK(g_warnings - warned0 == (int)n);
    /* every truncation, and one extra byte */
    missed = 0;
    corrupt0 = st.corrupt;
    for (size_t len = 0; orig && len <= n; len++) {
        write_file(path, orig, len < n ? len : n);
        if (len == n) {
            FILE *f = fopen(path, "ab");
            fputc(0, f);
            fclose(f);
        }
        hit = true;
        CHECK_OK(pllm_prefix_store_get(s, &x, got, &hit));
        if (hit) missed++;
    }
    CHECK(missed == 0);
    pllm_prefix_store_get_stats(s, &st);
    CHECK(st.corrupt - corrupt0 == (int64_t)n + 1);
    /* after all that, the original bytes load again */
    write_file(path, orig, n);
    CHECK_OK(pllm_prefix_store_get(s, &x, got, &hit));
    CHECK(hit && memcmp(got, kv, RAW) == 0);
    free(orig);
    free(path);
    pllm_prefix_store_free(s);
    printf("roundtrip: ok; %zu flipped bytes and %zu truncations detected and removed\n", n, n + 1);
}

/* A child process writes and is killed in the middle of its second write. */
static void die_on_second(void *arg)
{
    int *calls = arg;
    if (++*calls == 2) raise(SIGKILL);
}

static void test_kill_during_write(void)
{
    clear_dir();
    static chain c;
    make_chain(&c, 200);
    pid_t pid = fork();
    if (pid == 0) {
        int calls = 0;
        pllm_prefix_store *s = NULL;
        pllm_prefix_store_params p = params(0);
        p.stale_seconds = 3600; /* a fresh temporary file stays */
        p.fault_mid_write = die_on_second;
        p.fault_arg = &calls;
        if (pllm_prefix_store_create(&s, &p) != PLLM_OK) _exit(2);
        uint8_t kv[RAW];
        for (int32_t i = 0; i < 2; i++) {
            block_kv(i, kv);
            pllm_prefix_expect x = expect_of(&c, i);
            pllm_prefix_store_put(s, &x, kv);
        }
        _exit(3); /* not reached */
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    int n_entries, n_tmp;
    size_t bytes;
    count_dir(&n_entries, &n_tmp, &bytes);
    CHECK(n_entries == 1 && n_tmp == 1); /* block 0 whole; block 1 only as a temporary file */
    pllm_prefix_store *s = NULL;
    pllm_prefix_store_params p = params(0);
    p.stale_seconds = 3600;
    CHECK_OK(pllm_prefix_store_create(&s, &p));
    if (!s) return;
    int present = 0;
    CHECK(verify_all(&c, 2, s, &present) == 0 && present == 1);
    CHECK(!pllm_prefix_store_has(s, c.keys[1]));
    count_dir(&n_entries, &n_tmp, &bytes);
    CHECK(n_tmp == 1); /* not stale yet: it may be another run's write in progress */
    pllm_prefix_store_free(s);
    p.stale_seconds = -1; /* now it is */
    CHECK_OK(pllm_prefix_store_create(&s, &p));
    count_dir(&n_entries, &n_tmp, &bytes);
    CHECK(n_tmp == 0 && n_entries == 1);
    pllm_prefix_store_free(s);

    /* at random times: a writer of 200 blocks killed 8 times; whatever is there is whole */
    uint64_t r = 42;
    int killed = 0, total_present = 0;
    for (int round = 0; round < 8; round++) {
        pid = fork();
        if (pid == 0) {
            pllm_prefix_store *w = NULL;
            pllm_prefix_store_params wp = params(0);
            wp.stale_seconds = 3600;
            if (pllm_prefix_store_create(&w, &wp) != PLLM_OK) _exit(2);
            uint8_t kv[RAW];
            for (int32_t i = 0; i < 200; i++) {
                block_kv(i, kv);
                pllm_prefix_expect x = expect_of(&c, i);
                pllm_prefix_store_put(w, &x, kv);
            }
            pllm_prefix_store_free(w);
            _exit(0);
        }
        usleep((useconds_t)(100 + pllm_test_rand(&r) % 3000));
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        if (WIFSIGNALED(status)) killed++;
        CHECK_OK(create_store(&s, 0));
        if (!s) return;
        int present2 = 0;
        CHECK(verify_all(&c, 200, s, &present2) == 0);
        pllm_prefix_store_stats st;
        pllm_prefix_store_get_stats(s, &st);
        CHECK(st.corrupt == 0);
        total_present = present2;
        pllm_prefix_store_free(s);
    }
    printf("kill during write: ok (fixed point; %d of 8 random kills landed mid-run, %d blocks "
           "whole at the end)\n",
           killed, total_present);
}

/* Two writers on one directory with a cap of about 60 entries; each writes 150 blocks (100 in
 * common) and reads back the other's. */
static void test_two_writers(void)
{
    clear_dir();
    static chain c;
    make_chain(&c, 200);
    /* one entry's size, to set the cap */
    uint8_t kv[RAW];
    block_kv(0, kv);
    pllm_prefix_expect x0 = expect_of(&c, 0);
    uint8_t *enc = NULL;
    size_t entry = 0;
    CHECK_OK(pllm_prefix_entry_encode(&enc, &entry, &x0, kv, 1));
    free(enc);
    size_t cap = 60 * entry;
    pid_t pids[2];
    for (int w = 0; w < 2; w++) {
        pids[w] = fork();
        if (pids[w] == 0) {
            pllm_prefix_store *s = NULL;
            pllm_prefix_store_params p = params(cap);
            p.stale_seconds = 3600; /* never take the other writer's file in progress */
            if (pllm_prefix_store_create(&s, &p) != PLLM_OK) _exit(2);
            uint8_t b[RAW], want[RAW];
            int bad = 0;
            for (int32_t k = 0; k < 150; k++) {
                int32_t i = w == 0 ? k : 199 - k;
                block_kv(i, b);
                pllm_prefix_expect x = expect_of(&c, i);
                pllm_prefix_store_put(s, &x, b);
                int32_t j = (i * 7 + 3) % 200; /* read some block, maybe the other's */
                pllm_prefix_expect y = expect_of(&c, j);
                bool hit = false;
                if (pllm_prefix_store_get(s, &y, b, &hit) != PLLM_OK) bad++;
                block_kv(j, want);
                if (hit && memcmp(b, want, RAW) != 0) bad++;
            }
            pllm_prefix_store_stats st;
            pllm_prefix_store_get_stats(s, &st);
            pllm_prefix_store_free(s);
            _exit(bad ? 10 : st.corrupt ? 11 : st.write_errors ? 12 : 0);
        }
    }
    for (int w = 0; w < 2; w++) {
        int status = 0;
        waitpid(pids[w], &status, 0);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status))
            fprintf(stderr, "writer %d: status %d\n", w, status);
    }
    int n_entries, n_tmp;
    size_t bytes;
    count_dir(&n_entries, &n_tmp, &bytes);
    CHECK(n_tmp == 0);
    /* each writer trims when its own count passes the cap or after cap/8 of writes, so the
     * other's writes since its last trim (< cap/8 plus an entry) are the most the cap is
     * exceeded by; the next run's store trims it (below) */
    CHECK(bytes <= cap + cap / 8 + entry);
    CHECK(n_entries > 0);
    pllm_prefix_store *s = NULL;
    CHECK_OK(create_store(&s, cap)); /* may trim to 7/8 of the cap */
    if (!s) return;
    count_dir(&n_entries, &n_tmp, &bytes);
    CHECK(bytes <= cap);
    int present = 0;
    CHECK(verify_all(&c, 200, s, &present) == 0);
    CHECK(present == n_entries);
    pllm_prefix_store_free(s);
    printf("two writers: ok (%d entries, %zu bytes under a cap of %zu)\n", n_entries, bytes, cap);
}

/* The cap across runs: least recently used first, a hit refreshes. */
static void test_cap_lru(void)
{
    clear_dir();
    static chain c;
    make_chain(&c, 10);
    pllm_prefix_store *s = NULL;
    CHECK_OK(create_store(&s, 0));
    if (!s) return;
    uint8_t kv[RAW];
    for (int32_t i = 0; i < 10; i++) {
        block_kv(i, kv);
        pllm_prefix_expect x = expect_of(&c, i);
        CHECK_OK(pllm_prefix_store_put(s, &x, kv));
        /* entry i last used i seconds after the epoch's first hour: a strict order */
        char *path = pllm_prefix_store_path(s, c.keys[i]);
        struct timespec ts[2] = {{3600 + i, 0}, {3600 + i, 0}};
        utimensat(AT_FDCWD, path, ts, 0);
        free(path);
    }
    int n_entries, n_tmp;
    size_t bytes;
    count_dir(&n_entries, &n_tmp, &bytes);
    CHECK(n_entries == 10);
    pllm_prefix_expect x2 = expect_of(&c, 2);
    bool hit = false;
    CHECK_OK(pllm_prefix_store_get(s, &x2, kv, &hit)); /* block 2 is now the most recent */
    CHECK(hit);
    pllm_prefix_store_free(s);
    /* a later run with a cap of 5.5 entries keeps at most 7/8 of it: 4 entries */
    size_t entry = bytes / 10;
    CHECK_OK(create_store(&s, entry * 11 / 2));
    if (!s) return;
    count_dir(&n_entries, &n_tmp, &bytes);
    CHECK(n_entries == 4);
    CHECK(pllm_prefix_store_has(s, c.keys[2]));
    for (int32_t i = 7; i < 10; i++) CHECK(pllm_prefix_store_has(s, c.keys[i]));
    pllm_prefix_store_stats st;
    pllm_prefix_store_get_stats(s, &st);
    CHECK(st.evicted == 6);
    pllm_prefix_store_free(s);
    printf("cap: ok (LRU across runs, a hit refreshes)\n");
}

/* A save that cannot complete (here: a file size limit, as a full disk) is counted and warned
 * about once; the caller goes on; nothing is left behind. */
static void test_write_failure(void)
{
    clear_dir();
    static chain c;
    make_chain(&c, 3);
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit rl = {.rlim_cur = 200, .rlim_max = 200};
        if (setrlimit(RLIMIT_FSIZE, &rl) != 0) _exit(2);
        g_warnings = 0;
        pllm_prefix_store *s = NULL;
        if (create_store(&s, 0) != PLLM_OK) _exit(3);
        uint8_t kv[RAW];
        for (int32_t i = 0; i < 3; i++) {
            block_kv(i, kv);
            pllm_prefix_expect x = expect_of(&c, i);
            if (pllm_prefix_store_put(s, &x, kv) != PLLM_OK) _exit(4);
        }
        pllm_prefix_store_stats st;
        pllm_prefix_store_get_stats(s, &st);
        pllm_prefix_expect x = expect_of(&c, 0);
        bool hit = true;
        if (pllm_prefix_store_get(s, &x, kv, &hit) != PLLM_OK || hit) _exit(5);
        pllm_prefix_store_free(s);
        _exit(st.write_errors == 3 && st.writes == 0 && g_warnings == 1 ? 0 : 6);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    int n_entries, n_tmp;
    size_t bytes;
    count_dir(&n_entries, &n_tmp, &bytes);
    CHECK(n_entries == 0 && n_tmp == 0);
    printf("write failure: ok (counted, warned once, nothing left behind; status %d)\n", status);
}

static void test_bad_dir(void)
{
    pllm_prefix_store *s = NULL;
    pllm_prefix_store_params p = params(0);
    char file[600];
    snprintf(file, sizeof file, "%s/not_a_dir", g_dir);
    write_file(file, (const uint8_t *)"x", 1);
    p.dir = file;
    CHECK(pllm_prefix_store_create(&s, &p) != PLLM_OK && !s);
    CHECK(strstr(pllm_errmsg(), "not_a_dir") != NULL);
    unlink(file);
}

int main(void)
{
    const char *tmp = pllm_test_env("PLLM_TEST_TMP", "/tmp");
    snprintf(g_dir, sizeof g_dir, "%s/engine_prefix_store_%ld", tmp, (long)getpid());
    mkdir(tmp, 0755);
    mkdir(g_dir, 0755);
    test_roundtrip_and_corruption();
    test_kill_during_write();
    test_two_writers();
    test_cap_lru();
    test_write_failure();
    test_bad_dir();
    clear_dir();
    rmdir(g_dir);
    return pllm_test_finish("engine_prefix_store");
}
