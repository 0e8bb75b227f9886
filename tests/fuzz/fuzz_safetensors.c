/*
 * fuzz_safetensors.c: safetensors file images. pllm_safetensors_parse() on the bytes; what it
 * accepts must be in bounds (each tensor's data touched at both ends, so ASan sees a view past
 * the input), consistent (nbytes = shape x element size, no overlaps) and found by name.
 */
#include "tests/fuzz/fuzz_common.h"

#include "model/safetensors.h"

#include <string.h>

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    pllm_safetensors *s = NULL;
    pllm_status st = pllm_safetensors_parse(&s, data, size, "fuzz.safetensors");
    FUZZ_ERR_HAS_MSG(st);
    fuzz_note("parse", st);
    if (st != PLLM_OK) {
        FUZZ_CHECK(s == NULL, "handle returned with an error");
        return 0;
    }
    FUZZ_CHECK(s->data_offset == 8 + s->header_len && s->data_offset <= size, "data offset %zu", s->data_offset);
    size_t data_size = size - s->data_offset;
    for (int64_t i = 0; i < s->n_tensors; i++) {
        const pllm_st_tensor *t = &s->tensors[i];
        FUZZ_CHECK(pllm_safetensors_find(s, t->name) == t, "'%s' not found by name", t->name);
        FUZZ_CHECK(t->begin <= t->end && t->end <= data_size && t->nbytes == t->end - t->begin, "'%s' range", t->name);
        FUZZ_CHECK((const uint8_t *)t->data == data + s->data_offset + t->begin, "'%s' data pointer", t->name);
        size_t n = t->elem_bytes;
        for (int d = 0; d < t->n_dims; d++) {
            FUZZ_CHECK(t->shape[d] >= 0, "'%s' shape", t->name);
            FUZZ_CHECK(!__builtin_mul_overflow(n, (size_t)t->shape[d], &n), "'%s' shape overflow accepted", t->name);
        }
        FUZZ_CHECK(n == t->nbytes, "'%s': shape gives %zu bytes, range %zu", t->name, n, t->nbytes);
        if (t->nbytes) {
            fuzz_touch(t->data, 1);
            fuzz_touch((const uint8_t *)t->data + t->nbytes - 1, 1);
        }
        if (i > 0) FUZZ_CHECK(strcmp(s->tensors[i - 1].name, t->name) < 0, "not sorted / duplicate names");
        for (int64_t j = 0; j < i && j < 64; j++) {
            const pllm_st_tensor *u = &s->tensors[j];
            FUZZ_CHECK(!t->nbytes || !u->nbytes || t->end <= u->begin || u->end <= t->begin, "'%s' overlaps '%s'",
                       t->name, u->name);
        }
    }
    pllm_safetensors_close(s);
    return 0;
}
