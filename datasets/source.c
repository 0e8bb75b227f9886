#include "datasets/source.h"

#include "datasets/json_array.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One raw record: its JSON text and where it was. */
typedef struct raw_rec {
    char *text; /* NULL when too_long */
    size_t len;
    int64_t line, element;
    bool too_long; /* a line or list element over PLLM_READER_MAX_LINE: skipped, a bad record */
} raw_rec;

struct pllm_source {
    pllm_reader *r;
    pllm_json_array *arr; /* NULL for JSON lines */
    pllm_format format;
    raw_rec sniffed[PLLM_SOURCE_SNIFF];
    int n_sniffed, next_sniffed;
    bool eof;
    bool empty; /* no record at all */
    int64_t n_records;
    pllm_extra_fields extra;
};

void pllm_source_set_extra_fields(pllm_source *s, pllm_extra_fields mode)
{
    s->extra = mode;
}

/* What a JSON value is, for messages ("a number"). */
static const char *json_kind(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "a list";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
    case JSON_REAL:
        return "a number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    default:
        return "null";
    }
}

/* Next raw record from the file (not the sniff buffer); text points into the reader's or the
 * array's buffer. */
static pllm_status read_raw(pllm_source *s, raw_rec *out, bool *eof)
{
    *eof = false;
    if (s->arr) {
        pllm_json_elem e;
        pllm_status st = pllm_json_array_next(s->arr, &e, eof);
        if (st == PLLM_ERR_RANGE) { /* an over-long element: the array goes on after it */
            *out = (raw_rec){NULL, 0, e.line, e.index, true};
            return PLLM_OK;
        }
        PLLM_TRY(st);
        if (*eof) return PLLM_OK;
        *out = (raw_rec){(char *)e.text, e.len, e.line, e.index, false};
        return PLLM_OK;
    }
    for (;;) {
        const char *line;
        size_t len;
        int64_t no;
        pllm_status st = pllm_reader_next(s->r, &line, &len, &no, eof);
        if (st == PLLM_ERR_RANGE) { /* an over-long line: the reader goes on after it */
            *out = (raw_rec){NULL, 0, no, 0, true};
            return PLLM_OK;
        }
        PLLM_TRY(st);
        if (*eof) return PLLM_OK;
        if (pllm_record_line_is_blank(line, len)) continue;
        *out = (raw_rec){(char *)line, len, no, 0, false};
        return PLLM_OK;
    }
}

pllm_status pllm_source_open(pllm_source **out, const char *path, pllm_format format)
{
    *out = NULL;
    pllm_source *s = pllm_calloc(1, sizeof *s);
    if (!s) return PLLM_ERR_NOMEM;
    pllm_status st = pllm_reader_open(&s->r, path);
    if (st != PLLM_OK) goto fail;
    int c;
    if ((st = pllm_reader_peek_nonspace(s->r, &c)) != PLLM_OK) goto fail;
    if (c == '[') {
        if ((st = pllm_json_array_open(&s->arr, s->r)) != PLLM_OK) goto fail;
    }
    s->format = format == PLLM_FORMAT_AUTO ? PLLM_FORMAT_PLLM : format;
    /* Sniff (whatever --format says): the format, and whether this is records at all */
    bool found = false, any_too_long = false;
    char first_err[200] = "";
    const char *first_kind = NULL;
    while (s->n_sniffed < PLLM_SOURCE_SNIFF) {
        raw_rec rr;
        bool eof;
        if ((st = read_raw(s, &rr, &eof)) != PLLM_OK) goto fail;
        if (eof) {
            s->eof = true;
            break;
        }
        raw_rec *k = &s->sniffed[s->n_sniffed++];
        *k = rr;
        if (rr.too_long) {
            any_too_long = true;
            continue;
        }
        k->text = pllm_malloc(rr.len + 1);
        if (!k->text) {
            st = PLLM_ERR_NOMEM;
            goto fail;
        }
        memcpy(k->text, rr.text, rr.len);
        k->text[rr.len] = 0;
        json_error_t jerr;
        json_t *o = json_loadb(rr.text, rr.len, JSON_DECODE_ANY, &jerr);
        found = json_is_object(o);
        if (found && format == PLLM_FORMAT_AUTO) s->format = pllm_format_of_object(o);
        if (s->n_sniffed == 1 && !found) {
            if (o)
                first_kind = json_kind(o);
            else
                snprintf(first_err, sizeof first_err, "%s", jerr.text);
        }
        json_decref(o);
        if (found) break;
    }
    s->empty = s->n_sniffed == 0;
    if (!found && !any_too_long && s->n_sniffed > 0) {
        /* not one of the first records is a JSON object: the file is not records */
        const raw_rec *f = &s->sniffed[0];
        const char *path_shown = pllm_reader_path(s->r);
        char what[256], others[64] = "";
        if (first_kind)
            snprintf(what, sizeof what, "%s", first_kind);
        else
            snprintf(what, sizeof what, "not valid JSON (%s)", first_err);
        const char *unit = s->arr ? "element" : "line";
        if (s->n_sniffed == 2)
            snprintf(others, sizeof others, " (nor is the %s after it)", unit);
        else if (s->n_sniffed > 2)
            snprintf(others, sizeof others, " (nor are the %d %ss after it)", s->n_sniffed - 1,
                     unit);
        bool brace = !s->arr && f->text[strspn(f->text, " \t\r")] == '{';
        if (s->arr)
            st = pllm_errorf(PLLM_ERR_FORMAT,
                             "%s: a JSON list, but not of records: element 1 (line %lld) is %s, "
                             "not a JSON object%s",
                             path_shown, (long long)f->line, what, others);
        else
            st = pllm_errorf(PLLM_ERR_FORMAT,
                             "%s: not JSON lines of records: line %lld is %s, not a JSON "
                             "object%s%s",
                             path_shown, (long long)f->line, what, others,
                             brace ? "; it looks like one JSON document spread over several "
                                     "lines: pllm reads one record per line (`jq -c . FILE` "
                                     "writes that) or a JSON list of records"
                                   : "");
        goto fail;
    }
    *out = s;
    return PLLM_OK;
fail:
    pllm_source_close(s);
    return st;
}

void pllm_source_close(pllm_source *s)
{
    if (!s) return;
    for (int i = 0; i < s->n_sniffed; i++) free(s->sniffed[i].text);
    pllm_json_array_free(s->arr);
    pllm_reader_close(s->r);
    free(s);
}

pllm_format pllm_source_format(const pllm_source *s)
{
    return s->format;
}
bool pllm_source_is_list(const pllm_source *s)
{
    return s->arr != NULL;
}
bool pllm_source_empty(const pllm_source *s)
{
    return s->empty;
}
const char *pllm_source_path(const pllm_source *s)
{
    return pllm_reader_path(s->r);
}

pllm_status pllm_source_next(pllm_source *s, const pllm_request_params *defaults, pllm_record *rec,
                             bool *eof)
{
    memset(rec, 0, sizeof *rec);
    *eof = false;
    raw_rec rr;
    if (s->next_sniffed < s->n_sniffed) {
        rr = s->sniffed[s->next_sniffed++];
    } else if (s->eof) {
        *eof = true;
        return PLLM_OK;
    } else {
        bool e;
        PLLM_TRY(read_raw(s, &rr, &e));
        if (e) {
            s->eof = true;
            *eof = true;
            return PLLM_OK;
        }
    }
    pllm_record_loc loc = {
        .file = pllm_reader_path(s->r), .line = rr.line, .element = rr.element, .extra = s->extra};
    s->n_records++;
    pllm_status st;
    if (rr.too_long) {
        char msg[256];
        snprintf(msg, sizeof msg, "longer than %zu MiB (the limit of one record); skipped",
                 PLLM_READER_MAX_LINE >> 20);
        st = pllm_record_reject(rec, s->format, &loc, defaults, msg);
    } else {
        st = pllm_record_parse(rec, s->format, rr.text, rr.len, &loc, defaults);
    }
    if (st == PLLM_ERR_NOMEM && !rec->error) return st;
    return PLLM_OK; /* a bad record is the caller's to report (rec->error) */
}

void pllm_source_progress(const pllm_source *s, uint64_t *pos, uint64_t *size, int64_t *n_records)
{
    pllm_reader_progress(s->r, pos, size);
    *n_records = s->n_records;
}
