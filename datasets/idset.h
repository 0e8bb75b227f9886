/*
 * idset.h: a set of record ids with counts (open addressing, xxHash keys), used by --resume to
 * skip requests whose output lines are already in the output file.
 * Ownership: the set copies keys; free with pllm_idset_free().
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
