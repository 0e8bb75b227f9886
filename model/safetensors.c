#include "model/safetensors.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define ST_MAX_HEADER 100000000u /* the format's own cap on N */

/* dtype names of the format, their element sizes, and the pllm dtype where pllm computes with it */
static const struct {
    const char *name;
    size_t bytes;
    pllm_dtype dtype;
} g_st_dtypes[] = {
    {"F32", 4, PLLM_DTYPE_F32},       {"F16", 2, PLLM_DTYPE_F16},
    {"BF16", 2, PLLM_DTYPE_BF16},     {"F64", 8, PLLM_DTYPE_COUNT},
    {"I64", 8, PLLM_DTYPE_COUNT},     {"U64", 8, PLLM_DTYPE_COUNT},
    {"I32", 4, PLLM_DTYPE_COUNT},     {"U32", 4, PLLM_DTYPE_COUNT},
    {"I16", 2, PLLM_DTYPE_COUNT},     {"U16", 2, PLLM_DTYPE_COUNT},
    {"I8", 1, PLLM_DTYPE_COUNT},      {"U8", 1, PLLM_DTYPE_COUNT},
    {"BOOL", 1, PLLM_DTYPE_COUNT},    {"F8_E4M3", 1, PLLM_DTYPE_COUNT},
    {"F8_E5M2", 1, PLLM_DTYPE_COUNT}, {"F8_E8M0", 1, PLLM_DTYPE_COUNT},
};

/* Byte offset in the file of the header entry "name" (the first quoted occurrence), or the
 * start of the header when it cannot be found (a name written with JSON escapes). */
static size_t entry_offset(const uint8_t *hdr, size_t n, const char *name)
{
    size_t len = strlen(name);
    for (size_t i = 0; i + len + 2 <= n; i++) {
        if (hdr[i] == '"' && memcmp(hdr + i + 1, name, len) == 0 && hdr[i + 1 + len] == '"')
            return 8 + i;
    }
    return 8;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(((const pllm_st_tensor *)a)->name, ((const pllm_st_tensor *)b)->name);
}

static int cmp_begin(const void *a, const void *b)
{
    const pllm_st_tensor *x = *(pllm_st_tensor *const *)a, *y = *(pllm_st_tensor *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return (x->end > y->end) - (x->end < y->end);
}

const char *pllm_json_type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "an array";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
        return "an integer";
    case JSON_REAL:
        return "a real number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    default:
        return "null";
    }
}

/* One header entry into *t (name already set). */
static pllm_status parse_entry(const pllm_safetensors *s, const json_t *v, size_t data_size,
                               pllm_st_tensor *t)
{
    const char *path = s->path, *name = t->name;
    const size_t off = t->entry_offset;
    if (!json_is_object(v))
        return pllm_errorf(
            PLLM_ERR_FORMAT,
            "%s: tensor '%s' (header entry at byte offset %zu) must be an object, not %s", path,
            name, off, pllm_json_type_name(v));
    const json_t *jd = json_object_get(v, "dtype"), *js = json_object_get(v, "shape"),
                 *jo = json_object_get(v, "data_offsets");
    if (!jd || !js || !jo)
        return pllm_errorf(PLLM_ERR_FORMAT,
                           "%s: tensor '%s' (header entry at byte offset %zu): missing field '%s'",
                           path, name, off,
                           !jd   ? "dtype"
                           : !js ? "shape"
                                 : "data_offsets");
    if (!json_is_string(jd))
        return pllm_errorf(PLLM_ERR_FORMAT,
                           "%s: tensor '%s' (header entry at byte offset %zu): field 'dtype' must "
                           "be a string, not %s",
                           path, name, off, pllm_json_type_name(jd));
    const char *dn = json_string_value(jd);
    for (size_t i = 0; i < PLLM_ARRAY_LEN(g_st_dtypes) && !t->dtype_name; i++) {
        if (strcmp(dn, g_st_dtypes[i].name) == 0) {
            t->dtype_name = g_st_dtypes[i].name;
            t->elem_bytes = g_st_dtypes[i].bytes;
            t->dtype = g_st_dtypes[i].dtype;
        }
    }
    if (!t->dtype_name)
        return pllm_errorf(
            PLLM_ERR_FORMAT,
            "%s: tensor '%s' (header entry at byte offset %zu): unknown dtype '%.32s'", path, name,
            off, dn);
    if (!json_is_array(js))
        return pllm_errorf(PLLM_ERR_FORMAT,
                           "%s: tensor '%s' (header entry at byte offset %zu): field 'shape' must "
                           "be an array, not %s",
                           path, name, off, pllm_json_type_name(js));
    if (json_array_size(js) > PLLM_ST_MAX_DIMS)
        return pllm_errorf(
            PLLM_ERR_UNSUPPORTED,
            "%s: tensor '%s' (header entry at byte offset %zu): %zu dimensions (at most %d)", path,
            name, off, json_array_size(js), PLLM_ST_MAX_DIMS);
    t->n_dims = (int)json_array_size(js);
    size_t n_elems = 1;
    for (int d = 0; d < PLLM_ST_MAX_DIMS; d++) t->shape[d] = 1;
    for (int d = 0; d < t->n_dims; d++) {
        const json_t *e = json_array_get(js, (size_t)d);
        if (!json_is_integer(e) || json_integer_value(e) < 0)
            return pllm_errorf(PLLM_ERR_FORMAT,
                               "%s: tensor '%s' (header entry at byte offset %zu): shape[%d] must "
                               "be a non-negative integer",
                               path, name, off, d);
        t->shape[d] = (int64_t)json_integer_value(e);
        if (!pllm_mul_size(n_elems, (size_t)t->shape[d], &n_elems))
            return pllm_errorf(PLLM_ERR_FORMAT,
                               "%s: tensor '%s' (header entry at byte offset %zu): the shape's "
                               "element count overflows",
                               path, name, off);
    }
    if (!json_is_array(jo) || json_array_size(jo) != 2 || !json_is_integer(json_array_get(jo, 0)) ||
        !json_is_integer(json_array_get(jo, 1)) || json_integer_value(json_array_get(jo, 0)) < 0 ||
        json_integer_value(json_array_get(jo, 1)) < 0)
        return pllm_errorf(PLLM_ERR_FORMAT,
                           "%s: tensor '%s' (header entry at byte offset %zu): field "
                           "'data_offsets' must be [begin, end], two non-negative integers",
                           path, name, off);
    uint64_t b = (uint64_t)json_integer_value(json_array_get(jo, 0)),
             e = (uint64_t)json_integer_value(json_array_get(jo, 1));
    if (b > e)
        return pllm_errorf(PLLM_ERR_FORMAT,
                           "%s: tensor '%s' (header entry at byte offset %zu): data_offsets [%llu, "
                           "%llu] has begin > end",
                           path, name, off, (unsigned long long)b, (unsigned long long)e);
    if (e > data_size)
        return pllm_errorf(PLLM_ERR_FORMAT,
                           "%s: tensor '%s' (header entry at byte offset %zu): data_offsets [%llu, "
                           "%llu] (file bytes %llu..%llu) run past the end "
                           "of the file (%zu bytes; the data section holds %zu)",
                           path, name, off, (unsigned long long)b, (unsigned long long)e,
                           (unsigned long long)(s->data_offset + b),
                           (unsigned long long)(s->data_offset + e), s->size, data_size);
    size_t want;
    if (!pllm_mul_size(n_elems, t->elem_bytes, &want) || want != e - b)
        return pllm_errorf(PLLM_ERR_FORMAT,
                           "%s: tensor '%s' (header entry at byte offset %zu): shape holds %zu "
                           "elements of %s (%zu bytes) but data_offsets "
                           "[%llu, %llu] span %llu bytes",
                           path, name, off, n_elems, t->dtype_name, n_elems * t->elem_bytes,
                           (unsigned long long)b, (unsigned long long)e,
                           (unsigned long long)(e - b));
    t->begin = (size_t)b;
    t->end = (size_t)e;
    t->nbytes = (size_t)(e - b);
    t->data = s->map + s->data_offset + t->begin;
    if ((s->data_offset + t->begin) % t->elem_bytes != 0)
        return pllm_errorf(PLLM_ERR_UNSUPPORTED,
                           "%s: tensor '%s' (header entry at byte offset %zu): data at file byte "
                           "offset %zu is not aligned to its %zu-byte "
                           "elements (pllm uses tensors in place)",
                           path, name, off, s->data_offset + t->begin, t->elem_bytes);
    return PLLM_OK;
}

pllm_status pllm_safetensors_parse(pllm_safetensors **out, const void *data, size_t size,
                                   const char *name)
{
    pllm_status st = PLLM_OK;
    json_t *root = NULL;
    pllm_st_tensor **by_begin = NULL;
    *out = NULL;
    pllm_safetensors *s = pllm_calloc(1, sizeof *s);
    if (!s) return PLLM_ERR_NOMEM;
    s->map = data;
    s->size = size;
    if (!(s->path = pllm_strdup(name))) {
        st = PLLM_ERR_NOMEM;
        goto fail;
    }
    if (size < 8) {
        st = pllm_errorf(PLLM_ERR_FORMAT,
                         "%s: truncated file: %zu bytes, too small for the 8-byte header length",
                         name, size);
        goto fail;
    }
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | s->map[i];
    if (n > size - 8) {
        st = pllm_errorf(
            PLLM_ERR_FORMAT,
            "%s: header length %llu (at byte offset 0) runs past the end of the file (%zu bytes)",
            name, (unsigned long long)n, size);
        goto fail;
    }
    if (n > ST_MAX_HEADER) {
        st = pllm_errorf(
            PLLM_ERR_FORMAT,
            "%s: header length %llu (at byte offset 0) exceeds the format's limit of %u bytes",
            name, (unsigned long long)n, ST_MAX_HEADER);
        goto fail;
    }
    s->header_len = (size_t)n;
    s->data_offset = 8 + (size_t)n;
    const uint8_t *hdr = s->map + 8;
    if (n < 2 || hdr[0] != '{') {
        st = pllm_errorf(PLLM_ERR_FORMAT,
                         "%s: the header at byte offset 8 must be a JSON object starting with '{'",
                         name);
        goto fail;
    }
    json_error_t jerr;
    root = json_loadb((const char *)hdr, (size_t)n, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        st = pllm_errorf(PLLM_ERR_FORMAT,
                         "%s: invalid JSON header at byte offset %zu (line %d, column %d): %s",
                         name, 8 + (size_t)(jerr.position > 0 ? jerr.position : 0), jerr.line,
                         jerr.column, jerr.text);
        goto fail;
    }
    if (!json_is_object(root)) {
        st = pllm_errorf(PLLM_ERR_FORMAT, "%s: the header at byte offset 8 must be a JSON object",
                         name);
        goto fail;
    }
    const size_t data_size = size - s->data_offset;
    size_t n_entries = json_object_size(root);
    s->tensors = pllm_calloc(n_entries ? n_entries : 1, sizeof *s->tensors);
    if (!s->tensors) {
        st = PLLM_ERR_NOMEM;
        goto fail;
    }
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v)
    {
        if (strcmp(key, "__metadata__") == 0) {
            if (!json_is_object(v)) {
                st = pllm_errorf(PLLM_ERR_FORMAT,
                                 "%s: '__metadata__' (header entry at byte offset %zu) must be an "
                                 "object, not %s",
                                 name, entry_offset(hdr, (size_t)n, key), pllm_json_type_name(v));
                goto fail;
            }
            continue;
        }
        pllm_st_tensor *t = &s->tensors[s->n_tensors++];
        if (!(t->name = pllm_strdup(key))) {
            st = PLLM_ERR_NOMEM;
            goto fail;
        }
        t->entry_offset = entry_offset(hdr, (size_t)n, key);
        if ((st = parse_entry(s, v, data_size, t)) != PLLM_OK) goto fail;
    }

    /* no two tensors may share bytes (empty tensors share nothing) */
    by_begin = pllm_malloc(sizeof *by_begin * (size_t)(s->n_tensors ? s->n_tensors : 1));
    if (!by_begin) {
        st = PLLM_ERR_NOMEM;
        goto fail;
    }
    for (int64_t i = 0; i < s->n_tensors; i++) by_begin[i] = &s->tensors[i];
    qsort(by_begin, (size_t)s->n_tensors, sizeof *by_begin, cmp_begin);
    const pllm_st_tensor *prev = NULL;
    for (int64_t i = 0; i < s->n_tensors; i++) {
        const pllm_st_tensor *t = by_begin[i];
        if (t->nbytes == 0) continue;
        if (prev && t->begin < prev->end) {
            st = pllm_errorf(PLLM_ERR_FORMAT,
                             "%s: tensor '%s' (header entry at byte offset %zu): data_offsets "
                             "[%zu, %zu] overlap those of tensor '%s' [%zu, %zu] "
                             "(file bytes %zu..%zu)",
                             name, t->name, t->entry_offset, t->begin, t->end, prev->name,
                             prev->begin, prev->end, s->data_offset + t->begin,
                             s->data_offset + PLLM_MIN(t->end, prev->end));
            goto fail;
        }
        prev = t;
    }
    qsort(s->tensors, (size_t)s->n_tensors, sizeof *s->tensors, cmp_name);
    free(by_begin);
    json_decref(root);
    *out = s;
    return PLLM_OK;
fail:
    free(by_begin);
    json_decref(root);
    pllm_safetensors_close(s);
    return st;
}

pllm_status pllm_safetensors_open(pllm_safetensors **out, const char *path)
{
    *out = NULL;
    pllm_mapped_file f;
    PLLM_TRY(pllm_mapped_file_open(&f, path));
    pllm_status st;
    if (f.size < 8) {
        st = pllm_errorf(PLLM_ERR_FORMAT,
                         "%s: truncated file: %zu bytes, too small for the 8-byte header length",
                         path, f.size);
        goto fail;
    }
    pllm_mapped_file_set_polled(&f, true); /* checked right after the parse */
    st = pllm_safetensors_parse(out, f.data, f.size, path);
    pllm_mapped_file_set_polled(&f, false);
    if (st != PLLM_OK) goto fail;
    (*out)->owns_map = true;
    (*out)->file = f;
    /* the header was read from the mapping: a file cut short meanwhile read as zeros */
    if ((st = pllm_mapped_file_check(&(*out)->file)) != PLLM_OK) {
        pllm_safetensors_close(*out);
        *out = NULL;
        return st;
    }
    return PLLM_OK;
fail:
    pllm_mapped_file_close(&f);
    return st;
}

pllm_status pllm_safetensors_check_file(const pllm_safetensors *s)
{
    return s->owns_map ? pllm_mapped_file_poll(&s->file) : PLLM_OK;
}

void pllm_safetensors_set_polled(const pllm_safetensors *s, bool polled)
{
    if (s->owns_map) pllm_mapped_file_set_polled(&s->file, polled);
}

void pllm_safetensors_close(pllm_safetensors *s)
{
    if (!s) return;
    for (int64_t i = 0; i < s->n_tensors; i++) free(s->tensors[i].name);
    free(s->tensors);
    if (s->owns_map) pllm_mapped_file_close(&s->file);
    free(s->path);
    free(s);
}

const pllm_st_tensor *pllm_safetensors_find(const pllm_safetensors *s, const char *name)
{
    pllm_st_tensor key = {.name = (char *)name};
    return bsearch(&key, s->tensors, (size_t)s->n_tensors, sizeof *s->tensors, cmp_name);
}
