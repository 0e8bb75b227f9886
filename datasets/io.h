/*
 * io.h: byte streams for datasets: a line reader over a file or stdin ("-"), plain or
 * compressed (zstd or gzip, told by the first bytes, not the name; decompressed as it streams,
 * never whole in memory), and a writer to a file, stdout ("-") or a .zst file that writes whole
 * lines only.
 *
 * Lines: '\n'-terminated (a trailing '\r' is kept; JSON parsing ignores it as whitespace); the
 * last line may lack its newline. Each line's number (1-based) is reported with it. A UTF-8
 * byte order mark at the very start of the input is dropped.
 *
 * Raw reads (pllm_reader_read) and peeks consume the same stream as the line reader, so a
 * caller may peek at the first bytes to detect a format and then read lines or raw bytes.
 *
 * Writer: pllm_writer_line() writes one line with its newline and flushes it to the kernel,
 * so a killed process leaves only whole lines behind (at worst a torn last line, which
 * --resume cuts off). For .zst output each line is flushed as its own zstd block
 * (ZSTD_e_flush), so what was written decompresses up to the last line even if the process
 * dies before the frame is ended.
 *
 * Ownership: open() returns a handle closed with close(), which accepts NULL.
 */
#pragma once

#include "model/common.h"

#include <stdio.h>

typedef struct pllm_reader pllm_reader;

typedef enum pllm_compression {
    PLLM_COMPRESSION_NONE = 0,
    PLLM_COMPRESSION_ZSTD, /* 28 b5 2f fd (or a skippable frame, 5? 2a 4d 18) */
    PLLM_COMPRESSION_GZIP, /* 1f 8b; members may follow one another */
} pllm_compression;

/* The compression the first n bytes of a stream announce. */
pllm_compression pllm_compression_of(const unsigned char *p, size_t n);

/* Open path ("-" for stdin). The first bytes are read at once: zstd and gzip input is
 * decompressed whatever its name (a file named .zst without the magic is still taken as
 * zstd, so that a damaged one fails as such). */
pllm_status pllm_reader_open(pllm_reader **out, const char *path);
pllm_compression pllm_reader_compression(const pllm_reader *r);
/* Next line: *line points to an internal buffer (NUL-terminated, without the '\n'), valid
 * until the next call; *lineno is its number. *eof is set at the end (line NULL). A line longer
 * than PLLM_READER_MAX_LINE is not buffered (a file without newlines cannot make the reader
 * hold all of it): the call returns PLLM_ERR_RANGE with a message naming the line, *lineno set
 * to its number and *line NULL, and the next call goes on after that line's newline (the rest
 * of it is read and dropped chunk by chunk). Every other error status is final. */
#define PLLM_READER_MAX_LINE ((size_t)256 << 20)
pllm_status pllm_reader_next(pllm_reader *r, const char **line, size_t *len, int64_t *lineno,
                             bool *eof);
/* Up to cap decompressed bytes into dst; *n == 0 only at the end of the input. */
pllm_status pllm_reader_read(pllm_reader *r, char *dst, size_t cap, size_t *n);
/* The first byte that is not JSON whitespace (space, tab, CR, LF), without consuming
 * anything; *c = -1 when the input holds only whitespace. May read ahead (bounded by the
 * whitespace itself). */
pllm_status pllm_reader_peek_nonspace(pllm_reader *r, int *c);
/* Progress through the file: bytes of the file consumed so far (compressed bytes for .zst)
 * and its size (0 when unknown: stdin, a pipe). */
void pllm_reader_progress(const pllm_reader *r, uint64_t *pos, uint64_t *size);
const char *pllm_reader_path(const pllm_reader *r);
/* Whether reading stopped at a compressed stream cut short (the last zstd frame or gzip member
 * incomplete: a writer killed before it closed the file). Every line before the cut was handed
 * out. */
bool pllm_reader_truncated(const pllm_reader *r);
void pllm_reader_close(pllm_reader *r);

typedef struct pllm_writer pllm_writer;

/* Open path ("-" for stdout) for writing; append keeps existing content (for --resume). */
pllm_status pllm_writer_open(pllm_writer **out, const char *path, bool append);
/* Write s[0..n) and a newline as one unit, then flush. If that fails (disk full, file size
 * limit), whatever part of the line reached a regular file is cut off again, so the file ends
 * with the last whole line, and every later call fails. */
pllm_status pllm_writer_line(pllm_writer *w, const char *s, size_t n);
/* Flush and close; reports a failed final flush (disk full). Accepts NULL. */
pllm_status pllm_writer_close(pllm_writer *w);

/* Whether path names a zstd-compressed file (ends in ".zst"). */
bool pllm_path_is_zst(const char *path);
