/*
 * gguf.h: a GGUF (v2, v3) reader. The file is memory-mapped read-only; the parsed header
 * indexes into the mapping, so tensor data and string values are used in place, never copied.
 *
 * Validation at open: magic, version, every length and count against the bytes that remain
 * (and sane caps: at most PLLM_GGUF_MAX_ENTRIES metadata entries and tensors, keys and names
 * of at most 64 KiB without NUL bytes, arrays nested at most 4 deep), every metadata value
 * type, the alignment, and every tensor's type, shape (at most 2^44 elements), data range
 * against the file size and data alignment for its type. All size arithmetic is overflow
 * checked, and nothing is allocated from a header field before it was checked against the
 * bytes that remain. Any failure is an error naming the file, the key or tensor, and the byte
 * offset where it was found. Keys and tensor names are indexed by hash, so lookups and the
 * duplicate checks take constant time per entry (a file of millions of keys parses in linear
 * time).
 *
 * A file changed on disk while mapped: pllm_gguf_open() maps it through mapped_file.h, which
 * turns a read past a truncated end into zeros plus a "damaged" mark instead of SIGBUS.
 * pllm_gguf_check_file() reports such damage, or a changed size or modification time, as an
 * error; callers check after each phase that read tensor data and stop. A program that never
 * calls it gets a message naming the file and offset, then the SIGBUS, as before.
 *
 * Ownership: pllm_gguf_open() returns a handle the caller frees with pllm_gguf_close(); every
 * pointer obtained from it (keys, string views, tensor data) lives until then.
 */
#pragma once

#include "model/common.h"
#include "model/dtype.h"
#include "model/mapped_file.h"

#define PLLM_GGUF_MAX_ENTRIES (1 << 20) /* metadata entries, and tensors */

typedef enum pllm_gguf_type {
    PLLM_GGUF_U8 = 0,
    PLLM_GGUF_I8 = 1,
    PLLM_GGUF_U16 = 2,
    PLLM_GGUF_I16 = 3,
    PLLM_GGUF_U32 = 4,
    PLLM_GGUF_I32 = 5,
    PLLM_GGUF_F32 = 6,
    PLLM_GGUF_BOOL = 7,
    PLLM_GGUF_STRING = 8,
    PLLM_GGUF_ARRAY = 9,
    PLLM_GGUF_U64 = 10,
    PLLM_GGUF_I64 = 11,
    PLLM_GGUF_F64 = 12,
    PLLM_GGUF_TYPE_COUNT
} pllm_gguf_type;

/* A string inside the mapping: not NUL-terminated. */
typedef struct pllm_gguf_str {
    const char *s;
    size_t len;
} pllm_gguf_str;

typedef struct pllm_gguf_kv {
    char *key;             /* NUL-terminated copy */
    pllm_gguf_type type;
    size_t offset;         /* byte offset of the value in the file */
    union {
        uint64_t u;        /* U8..U64, BOOL */
        int64_t i;         /* I8..I64 */
        double f;          /* F32, F64 */
        pllm_gguf_str str; /* STRING */
    } v;
    /* ARRAY: element type, count and the first element in the mapping. For string arrays
     * str_offsets[i] is the file offset of element i's length prefix. */
    pllm_gguf_type arr_type;
    uint64_t arr_n;
    const uint8_t *arr_data;
    size_t *str_offsets;
} pllm_gguf_kv;

typedef struct pllm_gguf_tensor {
    char *name;            /* NUL-terminated copy */
    int n_dims;
    int64_t ne[4];         /* ne[0] is the fastest-varying (row length); unused dims are 1 */
    uint32_t ggml_type;    /* the type id in the file */
    pllm_dtype dtype;      /* PLLM_DTYPE_COUNT when the type is not one pllm knows */
    uint64_t offset;       /* relative to the data section */
    size_t nbytes;
    const void *data;      /* into the mapping */
    size_t info_offset;    /* byte offset of this tensor's entry in the header */
} pllm_gguf_tensor;

typedef struct pllm_gguf {
    char *path;
    const uint8_t *map;
    size_t size;
    bool owns_map;         /* opened (and unmapped on close) by pllm_gguf_open */
    pllm_mapped_file file; /* the mapping when owns_map */
    uint32_t version;
    size_t alignment;
    size_t data_offset;    /* start of the tensor data section */
    int64_t n_kv;
    pllm_gguf_kv *kv;
    int64_t n_tensors;
    pllm_gguf_tensor *tensors;
    /* hash indexes: slot -> entry index + 1 (0: empty); [mask + 1] each */
    int32_t *kv_index, *tensor_index;
    size_t kv_mask, tensor_mask;
} pllm_gguf;

/* Open and validate path. On failure *out is NULL and the message names file and offset. */
pllm_status pllm_gguf_open(pllm_gguf **out, const char *path);
/* Parse a GGUF image already in memory (not copied; must outlive the handle). name is used
 * in messages. Used by open() and by fuzzers. */
pllm_status pllm_gguf_parse(pllm_gguf **out, const void *data, size_t size, const char *name);
void pllm_gguf_close(pllm_gguf *g);
/* PLLM_OK while the opened file is as it was at open (always for parse()d images); else
 * PLLM_ERR_IO saying it was truncated or modified while in use (see the top of this file).
 * The first call also makes bus errors in the mapping read zeros (reported by the next call)
 * instead of ending the process with a message: call it after each step that read tensor
 * data, and stop on error (mapped_file.h, poll). One fstat per call. */
pllm_status pllm_gguf_check_file(const pllm_gguf *g);

const char *pllm_gguf_type_name(pllm_gguf_type t);

/* Lookup: NULL when absent. */
const pllm_gguf_kv *pllm_gguf_find(const pllm_gguf *g, const char *key);
const pllm_gguf_tensor *pllm_gguf_find_tensor(const pllm_gguf *g, const char *name);

/* Typed getters. Missing key: PLLM_ERR_NOT_FOUND. Wrong type or a value that does not fit:
 * PLLM_ERR_FORMAT. Messages name the file, key and offset. Integer getters accept any integer
 * type whose value fits. */
pllm_status pllm_gguf_get_u32(const pllm_gguf *g, const char *key, uint32_t *out);
pllm_status pllm_gguf_get_f32(const pllm_gguf *g, const char *key, float *out);
pllm_status pllm_gguf_get_bool(const pllm_gguf *g, const char *key, bool *out);
pllm_status pllm_gguf_get_str(const pllm_gguf *g, const char *key, pllm_gguf_str *out);
/* Optional variants: leave *out unchanged and return PLLM_OK when the key is absent. */
pllm_status pllm_gguf_opt_u32(const pllm_gguf *g, const char *key, uint32_t *out);
pllm_status pllm_gguf_opt_f32(const pllm_gguf *g, const char *key, float *out);
pllm_status pllm_gguf_opt_bool(const pllm_gguf *g, const char *key, bool *out);
/* An array of elem_type (any type for PLLM_GGUF_TYPE_COUNT); *kv receives the entry. */
pllm_status pllm_gguf_get_arr(const pllm_gguf *g, const char *key, pllm_gguf_type elem_type,
                              const pllm_gguf_kv **kv);
/* Element i of a string array. */
pllm_gguf_str pllm_gguf_arr_str(const pllm_gguf_kv *kv, uint64_t i);
/* Element i of a numeric array, converted (floats to integers saturate; NaN gives 0). */
int64_t pllm_gguf_arr_int(const pllm_gguf_kv *kv, uint64_t i);
double pllm_gguf_arr_float(const pllm_gguf_kv *kv, uint64_t i);
