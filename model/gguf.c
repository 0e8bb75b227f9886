#include "model/gguf.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define GGUF_MAX_DIMS 4
#define GGUF_MAX_KEY 65536
#define GGUF_MAX_ARRAY_DEPTH 4
#define GGUF_DEFAULT_ALIGNMENT 32

static const char *g_type_names[PLLM_GGUF_TYPE_COUNT] = {
    "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64",
};

static const size_t g_type_size[PLLM_GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

const char *pllm_gguf_type_name(pllm_gguf_type t)
{
    return (unsigned)t < PLLM_GGUF_TYPE_COUNT ? g_type_names[t] : "unknown";
}

/* GGML type ids -> pllm dtypes, and the names of GGML types pllm does not know. */
static pllm_dtype dtype_from_ggml(uint32_t t)
{
    switch (t) {
    case 0: return PLLM_DTYPE_F32;
    case 1: return PLLM_DTYPE_F16;
    case 2: return PLLM_DTYPE_Q4_0;
    case 3: return PLLM_DTYPE_Q4_1;
    case 6: return PLLM_DTYPE_Q5_0;
    case 7: return PLLM_DTYPE_Q5_1;
    case 8: return PLLM_DTYPE_Q8_0;
    case 12: return PLLM_DTYPE_Q4_K;
    case 13: return PLLM_DTYPE_Q5_K;
    case 14: return PLLM_DTYPE_Q6_K;
    case 30: return PLLM_DTYPE_BF16;
    default: return PLLM_DTYPE_COUNT;
    }
}

static const char *ggml_type_name(uint32_t t)
{
    static const char *names[] = {
        [9] = "Q8_1", [10] = "Q2_K", [11] = "Q3_K", [15] = "Q8_K", [16] = "IQ2_XXS",
        [17] = "IQ2_XS", [18] = "IQ3_XXS", [19] = "IQ1_S", [20] = "IQ4_NL", [21] = "IQ3_S",
        [22] = "IQ2_S", [23] = "IQ4_XS", [24] = "I8", [25] = "I16", [26] = "I32", [27] = "I64",
        [28] = "F64", [29] = "IQ1_M", [34] = "TQ1_0", [35] = "TQ2_0", [39] = "MXFP4",
    };
    pllm_dtype d = dtype_from_ggml(t);
    if (d != PLLM_DTYPE_COUNT) return pllm_dtype_name(d);
    if (t < PLLM_ARRAY_LEN(names) && names[t]) return names[t];
    return NULL;
}

typedef struct cursor {
    const uint8_t *p;
    size_t size, pos;
    const char *name;
} cursor;

static pllm_status truncated(const cursor *c, size_t need, const char *what)
{
    return pllm_errorf(PLLM_ERR_FORMAT,
                       "%s: truncated file: %s needs %zu bytes at byte offset %zu but the file has %zu",
                       c->name, what, need, c->pos, c->size);
}

static pllm_status rd(cursor *c, void *dst, size_t n, const char *what)
{
    if (c->size - c->pos < n) return truncated(c, n, what);
    memcpy(dst, c->p + c->pos, n);
    c->pos += n;
    return PLLM_OK;
}

static pllm_status rd_u32(cursor *c, uint32_t *v, const char *what) { return rd(c, v, 4, what); }
static pllm_status rd_u64(cursor *c, uint64_t *v, const char *what) { return rd(c, v, 8, what); }

static pllm_status rd_str(cursor *c, pllm_gguf_str *s, const char *what)
{
    uint64_t len = 0;
    size_t at = c->pos;
    PLLM_TRY(rd_u64(c, &len, what));
    if (len > c->size - c->pos) {
        c->pos = at;
        return pllm_errorf(PLLM_ERR_FORMAT,
                           "%s: %s at byte offset %zu has length %llu, past the end of the file (%zu bytes)",
                           c->name, what, at, (unsigned long long)len, c->size);
    }
    s->s = (const char *)c->p + c->pos;
    s->len = (size_t)len;
    c->pos += (size_t)len;
    return PLLM_OK;
}

/* Skip (validating) one value of type t; used for nested arrays. */
static pllm_status skip_value(cursor *c, uint32_t t, int depth, const char *key)
{
    if (t >= PLLM_GGUF_TYPE_COUNT)
        return pllm_errorf(PLLM_ERR_FORMAT, "%s: key '%s': unknown value type %u at byte offset %zu",
                           c->name, key, t, c->pos);
    if (t == PLLM_GGUF_STRING) {
        pllm_gguf_str s;
        return rd_str(c, &s, key);
    }
    if (t == PLLM_GGUF_ARRAY) {
        uint32_t et = 0;
        uint64_t n = 0;
        if (depth >= GGUF_MAX_ARRAY_DEPTH)
            return pllm_errorf(PLLM_ERR_FORMAT, "%s: key '%s': arrays nested deeper than %d at byte offset %zu",
                               c->name, key, GGUF_MAX_ARRAY_DEPTH, c->pos);
        PLLM_TRY(rd_u32(c, &et, key));
        PLLM_TRY(rd_u64(c, &n, key));
        if (et >= PLLM_GGUF_TYPE_COUNT)
            return pllm_errorf(PLLM_ERR_FORMAT, "%s: key '%s': unknown array element type %u at byte offset %zu",
                               c->name, key, et, c->pos - 12);
        if (g_type_size[et]) {
            if (n > (c->size - c->pos) / g_type_size[et])
                return truncated(c, (size_t)-1, key);
            c->pos += (size_t)n * g_type_size[et];
            return PLLM_OK;
        }
        if (n > c->size - c->pos) return truncated(c, (size_t)n, key); /* every element >= 1 byte */
        for (uint64_t i = 0; i < n; i++) PLLM_TRY(skip_value(c, et, depth + 1, key));
        return PLLM_OK;
    }
    if (c->size - c->pos < g_type_size[t]) return truncated(c, g_type_size[t], key);
    c->pos += g_type_size[t];
    return PLLM_OK;
}

static pllm_status read_scalar(cursor *c, pllm_gguf_kv *kv)
{
    uint8_t b[8] = {0};
    size_t n = g_type_size[kv->type];
    PLLM_TRY(rd(c, b, n, kv->key));
    switch (kv->type) {
    case PLLM_GGUF_U8: kv->v.u = b[0]; break;
    case PLLM_GGUF_I8: kv->v.i = (int8_t)b[0]; break;
    case PLLM_GGUF_U16: { uint16_t x; memcpy(&x, b, 2); kv->v.u = x; break; }
    case PLLM_GGUF_I16: { int16_t x; memcpy(&x, b, 2); kv->v.i = x; break; }
    case PLLM_GGUF_U32: { uint32_t x; memcpy(&x, b, 4); kv->v.u = x; break; }
    case PLLM_GGUF_I32: { int32_t x; memcpy(&x, b, 4); kv->v.i = x; break; }
    case PLLM_GGUF_F32: { float x; memcpy(&x, b, 4); kv->v.f = x; break; }
    case PLLM_GGUF_BOOL:
        if (b[0] > 1)
            return pllm_errorf(PLLM_ERR_FORMAT, "%s: key '%s': bool value %u is neither 0 nor 1 at byte offset %zu",
                               c->name, kv->key, b[0], kv->offset);
        kv->v.u = b[0];
        break;
    case PLLM_GGUF_U64: memcpy(&kv->v.u, b, 8); break;
    case PLLM_GGUF_I64: memcpy(&kv->v.i, b, 8); break;
    case PLLM_GGUF_F64: memcpy(&kv->v.f, b, 8); break;
    default: PLLM_ASSERT(!"not a scalar");
    }
    return PLLM_OK;
}

static pllm_status read_kv(cursor *c, pllm_gguf_kv *kv, int64_t idx)
{
    pllm_gguf_str key = {0};
    uint32_t t = 0;
    size_t key_at = c->pos;
    PLLM_TRY(rd_str(c, &key, "metadata key"));
    if (key.len == 0 || key.len > GGUF_MAX_KEY)
        return pllm_errorf(PLLM_ERR_FORMAT, "%s: metadata entry %lld at byte offset %zu: key length %zu is invalid",
                           c->name, (long long)idx, key_at, key.len);
    kv->key = pllm_malloc(key.len + 1);
    if (!kv->key) return PLLM_ERR_NOMEM;
    memcpy(kv->key, key.s, key.len);
    kv->key[key.len] = 0;
    if (strlen(kv->key) != key.len)
        return pllm_errorf(PLLM_ERR_FORMAT, "%s: metadata key at byte offset %zu contains a NUL byte", c->name, key_at);
    size_t type_at = c->pos;
    PLLM_TRY(rd_u32(c, &t, kv->key));
    if (t >= PLLM_GGUF_TYPE_COUNT)
        return pllm_errorf(PLLM_ERR_FORMAT, "%s: key '%s': unknown value type %u at byte offset %zu",
                           c->name, kv->key, t, type_at);
    kv->type = (pllm_gguf_type)t;
    kv->offset = c->pos;
    if (t == PLLM_GGUF_STRING) return rd_str(c, &kv->v.str, kv->key);
    if (t != PLLM_GGUF_ARRAY) return read_scalar(c, kv);

    uint32_t et = 0;
    uint64_t n = 0;
    PLLM_TRY(rd_u32(c, &et, kv->key));
    PLLM_TRY(rd_u64(c, &n, kv->key));
    if (et >= PLLM_GGUF_TYPE_COUNT)
        return pllm_errorf(PLLM_ERR_FORMAT, "%s: key '%s': unknown array element type %u at byte offset %zu",
                           c->name, kv->key, et, kv->offset);
    kv->arr_type = (pllm_gguf_type)et;
    kv->arr_n = n;
    kv->arr_data = c->p + c->pos;
    if (g_type_size[et]) {
        if (n > (c->size - c->pos) / g_type_size[et])
            return pllm_errorf(PLLM_ERR_FORMAT,
                               "%s: key '%s': array of %llu %s at byte offset %zu runs past the end of the file",
                               c->name, kv->key, (unsigned long long)n, g_type_names[et], kv->offset);
        c->pos += (size_t)n * g_type_size[et];
        return PLLM_OK;
    }
    /* Each string element needs at least its 8-byte length, which bounds n before allocating. */
    if (n > (c->size - c->pos) / (et == PLLM_GGUF_STRING ? 8 : 12))
        return pllm_errorf(PLLM_ERR_FORMAT,
                           "%s: key '%s': array of %llu %s at byte offset %zu runs past the end of the file",
                           c->name, kv->key, (unsigned long long)n, g_type_names[et], kv->offset);
    if (et == PLLM_GGUF_STRING) {
        kv->str_offsets = pllm_malloc((size_t)(n ? n : 1) * sizeof(size_t));
        if (!kv->str_offsets) return PLLM_ERR_NOMEM;
        for (uint64_t i = 0; i < n; i++) {
            pllm_gguf_str s;
            kv->str_offsets[i] = c->pos;
            PLLM_TRY(rd_str(c, &s, kv->key));
        }
        return PLLM_OK;
    }
    for (uint64_t i = 0; i < n; i++) PLLM_TRY(skip_value(c, et, 1, kv->key));
    return PLLM_OK;
}

static pllm_status read_tensor_info(cursor *c, pllm_gguf_tensor *t, int64_t idx)
{
    pllm_gguf_str name;
    uint32_t n_dims;
    t->info_offset = c->pos;
    PLLM_TRY(rd_str(c, &name, "tensor name"));
    if (name.len == 0 || name.len > GGUF_MAX_KEY)
        return pllm_errorf(PLLM_ERR_FORMAT, "%s: tensor %lld at byte offset %zu: name length %zu is invalid",
                           c->name, (long long)idx, t->info_offset, name.len);
    t->name = pllm_malloc(name.len + 1);
    if (!t->name) return PLLM_ERR_NOMEM;
    memcpy(t->name, name.s, name.len);
    t->name[name.len] = 0;
    if (strlen(t->name) != name.len)
        return pllm_errorf(PLLM_ERR_FORMAT, "%s: tensor %lld at byte offset %zu: name contains a NUL byte", c->name,
                           (long long)idx, t->info_offset);
    PLLM_TRY(rd_u32(c, &n_dims, t->name));
    if (n_dims == 0 || n_dims > GGUF_MAX_DIMS)
        return pllm_errorf(PLLM_ERR_FORMAT, "%s: tensor '%s' at byte offset %zu: %u dimensions (1 to %d allowed)",
                           c->name, t->name, t->info_offset, n_dims, GGUF_MAX_DIMS);
    t->n_dims = (int)n_dims;
    uint64_t nel = 1;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        uint64_t ne = 0;
        PLLM_TRY(rd_u64(c, &ne, t->name));
        if (ne == 0 || ne > ((uint64_t)1 << 40) || __builtin_mul_overflow(nel, ne, &nel) || nel > ((uint64_t)1 << 44))
            return pllm_errorf(PLLM_ERR_FORMAT, "%s: tensor '%s' at byte offset %zu: dimension %u is %llu (invalid or too large)",
                               c->name, t->name, t->info_offset, d, (unsigned long long)ne);
        t->ne[d] = (int64_t)ne;
    }
    PLLM_TRY(rd_u32(c, &t->ggml_type, t->name));
    PLLM_TRY(rd_u64(c, &t->offset, t->name));
    t->dtype = dtype_from_ggml(t->ggml_type);
    if (t->dtype == PLLM_DTYPE_COUNT) {
        const char *tn = ggml_type_name(t->ggml_type);
        if (tn)
            return pllm_errorf(PLLM_ERR_UNSUPPORTED,
                               "%s: tensor '%s' at byte offset %zu: tensor type %s (%u) is not supported "
                               "(supported: F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q4_K Q5_K Q6_K)",
                               c->name, t->name, t->info_offset, tn, t->ggml_type);
        return pllm_errorf(PLLM_ERR_FORMAT, "%s: tensor '%s' at byte offset %zu: unknown tensor type %u",
                           c->name, t->name, t->info_offset, t->ggml_type);
    }
    int be = pllm_dtype_block_elems(t->dtype);
    if (t->ne[0] % be)
        return pllm_errorf(PLLM_ERR_FORMAT,
                           "%s: tensor '%s' at byte offset %zu: row length %lld is not a multiple of the %s block size %d",
                           c->name, t->name, t->info_offset, (long long)t->ne[0], pllm_dtype_name(t->dtype), be);
    t->nbytes = (size_t)(nel / (uint64_t)be) * pllm_dtype_block_bytes(t->dtype);
    return PLLM_OK;
}

/* Alignment the data of a tensor of type t needs to be read in place: 4 for f32, 2 for the
 * rest (f16/bf16 elements, and every quantized block starts with or holds f16 scales). */
static size_t dtype_align(pllm_dtype t) { return t == PLLM_DTYPE_F32 ? 4 : 2; }

/* Open-addressing hash index of names: slot -> entry index + 1. */
static int32_t *index_new(int64_t n, size_t *mask)
{
    size_t cap = 8;
    while (cap < (size_t)n * 2) cap *= 2;
    *mask = cap - 1;
    return pllm_calloc(cap, sizeof(int32_t));
}

static size_t name_hash(const char *s) { return (size_t)XXH3_64bits(s, strlen(s)); }

static const char *kv_name(const pllm_gguf *g, int64_t i) { return g->kv[i].key; }
static const char *tensor_name(const pllm_gguf *g, int64_t i) { return g->tensors[i].name; }

/* The entry called name in an index (name_at gives an entry's name), or -1. */
static int64_t index_find(const pllm_gguf *g, const int32_t *idx, size_t mask,
                          const char *(*name_at)(const pllm_gguf *, int64_t), const char *name, size_t *slot)
{
    size_t h = name_hash(name) & mask;
    for (; idx[h]; h = (h + 1) & mask)
        if (strcmp(name_at(g, idx[h] - 1), name) == 0) break;
    if (slot) *slot = h;
    return idx[h] - 1;
}

/* Insert entry i; returns the index of an earlier entry with the same name (then nothing is
 * inserted), or -1. */
static int64_t index_insert(const pllm_gguf *g, int32_t *idx, size_t mask,
                            const char *(*name_at)(const pllm_gguf *, int64_t), int64_t i)
{
    size_t slot;
    int64_t dup = index_find(g, idx, mask, name_at, name_at(g, i), &slot);
    if (dup < 0) idx[slot] = (int32_t)i + 1;
    return dup;
}

pllm_status pllm_gguf_parse(pllm_gguf **out, const void *data, size_t size, const char *name)
{
    pllm_status st;
    cursor c = {.p = data, .size = size, .pos = 0, .name = name};
    *out = NULL;
    pllm_gguf *g = pllm_calloc(1, sizeof *g);
    if (!g) return PLLM_ERR_NOMEM;
    g->path = pllm_strdup(name);
    if (!g->path) { st = PLLM_ERR_NOMEM; goto fail; }
    g->map = data;
    g->size = size;

    char magic[4];
    if ((st = rd(&c, magic, 4, "magic")) != PLLM_OK) goto fail;
    if (memcmp(magic, "GGUF", 4) != 0) {
        st = pllm_errorf(PLLM_ERR_FORMAT, "%s: not a GGUF file: bad magic at byte offset 0 (expected \"GGUF\")", name);
        goto fail;
    }
    if ((st = rd_u32(&c, &g->version, "version")) != PLLM_OK) goto fail;
    if (g->version != 2 && g->version != 3) {
        st = pllm_errorf(PLLM_ERR_UNSUPPORTED, "%s: GGUF version %u at byte offset 4 is not supported (2 and 3 are)",
                         name, g->version);
        goto fail;
    }
    uint64_t n_tensors = 0, n_kv = 0;
    if ((st = rd_u64(&c, &n_tensors, "tensor count")) != PLLM_OK) goto fail;
    if ((st = rd_u64(&c, &n_kv, "metadata count")) != PLLM_OK) goto fail;
    /* A metadata entry takes at least 8+1+4+1 bytes, a tensor entry at least 8+1+4+8+4+8. */
    if (n_kv > (size - c.pos) / 14) {
        st = pllm_errorf(PLLM_ERR_FORMAT, "%s: metadata count %llu at byte offset 16 is larger than the file can hold",
                         name, (unsigned long long)n_kv);
        goto fail;
    }
    if (n_tensors > (size - c.pos) / 33) {
        st = pllm_errorf(PLLM_ERR_FORMAT, "%s: tensor count %llu at byte offset 8 is larger than the file can hold",
                         name, (unsigned long long)n_tensors);
        goto fail;
    }
    if (n_kv > PLLM_GGUF_MAX_ENTRIES || n_tensors > PLLM_GGUF_MAX_ENTRIES) {
        st = pllm_errorf(PLLM_ERR_FORMAT, "%s: %s count %llu at byte offset %d is over the limit of %d", name,
                         n_kv > PLLM_GGUF_MAX_ENTRIES ? "metadata" : "tensor",
                         (unsigned long long)(n_kv > PLLM_GGUF_MAX_ENTRIES ? n_kv : n_tensors),
                         n_kv > PLLM_GGUF_MAX_ENTRIES ? 16 : 8, PLLM_GGUF_MAX_ENTRIES);
        goto fail;
    }
    g->kv = pllm_calloc(n_kv ? (size_t)n_kv : 1, sizeof *g->kv);
    g->tensors = pllm_calloc(n_tensors ? (size_t)n_tensors : 1, sizeof *g->tensors);
    g->kv_index = index_new((int64_t)n_kv, &g->kv_mask);
    g->tensor_index = index_new((int64_t)n_tensors, &g->tensor_mask);
    if (!g->kv || !g->tensors || !g->kv_index || !g->tensor_index) { st = PLLM_ERR_NOMEM; goto fail; }
    for (uint64_t i = 0; i < n_kv; i++) {
        g->n_kv = (int64_t)i + 1;
        if ((st = read_kv(&c, &g->kv[i], (int64_t)i)) != PLLM_OK) goto fail;
        int64_t dup = index_insert(g, g->kv_index, g->kv_mask, kv_name, (int64_t)i);
        if (dup >= 0) {
            st = pllm_errorf(PLLM_ERR_FORMAT, "%s: duplicate metadata key '%s' at byte offset %zu (first at %zu)", name,
                             g->kv[i].key, g->kv[i].offset, g->kv[dup].offset);
            goto fail;
        }
    }
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    const pllm_gguf_kv *al = pllm_gguf_find(g, "general.alignment");
    if (al) {
        if (al->type != PLLM_GGUF_U32 || al->v.u == 0 || (al->v.u & (al->v.u - 1)) || al->v.u > 65536) {
            st = pllm_errorf(PLLM_ERR_FORMAT, "%s: key 'general.alignment' at byte offset %zu must be a u32 power of two",
                             name, al->offset);
            goto fail;
        }
        g->alignment = (size_t)al->v.u;
    }
    for (uint64_t i = 0; i < n_tensors; i++) {
        g->n_tensors = (int64_t)i + 1;
        if ((st = read_tensor_info(&c, &g->tensors[i], (int64_t)i)) != PLLM_OK) goto fail;
    }
    size_t data_off = (c.pos + g->alignment - 1) / g->alignment * g->alignment;
    if (n_tensors > 0 && data_off > size) {
        st = pllm_errorf(PLLM_ERR_FORMAT, "%s: truncated file: tensor data should start at byte offset %zu but the file has %zu bytes",
                         name, data_off, size);
        goto fail;
    }
    g->data_offset = data_off;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        pllm_gguf_tensor *t = &g->tensors[i];
        size_t avail = size > data_off ? size - data_off : 0;
        if (t->offset % g->alignment) {
            st = pllm_errorf(PLLM_ERR_FORMAT, "%s: tensor '%s' (entry at byte offset %zu): data offset %llu is not a multiple of the alignment %zu",
                             name, t->name, t->info_offset, (unsigned long long)t->offset, g->alignment);
            goto fail;
        }
        if (t->offset > avail || t->nbytes > avail - t->offset) {
            st = pllm_errorf(PLLM_ERR_FORMAT,
                             "%s: tensor '%s' (entry at byte offset %zu): data at byte offset %llu..%llu is out of bounds (file has %zu bytes; truncated?)",
                             name, t->name, t->info_offset, (unsigned long long)(data_off + t->offset),
                             (unsigned long long)(data_off + t->offset + t->nbytes), size);
            goto fail;
        }
        if ((data_off + t->offset) % dtype_align(t->dtype)) {
            st = pllm_errorf(PLLM_ERR_UNSUPPORTED,
                             "%s: tensor '%s' (entry at byte offset %zu): data at byte offset %llu is not aligned to %zu bytes "
                             "for %s (pllm reads tensors in place; general.alignment is %zu)",
                             name, t->name, t->info_offset, (unsigned long long)(data_off + t->offset),
                             dtype_align(t->dtype), pllm_dtype_name(t->dtype), g->alignment);
            goto fail;
        }
        t->data = g->map + data_off + t->offset;
        int64_t dup = index_insert(g, g->tensor_index, g->tensor_mask, tensor_name, i);
        if (dup >= 0) {
            st = pllm_errorf(PLLM_ERR_FORMAT, "%s: duplicate tensor '%s' at byte offset %zu (first at %zu)", name, t->name,
                             t->info_offset, g->tensors[dup].info_offset);
            goto fail;
        }
    }
    *out = g;
    return PLLM_OK;
fail:
    pllm_gguf_close(g); /* owns_map is false: the caller's buffer is left alone */
    return st;
}

pllm_status pllm_gguf_open(pllm_gguf **out, const char *path)
{
    *out = NULL;
    pllm_mapped_file f;
    PLLM_TRY(pllm_mapped_file_open(&f, path));
    pllm_status st;
    if (f.size < 24) {
        st = pllm_errorf(PLLM_ERR_FORMAT, "%s: truncated file: %zu bytes is too small for a GGUF header (24 bytes)",
                         path, f.size);
        goto fail;
    }
    pllm_mapped_file_set_polled(&f, true); /* checked right after the parse */
    st = pllm_gguf_parse(out, f.data, f.size, path);
    pllm_mapped_file_set_polled(&f, false);
    if (st != PLLM_OK) goto fail;
    (*out)->owns_map = true; /* close() unmaps */
    (*out)->file = f;
    /* the header was read from the mapping: a file cut short meanwhile read as zeros */
    if ((st = pllm_mapped_file_check(&(*out)->file)) != PLLM_OK) {
        pllm_gguf_close(*out);
        *out = NULL;
        return st;
    }
    return PLLM_OK;
fail:
    pllm_mapped_file_close(&f);
    return st;
}

pllm_status pllm_gguf_check_file(const pllm_gguf *g)
{
    return g->owns_map ? pllm_mapped_file_poll(&g->file) : PLLM_OK;
}

void pllm_gguf_close(pllm_gguf *g)
{
    if (!g) return;
    for (int64_t i = 0; i < g->n_kv; i++) {
        free(g->kv[i].key);
        free(g->kv[i].str_offsets);
    }
    for (int64_t i = 0; i < g->n_tensors; i++) free(g->tensors[i].name);
    free(g->kv);
    free(g->tensors);
    free(g->kv_index);
    free(g->tensor_index);
    if (g->owns_map) pllm_mapped_file_close(&g->file);
    free(g->path);
    free(g);
}

const pllm_gguf_kv *pllm_gguf_find(const pllm_gguf *g, const char *key)
{
    int64_t i = index_find(g, g->kv_index, g->kv_mask, kv_name, key, NULL);
    return i >= 0 ? &g->kv[i] : NULL;
}

const pllm_gguf_tensor *pllm_gguf_find_tensor(const pllm_gguf *g, const char *name)
{
    int64_t i = index_find(g, g->tensor_index, g->tensor_mask, tensor_name, name, NULL);
    return i >= 0 ? &g->tensors[i] : NULL;
}

static pllm_status missing(const pllm_gguf *g, const char *key)
{
    return pllm_errorf(PLLM_ERR_NOT_FOUND, "%s: missing metadata key '%s'", g->path, key);
}

static pllm_status wrong_type(const pllm_gguf *g, const pllm_gguf_kv *kv, const char *want)
{
    return pllm_errorf(PLLM_ERR_FORMAT, "%s: key '%s' at byte offset %zu has type %s, expected %s", g->path,
                       kv->key, kv->offset, pllm_gguf_type_name(kv->type), want);
}

static bool is_int_type(pllm_gguf_type t)
{
    return t == PLLM_GGUF_U8 || t == PLLM_GGUF_I8 || t == PLLM_GGUF_U16 || t == PLLM_GGUF_I16 || t == PLLM_GGUF_U32 ||
           t == PLLM_GGUF_I32 || t == PLLM_GGUF_U64 || t == PLLM_GGUF_I64;
}

static bool is_signed_type(pllm_gguf_type t)
{
    return t == PLLM_GGUF_I8 || t == PLLM_GGUF_I16 || t == PLLM_GGUF_I32 || t == PLLM_GGUF_I64;
}

pllm_status pllm_gguf_get_u32(const pllm_gguf *g, const char *key, uint32_t *out)
{
    const pllm_gguf_kv *kv = pllm_gguf_find(g, key);
    if (!kv) return missing(g, key);
    if (!is_int_type(kv->type)) return wrong_type(g, kv, "an integer");
    if (is_signed_type(kv->type) ? (kv->v.i < 0 || kv->v.i > (int64_t)UINT32_MAX) : kv->v.u > UINT32_MAX)
        return pllm_errorf(PLLM_ERR_FORMAT, "%s: key '%s' at byte offset %zu: value %lld does not fit in u32", g->path,
                           key, kv->offset, is_signed_type(kv->type) ? (long long)kv->v.i : (long long)kv->v.u);
    *out = is_signed_type(kv->type) ? (uint32_t)kv->v.i : (uint32_t)kv->v.u;
    return PLLM_OK;
}

pllm_status pllm_gguf_get_f32(const pllm_gguf *g, const char *key, float *out)
{
    const pllm_gguf_kv *kv = pllm_gguf_find(g, key);
    if (!kv) return missing(g, key);
    if (kv->type == PLLM_GGUF_F32 || kv->type == PLLM_GGUF_F64) *out = (float)kv->v.f;
    else if (is_int_type(kv->type)) *out = is_signed_type(kv->type) ? (float)kv->v.i : (float)kv->v.u;
    else return wrong_type(g, kv, "a number");
    return PLLM_OK;
}

pllm_status pllm_gguf_get_bool(const pllm_gguf *g, const char *key, bool *out)
{
    const pllm_gguf_kv *kv = pllm_gguf_find(g, key);
    if (!kv) return missing(g, key);
    if (kv->type != PLLM_GGUF_BOOL) return wrong_type(g, kv, "bool");
    *out = kv->v.u != 0;
    return PLLM_OK;
}

pllm_status pllm_gguf_get_str(const pllm_gguf *g, const char *key, pllm_gguf_str *out)
{
    const pllm_gguf_kv *kv = pllm_gguf_find(g, key);
    if (!kv) return missing(g, key);
    if (kv->type != PLLM_GGUF_STRING) return wrong_type(g, kv, "string");
    *out = kv->v.str;
    return PLLM_OK;
}

pllm_status pllm_gguf_opt_u32(const pllm_gguf *g, const char *key, uint32_t *out)
{
    return pllm_gguf_find(g, key) ? pllm_gguf_get_u32(g, key, out) : PLLM_OK;
}

pllm_status pllm_gguf_opt_f32(const pllm_gguf *g, const char *key, float *out)
{
    return pllm_gguf_find(g, key) ? pllm_gguf_get_f32(g, key, out) : PLLM_OK;
}

pllm_status pllm_gguf_opt_bool(const pllm_gguf *g, const char *key, bool *out)
{
    return pllm_gguf_find(g, key) ? pllm_gguf_get_bool(g, key, out) : PLLM_OK;
}

pllm_status pllm_gguf_get_arr(const pllm_gguf *g, const char *key, pllm_gguf_type elem_type, const pllm_gguf_kv **out)
{
    const pllm_gguf_kv *kv = pllm_gguf_find(g, key);
    if (!kv) return missing(g, key);
    if (kv->type != PLLM_GGUF_ARRAY) return wrong_type(g, kv, "array");
    if (elem_type != PLLM_GGUF_TYPE_COUNT && kv->arr_type != elem_type)
        return pllm_errorf(PLLM_ERR_FORMAT, "%s: key '%s' at byte offset %zu is an array of %s, expected an array of %s",
                           g->path, key, kv->offset, pllm_gguf_type_name(kv->arr_type), pllm_gguf_type_name(elem_type));
    *out = kv;
    return PLLM_OK;
}

pllm_gguf_str pllm_gguf_arr_str(const pllm_gguf_kv *kv, uint64_t i)
{
    PLLM_ASSERT(kv->arr_type == PLLM_GGUF_STRING && i < kv->arr_n);
    /* str_offsets are file offsets; arr_data points at element 0's length prefix. */
    const uint8_t *p = kv->arr_data + (kv->str_offsets[i] - kv->str_offsets[0]);
    uint64_t len;
    memcpy(&len, p, 8);
    return (pllm_gguf_str){(const char *)p + 8, (size_t)len};
}

static int64_t saturate_i64(double x)
{
    if (x != x) return 0;
    if (x >= 9223372036854775807.0) return INT64_MAX;
    if (x <= -9223372036854775808.0) return INT64_MIN;
    return (int64_t)x;
}

int64_t pllm_gguf_arr_int(const pllm_gguf_kv *kv, uint64_t i)
{
    PLLM_ASSERT(i < kv->arr_n);
    const uint8_t *p = kv->arr_data + i * g_type_size[kv->arr_type];
    switch (kv->arr_type) {
    case PLLM_GGUF_U8: case PLLM_GGUF_BOOL: return p[0];
    case PLLM_GGUF_I8: return (int8_t)p[0];
    case PLLM_GGUF_U16: { uint16_t x; memcpy(&x, p, 2); return x; }
    case PLLM_GGUF_I16: { int16_t x; memcpy(&x, p, 2); return x; }
    case PLLM_GGUF_U32: { uint32_t x; memcpy(&x, p, 4); return x; }
    case PLLM_GGUF_I32: { int32_t x; memcpy(&x, p, 4); return x; }
    case PLLM_GGUF_U64: { uint64_t x; memcpy(&x, p, 8); return (int64_t)x; }
    case PLLM_GGUF_I64: { int64_t x; memcpy(&x, p, 8); return x; }
    case PLLM_GGUF_F32: { float x; memcpy(&x, p, 4); return saturate_i64(x); }
    case PLLM_GGUF_F64: { double x; memcpy(&x, p, 8); return saturate_i64(x); }
    default: PLLM_ASSERT(!"not a numeric array"); return 0;
    }
}

double pllm_gguf_arr_float(const pllm_gguf_kv *kv, uint64_t i)
{
    PLLM_ASSERT(i < kv->arr_n);
    const uint8_t *p = kv->arr_data + i * g_type_size[kv->arr_type];
    if (kv->arr_type == PLLM_GGUF_F32) { float x; memcpy(&x, p, 4); return x; }
    if (kv->arr_type == PLLM_GGUF_F64) { double x; memcpy(&x, p, 8); return x; }
    return (double)pllm_gguf_arr_int(kv, i);
}
