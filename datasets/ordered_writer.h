/*
 * ordered_writer.h: the output lines of a run, written as requests finish (completion order) or
 * in input order through a reorder ring, and held per engine step until the step is known good.
 *
 * Each request has a sequence number (its place in the input among the records that produce
 * output) and n_lines lines (one per completion, or one error line). In input order a request
 * is registered (open) before its lines arrive; its lines wait in the ring slot seq % n_slots
 * until every earlier request is written. At most n_slots requests are open past the head: the
 * caller reads no further input while has_room() is false (nothing is dropped, memory stays
 * bounded). An empty line "" stands for a completion an earlier run already wrote (--resume):
 * it fills its place and is not written.
 *
 * A line computed during an engine step is held (hold) until the caller knows the step's
 * weights were intact; release(true) then puts the held lines, release(false) drops them.
 *
 * Errors: the first failed write (or a NULL line: out of memory serialising it) is kept in
 * write_st; nothing is written after it. flush_all() writes every line still in the ring, in
 * input order, even though an earlier request is missing (an interrupted or failed run keeps
 * what finished).
 *
 * Ownership: lines passed in are owned by the ordered writer; the pllm_writer is borrowed.
 */
#pragma once

#include "datasets/io.h"

typedef enum pllm_output_order {
    PLLM_ORDER_COMPLETION, /* as requests finish */
    PLLM_ORDER_INPUT,      /* reordered to the input's order */
} pllm_output_order;

/* A request's output lines while they wait for earlier ones (input order). */
typedef struct pllm_ordered_slot {
    int64_t seq;  /* -1: free */
    char **lines; /* [n_lines] */
    int32_t n_lines, n_got;
} pllm_ordered_slot;

/* An output line computed in the current step. */
typedef struct pllm_ordered_pending {
    int64_t seq;
    int32_t k;
    char *line;
} pllm_ordered_pending;

typedef struct pllm_ordered_writer {
    pllm_writer *w; /* borrowed */
    pllm_output_order order;
    pllm_ordered_slot *slots;      /* [n_slots] ring, input order */
    int64_t n_slots, head;         /* head: the next seq to write */
    pllm_ordered_pending *pending; /* [n_pending] lines of the current step */
    size_t n_pending, cap_pending;
    pllm_status write_st; /* the first error; the caller may set it too (stops writing) */
    int64_t n_lines;      /* output lines written */
} pllm_ordered_writer;

/* order INPUT: a ring of n_slots requests (n_slots >= 1); COMPLETION: n_slots is ignored.
 * w may be NULL until the first line is written (set ow->w). */
pllm_status pllm_ordered_writer_init(pllm_ordered_writer *ow, pllm_writer *w,
                                     pllm_output_order order, int64_t n_slots);
/* Frees the lines still held (not written) and the ring; not the pllm_writer. */
void pllm_ordered_writer_free(pllm_ordered_writer *ow);

/* May request seq be opened now? (input order: seq - head < n_slots) */
bool pllm_ordered_writer_has_room(const pllm_ordered_writer *ow, int64_t seq);
/* Register seq with n_lines output lines (input order; a no-op in completion order). */
pllm_status pllm_ordered_writer_open(pllm_ordered_writer *ow, int64_t seq, int32_t n_lines);
/* Forget an opened seq that will not produce its lines (it may be opened again). */
void pllm_ordered_writer_cancel(pllm_ordered_writer *ow, int64_t seq);
/* Line k (owned; NULL: out of memory, recorded in write_st) of request seq: written now, or
 * held until the requests before it are written. */
void pllm_ordered_writer_put(pllm_ordered_writer *ow, int64_t seq, int32_t k, char *line);
/* A line computed in this step: kept until release(). */
void pllm_ordered_writer_hold(pllm_ordered_writer *ow, int64_t seq, int32_t k, char *line);
/* The step was good (write = true: put its held lines) or not (drop them). */
void pllm_ordered_writer_release(pllm_ordered_writer *ow, bool write);
/* Interrupted or failed: write every finished line still in the ring, in input order. */
void pllm_ordered_writer_flush_all(pllm_ordered_writer *ow);
