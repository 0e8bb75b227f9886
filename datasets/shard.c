/* shard.c: the --shard partition and the shard sidecar (shard.h). */
#include "datasets/shard.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

pllm_status pllm_shard_parse(const char *s, pllm_shard_spec *out)
{
    long long k, n;
    char tail;
    if (!s || sscanf(s, "%lld/%lld%c", &k, &n, &tail) != 2 || n < 1 || n > 1000000 || k < 0 ||
        k >= n)
        return pllm_errorf(PLLM_ERR_INVALID,
                           "--shard '%s': expected K/N with 0 <= K < N (e.g. 0/4 .. 3/4)",
                           s ? s : "");
    out->k = (int32_t)k;
    out->n = (int32_t)n;
    return PLLM_OK;
}

const char *pllm_shard_balance_name(pllm_shard_balance b)
{
    return b == PLLM_SHARD_BALANCE_TOKENS ? "tokens" : "hash";
}

pllm_status pllm_shard_balance_parse(const char *s, pllm_shard_balance *out)
{
    if (s && !strcmp(s, "hash")) {
        *out = PLLM_SHARD_BALANCE_HASH;
        return PLLM_OK;
    }
    if (s && !strcmp(s, "tokens")) {
        *out = PLLM_SHARD_BALANCE_TOKENS;
        return PLLM_OK;
    }
    return pllm_errorf(PLLM_ERR_INVALID, "--shard-balance '%s' is not one of tokens, hash",
                       s ? s : "");
}

uint64_t pllm_shard_prefix_key(const int32_t *ids, size_t n, int32_t key_tokens, int32_t block_size)
{
    size_t bs = block_size > 0 ? (size_t)block_size : 1;
    size_t cacheable = n > 0 ? (n - 1) / bs * bs : 0;
    size_t len = (size_t)(key_tokens > 0 ? key_tokens : PLLM_SHARD_KEY_TOKENS);
    if (cacheable < len) len = cacheable;
    if (len == 0) len = n;
    /* seed 1: a token key never equals a text key of the same bytes */
    return XXH3_64bits_withSeed(ids, len * sizeof *ids, 1);
}

uint64_t pllm_shard_text_key(const char *text)
{
    return XXH3_64bits_withSeed(text, strlen(text), 2);
}

/* ---------------------------------------------------------------- the plan (open addressing) */

typedef struct plan_slot {
    uint64_t key;
    int64_t tokens;
    int32_t shard; /* -1: spread by record key */
    bool used;
} plan_slot;

struct pllm_shard_plan {
    plan_slot *slots; /* [cap], cap a power of two */
    size_t cap, n;
    int64_t *load; /* [n_shards] after finish */
    int32_t n_shards;
};

pllm_status pllm_shard_plan_create(pllm_shard_plan **out)
{
    pllm_shard_plan *p = pllm_calloc(1, sizeof *p);
    if (!p) return PLLM_ERR_NOMEM;
    p->cap = 1024;
    p->slots = pllm_calloc(p->cap, sizeof *p->slots);
    if (!p->slots) {
        free(p);
        return PLLM_ERR_NOMEM;
    }
    *out = p;
    return PLLM_OK;
}

void pllm_shard_plan_free(pllm_shard_plan *p)
{
    if (!p) return;
    free(p->slots);
    free(p->load);
    free(p);
}

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

static plan_slot *plan_find(const pllm_shard_plan *p, uint64_t key)
{
    size_t i = (size_t)mix(key) & (p->cap - 1);
    while (p->slots[i].used && p->slots[i].key != key) i = (i + 1) & (p->cap - 1);
    return &p->slots[i];
}

pllm_status pllm_shard_plan_add(pllm_shard_plan *p, uint64_t key, int64_t tokens)
{
    if ((p->n + 1) * 4 > p->cap * 3) {
        pllm_shard_plan grown = *p;
        grown.cap = p->cap * 2;
        grown.slots = pllm_calloc(grown.cap, sizeof *grown.slots);
        if (!grown.slots) return PLLM_ERR_NOMEM;
        for (size_t i = 0; i < p->cap; i++)
            if (p->slots[i].used) *plan_find(&grown, p->slots[i].key) = p->slots[i];
        free(p->slots);
        p->slots = grown.slots;
        p->cap = grown.cap;
    }
    plan_slot *s = plan_find(p, key);
    if (!s->used) {
        *s = (plan_slot){.key = key, .used = true, .shard = -1};
        p->n++;
    }
    s->tokens += tokens > 0 ? tokens : 1; /* every record weighs at least 1 */
    return PLLM_OK;
}

static int by_weight(const void *a, const void *b)
{
    const plan_slot *x = *(plan_slot *const *)a, *y = *(plan_slot *const *)b;
    if (x->tokens != y->tokens) return x->tokens > y->tokens ? -1 : 1;
    return x->key < y->key ? -1 : x->key > y->key;
}

static bool heap_less(const int64_t *load, int32_t a, int32_t b)
{
    return load[a] < load[b] || (load[a] == load[b] && a < b);
}

pllm_status pllm_shard_plan_finish(pllm_shard_plan *p, int32_t n)
{
    PLLM_ASSERT(n >= 1);
    free(p->load);
    p->load = pllm_calloc((size_t)n, sizeof *p->load);
    plan_slot **order = pllm_calloc(p->n ? p->n : 1, sizeof *order);
    if (!p->load || !order) {
        free(order);
        return PLLM_ERR_NOMEM;
    }
    p->n_shards = n;
    size_t m = 0;
    int64_t total = 0;
    for (size_t i = 0; i < p->cap; i++)
        if (p->slots[i].used) {
            order[m++] = &p->slots[i];
            total += p->slots[i].tokens;
        }
    qsort(order, m, sizeof *order, by_weight);
    /* A key much heavier than a fair share would leave its shard far behind the others:
     * spread its records (shard -1); its tokens then go to every shard about equally, and its
     * prefix is computed once per shard. "Much": more than 5/4 of a fair share; a key below
     * that stays whole (at worst its shard takes 25% longer than the mean). */
    int64_t fair = (total + n - 1) / n * 5 / 4;
    int64_t spread = 0;
    for (size_t i = 0; i < m; i++)
        if (n > 1 && order[i]->tokens > fair) {
            order[i]->shard = -1;
            spread += order[i]->tokens;
        }
    for (int32_t k = 0; k < n; k++) p->load[k] = spread / n;
    /* Longest processing time first: the heaviest key to the least loaded shard (a binary
     * min-heap of shards by load, ties to the lower shard): O(m log n). */
    int32_t *heap = pllm_calloc((size_t)n, sizeof *heap);
    if (!heap) {
        free(order);
        return PLLM_ERR_NOMEM;
    }
    for (int32_t k = 0; k < n; k++) heap[k] = k; /* equal loads: already a heap */
    for (size_t i = 0; i < m; i++) {
        if (n > 1 && order[i]->tokens > fair) continue;
        int32_t best = heap[0];
        order[i]->shard = best;
        p->load[best] += order[i]->tokens;
        /* sift the root down */
        size_t j = 0;
        for (;;) {
            size_t l = 2 * j + 1, r = l + 1, s = j;
            if (l < (size_t)n && heap_less(p->load, heap[l], heap[s])) s = l;
            if (r < (size_t)n && heap_less(p->load, heap[r], heap[s])) s = r;
            if (s == j) break;
            int32_t t = heap[j];
            heap[j] = heap[s];
            heap[s] = t;
            j = s;
        }
    }
    free(heap);
    free(order);
    return PLLM_OK;
}

int64_t pllm_shard_plan_tokens(const pllm_shard_plan *p, int32_t k)
{
    return p->load && k >= 0 && k < p->n_shards ? p->load[k] : 0;
}

int64_t pllm_shard_plan_keys(const pllm_shard_plan *p)
{
    return (int64_t)p->n;
}

int32_t pllm_shard_of(const pllm_shard_plan *plan, uint64_t prefix_key, uint64_t record_key,
                      int32_t n)
{
    if (n <= 1) return 0;
    if (plan) {
        const plan_slot *s = plan_find(plan, prefix_key);
        if (s->used && s->shard >= 0) return s->shard;
        return (int32_t)(mix(record_key) % (uint64_t)n);
    }
    return (int32_t)(mix(prefix_key) % (uint64_t)n);
}

/* ---------------------------------------------------------------- the sidecar */

char *pllm_shard_sidecar_path(const char *out_path)
{
    pllm_buf b = {0};
    if (pllm_buf_appendf(&b, "%s%s", out_path, PLLM_SHARD_SIDECAR_SUFFIX) != PLLM_OK) return NULL;
    return b.s;
}

static bool get_int(const json_t *o, const char *k, int64_t lo, int64_t hi, int64_t *v)
{
    const json_t *x = json_object_get(o, k);
    if (!json_is_integer(x)) return false;
    *v = json_integer_value(x);
    return *v >= lo && *v <= hi;
}

static pllm_status meta_check(pllm_shard_meta *m, json_t *doc, const char *name)
{
    int64_t ver, k, n, p;
    if (!json_is_object(doc))
        return pllm_errorf(PLLM_ERR_FORMAT, "%s: not a shard sidecar (not a JSON object)", name);
    if (!get_int(doc, "pllm_shard", 1, PLLM_SHARD_SIDECAR_VERSION, &ver))
        return pllm_errorf(PLLM_ERR_FORMAT,
                           "%s: not a shard sidecar of a version this pllm reads (field "
                           "'pllm_shard')",
                           name);
    if (!get_int(doc, "num_shards", 1, 1000000, &n))
        return pllm_errorf(PLLM_ERR_FORMAT, "%s: field 'num_shards' missing or out of range", name);
    if (!get_int(doc, "shard", 0, n - 1, &k))
        return pllm_errorf(PLLM_ERR_FORMAT, "%s: field 'shard' missing or not in 0..%lld", name,
                           (long long)(n - 1));
    if (!get_int(doc, "key_tokens", 1, INT32_MAX, &p))
        return pllm_errorf(PLLM_ERR_FORMAT, "%s: field 'key_tokens' missing or out of range", name);
    pllm_shard_balance b = PLLM_SHARD_BALANCE_HASH;
    if (pllm_shard_balance_parse(json_string_value(json_object_get(doc, "balance")), &b) != PLLM_OK)
        return pllm_errorf(PLLM_ERR_FORMAT, "%s: field 'balance' missing or unknown", name);
    const json_t *att = json_object_get(doc, "attempts");
    if (att && !json_is_array(att))
        return pllm_errorf(PLLM_ERR_FORMAT, "%s: field 'attempts' is not a list", name);
    m->spec = (pllm_shard_spec){(int32_t)k, (int32_t)n, (int32_t)p, b};
    m->doc = doc;
    return PLLM_OK;
}

pllm_status pllm_shard_meta_parse(pllm_shard_meta *m, const char *text, size_t len,
                                  const char *name)
{
    memset(m, 0, sizeof *m);
    json_error_t je;
    json_t *doc = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!doc) return pllm_errorf(PLLM_ERR_FORMAT, "%s: not JSON: %s", name, je.text);
    pllm_status st = meta_check(m, doc, name);
    if (st != PLLM_OK) json_decref(doc);
    return st;
}

pllm_status pllm_shard_meta_load(pllm_shard_meta *m, const char *path)
{
    memset(m, 0, sizeof *m);
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (errno == ENOENT) return pllm_errorf(PLLM_ERR_NOT_FOUND, "%s: no such file", path);
        return pllm_errorf(PLLM_ERR_IO, "%s: %s", path, strerror(errno));
    }
    pllm_buf b = {0};
    char chunk[65536];
    size_t got;
    pllm_status st = PLLM_OK;
    while (st == PLLM_OK && (got = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (b.n + got > ((size_t)64 << 20))
            st = pllm_errorf(PLLM_ERR_FORMAT, "%s: too large for a shard sidecar", path);
        else
            st = pllm_buf_append(&b, chunk, got);
    }
    if (st == PLLM_OK && ferror(f)) st = pllm_errorf(PLLM_ERR_IO, "%s: read failed", path);
    fclose(f);
    if (st == PLLM_OK) st = pllm_shard_meta_parse(m, b.s ? b.s : "", b.n, path);
    pllm_buf_free(&b);
    return st;
}

pllm_status pllm_shard_meta_save(const pllm_shard_meta *m, const char *path)
{
    pllm_buf tmp = {0};
    PLLM_TRY(pllm_buf_appendf(&tmp, "%s.tmp.%ld", path, (long)getpid()));
    pllm_status st = PLLM_OK;
    if (json_dump_file(m->doc, tmp.s, JSON_INDENT(2) | JSON_PRESERVE_ORDER) != 0)
        st = pllm_errorf(PLLM_ERR_IO, "%s: cannot write the shard sidecar", tmp.s);
    else if (rename(tmp.s, path) != 0)
        st = pllm_errorf(PLLM_ERR_IO, "%s: cannot rename to %s: %s", tmp.s, path, strerror(errno));
    if (st != PLLM_OK) unlink(tmp.s);
    pllm_buf_free(&tmp);
    return st;
}

void pllm_shard_meta_free(pllm_shard_meta *m)
{
    if (!m) return;
    json_decref(m->doc);
    m->doc = NULL;
}
