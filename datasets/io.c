#include "datasets/io.h"

#include <errno.h>
#include <stdio_ext.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#define IO_CHUNK (1 << 16)

bool pllm_path_is_zst(const char *path)
{
    size_t n = strlen(path);
    return n > 4 && strcmp(path + n - 4, ".zst") == 0;
}

pllm_compression pllm_compression_of(const unsigned char *p, size_t n)
{
    if (n >= 4 && p[0] == 0x28 && p[1] == 0xb5 && p[2] == 0x2f && p[3] == 0xfd)
        return PLLM_COMPRESSION_ZSTD;
    /* a zstd skippable frame (0x184D2A50..5F, little-endian) may come first */
    if (n >= 4 && (p[0] & 0xf0) == 0x50 && p[1] == 0x2a && p[2] == 0x4d && p[3] == 0x18)
        return PLLM_COMPRESSION_ZSTD;
    if (n >= 2 && p[0] == 0x1f && p[1] == 0x8b) return PLLM_COMPRESSION_GZIP;
    return PLLM_COMPRESSION_NONE;
}

static pllm_status reader_grow(pllm_reader *r);
static pllm_status read_fd(pllm_reader *r, void *dst, size_t cap, size_t *n);

struct pllm_reader {
    char *path;
    FILE *f;
    bool is_stdin;
    pllm_compression comp;
    ZSTD_DStream *zd;   /* zstd input */
    z_stream *gz;       /* gzip input */
    unsigned char *zin; /* compressed input buffer */
    ZSTD_inBuffer zib;
    bool zin_eof;
    bool frame_done; /* the last decompress call ended a frame (gzip: a member) */
    char *buf;       /* decompressed (or raw) bytes not yet consumed */
    size_t buf_start, buf_end, buf_cap;
    bool src_eof;
    char *line; /* the line handed out */
    size_t line_cap;
    int64_t lineno;
    bool bom_checked;   /* a leading UTF-8 BOM was looked for */
    bool truncated;     /* the .zst stream ended inside a frame */
    bool skip_line;     /* an over-long line was reported: drop bytes through its newline */
    uint64_t file_pos;  /* bytes read from the file */
    uint64_t file_size; /* 0 when unknown */
};

pllm_status pllm_reader_open(pllm_reader **out, const char *path)
{
    *out = NULL;
    pllm_reader *r = pllm_calloc(1, sizeof *r);
    if (!r) return PLLM_ERR_NOMEM;
    r->path = pllm_strdup(strcmp(path, "-") == 0 ? "<stdin>" : path);
    if (!r->path) {
        free(r);
        return PLLM_ERR_NOMEM;
    }
    if (strcmp(path, "-") == 0) {
        r->f = stdin;
        r->is_stdin = true;
    } else {
        r->f = fopen(path, "rb");
        if (!r->f) {
            pllm_status st = pllm_errorf(errno == ENOENT ? PLLM_ERR_NOT_FOUND : PLLM_ERR_IO,
                                         "%s: cannot open: %s", path, strerror(errno));
            pllm_reader_close(r);
            return st;
        }
    }
    struct stat sb;
    if (fstat(fileno(r->f), &sb) == 0 && S_ISREG(sb.st_mode)) r->file_size = (uint64_t)sb.st_size;
    /* The first bytes decide the compression (files and stdin alike); a file named .zst is
     * decoded as zstd even without the magic, so that a corrupt one fails as such. */
    r->zin = pllm_malloc(IO_CHUNK);
    if (!r->zin) {
        pllm_reader_close(r);
        return pllm_errorf(PLLM_ERR_NOMEM, "%s: out of memory", path);
    }
    size_t head = 0;
    for (;;) {
        size_t n;
        pllm_status st = read_fd(r, r->zin + head, IO_CHUNK - head, &n);
        if (st != PLLM_OK) {
            pllm_reader_close(r);
            return st;
        }
        head += n;
        r->file_pos += n;
        if (n == 0) r->zin_eof = true;
        if (n == 0 || head >= 4) break;
    }
    r->comp = pllm_compression_of(r->zin, head);
    if (r->comp == PLLM_COMPRESSION_NONE && head > 0 && !r->is_stdin && pllm_path_is_zst(path))
        r->comp = PLLM_COMPRESSION_ZSTD;
    r->zib = (ZSTD_inBuffer){r->zin, head, 0};
    r->frame_done = true;
    if (r->comp == PLLM_COMPRESSION_ZSTD) {
        r->zd = ZSTD_createDStream();
        if (!r->zd) {
            pllm_reader_close(r);
            return pllm_errorf(PLLM_ERR_NOMEM, "%s: out of memory", path);
        }
        ZSTD_initDStream(r->zd);
    } else if (r->comp == PLLM_COMPRESSION_GZIP) {
        r->gz = pllm_calloc(1, sizeof *r->gz);
        if (!r->gz || inflateInit2(r->gz, 15 + 16) != Z_OK) {
            free(r->gz);
            r->gz = NULL;
            pllm_reader_close(r);
            return pllm_errorf(PLLM_ERR_NOMEM, "%s: out of memory (zlib)", path);
        }
    } else if (head > 0) { /* plain: the bytes read so far are the first of the text */
        pllm_status st = reader_grow(r);
        if (st != PLLM_OK) {
            pllm_reader_close(r);
            return st;
        }
        memcpy(r->buf, r->zin, head);
        r->buf_end = head;
        r->zib = (ZSTD_inBuffer){r->zin, 0, 0};
    }
    if (r->comp == PLLM_COMPRESSION_NONE && r->zin_eof) r->src_eof = true;
    *out = r;
    return PLLM_OK;
}

pllm_compression pllm_reader_compression(const pllm_reader *r)
{
    return r->comp;
}

const char *pllm_reader_path(const pllm_reader *r)
{
    return r->path;
}
bool pllm_reader_truncated(const pllm_reader *r)
{
    return r->truncated;
}

void pllm_reader_progress(const pllm_reader *r, uint64_t *pos, uint64_t *size)
{
    *pos = r->file_pos;
    *size = r->file_size;
}

/* Make room for at least IO_CHUNK more bytes after buf_end. */
static pllm_status reader_grow(pllm_reader *r)
{
    if (r->buf_start > 0) {
        memmove(r->buf, r->buf + r->buf_start, r->buf_end - r->buf_start);
        r->buf_end -= r->buf_start;
        r->buf_start = 0;
    }
    if (r->buf_cap - r->buf_end >= IO_CHUNK) return PLLM_OK;
    size_t ncap = r->buf_cap ? r->buf_cap * 2 : 4 * IO_CHUNK;
    char *nb = pllm_realloc(r->buf, ncap);
    if (!nb) return PLLM_ERR_NOMEM;
    r->buf = nb;
    r->buf_cap = ncap;
    return PLLM_OK;
}

/* read(2) rather than fread: a pipe's data is handed on as soon as it arrives (fread would
 * wait for a full buffer), and a signal interrupts the wait (PLLM_ERR_INTERRUPTED) so that the
 * caller can stop. */
static pllm_status read_fd(pllm_reader *r, void *dst, size_t cap, size_t *n)
{
    ssize_t k = read(fileno(r->f), dst, cap);
    if (k < 0) {
        *n = 0;
        if (errno == EINTR)
            return pllm_errorf(PLLM_ERR_INTERRUPTED, "%s: read interrupted by a signal", r->path);
        return pllm_errorf(PLLM_ERR_IO, "%s: read error: %s", r->path, strerror(errno));
    }
    *n = (size_t)k;
    return PLLM_OK;
}

/* reader_fill for gzip input: inflate into buf; members follow one another (as gzip -d reads a
 * concatenation of .gz files). */
static pllm_status gzip_fill(pllm_reader *r)
{
    for (;;) {
        if (r->zib.pos == r->zib.size && !r->zin_eof) {
            size_t n;
            PLLM_TRY(read_fd(r, r->zin, IO_CHUNK, &n));
            r->file_pos += n;
            if (n == 0) r->zin_eof = true;
            r->zib = (ZSTD_inBuffer){r->zin, n, 0};
        }
        if (r->zin_eof && r->zib.pos == r->zib.size) {
            if (!r->frame_done) {
                r->truncated = true;
                return pllm_errorf(PLLM_ERR_FORMAT,
                                   "%s: truncated gzip stream (the last member is incomplete)",
                                   r->path);
            }
            r->src_eof = true;
            return PLLM_OK;
        }
        if (r->frame_done) { /* a new member starts */
            if (inflateReset(r->gz) != Z_OK)
                return pllm_errorf(PLLM_ERR_FORMAT, "%s: gzip: cannot reset the decoder", r->path);
            r->frame_done = false;
        }
        r->gz->next_in = (unsigned char *)r->zin + r->zib.pos;
        r->gz->avail_in = (unsigned)(r->zib.size - r->zib.pos);
        r->gz->next_out = (unsigned char *)r->buf + r->buf_end;
        r->gz->avail_out = (unsigned)PLLM_MIN(r->buf_cap - r->buf_end, (size_t)1 << 30);
        int ret = inflate(r->gz, Z_NO_FLUSH);
        size_t got = (size_t)((char *)r->gz->next_out - (r->buf + r->buf_end));
        r->zib.pos = r->zib.size - r->gz->avail_in;
        r->buf_end += got;
        if (ret == Z_STREAM_END) {
            r->frame_done = true;
        } else if (ret != Z_OK && !(ret == Z_BUF_ERROR && got == 0 && r->gz->avail_in == 0)) {
            return pllm_errorf(PLLM_ERR_FORMAT, "%s: gzip: %s", r->path,
                               r->gz->msg ? r->gz->msg : "corrupt data");
        }
        if (got > 0) return PLLM_OK;
    }
}

/* Append more bytes to buf; sets src_eof at the end of the input. */
static pllm_status reader_fill(pllm_reader *r)
{
    PLLM_TRY(reader_grow(r));
    if (r->gz) return gzip_fill(r);
    if (!r->zd) {
        size_t n;
        PLLM_TRY(read_fd(r, r->buf + r->buf_end, r->buf_cap - r->buf_end, &n));
        if (n == 0) r->src_eof = true;
        r->buf_end += n;
        r->file_pos += n;
        return PLLM_OK;
    }
    for (;;) {
        if (r->zib.pos == r->zib.size && !r->zin_eof) {
            size_t n;
            PLLM_TRY(read_fd(r, r->zin, IO_CHUNK, &n));
            r->file_pos += n;
            if (n == 0) r->zin_eof = true;
            r->zib = (ZSTD_inBuffer){r->zin, n, 0};
        }
        if (r->zin_eof && r->zib.pos == r->zib.size) {
            if (!r->frame_done) {
                r->truncated = true;
                return pllm_errorf(PLLM_ERR_FORMAT,
                                   "%s: truncated zstd stream (the last frame is incomplete)",
                                   r->path);
            }
            r->src_eof = true;
            return PLLM_OK;
        }
        ZSTD_outBuffer ob = {r->buf + r->buf_end, r->buf_cap - r->buf_end, 0};
        size_t ret = ZSTD_decompressStream(r->zd, &ob, &r->zib);
        if (ZSTD_isError(ret))
            return pllm_errorf(PLLM_ERR_FORMAT, "%s: zstd: %s", r->path, ZSTD_getErrorName(ret));
        r->frame_done = ret == 0;
        r->buf_end += ob.pos;
        if (ob.pos > 0) return PLLM_OK;
    }
}

/* After an over-long line was reported: consume the rest of it through its newline (or the
 * end of the input), keeping no more than one chunk of it in memory. */
static pllm_status skip_rest_of_line(pllm_reader *r)
{
    while (r->skip_line) {
        char *nl = r->buf_end > r->buf_start
                       ? memchr(r->buf + r->buf_start, '\n', r->buf_end - r->buf_start)
                       : NULL;
        if (nl) {
            r->buf_start = (size_t)(nl - r->buf) + 1;
            r->skip_line = false;
        } else if (r->src_eof) {
            r->buf_start = r->buf_end;
            r->skip_line = false;
        } else {
            r->buf_start = r->buf_end; /* nothing kept: reader_grow() moves no bytes */
            PLLM_TRY(reader_fill(r));
        }
    }
    return PLLM_OK;
}

/* Before the first byte is handed out: buffer 3 bytes (or the whole shorter input) and drop
 * a UTF-8 byte order mark. Then finish skipping an over-long line, if one was reported. */
static pllm_status ensure_bom(pllm_reader *r)
{
    PLLM_TRY(skip_rest_of_line(r));
    while (!r->bom_checked) {
        size_t have = r->buf_end - r->buf_start;
        if (have >= 3 || r->src_eof) {
            r->bom_checked = true;
            if (have >= 3 && memcmp(r->buf + r->buf_start, "\xef\xbb\xbf", 3) == 0)
                r->buf_start += 3;
            break;
        }
        PLLM_TRY(reader_fill(r));
    }
    return PLLM_OK;
}

/* After a line was dropped: give back what the buffer grew for it. The bytes left (already
 * read, after that line) move to the front; the buffer shrinks to the smallest doubling of the
 * first size that holds them and a chunk more. */
static void reader_shrink(pllm_reader *r)
{
    size_t have = r->buf_end - r->buf_start;
    if (have > 0 && r->buf_start > 0) memmove(r->buf, r->buf + r->buf_start, have);
    r->buf_start = 0;
    r->buf_end = have;
    size_t cap = 4 * IO_CHUNK;
    while (cap < have + IO_CHUNK) cap *= 2;
    if (cap >= r->buf_cap) return;
    char *nb = pllm_realloc(r->buf, cap);
    if (!nb) return; /* keep the larger buffer */
    r->buf = nb;
    r->buf_cap = cap;
}

/* A line over PLLM_READER_MAX_LINE: its bytes up to buf_start are dropped already; report it
 * (the caller set skip_line when its newline is still to come). */
static pllm_status line_too_long(pllm_reader *r, int64_t *lineno)
{
    reader_shrink(r);
    *lineno = ++r->lineno;
    return pllm_errorf(PLLM_ERR_RANGE,
                       "%s: line %lld is longer than %zu MiB (the limit of one record)", r->path,
                       (long long)r->lineno, PLLM_READER_MAX_LINE >> 20);
}

pllm_status pllm_reader_next(pllm_reader *r, const char **line, size_t *len, int64_t *lineno,
                             bool *eof)
{
    PLLM_TRY(ensure_bom(r));
    *line = NULL;
    *len = 0;
    *eof = false;
    size_t scanned = 0; /* bytes after buf_start known to hold no newline (survives buffer moves) */
    for (;;) {
        size_t from = r->buf_start + scanned;
        char *nl = r->buf_end > from ? memchr(r->buf + from, '\n', r->buf_end - from) : NULL;
        if (nl || (r->src_eof && r->buf_end > r->buf_start)) {
            size_t end = nl ? (size_t)(nl - r->buf) : r->buf_end;
            size_t n = end - r->buf_start;
            if (n > PLLM_READER_MAX_LINE) { /* whole in the buffer (one .zst fill can do that) */
                r->buf_start = nl ? end + 1 : end;
                return line_too_long(r, lineno);
            }
            if (n + 1 > r->line_cap) {
                char *nlb = pllm_realloc(r->line, n + 1);
                if (!nlb) return PLLM_ERR_NOMEM;
                r->line = nlb;
                r->line_cap = n + 1;
            }
            memcpy(r->line, r->buf + r->buf_start, n);
            r->line[n] = 0;
            r->buf_start = nl ? end + 1 : end;
            *line = r->line;
            *len = n;
            *lineno = ++r->lineno;
            return PLLM_OK;
        }
        if (r->src_eof) {
            *eof = true;
            return PLLM_OK;
        }
        scanned = r->buf_end - r->buf_start;
        if (scanned > PLLM_READER_MAX_LINE) { /* the next call reads and drops the rest of it */
            r->buf_start = r->buf_end;
            r->skip_line = true;
            return line_too_long(r, lineno);
        }
        PLLM_TRY(reader_fill(r));
    }
}

pllm_status pllm_reader_read(pllm_reader *r, char *dst, size_t cap, size_t *n)
{
    *n = 0;
    PLLM_TRY(ensure_bom(r));
    while (r->buf_end == r->buf_start) {
        if (r->src_eof) return PLLM_OK;
        PLLM_TRY(reader_fill(r));
    }
    size_t k = PLLM_MIN(cap, r->buf_end - r->buf_start);
    memcpy(dst, r->buf + r->buf_start, k);
    r->buf_start += k;
    *n = k;
    return PLLM_OK;
}

pllm_status pllm_reader_peek_nonspace(pllm_reader *r, int *c)
{
    PLLM_TRY(ensure_bom(r));
    size_t scanned = 0; /* bytes after buf_start known to be whitespace */
    for (;;) {
        for (size_t i = r->buf_start + scanned; i < r->buf_end; i++) {
            char ch = r->buf[i];
            if (ch != ' ' && ch != '\t' && ch != '\r' && ch != '\n') {
                *c = (unsigned char)ch;
                return PLLM_OK;
            }
        }
        scanned = r->buf_end - r->buf_start;
        if (r->src_eof) {
            *c = -1;
            return PLLM_OK;
        }
        PLLM_TRY(reader_fill(r));
    }
}

void pllm_reader_close(pllm_reader *r)
{
    if (!r) return;
    if (r->f && !r->is_stdin) fclose(r->f);
    if (r->zd) ZSTD_freeDStream(r->zd);
    if (r->gz) {
        inflateEnd(r->gz);
        free(r->gz);
    }
    free(r->zin);
    free(r->buf);
    free(r->line);
    free(r->path);
    free(r);
}

struct pllm_writer {
    char *path;
    FILE *f;
    bool is_stdout;
    bool seekable;      /* a regular file: a failed line can be cut off again */
    off_t committed;    /* the file's size after the last line that was written whole */
    pllm_status broken; /* a line failed: nothing more is written */
    ZSTD_CStream *zc;
    unsigned char *zout;
    size_t zout_cap;
};

pllm_status pllm_writer_open(pllm_writer **out, const char *path, bool append)
{
    *out = NULL;
    pllm_writer *w = pllm_calloc(1, sizeof *w);
    if (!w) return PLLM_ERR_NOMEM;
    w->path = pllm_strdup(strcmp(path, "-") == 0 ? "<stdout>" : path);
    if (!w->path) {
        free(w);
        return PLLM_ERR_NOMEM;
    }
    if (strcmp(path, "-") == 0) {
        w->f = stdout;
        w->is_stdout = true;
    } else {
        w->f = fopen(path, append ? "ab" : "wb");
        if (!w->f) {
            pllm_status st =
                pllm_errorf(PLLM_ERR_IO, "%s: cannot open for writing: %s", path, strerror(errno));
            free(w->path);
            free(w);
            return st;
        }
    }
    struct stat sb;
    if (fstat(fileno(w->f), &sb) == 0 && S_ISREG(sb.st_mode)) {
        w->seekable = true;
        w->committed = sb.st_size;
    }
    if (!w->is_stdout && pllm_path_is_zst(path)) {
        w->zc = ZSTD_createCStream();
        w->zout_cap = ZSTD_CStreamOutSize();
        w->zout = pllm_malloc(w->zout_cap);
        if (!w->zc || !w->zout) {
            pllm_writer_close(w);
            return pllm_errorf(PLLM_ERR_NOMEM, "%s: out of memory", path);
        }
        ZSTD_CCtx_setParameter(w->zc, ZSTD_c_compressionLevel, 3);
    }
    *out = w;
    return PLLM_OK;
}

/* Drop a FILE's buffered output without writing it. */
static void fpurge_compat(FILE *f)
{
    __fpurge(f);
}

static pllm_status write_all(pllm_writer *w, const void *p, size_t n)
{
    if (n && fwrite(p, 1, n, w->f) != n)
        return pllm_errorf(PLLM_ERR_IO, "%s: write failed: %s", w->path, strerror(errno));
    return PLLM_OK;
}

static pllm_status zstd_push(pllm_writer *w, const void *p, size_t n, ZSTD_EndDirective mode)
{
    ZSTD_inBuffer in = {p, n, 0};
    for (;;) {
        ZSTD_outBuffer ob = {w->zout, w->zout_cap, 0};
        size_t rem = ZSTD_compressStream2(w->zc, &ob, &in, mode);
        if (ZSTD_isError(rem))
            return pllm_errorf(PLLM_ERR_IO, "%s: zstd: %s", w->path, ZSTD_getErrorName(rem));
        PLLM_TRY(write_all(w, w->zout, ob.pos));
        if (rem == 0 && in.pos == in.size) return PLLM_OK;
    }
}

/* A line could not be written whole (disk full, file size limit): cut what reached the file
 * back to the last whole line, so the file holds only whole lines and --resume continues
 * cleanly. The writer is unusable afterwards (w->broken). */
static pllm_status line_failed(pllm_writer *w, pllm_status st)
{
    w->broken = st;
    if (!w->seekable) return st;
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", pllm_errmsg());
    clearerr(w->f);
    fpurge_compat(w->f); /* drop stdio's buffer without writing it: the failed line's tail */
    if (ftruncate(fileno(w->f), w->committed) != 0)
        return pllm_errorf(st, "%s (and cutting the partial line off failed too: %s)", msg,
                           strerror(errno));
    return pllm_errorf(
        st, "%s; the partial line was cut off, the file ends with the last whole line", msg);
}

pllm_status pllm_writer_line(pllm_writer *w, const char *s, size_t n)
{
    if (w->broken != PLLM_OK) return pllm_errorf(w->broken, "%s: an earlier write failed", w->path);
    pllm_status st;
    if (w->zc) {
        if ((st = zstd_push(w, s, n, ZSTD_e_continue)) != PLLM_OK ||
            (st = zstd_push(w, "\n", 1, ZSTD_e_flush)) != PLLM_OK)
            return line_failed(w, st);
    } else if ((st = write_all(w, s, n)) != PLLM_OK || (st = write_all(w, "\n", 1)) != PLLM_OK) {
        return line_failed(w, st);
    }
    if (fflush(w->f) != 0)
        return line_failed(
            w, pllm_errorf(PLLM_ERR_IO, "%s: write failed: %s", w->path, strerror(errno)));
    if (w->seekable) {
        off_t pos = ftello(w->f);
        if (pos >= 0) w->committed = pos;
    }
    return PLLM_OK;
}

pllm_status pllm_writer_close(pllm_writer *w)
{
    if (!w) return PLLM_OK;
    pllm_status st = w->broken;
    if (w->zc && w->f && st == PLLM_OK) {
        st = zstd_push(w, "", 0, ZSTD_e_end);
        if (st != PLLM_OK) line_failed(w, st); /* the frame stays open: --resume repairs it */
    }
    if (w->f && w->broken != PLLM_OK)
        fpurge_compat(w->f); /* never flush a failed line's tail on close */
    if (w->f) {
        if (fflush(w->f) != 0 && st == PLLM_OK)
            st = pllm_errorf(PLLM_ERR_IO, "%s: write failed: %s", w->path, strerror(errno));
        if (!w->is_stdout && fclose(w->f) != 0 && st == PLLM_OK)
            st = pllm_errorf(PLLM_ERR_IO, "%s: close failed: %s", w->path, strerror(errno));
    }
    if (w->zc) ZSTD_freeCStream(w->zc);
    free(w->zout);
    free(w->path);
    free(w);
    return st;
}
