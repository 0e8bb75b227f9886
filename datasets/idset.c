#include "datasets/idset.h"

#include "datasets/io.h"
#include "datasets/records.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

typedef struct slot {
    char *key;
    uint64_t hash;
    int32_t count;
} slot;

struct pllm_idset {
    slot *slots;
    size_t cap, n;
};

pllm_status pllm_idset_create(pllm_idset **out)
{
    pllm_idset *s = pllm_calloc(1, sizeof *s);
    if (!s) return PLLM_ERR_NOMEM;
    s->cap = 1024;
    s->slots = pllm_calloc(s->cap, sizeof *s->slots);
    if (!s->slots) {
        free(s);
        return PLLM_ERR_NOMEM;
    }
    *out = s;
    return PLLM_OK;
}

void pllm_idset_free(pllm_idset *s)
{
    if (!s) return;
    for (size_t i = 0; i < s->cap; i++) free(s->slots[i].key);
    free(s->slots);
    free(s);
}

static slot *lookup(const pllm_idset *s, const char *key, uint64_t h)
{
    size_t i = (size_t)h & (s->cap - 1);
    for (;;) {
        slot *e = &s->slots[i];
        if (!e->key || (e->hash == h && strcmp(e->key, key) == 0)) return e;
        i = (i + 1) & (s->cap - 1);
    }
}

static pllm_status grow(pllm_idset *s)
{
    size_t ncap = s->cap * 2;
    slot *old = s->slots;
    size_t ocap = s->cap;
    s->slots = pllm_calloc(ncap, sizeof *s->slots);
    if (!s->slots) {
        s->slots = old;
        return PLLM_ERR_NOMEM;
    }
    s->cap = ncap;
    for (size_t i = 0; i < ocap; i++)
        if (old[i].key) *lookup(s, old[i].key, old[i].hash) = old[i];
    free(old);
    return PLLM_OK;
}

pllm_status pllm_idset_add(pllm_idset *s, const char *key)
{
    if ((s->n + 1) * 4 > s->cap * 3) PLLM_TRY(grow(s));
    uint64_t h = XXH3_64bits(key, strlen(key));
    slot *e = lookup(s, key, h);
    if (!e->key) {
        e->key = pllm_strdup(key);
        if (!e->key) return PLLM_ERR_NOMEM;
        e->hash = h;
        s->n++;
    }
    e->count++;
    return PLLM_OK;
}

int32_t pllm_idset_count(const pllm_idset *s, const char *key)
{
    slot *e = lookup(s, key, XXH3_64bits(key, strlen(key)));
    return e->key ? e->count : 0;
}

size_t pllm_idset_size(const pllm_idset *s)
{
    return s->n;
}

/* Copy the first n lines of the .zst file at path into a new .zst stream that replaces it. */
static pllm_status rewrite_zst(const char *path, int64_t n)
{
    pllm_buf tmp = {0};
    PLLM_TRY(pllm_buf_appendf(&tmp, "%s.resume-tmp.zst", path));
    pllm_reader *r = NULL;
    pllm_writer *w = NULL;
    pllm_status st = pllm_reader_open(&r, path);
    if (st == PLLM_OK) st = pllm_writer_open(&w, tmp.s, false);
    for (int64_t i = 0; st == PLLM_OK && i < n; i++) {
        const char *line;
        size_t len;
        int64_t lineno;
        bool eof;
        if ((st = pllm_reader_next(r, &line, &len, &lineno, &eof)) != PLLM_OK) break;
        if (eof) break;
        st = pllm_writer_line(w, line, len);
    }
    pllm_status cst = pllm_writer_close(w);
    if (st == PLLM_OK) st = cst;
    pllm_reader_close(r);
    if (st == PLLM_OK && rename(tmp.s, path) != 0)
        st = pllm_errorf(PLLM_ERR_IO, "%s: cannot replace it with the repaired stream: %s", path,
                         strerror(errno));
    if (st != PLLM_OK) {
        remove(tmp.s);
        pllm_error_prefix(st, "repairing the cut .zst output %s: ", path);
    }
    pllm_buf_free(&tmp);
    return st;
}

pllm_status pllm_idset_load_output(pllm_idset *s, const char *path, int64_t *n_lines, bool *torn)
{
    *n_lines = 0;
    *torn = false;
    struct stat sb;
    if (stat(path, &sb) != 0)
        return errno == ENOENT ? PLLM_OK
                               : pllm_errorf(PLLM_ERR_IO, "%s: %s", path, strerror(errno));
    /* A torn last line (the file does not end in '\n'; plain files only) is cut off, so that
     * appended lines start on a line of their own. */
    if (!pllm_path_is_zst(path) && sb.st_size > 0) {
        FILE *f = fopen(path, "r+b");
        if (!f) return pllm_errorf(PLLM_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
        off_t end = sb.st_size;
        fseeko(f, end - 1, SEEK_SET);
        if (fgetc(f) != '\n') {
            *torn = true;
            off_t keep = end - 1;
            while (keep > 0) {
                fseeko(f, keep - 1, SEEK_SET);
                if (fgetc(f) == '\n') break;
                keep--;
            }
            if (ftruncate(fileno(f), keep) != 0) {
                fclose(f);
                return pllm_errorf(PLLM_ERR_IO, "%s: cannot cut the torn last line: %s", path,
                                   strerror(errno));
            }
        }
        fclose(f);
    }
    pllm_reader *r;
    PLLM_TRY(pllm_reader_open(&r, path));
    pllm_status st = PLLM_OK;
    int64_t n_complete = 0;
    for (;;) {
        const char *line;
        size_t len;
        int64_t lineno;
        bool eof;
        if ((st = pllm_reader_next(r, &line, &len, &lineno, &eof)) != PLLM_OK || eof) break;
        n_complete++;
        json_t *o = json_loadb(line, len, 0, NULL);
        if (!o) continue; /* not JSON: no request to skip */
        char *key = json_is_object(o) ? pllm_output_key(o) : NULL;
        if (key) {
            st = pllm_idset_add(s, key);
            free(key);
            (*n_lines)++;
        }
        json_decref(o);
        if (st != PLLM_OK) break;
    }
    bool cut = pllm_reader_truncated(r);
    pllm_reader_close(r);
    if (cut) {
        /* A .zst output whose writer was killed: its last frame never ended, so nothing can be
         * appended after it. Rewrite the complete lines as a fresh stream (once per resume). */
        *torn = true;
        st = rewrite_zst(path, n_complete);
    }
    return st;
}
