#include "datasets/json_array.h"

#include <stdlib.h>
#include <string.h>

#define JA_CHUNK (1 << 16)

typedef enum ja_state {
    JA_OPEN,    /* before '[' */
    JA_FIRST,   /* after '[': an element or ']' */
    JA_ELEM,    /* after ',': an element */
    JA_AFTER,   /* after an element: ',' or ']' */
    JA_TRAILER, /* after ']': whitespace only */
    JA_DONE,
} ja_state;

struct pllm_json_array {
    pllm_reader *r;
    char *chunk; /* [JA_CHUNK] raw bytes from the reader */
    size_t pos, n;
    bool src_eof;
    uint64_t offset; /* byte offset of chunk[pos] */
    int64_t line;    /* line of chunk[pos] */
    ja_state state;
    int64_t n_elems;
    pllm_buf elem;
};

pllm_status pllm_json_array_open(pllm_json_array **out, pllm_reader *r)
{
    *out = NULL;
    pllm_json_array *a = pllm_calloc(1, sizeof *a);
    if (!a) return PLLM_ERR_NOMEM;
    a->chunk = pllm_malloc(JA_CHUNK);
    if (!a->chunk) {
        free(a);
        return PLLM_ERR_NOMEM;
    }
    a->r = r;
    a->line = 1;
    a->state = JA_OPEN;
    *out = a;
    return PLLM_OK;
}

void pllm_json_array_free(pllm_json_array *a)
{
    if (!a) return;
    free(a->chunk);
    pllm_buf_free(&a->elem);
    free(a);
}

/* The next byte without consuming it; -1 at the end of the input. */
static pllm_status peek(pllm_json_array *a, int *c)
{
    if (a->pos == a->n) {
        if (a->src_eof) {
            *c = -1;
            return PLLM_OK;
        }
        PLLM_TRY(pllm_reader_read(a->r, a->chunk, JA_CHUNK, &a->n));
        a->pos = 0;
        if (a->n == 0) {
            a->src_eof = true;
            *c = -1;
            return PLLM_OK;
        }
    }
    *c = (unsigned char)a->chunk[a->pos];
    return PLLM_OK;
}

static void advance(pllm_json_array *a)
{
    if (a->chunk[a->pos] == '\n') a->line++;
    a->pos++;
    a->offset++;
}

static bool is_ws(int c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

static pllm_status skip_ws(pllm_json_array *a, int *c)
{
    for (;;) {
        PLLM_TRY(peek(a, c));
        if (!is_ws(*c)) return PLLM_OK;
        advance(a);
    }
}

static pllm_status structure_error(pllm_json_array *a, const char *what, int c)
{
    char got[32];
    if (c < 0)
        snprintf(got, sizeof got, "the end of the input");
    else if (c >= 0x20 && c < 0x7f)
        snprintf(got, sizeof got, "'%c'", c);
    else
        snprintf(got, sizeof got, "byte 0x%02x", c);
    return pllm_errorf(PLLM_ERR_FORMAT, "%s:%lld: byte offset %llu: %s, found %s",
                       pllm_reader_path(a->r), (long long)a->line, (unsigned long long)a->offset,
                       what, got);
}

/* Copy one element (its first byte is the current one) into a->elem. Brackets are counted
 * with one depth counter and strings are skipped with their escapes; a scalar ends at
 * whitespace, ',' or ']'. An element longer than PLLM_READER_MAX_LINE is scanned to its end
 * without being kept (its buffer freed) and reported as PLLM_ERR_RANGE; the array goes on
 * after it. */
static pllm_status scan_element(pllm_json_array *a)
{
    a->elem.n = 0;
    int depth = 0;
    bool in_str = false, esc = false, scalar = false, first = true, dropping = false;
    for (;;) {
        if (a->pos == a->n) {
            int c;
            PLLM_TRY(peek(a, &c));
            if (c < 0) {
                if (scalar && !first) break;
                return structure_error(
                    a, "the input ends inside an array element (is the file truncated?)", c);
            }
        }
        /* scan the rest of the chunk in one go */
        size_t start = a->pos, i = a->pos;
        bool done = false;
        for (; i < a->n; i++) {
            char ch = a->chunk[i];
            if (first) {
                first = false;
                if (ch == '{' || ch == '[')
                    depth = 1;
                else if (ch == '"')
                    in_str = true;
                else
                    scalar = true;
                continue;
            }
            if (in_str) {
                if (esc)
                    esc = false;
                else if (ch == '\\')
                    esc = true;
                else if (ch == '"') {
                    in_str = false;
                    if (depth == 0) {
                        i++;
                        done = true;
                        break;
                    }
                }
                continue;
            }
            if (scalar) {
                if (is_ws((unsigned char)ch) || ch == ',' || ch == ']') {
                    done = true;
                    break;
                }
                continue;
            }
            if (ch == '"')
                in_str = true;
            else if (ch == '{' || ch == '[')
                depth++;
            else if (ch == '}' || ch == ']') {
                if (--depth == 0) {
                    i++;
                    done = true;
                    break;
                }
            }
        }
        if (!dropping) PLLM_TRY(pllm_buf_append(&a->elem, a->chunk + start, i - start));
        while (a->pos < i) advance(a);
        if (done) break;
        if (!dropping && a->elem.n > PLLM_READER_MAX_LINE) { /* the line reader's cap */
            pllm_buf_free(&a->elem);
            dropping = true;
        }
    }
    if (dropping)
        return pllm_errorf(
            PLLM_ERR_RANGE,
            "%s: array element %lld is longer than %zu MiB (the limit of one record)",
            pllm_reader_path(a->r), (long long)a->n_elems + 1, PLLM_READER_MAX_LINE >> 20);
    if (!a->elem.s) PLLM_TRY(pllm_buf_append(&a->elem, "", 0));
    return PLLM_OK;
}

pllm_status pllm_json_array_next(pllm_json_array *a, pllm_json_elem *e, bool *eof)
{
    *eof = false;
    memset(e, 0, sizeof *e);
    int c;
    for (;;) {
        switch (a->state) {
        case JA_OPEN:
            PLLM_TRY(skip_ws(a, &c));
            if (c != '[') return structure_error(a, "expected '[' (a JSON list of records)", c);
            advance(a);
            a->state = JA_FIRST;
            break;
        case JA_FIRST:
        case JA_ELEM:
            PLLM_TRY(skip_ws(a, &c));
            if (c == ']' && a->state == JA_FIRST) {
                advance(a);
                a->state = JA_TRAILER;
                break;
            }
            if (c < 0 || c == ']' || c == ',')
                return structure_error(a,
                                       a->state == JA_FIRST ? "expected an element or ']'"
                                                            : "expected an element after ','",
                                       c);
            e->line = a->line;
            e->offset = a->offset;
            pllm_status st = scan_element(a);
            if (st == PLLM_ERR_RANGE) { /* an over-long element, skipped: the list goes on */
                e->index = ++a->n_elems;
                a->state = JA_AFTER;
                return st;
            }
            PLLM_TRY(st);
            e->text = a->elem.s;
            e->len = a->elem.n;
            e->index = ++a->n_elems;
            a->state = JA_AFTER;
            return PLLM_OK;
        case JA_AFTER:
            PLLM_TRY(skip_ws(a, &c));
            if (c == ',')
                a->state = JA_ELEM;
            else if (c == ']')
                a->state = JA_TRAILER;
            else
                return structure_error(a, "expected ',' or ']' after an array element", c);
            advance(a);
            break;
        case JA_TRAILER:
            PLLM_TRY(skip_ws(a, &c));
            if (c >= 0)
                return structure_error(a, "unexpected data after the closing ']' of the list", c);
            a->state = JA_DONE;
            break;
        case JA_DONE:
            *eof = true;
            return PLLM_OK;
        }
    }
}
