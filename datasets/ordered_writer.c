/*
 * ordered_writer.c: the reorder ring and the per-step pending lines of a run's output
 * (ordered_writer.h).
 */
#include "datasets/ordered_writer.h"

#include <stdlib.h>
#include <string.h>

pllm_status pllm_ordered_writer_init(pllm_ordered_writer *ow, pllm_writer *w,
                                     pllm_output_order order, int64_t n_slots)
{
    memset(ow, 0, sizeof *ow);
    ow->w = w;
    ow->order = order;
    if (order != PLLM_ORDER_INPUT) return PLLM_OK;
    if (n_slots < 1)
        return pllm_errorf(PLLM_ERR_INVALID, "reorder buffer of %lld requests: must be >= 1",
                           (long long)n_slots);
    ow->n_slots = n_slots;
    ow->slots = pllm_calloc((size_t)n_slots, sizeof *ow->slots);
    if (!ow->slots) return PLLM_ERR_NOMEM;
    for (int64_t i = 0; i < ow->n_slots; i++) ow->slots[i].seq = -1;
    return PLLM_OK;
}

void pllm_ordered_writer_free(pllm_ordered_writer *ow)
{
    pllm_ordered_writer_release(ow, false);
    free(ow->pending);
    ow->pending = NULL;
    ow->cap_pending = 0;
    if (ow->slots) {
        for (int64_t i = 0; i < ow->n_slots; i++) {
            for (int32_t k = 0; k < ow->slots[i].n_lines; k++) free(ow->slots[i].lines[k]);
            free(ow->slots[i].lines);
        }
        free(ow->slots);
        ow->slots = NULL;
    }
}

bool pllm_ordered_writer_has_room(const pllm_ordered_writer *ow, int64_t seq)
{
    return ow->order == PLLM_ORDER_COMPLETION || seq - ow->head < ow->n_slots;
}

/* Write an output line (owned); "" is the place of a completion written by an earlier run. */
static void write_now(pllm_ordered_writer *ow, char *line)
{
    if (!line[0]) {
        free(line);
        return;
    }
    if (ow->write_st == PLLM_OK) ow->write_st = pllm_writer_line(ow->w, line, strlen(line));
    if (ow->write_st == PLLM_OK) ow->n_lines++;
    free(line);
}

static void flush_slot(pllm_ordered_writer *ow, pllm_ordered_slot *s)
{
    for (int32_t i = 0; i < s->n_lines; i++)
        if (s->lines[i]) write_now(ow, s->lines[i]);
    free(s->lines);
    s->lines = NULL;
    s->seq = -1;
    s->n_lines = s->n_got = 0;
}

/* Write the complete requests at the head of the reorder buffer. */
static void flush_head(pllm_ordered_writer *ow)
{
    for (;;) {
        pllm_ordered_slot *s = &ow->slots[ow->head % ow->n_slots];
        if (s->seq != ow->head || s->n_got < s->n_lines) return;
        flush_slot(ow, s);
        ow->head++;
    }
}

pllm_status pllm_ordered_writer_open(pllm_ordered_writer *ow, int64_t seq, int32_t n_lines)
{
    if (ow->order != PLLM_ORDER_INPUT) return PLLM_OK;
    pllm_ordered_slot *s = &ow->slots[seq % ow->n_slots];
    PLLM_ASSERT(s->seq == -1);
    s->lines = pllm_calloc((size_t)n_lines, sizeof *s->lines);
    if (!s->lines) return PLLM_ERR_NOMEM;
    s->seq = seq;
    s->n_lines = n_lines;
    return PLLM_OK;
}

void pllm_ordered_writer_cancel(pllm_ordered_writer *ow, int64_t seq)
{
    if (ow->order != PLLM_ORDER_INPUT) return;
    pllm_ordered_slot *s = &ow->slots[seq % ow->n_slots];
    free(s->lines);
    s->lines = NULL;
    s->seq = -1;
}

void pllm_ordered_writer_put(pllm_ordered_writer *ow, int64_t seq, int32_t k, char *line)
{
    if (!line) {
        if (ow->write_st == PLLM_OK)
            ow->write_st = pllm_errorf(PLLM_ERR_NOMEM, "out of memory serialising an output line");
        return;
    }
    if (ow->order == PLLM_ORDER_COMPLETION) {
        write_now(ow, line);
        return;
    }
    pllm_ordered_slot *s = &ow->slots[seq % ow->n_slots];
    PLLM_ASSERT(s->seq == seq && k < s->n_lines && !s->lines[k]);
    s->lines[k] = line;
    s->n_got++;
    flush_head(ow);
}

void pllm_ordered_writer_flush_all(pllm_ordered_writer *ow)
{
    if (ow->order != PLLM_ORDER_INPUT) return;
    for (int64_t i = 0; i < ow->n_slots; i++) {
        pllm_ordered_slot *s = &ow->slots[(ow->head + i) % ow->n_slots];
        if (s->seq >= 0) flush_slot(ow, s);
    }
}

void pllm_ordered_writer_hold(pllm_ordered_writer *ow, int64_t seq, int32_t k, char *line)
{
    if (!line) {
        pllm_ordered_writer_put(ow, seq, k, NULL);
        return;
    }
    if (ow->n_pending == ow->cap_pending) {
        size_t cap = ow->cap_pending ? 2 * ow->cap_pending : 64;
        pllm_ordered_pending *p = pllm_realloc(ow->pending, cap * sizeof *p);
        if (!p) {
            free(line);
            pllm_ordered_writer_put(ow, seq, k, NULL);
            return;
        }
        ow->pending = p;
        ow->cap_pending = cap;
    }
    ow->pending[ow->n_pending++] = (pllm_ordered_pending){seq, k, line};
}

void pllm_ordered_writer_release(pllm_ordered_writer *ow, bool write)
{
    for (size_t i = 0; i < ow->n_pending; i++) {
        if (write)
            pllm_ordered_writer_put(ow, ow->pending[i].seq, ow->pending[i].k, ow->pending[i].line);
        else
            free(ow->pending[i].line);
    }
    ow->n_pending = 0;
}
