/*
 * idset.h: a set of record ids with counts (open addressing, xxHash keys), used by --resume to
 * skip requests whose output lines are already in the output file; and a set of 64-bit key
 * hashes (8 bytes a key) that finds duplicate ids in an input of any size.
 * Ownership: the set copies keys; free with pllm_idset_free() / pllm_hashset_free().
 */
#pragma once

#include "model/common.h"

typedef struct pllm_idset pllm_idset;

pllm_status pllm_idset_create(pllm_idset **out);
void pllm_idset_free(pllm_idset *s);
/* Add one occurrence of key. */
pllm_status pllm_idset_add(pllm_idset *s, const char *key);
/* Occurrences of key (0 when absent). */
int32_t pllm_idset_count(const pllm_idset *s, const char *key);
size_t pllm_idset_size(const pllm_idset *s);

/* Read an existing output file (JSONL, pllm or OpenAI output): every complete line's key
 * (pllm_output_key: custom_id or id) is counted, error records included (an input error would only
 * fail again, and an id must never appear twice). A missing file is an empty set. A torn end is
 * repaired and reported in *torn: a plain file's last line without its newline (the writer was
 * killed mid-line) is cut off; a .zst file whose last frame never ended (the writer was killed) is
 * rewritten with its complete lines as a fresh stream, so that appended frames decode after it. */
pllm_status pllm_idset_load_output(pllm_idset *s, const char *path, int64_t *n_lines, bool *torn);

/* What pllm_idset_scan_output() found and did. */
typedef struct pllm_output_scan {
    int64_t n_lines;   /* lines that name a request (counted in the set) */
    int64_t n_dropped; /* error lines removed (drop_errors) */
    bool torn;         /* a torn end was repaired */
} pllm_output_scan;

/* As pllm_idset_load_output(), and: a line with an integer "index" (one of n > 1 completions)
 * is counted under its key, "\x02", and the index (pllm_completion_key), so that a request whose
 * completions were written in part can be told from one written whole; with drop_errors, error
 * lines (pllm: finish_reason "error"; OpenAI: a non-null "error") are not counted and are removed
 * from the file (rewritten through a temporary renamed over it), so that their requests run
 * again (--retry-errors). */
pllm_status pllm_idset_scan_output(pllm_idset *s, const char *path, bool drop_errors,
                                   pllm_output_scan *res);
/* key "\x02" index: the key of one of a request's n > 1 completions. Caller frees. */
char *pllm_completion_key(const char *key, int64_t index);

typedef struct pllm_hashset pllm_hashset;

pllm_status pllm_hashset_create(pllm_hashset **out);
void pllm_hashset_free(pllm_hashset *s);
/* Add key's 64-bit hash; *seen: it was there already (a duplicate, or with probability about
 * n^2 / 2^65 for n keys, two keys with the same hash). */
pllm_status pllm_hashset_add(pllm_hashset *s, const char *key, bool *seen);
