/*
 * source.h: a stream of prompt records from a file or stdin, in any input format
 * (records.h), detected from the content or forced.
 *
 * Layout: JSON lines (one record per line, blank lines skipped), or one top-level JSON list
 * whose elements are the records (streamed element by element: json_array.h). Either layout
 * holds any of the formats.
 *
 * Detection: the first non-blank byte '[' means a JSON list; (--format auto) the format is
 * then that of the first record that parses as a JSON object (pllm_format_of_object: "custom_id"
 * means openai, "conversations" sharegpt, else pllm), looking at most PLLM_SOURCE_SNIFF
 * records ahead (those are buffered and handed out in order).
 *
 * Shape: when not one of those first records (lines, or list elements) is a JSON object, the
 * input is not records at all (a JSON document pretty-printed over several lines, a list of
 * numbers, a text file): open() fails with one PLLM_ERR_FORMAT message naming the file, the
 * first record's line and what it is, instead of one error record per line. An input with no
 * record (empty, blank, `[]`) opens, and pllm_source_empty() says so.
 *
 * Memory: the reader's buffer, one record, and the sniffed records at the start.
 * Ownership: open() returns a source closed with close() (accepts NULL); records handed out
 * are the caller's to free with pllm_record_free().
 */
#pragma once

#include "datasets/io.h"
#include "datasets/records.h"

#define PLLM_SOURCE_SNIFF 16

typedef struct pllm_source pllm_source;

/* Open path ("-": stdin; ".zst": decompressed) and detect its layout and format. I/O errors
 * and a broken list structure are errors (PLLM_ERR_IO, PLLM_ERR_NOT_FOUND, PLLM_ERR_FORMAT). */
pllm_status pllm_source_open(pllm_source **out, const char *path, pllm_format format);
void pllm_source_close(pllm_source *s);

pllm_format pllm_source_format(const pllm_source *s);
/* What fields a record's format does not know do (records.h; default PLLM_EXTRA_ERROR). */
void pllm_source_set_extra_fields(pllm_source *s, pllm_extra_fields mode);
bool pllm_source_is_list(const pllm_source *s);
/* The input holds no record at all (empty, only whitespace, an empty JSON list). */
bool pllm_source_empty(const pllm_source *s);
const char *pllm_source_path(const pllm_source *s);

/*
 * Next record, parsed with defaults. Returns PLLM_OK with *eof at the end; PLLM_OK with a
 * record otherwise, which may be a bad one (rec->error set: write an error record and go on;
 * a line longer than PLLM_READER_MAX_LINE is one, and reading goes on after it);
 * an error status only when the input itself cannot be read further (I/O error, truncated
 * .zst, broken list structure, PLLM_ERR_INTERRUPTED when a signal interrupted a read).
 */
pllm_status pllm_source_next(pllm_source *s, const pllm_request_params *defaults, pllm_record *rec,
                             bool *eof);

/* Progress: bytes of the file consumed and its size (0: unknown), records handed out. */
void pllm_source_progress(const pllm_source *s, uint64_t *pos, uint64_t *size, int64_t *n_records);
