/*
 * fuzz_io.c: the dataset byte streams (datasets/io.h) and the --resume reader of output files
 * (datasets/idset.h), on arbitrary file contents. The first byte picks the mode:
 *   0: a plain input file read line by line: the lines joined with '\n' give back the file
 *      (the last newline optional; a UTF-8 byte order mark at the start is dropped, as io.h
 *      says), every line number in order; the same bytes gzip-compressed (zlib) read back to
 *      the same lines (the reader tells compression by the magic bytes, not the name); bytes
 *      that start with a zstd or gzip magic are read as such (any error has a message, under
 *      the same decompressed-size cap as mode 1);
 *   1: the same bytes as a .zst input file: any error has a message; lines never hold '\n';
 *   2: the bytes as an existing output file for --resume: after loading, the file is whole
 *      lines only (empty or ending in '\n', a torn tail cut off), and every counted id is in
 *      the set;
 *   5: the bytes as an existing .zst output for --resume (a killed writer leaves a frame
 *      without its end; the loader rewrites the whole lines into a fresh stream): any error
 *      has a message, and after a successful load the file decompresses cleanly to whole lines;
 *   3, 4: the bytes as a prompt file through pllm_source (datasets/source.h: JSON lines or one
 *      JSON list, format detected, or forced to pllm by mode 4): every record handed out is
 *      good (no error) or bad with a message, records come in file order, and the source
 *      stops only at the end or with an error that has a message.
 *
 * Decompressed-size cap (modes 1 and 5, and any input starting with a zstd or gzip magic, which
 * every mode decompresses): a .zst input that decompresses to more than
 * FUZZ_ZST_MAX_OUT bytes (1 MiB) or more than FUZZ_ZST_MAX_LINES newlines (1024) is skipped
 * (returns -1: libFuzzer runs it but does not add it to the corpus), the way -max_len caps
 * the input itself. A few dozen bytes of zstd can expand to hundreds of MB (an RLE block of
 * newlines), which the reader splits into millions of lines and mode 5 parses as JSON and
 * recompresses, line by line: seconds per input under ASan (~7 us a line, ~70 ns a byte).
 * Such inputs filled the corpus until the io target ran at ~150 exec/s instead of thousands.
 * The size is measured first by a streaming decompress of the input into a scratch buffer
 * that stops as soon as either cap is passed (or at the first error, or at the end of the
 * input, where the reader stops too). 1 MiB is 4x the reader's first buffer (4 x 64 KiB), so
 * buffer growth on long lines is still fuzzed; 1024 lines is far past what coverage can tell
 * apart (libFuzzer's loop counters stop at 128+). Over-long lines (PLLM_READER_MAX_LINE, 256
 * MiB) were never reachable here (-max_len, the RSS limit); tests/ cover them. Inputs under
 * the caps are checked exactly as before. This is a harness limit only: the product reads
 * .zst inputs of any size.
 */
#include "tests/fuzz/fuzz_common.h"

#include "datasets/idset.h"
#include "datasets/io.h"
#include "datasets/source.h"

#include <string.h>
#include <sys/stat.h>
#include <zlib.h>
#include <zstd.h>

#define FUZZ_ZST_MAX_OUT ((size_t)1 << 20)
#define FUZZ_ZST_MAX_LINES 1024

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

/* Whether the zstd stream p[0..n) decompresses to more than FUZZ_ZST_MAX_OUT bytes or more
 * than FUZZ_ZST_MAX_LINES newlines, counted up to the first error or the end of the input (as
 * datasets/io.c's reader would read it) and no further than a cap. */
static bool zst_over_cap(const uint8_t *p, size_t n)
{
    static ZSTD_DCtx *dctx; /* kept for the process (reachable, not a leak) */
    static unsigned char out[1 << 16];
    if (!dctx) dctx = ZSTD_createDCtx();
    FUZZ_CHECK(dctx != NULL, "ZSTD_createDCtx");
    ZSTD_DCtx_reset(dctx, ZSTD_reset_session_only);
    ZSTD_inBuffer in = {p, n, 0};
    size_t total = 0, lines = 0;
    for (;;) {
        ZSTD_outBuffer ob = {out, sizeof out, 0};
        size_t in_before = in.pos;
        size_t ret = ZSTD_decompressStream(dctx, &ob, &in);
        if (ZSTD_isError(ret)) return false;
        total += ob.pos;
        if (total > FUZZ_ZST_MAX_OUT) return true;
        const unsigned char *q = out, *end = out + ob.pos;
        while ((q = memchr(q, '\n', (size_t)(end - q))) != NULL) {
            if (++lines > FUZZ_ZST_MAX_LINES) return true;
            q++;
        }
        /* go on while input is left or a full output buffer may leave bytes to flush */
        if (in.pos == in.size && ob.pos < ob.size) return false;
        if (ob.pos == 0 && in.pos == in_before) return false; /* no progress */
    }
}

/* The gzip counterpart of zst_over_cap (concatenated members included). */
static bool gz_over_cap(const uint8_t *p, size_t n)
{
    static unsigned char out[1 << 16];
    z_stream z;
    memset(&z, 0, sizeof z);
    FUZZ_CHECK(inflateInit2(&z, 15 + 16) == Z_OK, "inflateInit2");
    z.next_in = (unsigned char *)p;
    z.avail_in = (unsigned)n;
    size_t total = 0, lines = 0;
    bool over = false;
    while (!over) {
        z.next_out = out;
        z.avail_out = sizeof out;
        int ret = inflate(&z, Z_NO_FLUSH);
        size_t got = sizeof out - z.avail_out;
        total += got;
        for (size_t i = 0; i < got; i++) lines += out[i] == '\n';
        over = total > FUZZ_ZST_MAX_OUT || lines > FUZZ_ZST_MAX_LINES;
        if (ret == Z_STREAM_END && z.avail_in > 0) {
            if (inflateReset(&z) != Z_OK) break;
            continue;
        }
        if (ret != Z_OK || (got == 0 && z.avail_in == 0)) break;
    }
    inflateEnd(&z);
    return over;
}

static void check_lines(const char *path, const uint8_t *p, size_t n);

static void read_plain(const uint8_t *p, size_t n)
{
    fuzz_write_file(fuzz_scratch_dir(), "in.jsonl", p, n);
    char *path = path_of("in.jsonl");
    if (pllm_compression_of(p, n) != PLLM_COMPRESSION_NONE) {
        /* compressed by its first bytes: read as such; errors have messages */
        pllm_reader *r;
        pllm_status st = pllm_reader_open(&r, path);
        FUZZ_ERR_HAS_MSG(st);
        for (int i = 0; st == PLLM_OK && i < 100000; i++) {
            const char *line;
            size_t len;
            int64_t no;
            bool eof = false;
            st = pllm_reader_next(r, &line, &len, &no, &eof);
            FUZZ_ERR_HAS_MSG(st);
            if (st == PLLM_ERR_RANGE) st = PLLM_OK; /* an over-long line: reading goes on */
            if (st != PLLM_OK || eof) break;
        }
        if (r) pllm_reader_close(r);
        free(path);
        return;
    }
    check_lines(path, p, n);
    free(path);
    /* the same bytes through gzip */
    char *gpath = path_of("in.gz");
    gzFile gz = gzopen(gpath, "wb1");
    FUZZ_CHECK(gz != NULL, "gzopen");
    FUZZ_CHECK(n == 0 || gzwrite(gz, p, (unsigned)n) == (int)n, "gzwrite");
    FUZZ_CHECK(gzclose(gz) == Z_OK, "gzclose");
    check_lines(gpath, p, n);
    free(gpath);
}

/* Read path line by line: the lines must give back p[0..n) (mode 0's invariant). */
static void check_lines(const char *path, const uint8_t *p, size_t n)
{
    pllm_reader *r;
    FUZZ_CHECK(pllm_reader_open(&r, path) == PLLM_OK, "open: %s", pllm_errmsg());
    size_t off = n >= 3 && memcmp(p, "\xef\xbb\xbf", 3) == 0 ? 3 : 0; /* the BOM is dropped */
    int64_t expect_no = 1;
    for (;;) {
        const char *line;
        size_t len;
        int64_t no;
        bool eof;
        FUZZ_CHECK(pllm_reader_next(r, &line, &len, &no, &eof) == PLLM_OK, "read: %s", pllm_errmsg());
        if (eof) break;
        FUZZ_CHECK(no == expect_no++, "line number %lld", (long long)no);
        FUZZ_CHECK(len <= n - off && memcmp(line, p + off, len) == 0 && line[len] == 0, "line %lld differs", (long long)no);
        off += len;
        if (off < n) {
            FUZZ_CHECK(p[off] == '\n', "line %lld not ended by a newline", (long long)no);
            off++;
        }
    }
    FUZZ_CHECK(off == n, "lines cover %zu of %zu bytes", off, n);
    pllm_reader_close(r);
}

static void read_zst(const uint8_t *p, size_t n)
{
    fuzz_write_file(fuzz_scratch_dir(), "in.jsonl.zst", p, n);
    char *path = path_of("in.jsonl.zst");
    pllm_reader *r;
    FUZZ_CHECK(pllm_reader_open(&r, path) == PLLM_OK, "open: %s", pllm_errmsg());
    for (int i = 0; i < 100000; i++) {
        const char *line;
        size_t len;
        int64_t no;
        bool eof;
        pllm_status st = pllm_reader_next(r, &line, &len, &no, &eof);
        FUZZ_ERR_HAS_MSG(st);
        if (st != PLLM_OK || eof) break;
        FUZZ_CHECK(memchr(line, '\n', len) == NULL && line[len] == 0, "line with a newline");
    }
    pllm_reader_close(r);
    free(path);
}

static void resume(const uint8_t *p, size_t n)
{
    fuzz_write_file(fuzz_scratch_dir(), "out.jsonl", p, n);
    char *path = path_of("out.jsonl");
    pllm_idset *s;
    FUZZ_CHECK(pllm_idset_create(&s) == PLLM_OK, "idset");
    int64_t n_lines;
    bool torn;
    pllm_status st = pllm_idset_load_output(s, path, &n_lines, &torn);
    if (pllm_compression_of(p, n) != PLLM_COMPRESSION_NONE) {
        /* compressed content under a plain name: refused (lines would be appended in plain) */
        FUZZ_CHECK(st == PLLM_ERR_FORMAT && pllm_errmsg()[0], "compressed plain-named output: %d",
                   st);
        pllm_idset_free(s);
        free(path);
        return;
    }
    FUZZ_CHECK(st == PLLM_OK, "load_output: %s", pllm_errmsg());
    struct stat sb;
    FUZZ_CHECK(stat(path, &sb) == 0, "stat");
    size_t sz = (size_t)sb.st_size;
    FUZZ_CHECK(sz <= n && (sz == 0 || p[sz - 1] == '\n'), "after load: %zu of %zu bytes, not whole lines", sz, n);
    FUZZ_CHECK(torn == (sz != n), "torn=%d but %zu -> %zu bytes", torn, n, sz);
    FUZZ_CHECK(n_lines >= 0 && (size_t)n_lines <= sz, "n_lines %lld", (long long)n_lines);
    FUZZ_CHECK(pllm_idset_size(s) <= (size_t)n_lines, "more ids than lines");
    pllm_idset_free(s);
    free(path);
}

static void resume_zst(const uint8_t *p, size_t n)
{
    fuzz_write_file(fuzz_scratch_dir(), "out.jsonl.zst", p, n);
    char *path = path_of("out.jsonl.zst");
    pllm_idset *s;
    FUZZ_CHECK(pllm_idset_create(&s) == PLLM_OK, "idset");
    int64_t n_lines;
    bool torn;
    pllm_status st = pllm_idset_load_output(s, path, &n_lines, &torn);
    FUZZ_ERR_HAS_MSG(st);
    if (st == PLLM_OK) {
        /* what is left must read back cleanly, line by line */
        pllm_reader *r;
        FUZZ_CHECK(pllm_reader_open(&r, path) == PLLM_OK, "reopen: %s", pllm_errmsg());
        for (int i = 0; i < 100000; i++) {
            const char *line;
            size_t len;
            int64_t no;
            bool eof;
            st = pllm_reader_next(r, &line, &len, &no, &eof);
            FUZZ_CHECK(st == PLLM_OK, "after a successful --resume load the .zst output does not read back: %s",
                       pllm_errmsg());
            if (eof) break;
        }
        pllm_reader_close(r);
    }
    pllm_idset_free(s);
    free(path);
}

static void source(const uint8_t *p, size_t n, pllm_format fmt)
{
    fuzz_write_file(fuzz_scratch_dir(), "prompts.json", p, n);
    char *path = path_of("prompts.json");
    pllm_source *src = NULL;
    pllm_status st = pllm_source_open(&src, path, fmt);
    FUZZ_ERR_HAS_MSG(st);
    if (st == PLLM_OK) {
        pllm_request_params defaults;
        pllm_request_params_defaults(&defaults);
        int64_t last_line = 0, last_elem = 0;
        for (int i = 0; i < 100000; i++) {
            pllm_record rec;
            bool eof = false;
            memset(&rec, 0, sizeof rec);
            st = pllm_source_next(src, &defaults, &rec, &eof);
            FUZZ_ERR_HAS_MSG(st);
            if (st != PLLM_OK || eof) {
                pllm_record_free(&rec);
                break;
            }
            FUZZ_CHECK(rec.error == NULL || rec.error[0], "bad record without a message");
            FUZZ_CHECK(rec.line >= last_line && (rec.element == 0 || rec.element > last_elem), "record order: line %lld "
                       "element %lld after %lld/%lld", (long long)rec.line, (long long)rec.element, (long long)last_line,
                       (long long)last_elem);
            last_line = rec.line;
            last_elem = rec.element;
            char *key = pllm_record_key(&rec);
            FUZZ_CHECK(key != NULL, "record key");
            free(key);
            pllm_record_free(&rec);
        }
    }
    pllm_source_close(src);
    free(path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0) return 0;
    int mode = data[0] % 6;
    /* every mode reads compressed content by its magic bytes: the caps apply to all */
    pllm_compression c = pllm_compression_of(data + 1, size - 1);
    if ((mode == 1 || mode == 5 || c == PLLM_COMPRESSION_ZSTD) && zst_over_cap(data + 1, size - 1))
        return -1;
    if (c == PLLM_COMPRESSION_GZIP && gz_over_cap(data + 1, size - 1)) return -1;
    switch (mode) {
    case 0: read_plain(data + 1, size - 1); break;
    case 1: read_zst(data + 1, size - 1); break;
    case 2: resume(data + 1, size - 1); break;
    case 3: source(data + 1, size - 1, PLLM_FORMAT_AUTO); break;
    case 4: source(data + 1, size - 1, PLLM_FORMAT_PLLM); break;
    default: resume_zst(data + 1, size - 1); break;
    }
    return 0;
}
