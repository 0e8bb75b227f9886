/*
 * model_st_fuzz: the safetensors parser on corrupted images. A valid in-memory image (4
 * tensors, F32/F16/BF16 plus __metadata__) is parsed, then: every truncation of it; 20000
 * copies with 1-8 random bytes of the header replaced (by random bytes or by JSON-significant
 * characters); 2000 with a random header length. Every parse must either succeed with tensors
 * inside the image or fail with a message naming the image; nothing may crash or read outside
 * the buffer (run under the ASan+UBSan preset to check the latter). Counts are printed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/safetensors.h"
#include "tests/testutil.h"

static size_t build_image(uint8_t *buf, size_t cap)
{
    const char *hdr = "{\"__metadata__\":{\"format\":\"pt\"},"
                      "\"a.weight\":{\"dtype\":\"F32\",\"shape\":[4,8],\"data_offsets\":[0,128]},"
                      "\"b.weight\":{\"dtype\":\"F16\",\"shape\":[16],\"data_offsets\":[128,160]},"
                      "\"c.bias\":{\"dtype\":\"BF16\",\"shape\":[8,2],\"data_offsets\":[160,192]},"
                      "\"d.count\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[192,200]}}";
    size_t n = strlen(hdr), padded = (n + 7) & ~(size_t)7;
    PLLM_ASSERT(8 + padded + 200 <= cap);
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    memcpy(buf + 8, hdr, n);
    memset(buf + 8 + n, ' ', padded - n);
    for (size_t i = 0; i < 200; i++) buf[8 + padded + i] = (uint8_t)(i * 7);
    return 8 + padded + 200;
}

/* Parse img[0..n); check the outcome's invariants. Returns 1 on success, 0 on a clean error. */
static int parse_one(const uint8_t *img, size_t n)
{
    uint8_t *copy = malloc(n ? n : 1); /* an exact-size heap copy, so ASan sees any overread */
    memcpy(copy, img, n);
    pllm_safetensors *s = NULL;
    pllm_status st = pllm_safetensors_parse(&s, copy, n, "fuzz.safetensors");
    int ok = 0;
    if (st == PLLM_OK) {
        CHECK(s != NULL);
        for (int64_t i = 0; s && i < s->n_tensors; i++) {
            const pllm_st_tensor *t = &s->tensors[i];
            CHECK(t->end <= n - s->data_offset && t->begin <= t->end);
            CHECK((const uint8_t *)t->data >= copy &&
                  (const uint8_t *)t->data + t->nbytes <= copy + n);
            CHECK(pllm_safetensors_find(s, t->name) == t);
        }
        ok = 1;
    } else {
        CHECK(s == NULL);
        CHECK(strstr(pllm_errmsg(), "fuzz.safetensors") != NULL);
    }
    pllm_safetensors_close(s);
    free(copy);
    return ok;
}

int main(void)
{
    uint8_t img[1024], buf[1024];
    size_t n = build_image(img, sizeof img);
    CHECK(parse_one(img, n) == 1);
    {
        pllm_safetensors *s = NULL;
        CHECK_OK(pllm_safetensors_parse(&s, img, n, "fuzz.safetensors"));
        CHECK(s && s->n_tensors == 4);
        const pllm_st_tensor *t = s ? pllm_safetensors_find(s, "c.bias") : NULL;
        CHECK(t && t->dtype == PLLM_DTYPE_BF16 && t->n_dims == 2 && t->shape[0] == 8 &&
              t->shape[1] == 2 && t->nbytes == 32);
        t = s ? pllm_safetensors_find(s, "d.count") : NULL;
        CHECK(t && t->dtype == PLLM_DTYPE_COUNT && t->n_dims == 0 && t->nbytes == 8);
        CHECK(!s || pllm_safetensors_find(s, "__metadata__") == NULL);
        pllm_safetensors_close(s);
    }

    int n_trunc_ok = 0;
    for (size_t len = 0; len < n; len++) n_trunc_ok += parse_one(img, len);
    CHECK(n_trunc_ok == 0); /* every truncation cuts a tensor's data or the header */

    uint64_t rng = 12345;
    const char special[] = "{}[]\",:0123456789-e. \\\x00\xff";
    int accepted = 0, rejected = 0;
    const size_t hdr_end = 8 + ((size_t)img[0] | (size_t)img[1] << 8);
    for (int it = 0; it < 20000; it++) {
        memcpy(buf, img, n);
        int k = 1 + (int)(pllm_test_rand(&rng) % 8);
        for (int j = 0; j < k; j++) {
            size_t pos = 8 + (size_t)(pllm_test_rand(&rng) % (hdr_end - 8));
            uint64_t r = pllm_test_rand(&rng);
            buf[pos] =
                (r & 1) ? (uint8_t)(r >> 8) : (uint8_t)special[(r >> 8) % (sizeof special - 1)];
        }
        if (parse_one(buf, n))
            accepted++;
        else
            rejected++;
    }
    int len_ok = 0;
    for (int it = 0; it < 2000; it++) {
        memcpy(buf, img, n);
        uint64_t v = pllm_test_rand(&rng) >> (pllm_test_rand(&rng) % 64);
        for (int i = 0; i < 8; i++) buf[i] = (uint8_t)(v >> (8 * i));
        len_ok += parse_one(buf, n);
    }
    fprintf(stderr,
            "model_st_fuzz: %zu truncations rejected; header mutations: %d accepted, %d rejected; "
            "random header lengths: "
            "%d accepted of 2000\n",
            n, accepted, rejected, len_ok);
    return pllm_test_finish("model_st_fuzz");
}
