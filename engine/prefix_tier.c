/* prefix_tier.c: the persistent prefix cache between the KV manager, the backend and the
 * store (prefix_tier.h). */
#include "engine/prefix_tier.h"

#include <stdlib.h>
#include <string.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

struct pllm_prefix_tier {
    pllm_backend *backend;
    pllm_kv_layout layout;
    pllm_prefix_store *store;
    uint64_t ns;
    size_t raw_bytes;
    uint8_t *kv;           /* [raw_bytes] one block */
    pllm_prefix_key *keys; /* [keys_cap] a sequence's chain */
    int32_t keys_cap;
    pllm_kv_tier iface;
};

/* keys[0 .. n) of tokens' first n blocks */
static pllm_status chain(pllm_prefix_tier *t, const int32_t *tokens, int32_t n)
{
    if (n > t->keys_cap) {
        int32_t cap = PLLM_MAX(n, 2 * t->keys_cap);
        pllm_prefix_key *k = pllm_realloc(t->keys, (size_t)cap * sizeof *k);
        if (!k) return PLLM_ERR_NOMEM;
        t->keys = k;
        t->keys_cap = cap;
    }
    int32_t bs = t->layout.block_size;
    pllm_prefix_key parent = pllm_prefix_root_key();
    for (int32_t i = 0; i < n; i++) {
        t->keys[i] = pllm_prefix_key_next(parent, tokens + (size_t)i * (size_t)bs, bs, t->ns);
        parent = t->keys[i];
    }
    return PLLM_OK;
}

static pllm_prefix_expect expect(const pllm_prefix_tier *t, const int32_t *tokens, int32_t d)
{
    return (pllm_prefix_expect){
        .ns = t->ns,
        .key = t->keys[d],
        .parent = d == 0 ? pllm_prefix_root_key() : t->keys[d - 1],
        .depth = d,
        .block_size = t->layout.block_size,
        .tokens = tokens + (size_t)d * (size_t)t->layout.block_size,
        .raw_bytes = t->raw_bytes,
    };
}

static int32_t tier_probe(void *arg, const int32_t *tokens, int32_t from, int32_t max)
{
    pllm_prefix_tier *t = arg;
    if (chain(t, tokens, from + max) != PLLM_OK) return 0;
    int32_t n = 0;
    while (n < max && pllm_prefix_store_has(t->store, t->keys[from + n])) n++;
    return n;
}

static pllm_status tier_load(void *arg, const int32_t *tokens, int32_t from, int32_t n,
                             const int32_t *ids, int32_t *n_loaded)
{
    pllm_prefix_tier *t = arg;
    *n_loaded = 0;
    PLLM_TRY(chain(t, tokens, from + n));
    for (int32_t i = 0; i < n; i++) {
        pllm_prefix_expect x = expect(t, tokens, from + i);
        bool hit = false;
        PLLM_TRY(pllm_prefix_store_get(t->store, &x, t->kv, &hit));
        if (!hit) break;
        PLLM_TRY(t->backend->iface->kv_write_block(t->backend->ctx, ids[i], t->kv));
        (*n_loaded)++;
    }
    return PLLM_OK;
}

pllm_status pllm_prefix_tier_create(pllm_prefix_tier **out, pllm_backend *backend,
                                    const pllm_kv_layout *layout, const pllm_prefix_tier_params *p)
{
    *out = NULL;
    if (!backend->iface->kv_read_block || !backend->iface->kv_write_block)
        return pllm_errorf(PLLM_ERR_UNSUPPORTED,
                           "prefix cache directory %s: the %s backend cannot read and write KV "
                           "blocks (the persistent prefix cache is CPU-only for now)",
                           p->dir, backend->iface->name);
    pllm_prefix_tier *t = pllm_calloc(1, sizeof *t);
    if (!t) return PLLM_ERR_NOMEM;
    t->backend = backend;
    t->layout = *layout;
    t->raw_bytes = pllm_kv_block_bytes(layout);
    XXH3_state_t hs;
    XXH3_64bits_reset(&hs);
    const char *name = backend->iface->name, *tag = p->tag ? p->tag : "";
    int32_t dims[5] = {(int32_t)layout->dtype, layout->block_size, layout->n_layer,
                       layout->n_head_kv, layout->head_dim};
    XXH3_64bits_update(&hs, "pllm-prefix-v1", 14);
    XXH3_64bits_update(&hs, &p->model_identity, sizeof p->model_identity);
    XXH3_64bits_update(&hs, dims, sizeof dims);
    XXH3_64bits_update(&hs, name, strlen(name) + 1);
    XXH3_64bits_update(&hs, tag, strlen(tag) + 1);
    t->ns = XXH3_64bits_digest(&hs);
    t->kv = pllm_malloc(t->raw_bytes);
    pllm_status st = t->kv ? PLLM_OK : PLLM_ERR_NOMEM;
    pllm_prefix_store_params sp = {
        .dir = p->dir,
        .max_bytes = p->max_bytes,
        .ns = t->ns,
        .block_size = layout->block_size,
        .raw_bytes = t->raw_bytes,
        .warn = p->warn,
        .warn_arg = p->warn_arg,
    };
    if (st == PLLM_OK) st = pllm_prefix_store_create(&t->store, &sp);
    if (st != PLLM_OK) {
        pllm_prefix_tier_free(t);
        return st;
    }
    t->iface = (pllm_kv_tier){.probe = tier_probe, .load = tier_load, .arg = t};
    *out = t;
    return PLLM_OK;
}

void pllm_prefix_tier_free(pllm_prefix_tier *t)
{
    if (!t) return;
    pllm_prefix_store_free(t->store);
    free(t->kv);
    free(t->keys);
    free(t);
}

const pllm_kv_tier *pllm_prefix_tier_iface(pllm_prefix_tier *t)
{
    return &t->iface;
}

pllm_status pllm_prefix_tier_save(pllm_prefix_tier *t, const int32_t *tokens, int32_t from,
                                  int32_t to, const int32_t *ids)
{
    if (from >= to) return PLLM_OK;
    PLLM_TRY(chain(t, tokens, to));
    for (int32_t d = from; d < to; d++) {
        pllm_prefix_expect x = expect(t, tokens, d);
        /* an entry already there is counted as skipped without reading the block */
        bool have = pllm_prefix_store_has(t->store, x.key);
        if (!have) PLLM_TRY(t->backend->iface->kv_read_block(t->backend->ctx, ids[d], t->kv));
        PLLM_TRY(pllm_prefix_store_put(t->store, &x, have ? NULL : t->kv));
    }
    return PLLM_OK;
}

void pllm_prefix_tier_get_stats(const pllm_prefix_tier *t, pllm_prefix_store_stats *out)
{
    pllm_prefix_store_get_stats(t->store, out);
}

uint64_t pllm_prefix_tier_ns(const pllm_prefix_tier *t)
{
    return t->ns;
}
