/*
 * fuzz_prefix_store.c: the persistent prefix cache's entry files (engine/prefix_store.h), which
 * any process on the host may have written, truncated or damaged.
 *
 * Input: a flag byte, then the bytes of an entry file.
 *   flag bit 0: "repair": before decoding, recompute the payload and header checksums over the
 *     fuzzed bytes (where the header fits), so the fuzzer gets past them to the field checks
 *     and to zstd on arbitrary frames; the expected fields are then taken from the header
 *     itself (raw size capped at 1 MiB), so a well-formed entry reaches decompression.
 *   otherwise: decoded against a fixed expectation (block size 4, 64 raw bytes).
 * Properties: no read past the input (ASan); a rejection names why; an accepted entry has the
 * expected fields, and encoding the decoded block again and decoding that gives the same bytes;
 * through the store (the bytes as a file in a scratch directory), a lookup is a hit only when
 * the decoder accepts, and a corrupt file is removed.
 */
#include "tests/fuzz/fuzz_common.h"

#include "engine/prefix_store.h"

#include <string.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_scratch_dir();
    return 0;
}

static uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t rd64(const uint8_t *p)
{
    return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32;
}
static void wr64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

#define MAX_RAW ((size_t)1 << 20)

static void quiet(void *arg, const char *msg)
{
    (void)arg;
    FUZZ_CHECK(msg && msg[0], "an empty warning");
}
#define MAX_BS 4096

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    uint8_t flags = data[0];
    size_t n = size - 1;
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf) return 0;
    memcpy(buf, data + 1, n);

    static int32_t fixed_tokens[4] = {1, 2, 3, 4};
    pllm_prefix_expect x = {
        .ns = 7,
        .key = {1, 2},
        .parent = {3, 4},
        .depth = 0,
        .block_size = 4,
        .tokens = fixed_tokens,
        .raw_bytes = 64,
    };
    int32_t *tokens = NULL;
    if (flags & 1) {
        uint32_t hdr = n >= 16 ? rd32(buf + 12) : 0;
        if (hdr >= PLLM_PREFIX_HEADER_BYTES(1) && hdr <= n && (hdr - 104) % 4 == 0 &&
            (hdr - 104) / 4 <= MAX_BS) {
            wr64(buf + 80, XXH3_64bits(buf + hdr, n - hdr));
            wr64(buf + hdr - 8, XXH3_64bits(buf, hdr - 8));
            int32_t bs = (int32_t)((hdr - 104) / 4);
            tokens = malloc((size_t)bs * sizeof *tokens);
            if (!tokens) {
                free(buf);
                return 0;
            }
            for (int32_t i = 0; i < bs; i++) tokens[i] = (int32_t)rd32(buf + 96 + 4 * (size_t)i);
            x = (pllm_prefix_expect){
                .ns = rd64(buf + 16),
                .key = {rd64(buf + 24), rd64(buf + 32)},
                .parent = {rd64(buf + 40), rd64(buf + 48)},
                .depth = (int32_t)(rd32(buf + 56) & 0x7fffffff),
                .block_size = bs,
                .tokens = tokens,
                .raw_bytes = PLLM_MIN((size_t)rd64(buf + 64), MAX_RAW),
            };
        }
    }
    uint8_t *kv = malloc(x.raw_bytes ? x.raw_bytes : 1);
    char why[160];
    pllm_prefix_verdict v = pllm_prefix_entry_decode(buf, n, &x, kv, why, sizeof why);
    if (getenv("FUZZ_VERBOSE"))
        fprintf(stderr, "  decode: verdict %d (0 ok, 1 corrupt, 2 mismatch) %s\n", (int)v, why);
    FUZZ_CHECK(v == PLLM_PREFIX_OK || v == PLLM_PREFIX_CORRUPT || v == PLLM_PREFIX_MISMATCH,
               "verdict %d", (int)v);
    FUZZ_CHECK(v == PLLM_PREFIX_OK || why[0], "a rejection (%d) without a reason", (int)v);
    if (v == PLLM_PREFIX_OK) {
        FUZZ_CHECK(n >= PLLM_PREFIX_HEADER_BYTES(x.block_size), "accepted %zu bytes", n);
        fuzz_touch(kv, x.raw_bytes);
        /* encode(decode(entry)) decodes to the same block */
        uint8_t *again = NULL, *kv2 = malloc(x.raw_bytes ? x.raw_bytes : 1);
        size_t an = 0;
        pllm_status st = pllm_prefix_entry_encode(&again, &an, &x, kv, 1);
        FUZZ_ERR_HAS_MSG(st);
        if (st == PLLM_OK) {
            pllm_prefix_verdict v2 = pllm_prefix_entry_decode(again, an, &x, kv2, NULL, 0);
            FUZZ_CHECK(v2 == PLLM_PREFIX_OK && memcmp(kv, kv2, x.raw_bytes) == 0,
                       "re-encoded entry decodes to %d", (int)v2);
        }
        free(again);
        free(kv2);
    }

    /* the same bytes through the store, as the file of x's key */
    if (x.raw_bytes > 0) {
        pllm_prefix_store_params sp = {
            .dir = fuzz_scratch_dir(),
            .ns = x.ns,
            .block_size = x.block_size,
            .raw_bytes = x.raw_bytes,
            .warn = quiet,
        };
        pllm_prefix_store *s = NULL;
        if (pllm_prefix_store_create(&s, &sp) == PLLM_OK) {
            char *path = pllm_prefix_store_path(s, x.key);
            const char *name = strrchr(path, '/') + 1;
            fuzz_write_file(fuzz_scratch_dir(), name, buf, n);
            bool hit = false;
            pllm_status st = pllm_prefix_store_get(s, &x, kv, &hit);
            FUZZ_ERR_HAS_MSG(st);
            FUZZ_CHECK(hit == (v == PLLM_PREFIX_OK), "store hit %d, decoder verdict %d", hit,
                       (int)v);
            /* a corrupt file is removed; so is one longer than any entry of x's block can be
             * (which the decoder may call a mismatch); a valid one stays */
            bool gone = !pllm_prefix_store_has(s, x.key);
            FUZZ_CHECK(v != PLLM_PREFIX_CORRUPT || gone, "a corrupt file was not removed");
            FUZZ_CHECK(v != PLLM_PREFIX_OK || !gone, "a valid file was removed");
            fuzz_remove_file(fuzz_scratch_dir(), name);
            free(path);
            pllm_prefix_store_free(s);
        }
    }
    free(kv);
    free(tokens);
    free(buf);
    return 0;
}
