/*
 * safetensors.h: a reader of the safetensors format (Hugging Face checkpoints). The file is
 * memory-mapped read-only; tensor data is used in place, never copied.
 *
 * Format: an 8-byte little-endian header length N, N bytes of JSON header, then the data
 * section. The header maps each tensor name to {"dtype": "F32", "shape": [rows, cols],
 * "data_offsets": [begin, end]} (offsets relative to the data section), plus an optional
 * "__metadata__" object. shape[0] is the slowest-varying dimension (PyTorch order), so a
 * [out, in] projection matrix is out rows of in elements.
 *
 * Validation at open, before anything the header asks for is allocated: N against the file
 * size (and the format's 100 MB cap), the JSON (duplicate keys rejected), every entry's
 * fields and types, known dtype names, shape x element size == end - begin (overflow
 * checked), data_offsets inside the data section, no two tensors overlapping, and each
 * tensor's data aligned to its element size. Every error names the file, the tensor (or
 * field) and a byte offset.
 *
 * A file changed on disk while mapped: open() maps through mapped_file.h (as the GGUF reader
 * does), so a read past a truncated end reads zeros plus a "damaged" mark while polled, and
 * pllm_safetensors_check_file() reports that, or a changed size or modification time.
 *
 * Ownership: pllm_safetensors_open() returns a handle freed with pllm_safetensors_close();
 * every pointer obtained from it (names, data) lives until then.
 */
#pragma once

#include "model/common.h"
#include "model/dtype.h"
#include "model/mapped_file.h"

#define PLLM_ST_MAX_DIMS 8

typedef struct pllm_st_tensor {
    char *name;             /* NUL-terminated copy */
    const char *dtype_name; /* the file's dtype ("F32", "BF16", "I64", ...); static storage */
    pllm_dtype dtype;       /* F32/F16/BF16; PLLM_DTYPE_COUNT for what pllm does not use */
    size_t elem_bytes;      /* bytes per element of dtype_name */
    int n_dims;
    int64_t shape[PLLM_ST_MAX_DIMS]; /* shape[0] slowest-varying; unused dims are 1 */
    size_t begin, end;      /* data_offsets: relative to the data section */
    size_t nbytes;          /* end - begin */
    const void *data;       /* into the mapping */
    size_t entry_offset;    /* byte offset of the tensor's header entry in the file (messages) */
} pllm_st_tensor;

typedef struct pllm_safetensors {
    char *path;
    const uint8_t *map;
    size_t size;
    bool owns_map;          /* opened (and unmapped on close) by pllm_safetensors_open */
    pllm_mapped_file file;  /* the mapping when owns_map */
    size_t header_len;      /* N */
    size_t data_offset;     /* 8 + N: start of the data section */
    int64_t n_tensors;
    pllm_st_tensor *tensors; /* sorted by name */
} pllm_safetensors;

/* Open and validate path. On failure *out is NULL and the message names file and offset. */
pllm_status pllm_safetensors_open(pllm_safetensors **out, const char *path);
/* Parse an image already in memory (not copied; must outlive the handle); name is used in
 * messages. */
pllm_status pllm_safetensors_parse(pllm_safetensors **out, const void *data, size_t size,
                                   const char *name);
void pllm_safetensors_close(pllm_safetensors *s);
/* PLLM_OK while the opened file is as it was at open (always for parse()d images); else
 * PLLM_ERR_IO naming the file (mapped_file.h, poll). */
pllm_status pllm_safetensors_check_file(const pllm_safetensors *s);
/* Whether faults in the mapping read zeros (polled: the caller checks afterwards) or end the
 * process with a message (the default). No-op for parse()d images. */
void pllm_safetensors_set_polled(const pllm_safetensors *s, bool polled);

/* The tensor called name, or NULL. */
const pllm_st_tensor *pllm_safetensors_find(const pllm_safetensors *s, const char *name);

/* A JSON value's type as messages name it ("an object", "an array", "a string", "an integer",
 * "a real number", "a boolean", "null"); shared by the JSON readers of model/ (hf_config.c). */
struct json_t;
const char *pllm_json_type_name(const struct json_t *v);
