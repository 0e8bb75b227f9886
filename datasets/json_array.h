/*
 * json_array.h: streams the elements of a top-level JSON array (`[ {...}, {...} ]`, as a
 * ShareGPT .json file is) one at a time, so that a multi-GB list is never held whole.
 *
 * The splitter only tracks the array's structure: strings (with escapes) and bracket depth.
 * Each element's bytes are handed out as they are in the file, for the caller to parse with a
 * real JSON parser; an element that is not valid JSON but whose brackets balance is therefore
 * an error of that element only, and the caller can go on. Structure errors between elements
 * (a missing comma, text after the closing bracket, the input ending inside the array) are
 * fatal: they name the file, line and byte offset.
 *
 * Memory: one element at a time (plus the reader's buffer).
 * Ownership: the array borrows the reader; free with pllm_json_array_free().
 */
#pragma once

#include "datasets/io.h"

typedef struct pllm_json_array pllm_json_array;

/* The reader must be positioned at the array (leading whitespace allowed). */
pllm_status pllm_json_array_open(pllm_json_array **out, pllm_reader *r);
void pllm_json_array_free(pllm_json_array *a);

typedef struct pllm_json_elem {
    const char *text; /* the element's bytes, NUL-terminated; valid until the next call */
    size_t len;
    int64_t index;   /* 1-based element number */
    int64_t line;    /* 1-based line where the element starts */
    uint64_t offset; /* byte offset of its first byte (after decompression) */
} pllm_json_elem;

/* Next element; *eof at the closing bracket (nothing but whitespace may follow it). An
 * element longer than PLLM_READER_MAX_LINE is not kept: the call returns PLLM_ERR_RANGE with
 * e->index, e->line and e->offset set (e->text NULL), and the next call goes on after it.
 * Every other error status is final. */
pllm_status pllm_json_array_next(pllm_json_array *a, pllm_json_elem *e, bool *eof);
