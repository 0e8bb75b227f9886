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
    if (!s->slots) { free(s); return PLLM_ERR_NOMEM; }
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
    if (!s->slots) { s->slots = old; return PLLM_ERR_NOMEM; }
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

size_t pllm_idset_size(const pllm_idset *s) { return s->n; }

pllm_status pllm_idset_load_output(pllm_idset *s, const char *path, int64_t *n_lines, bool *torn)
{
    *n_lines = 0;
    *torn = false;
    struct stat sb;
    if (stat(path, &sb) != 0) return errno == ENOENT ? PLLM_OK : pllm_errorf(PLLM_ERR_IO, "%s: %s", path, strerror(errno));
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
                return pllm_errorf(PLLM_ERR_IO, "%s: cannot cut the torn last line: %s", path, strerror(errno));
            }
        }
        fclose(f);
    }
    pllm_reader *r;
    PLLM_TRY(pllm_reader_open(&r, path));
    pllm_status st = PLLM_OK;
    for (;;) {
        const char *line;
        size_t len;
        int64_t lineno;
        bool eof;
        if ((st = pllm_reader_next(r, &line, &len, &lineno, &eof)) != PLLM_OK || eof) break;
        json_t *o = json_loadb(line, len, 0, NULL);
        if (!o) continue; /* a torn line */
        char *key = json_is_object(o) ? pllm_output_key(o) : NULL;
        if (key) {
            st = pllm_idset_add(s, key);
            free(key);
            (*n_lines)++;
        }
        json_decref(o);
        if (st != PLLM_OK) break;
    }
    pllm_reader_close(r);
    return st;
}
