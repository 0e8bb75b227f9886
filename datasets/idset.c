#include "datasets/idset.h"

#include "datasets/io.h"
#include "datasets/records.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
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

char *pllm_completion_key(const char *key, int64_t index)
{
    pllm_buf b = {0};
    if (pllm_buf_appendf(&b, "%s\x02%lld", key, (long long)index) != PLLM_OK) return NULL;
    return b.s;
}

/* An output line that reports a failure: pllm finish_reason "error", OpenAI a non-null error. */
static bool is_error_line(const json_t *o)
{
    if (json_object_get(o, "custom_id")) {
        const json_t *e = json_object_get(o, "error");
        return e && !json_is_null(e);
    }
    const json_t *f = json_object_get(o, "finish_reason");
    return json_is_string(f) && strcmp(json_string_value(f), "error") == 0;
}

/* The key a complete output line is counted under (NULL: it names no request). */
static char *line_key(const json_t *o)
{
    char *key = pllm_output_key(o);
    const json_t *idx = json_object_get(o, "index");
    if (key && json_is_integer(idx) && !json_object_get(o, "custom_id")) {
        char *k = pllm_completion_key(key, json_integer_value(idx));
        free(key);
        key = k;
    }
    return key;
}

/* Rewrite path with its first n lines, without the error lines when drop_errors, through a
 * temporary renamed over it (a .zst file becomes one fresh stream). */
static pllm_status rewrite_output(const char *path, int64_t n, bool drop_errors)
{
    pllm_buf tmp = {0};
    PLLM_TRY(pllm_buf_appendf(&tmp, "%s.resume-tmp%s", path, pllm_path_is_zst(path) ? ".zst" : ""));
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
        if (drop_errors) {
            json_t *o = json_loadb(line, len, 0, NULL);
            bool drop = json_is_object(o) && is_error_line(o);
            json_decref(o);
            if (drop) continue;
        }
        st = pllm_writer_line(w, line, len);
    }
    pllm_status cst = pllm_writer_close(w);
    if (st == PLLM_OK) st = cst;
    pllm_reader_close(r);
    if (st == PLLM_OK && rename(tmp.s, path) != 0)
        st = pllm_errorf(PLLM_ERR_IO, "%s: cannot replace it with the rewritten file: %s", path,
                         strerror(errno));
    if (st != PLLM_OK) {
        remove(tmp.s);
        pllm_error_prefix(st, "rewriting the output %s: ", path);
    }
    pllm_buf_free(&tmp);
    return st;
}

pllm_status pllm_idset_load_output(pllm_idset *s, const char *path, int64_t *n_lines, bool *torn)
{
    pllm_output_scan res;
    pllm_status st = pllm_idset_scan_output(s, path, false, &res);
    *n_lines = res.n_lines;
    *torn = res.torn;
    return st;
}

pllm_status pllm_idset_scan_output(pllm_idset *s, const char *path, bool drop_errors,
                                   pllm_output_scan *res)
{
    memset(res, 0, sizeof *res);
    struct stat sb;
    if (stat(path, &sb) != 0)
        return errno == ENOENT ? PLLM_OK
                               : pllm_errorf(PLLM_ERR_IO, "%s: %s", path, strerror(errno));
    /* A torn last line (the file does not end in '\n'; plain files only) is cut off, so that
     * appended lines start on a line of their own. */
    if (!pllm_path_is_zst(path) && sb.st_size > 0) {
        FILE *f = fopen(path, "r+b");
        if (!f) return pllm_errorf(PLLM_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
        unsigned char head[4];
        size_t nh = fread(head, 1, sizeof head, f);
        if (pllm_compression_of(head, nh) != PLLM_COMPRESSION_NONE) {
            fclose(f);
            return pllm_errorf(PLLM_ERR_FORMAT,
                               "%s: the file is compressed but its name does not end in .zst, "
                               "so pllm would append plain lines to it; pllm did not write it",
                               path);
        }
        off_t end = sb.st_size;
        fseeko(f, end - 1, SEEK_SET);
        if (fgetc(f) != '\n') {
            res->torn = true;
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
        if (drop_errors && json_is_object(o) && is_error_line(o)) {
            res->n_dropped++;
            json_decref(o);
            continue;
        }
        char *key = json_is_object(o) ? line_key(o) : NULL;
        if (key) {
            st = pllm_idset_add(s, key);
            free(key);
            res->n_lines++;
        }
        json_decref(o);
        if (st != PLLM_OK) break;
    }
    bool cut = pllm_reader_truncated(r);
    pllm_reader_close(r);
    if (cut) {
        /* A .zst output whose writer was killed: its last frame never ended, so nothing can be
         * appended after it. Rewrite the complete lines as a fresh stream (once per resume). */
        res->torn = true;
        st = rewrite_output(path, n_complete, drop_errors);
    } else if (st == PLLM_OK && res->n_dropped > 0) {
        st = rewrite_output(path, n_complete, true);
    }
    return st;
}

/* ---------------------------------------------------------------- hash set */

/*
 * The duplicate-id set keeps 8 bytes a key and never holds two copies of itself: a sorted array
 * of 64-bit hashes (mmap'd, grown with mremap: no copy, so no transient 2x while it grows) with
 * a prefix index (the top 16 bits -> where that range starts), plus a small open-addressing
 * table of recent keys that is sorted and merged into the array when half full. The table is
 * kept at 1/16 of the array, so merging costs O(16 n) in all and the table 1/8 of the memory.
 * (A plain open-addressing table of a million keys doubles to 16 MiB, 24 MiB while it rehashes:
 * more than the streaming tests allow for a million records.)
 */
#define HS_PREFIX_BITS 16

struct pllm_hashset {
    uint64_t *sorted; /* [n_sorted], ascending; mmap'd, [cap_sorted] mapped */
    size_t n_sorted, cap_sorted;
    uint32_t *prefix; /* [2^16 + 1]: sorted[prefix[p] .. prefix[p+1]) have top bits p */
    uint64_t *recent; /* [cap_recent] open addressing, 0: empty */
    size_t n_recent, cap_recent;
};

static pllm_status hs_recent_alloc(pllm_hashset *s, size_t cap)
{
    uint64_t *r = pllm_calloc(cap, sizeof *r);
    if (!r) return PLLM_ERR_NOMEM;
    free(s->recent);
    s->recent = r;
    s->cap_recent = cap;
    s->n_recent = 0;
    return PLLM_OK;
}

pllm_status pllm_hashset_create(pllm_hashset **out)
{
    pllm_hashset *s = pllm_calloc(1, sizeof *s);
    if (!s) return PLLM_ERR_NOMEM;
    s->prefix = pllm_calloc(((size_t)1 << HS_PREFIX_BITS) + 1, sizeof *s->prefix);
    if (!s->prefix || hs_recent_alloc(s, 4096) != PLLM_OK) {
        pllm_hashset_free(s);
        return PLLM_ERR_NOMEM;
    }
    *out = s;
    return PLLM_OK;
}

void pllm_hashset_free(pllm_hashset *s)
{
    if (!s) return;
    if (s->sorted) munmap(s->sorted, s->cap_sorted * sizeof *s->sorted);
    free(s->prefix);
    free(s->recent);
    free(s);
}

static bool hs_sorted_has(const pllm_hashset *s, uint64_t h)
{
    size_t p = (size_t)(h >> (64 - HS_PREFIX_BITS));
    size_t lo = s->prefix[p], hi = s->prefix[p + 1];
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->sorted[mid] < h)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < s->prefix[p + 1] && s->sorted[lo] == h;
}

static uint64_t *hs_recent_slot(const pllm_hashset *s, uint64_t h)
{
    size_t i = (size_t)h & (s->cap_recent - 1);
    while (s->recent[i] && s->recent[i] != h) i = (i + 1) & (s->cap_recent - 1);
    return &s->recent[i];
}

static int hs_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Merge the recent table into the sorted array. */
static pllm_status hs_merge(pllm_hashset *s)
{
    size_t n = s->n_sorted + s->n_recent;
    if (n > s->cap_sorted) {
        size_t cap = s->cap_sorted ? s->cap_sorted : 65536;
        while (cap < n) cap *= 2;
        void *m = s->sorted ? mremap(s->sorted, s->cap_sorted * sizeof(uint64_t),
                                     cap * sizeof(uint64_t), MREMAP_MAYMOVE)
                            : mmap(NULL, cap * sizeof(uint64_t), PROT_READ | PROT_WRITE,
                                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) return PLLM_ERR_NOMEM;
        s->sorted = m;
        s->cap_sorted = cap;
    }
    /* the recent keys, sorted (1/16 of the array at most); then merge from the back */
    uint64_t *tail = pllm_malloc((s->n_recent ? s->n_recent : 1) * sizeof *tail);
    if (!tail) return PLLM_ERR_NOMEM;
    size_t k = 0;
    for (size_t i = 0; i < s->cap_recent; i++)
        if (s->recent[i]) tail[k++] = s->recent[i];
    qsort(tail, k, sizeof *tail, hs_cmp);
    size_t i = s->n_sorted, j = k, w = n;
    while (j > 0) {
        if (i > 0 && s->sorted[i - 1] > tail[j - 1])
            s->sorted[--w] = s->sorted[--i];
        else
            s->sorted[--w] = tail[--j];
    }
    free(tail);
    s->n_sorted = n;
    /* the prefix index */
    size_t p = 0;
    for (size_t e = 0; e < n; e++) {
        size_t q = (size_t)(s->sorted[e] >> (64 - HS_PREFIX_BITS));
        while (p <= q) s->prefix[p++] = (uint32_t)e;
    }
    while (p <= ((size_t)1 << HS_PREFIX_BITS)) s->prefix[p++] = (uint32_t)n;
    /* the recent table: 1/16 of the sorted keys (at least 4096 slots) */
    size_t cap = 4096;
    while (cap < n / 8) cap *= 2;
    if (cap != s->cap_recent) return hs_recent_alloc(s, cap);
    memset(s->recent, 0, s->cap_recent * sizeof *s->recent);
    s->n_recent = 0;
    return PLLM_OK;
}

pllm_status pllm_hashset_add(pllm_hashset *s, const char *key, bool *seen)
{
    uint64_t h = XXH3_64bits(key, strlen(key));
    if (h == 0) h = 1;
    uint64_t *e = hs_recent_slot(s, h);
    *seen = *e != 0 || (s->n_sorted > 0 && hs_sorted_has(s, h));
    if (*seen) return PLLM_OK;
    if (s->n_sorted + s->n_recent + 1 >= UINT32_MAX) return PLLM_ERR_NOMEM; /* prefix is 32-bit */
    *e = h;
    if (++s->n_recent * 2 >= s->cap_recent) return hs_merge(s);
    return PLLM_OK;
}
