/*
 * io.h: byte streams for datasets: a line reader over a file, stdin ("-") or a .zst file
 * (decompressed as it streams, never whole in memory), and a writer to a file, stdout ("-")
 * or a .zst file that writes whole lines only.
 *
 * Lines: '\n'-terminated (a trailing '\r' is kept; JSON parsing ignores it as whitespace); the
 * last line may lack its newline. Each line's number (1-based) is reported with it.
 *
 * Writer: pllm_writer_line() writes one line with its newline and flushes it to the kernel
 * (and, for .zst, ends a zstd frame... see below), so a killed process leaves only whole
 * lines behind. For .zst output each line is flushed as its own zstd block (ZSTD_e_flush), so
 * what was written decompresses up to the last line even if the process dies.
 *
 * Ownership: open() returns a handle closed with close(), which accepts NULL.
 */
#pragma once

#include "engine/common.h"

#include <stdio.h>

typedef struct pllm_reader pllm_reader;

/* Open path ("-" for stdin); a name ending in ".zst" is decompressed. */
pllm_status pllm_reader_open(pllm_reader **out, const char *path);
/* Next line: *line points to an internal buffer (NUL-terminated, without the '\n'), valid
 * until the next call; *lineno is its number. *eof is set at the end (line NULL). */
pllm_status pllm_reader_next(pllm_reader *r, const char **line, size_t *len, int64_t *lineno, bool *eof);
const char *pllm_reader_path(const pllm_reader *r);
void pllm_reader_close(pllm_reader *r);

typedef struct pllm_writer pllm_writer;

/* Open path ("-" for stdout) for writing; append keeps existing content (for --resume). */
pllm_status pllm_writer_open(pllm_writer **out, const char *path, bool append);
/* Write s[0..n) and a newline as one unit, then flush. */
pllm_status pllm_writer_line(pllm_writer *w, const char *s, size_t n);
/* Flush and close; reports a failed final flush (disk full). Accepts NULL. */
pllm_status pllm_writer_close(pllm_writer *w);

/* Whether path names a zstd-compressed file (ends in ".zst"). */
bool pllm_path_is_zst(const char *path);
