/* datasets_ordered_writer: the output of a run in completion and input order
 * (datasets/ordered_writer.h): out-of-order arrival through the reorder ring (wrapping around),
 * several lines per request, the ring's room, lines held during a step then released or
 * dropped, a request cancelled and reopened, placeholders of a resumed run, the flush of an
 * interrupted run (finished lines behind a missing one), and a failing write. */
#include "datasets/ordered_writer.h"
#include "tests/testutil.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static char g_dir[512];

static const char *tmp_path(const char *name)
{
    static char p[1024];
    snprintf(p, sizeof p, "%s/%s", g_dir, name);
    return p;
}

/* The file's lines joined by ' ' ("" when empty). */
static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return pllm_strdup("<missing>");
    char *s = calloc(1, 1 << 16);
    size_t n = fread(s, 1, (1 << 16) - 1, f);
    fclose(f);
    s[n] = 0;
    while (n > 0 && s[n - 1] == '\n') s[--n] = 0;
    for (size_t i = 0; i < n; i++)
        if (s[i] == '\n') s[i] = ' ';
    return s;
}

static void check_file(const char *path, const char *want, int line)
{
    char *got = slurp(path);
    if (strcmp(got, want)) {
        fprintf(stderr, "%s:%d: file holds \"%s\", want \"%s\"\n", __FILE__, line, got, want);
        pllm_test_failures++;
    }
    free(got);
}
#define CHECK_FILE(path, want) check_file(path, want, __LINE__)

static void put(pllm_ordered_writer *ow, int64_t seq, int32_t k, const char *s)
{
    pllm_ordered_writer_put(ow, seq, k, pllm_strdup(s));
}

static void hold(pllm_ordered_writer *ow, int64_t seq, int32_t k, const char *s)
{
    pllm_ordered_writer_hold(ow, seq, k, pllm_strdup(s));
}

static void test_completion_order(void)
{
    const char *path = tmp_path("completion.jsonl");
    pllm_writer *w;
    CHECK_OK(pllm_writer_open(&w, path, false));
    pllm_ordered_writer ow;
    CHECK_OK(pllm_ordered_writer_init(&ow, w, PLLM_ORDER_COMPLETION, 0));
    CHECK(pllm_ordered_writer_has_room(&ow, 1000000));
    CHECK_OK(pllm_ordered_writer_open(&ow, 5, 2)); /* a no-op: lines go out as they come */
    put(&ow, 5, 1, "e1");
    put(&ow, 2, 0, "b0");
    put(&ow, 5, 0, ""); /* written by an earlier run: not written again */
    put(&ow, 5, 0, "e0");
    CHECK_FILE(path, "e1 b0 e0");
    CHECK(ow.n_lines == 3);
    CHECK(ow.write_st == PLLM_OK);
    pllm_ordered_writer_flush_all(&ow); /* nothing held */
    CHECK(ow.n_lines == 3);
    pllm_ordered_writer_free(&ow);
    CHECK_OK(pllm_writer_close(w));
}

/* Out-of-order arrival, several lines per request, and the ring's room. */
static void test_input_order(void)
{
    const char *path = tmp_path("input.jsonl");
    pllm_writer *w;
    CHECK_OK(pllm_writer_open(&w, path, false));
    pllm_ordered_writer ow;
    CHECK_OK(pllm_ordered_writer_init(&ow, w, PLLM_ORDER_INPUT, 3));
    CHECK_OK(pllm_ordered_writer_open(&ow, 0, 1));
    CHECK_OK(pllm_ordered_writer_open(&ow, 1, 3));
    CHECK_OK(pllm_ordered_writer_open(&ow, 2, 1));
    CHECK(!pllm_ordered_writer_has_room(&ow, 3)); /* three open past the head */
    put(&ow, 2, 0, "c0");
    put(&ow, 1, 2, "b2");
    put(&ow, 1, 0, "b0");
    CHECK_FILE(path, ""); /* request 0 holds everything back */
    CHECK(ow.n_lines == 0);
    put(&ow, 0, 0, "a0");
    CHECK_FILE(path, "a0"); /* request 1 still misses a line */
    CHECK(pllm_ordered_writer_has_room(&ow, 3) && !pllm_ordered_writer_has_room(&ow, 4));
    CHECK_OK(pllm_ordered_writer_open(&ow, 3, 2));
    put(&ow, 3, 1, "d1");
    put(&ow, 3, 0, "d0");
    put(&ow, 1, 1, ""); /* a completion an earlier run wrote: fills its place */
    CHECK_FILE(path, "a0 b0 b2 c0 d0 d1");
    CHECK(ow.n_lines == 6 && ow.head == 4);
    /* wrap the ring several times, each window arriving backwards */
    for (int64_t base = 4; base < 13; base += 3) {
        for (int64_t s = base; s < base + 3; s++) CHECK_OK(pllm_ordered_writer_open(&ow, s, 1));
        for (int64_t s = base + 2; s >= base; s--) {
            char t[16];
            snprintf(t, sizeof t, "r%lld", (long long)s);
            put(&ow, s, 0, t);
        }
    }
    CHECK_FILE(path, "a0 b0 b2 c0 d0 d1 r4 r5 r6 r7 r8 r9 r10 r11 r12");
    CHECK(ow.head == 13);
    CHECK(ow.write_st == PLLM_OK);
    pllm_ordered_writer_free(&ow);
    CHECK_OK(pllm_writer_close(w));
}

/* A step's lines wait until release: written (in order) or dropped. */
static void test_hold_release(void)
{
    for (int order = 0; order < 2; order++) {
        const char *path = tmp_path(order ? "held_input.jsonl" : "held_completion.jsonl");
        pllm_writer *w;
        CHECK_OK(pllm_writer_open(&w, path, false));
        pllm_ordered_writer ow;
        CHECK_OK(
            pllm_ordered_writer_init(&ow, w, order ? PLLM_ORDER_INPUT : PLLM_ORDER_COMPLETION, 8));
        for (int64_t s = 0; s < 4; s++) CHECK_OK(pllm_ordered_writer_open(&ow, s, 1));
        hold(&ow, 1, 0, "b");
        hold(&ow, 0, 0, "a");
        CHECK_FILE(path, "");
        CHECK(ow.n_pending == 2);
        pllm_ordered_writer_release(&ow, true);
        CHECK(ow.n_pending == 0);
        CHECK_FILE(path, order ? "a b" : "b a");
        /* a step whose weights changed: its lines are dropped, never written */
        hold(&ow, 3, 0, "d-bad");
        hold(&ow, 2, 0, "c-bad");
        pllm_ordered_writer_release(&ow, false);
        CHECK(ow.n_pending == 0);
        CHECK_FILE(path, order ? "a b" : "b a");
        /* more lines than the first allocation holds */
        for (int64_t s = 2; s < 4; s++) {
            for (int i = 0; i < 100; i++) hold(&ow, 100, 0, "x-bad");
            pllm_ordered_writer_release(&ow, false);
        }
        hold(&ow, 3, 0, "d");
        hold(&ow, 2, 0, "c");
        pllm_ordered_writer_release(&ow, true);
        CHECK_FILE(path, order ? "a b c d" : "b a d c");
        hold(&ow, 4, 0, "never"); /* freed by _free (ASan: no leak) */
        CHECK(ow.write_st == PLLM_OK);
        pllm_ordered_writer_free(&ow);
        CHECK_OK(pllm_writer_close(w));
    }
}

/* A request that never runs: its slot is cancelled and reopened for one error line. */
static void test_cancel(void)
{
    const char *path = tmp_path("cancel.jsonl");
    pllm_writer *w;
    CHECK_OK(pllm_writer_open(&w, path, false));
    pllm_ordered_writer ow;
    CHECK_OK(pllm_ordered_writer_init(&ow, w, PLLM_ORDER_INPUT, 2));
    CHECK_OK(pllm_ordered_writer_open(&ow, 0, 4));
    pllm_ordered_writer_cancel(&ow, 0);
    CHECK_OK(pllm_ordered_writer_open(&ow, 0, 1));
    put(&ow, 0, 0, "err0");
    CHECK_FILE(path, "err0");
    CHECK(ow.head == 1);
    pllm_ordered_writer_free(&ow);
    CHECK_OK(pllm_writer_close(w));
}

/* An interrupted run: what finished behind a missing request is written, in input order. */
static void test_flush_all(void)
{
    const char *path = tmp_path("flush.jsonl");
    pllm_writer *w;
    CHECK_OK(pllm_writer_open(&w, path, false));
    pllm_ordered_writer ow;
    CHECK_OK(pllm_ordered_writer_init(&ow, w, PLLM_ORDER_INPUT, 4));
    CHECK_OK(pllm_ordered_writer_open(&ow, 0, 1));
    put(&ow, 0, 0, "a0");
    for (int64_t s = 1; s < 5; s++) CHECK_OK(pllm_ordered_writer_open(&ow, s, 2));
    put(&ow, 4, 1, "e1"); /* the ring wraps: 4 sits before 1..3 in memory */
    put(&ow, 3, 0, "d0");
    put(&ow, 3, 1, "d1");
    put(&ow, 2, 1, "c1"); /* half of request 2 */
    /* request 1 never finishes */
    CHECK_FILE(path, "a0");
    hold(&ow, 4, 0, "e0-unchecked"); /* a step that never completed: not part of the flush */
    pllm_ordered_writer_flush_all(&ow);
    CHECK_FILE(path, "a0 c1 d0 d1 e1");
    CHECK(ow.n_lines == 5);
    pllm_ordered_writer_release(&ow, false);
    pllm_ordered_writer_free(&ow);
    CHECK_OK(pllm_writer_close(w));
}

/* A failing write is kept; nothing is written after it. A NULL line is out of memory. */
static void test_write_error(void)
{
    pllm_writer *w;
    if (pllm_writer_open(&w, "/dev/full", false) != PLLM_OK) {
        fprintf(stderr, "%s:%d: cannot open /dev/full: %s\n", __FILE__, __LINE__, pllm_errmsg());
        pllm_test_failures++;
        return;
    }
    pllm_ordered_writer ow;
    CHECK_OK(pllm_ordered_writer_init(&ow, w, PLLM_ORDER_INPUT, 2));
    CHECK_OK(pllm_ordered_writer_open(&ow, 0, 1));
    CHECK_OK(pllm_ordered_writer_open(&ow, 1, 1));
    put(&ow, 1, 0, "b");
    CHECK(ow.write_st == PLLM_OK); /* held, not yet written */
    put(&ow, 0, 0, "a");
    CHECK(ow.write_st == PLLM_ERR_IO);
    CHECK(ow.n_lines == 0);
    CHECK(ow.head == 2); /* both left the ring (freed) although neither was written */
    CHECK_OK(pllm_ordered_writer_open(&ow, 2, 1));
    put(&ow, 2, 0, "c");
    CHECK(ow.write_st == PLLM_ERR_IO && ow.n_lines == 0);
    pllm_ordered_writer_free(&ow);
    pllm_writer_close(w);

    /* out of memory serialising a line: the run stops writing (completion order) */
    const char *path = tmp_path("nomem.jsonl");
    CHECK_OK(pllm_writer_open(&w, path, false));
    CHECK_OK(pllm_ordered_writer_init(&ow, w, PLLM_ORDER_COMPLETION, 0));
    put(&ow, 0, 0, "a");
    pllm_ordered_writer_hold(&ow, 1, 0, NULL);
    CHECK(ow.write_st == PLLM_ERR_NOMEM);
    CHECK(strstr(pllm_errmsg(), "output line") != NULL);
    put(&ow, 2, 0, "c");
    CHECK_FILE(path, "a");
    CHECK(ow.n_lines == 1);
    pllm_ordered_writer_free(&ow);
    CHECK_OK(pllm_writer_close(w));

    /* a zeroed struct frees; a ring of no slot is refused */
    pllm_ordered_writer z;
    memset(&z, 0, sizeof z);
    pllm_ordered_writer_free(&z);
    CHECK(pllm_ordered_writer_init(&z, NULL, PLLM_ORDER_INPUT, 0) == PLLM_ERR_INVALID);
    pllm_ordered_writer_free(&z);
}

int main(void)
{
    snprintf(g_dir, sizeof g_dir, "%s/datasets_ordered_writer",
             pllm_test_env("PLLM_TEST_TMP", "/tmp"));
    if (mkdir(g_dir, 0700) != 0 && errno != EEXIST) {
        fprintf(stderr, "cannot create %s: %s\n", g_dir, strerror(errno));
        return 1;
    }
    test_completion_order();
    test_input_order();
    test_hold_release();
    test_cancel();
    test_flush_all();
    test_write_error();
    return pllm_test_finish("datasets_ordered_writer");
}
