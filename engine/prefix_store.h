/*
 * prefix_store.h: a directory of KV cache blocks that outlives a run (--prefix-cache-dir): full
 * prompt blocks saved zstd-compressed, one file per block, so that a later run, or another
 * shard on the same host, loads a shared prefix instead of computing it.
 *
 * Keys. A block's disk key chains its parent, as the in-memory index does, but 128 bits wide
 * (XXH3-128): key_i = H128(key_{i-1}, tokens of block i, ns), key_{-1} = a fixed root. ns, the
 * namespace, is a hash of everything that decides the block's bytes: the model identity, the
 * KV dtype, the block size, the KV layout (layers, KV heads, head dim) and the backend's
 * numerics (its name and kernels, weight math). The file of block i is
 *     DIR/<ns, 16 hex>-<key_i, 32 hex>.kvb
 *
 * File format (version 1, little-endian), header then one zstd frame:
 *     0   magic "PLLMKVB" + 0x01                 8 bytes
 *     8   version (1), header bytes (104 + 4 * block_size)          u32, u32
 *     16  ns                                                        u64
 *     24  key (hi, lo), 40 parent key (hi, lo)                      u64 x 4
 *     56  depth (the block's index in its sequence), block_size     u32, u32
 *     64  raw bytes (the block's KV, backend.h's kv_read_block layout), compressed bytes  u64 x 2
 *     80  XXH3-64 of the compressed payload, then 8 zero bytes      u64, u64
 *     96  the block's token ids                                     i32 x block_size
 *     96 + 4 * block_size: XXH3-64 of every header byte before it   u64
 * The file is exactly header + compressed bytes long; the zstd frame carries its own content
 * checksum and size. A hit is trusted only when every field matches what the caller expects
 * (namespace, key, parent key, depth, block size, raw size, the tokens themselves), both
 * checksums hold and the frame decompresses to exactly raw bytes. Anything else is a miss; a
 * file that fails its checksums or its framing is corrupt: reported through the warn callback,
 * counted, and removed (so a later run writes it again). A valid file for other tokens (a
 * 128-bit key collision) is a plain miss.
 *
 * Concurrency (several runs, shards, on one host and one directory): a file is written to a
 * temporary name (".tmp-<pid>-<n>") and renamed into place, so a reader sees a whole file or
 * none; two writers of one block both write whole files and the last rename wins (the contents
 * are the same). A writer killed mid-write leaves only its temporary file, which a later run
 * removes once it is older than stale_seconds.
 *
 * Size cap: the directory holds at most max_bytes of entries. Each store counts the bytes it
 * wrote since it last scanned the directory; when its scanned total plus those passes the cap
 * (or it has written cap/8 since the scan), it takes an exclusive flock on DIR/.lock, rescans,
 * and removes entries least recently used first (a hit refreshes the file's mtime) until the
 * total is at most 7/8 of the cap. The cap holds across runs up to what concurrent writers add
 * between their scans.
 *
 * Failures never fail a run: a write that cannot complete (disk full, permissions) is counted,
 * warned about once, and the run goes on computing what it cannot save.
 *
 * Ownership: the store owns its strings; pointers passed in are borrowed.
 */
#pragma once

#include "model/common.h"

#define PLLM_PREFIX_MAGIC            "PLLMKVB\x01"
#define PLLM_PREFIX_VERSION          1
#define PLLM_PREFIX_HEADER_BYTES(bs) (104 + 4 * (size_t)(bs))

typedef struct pllm_prefix_key {
    uint64_t hi, lo;
} pllm_prefix_key;

static inline bool pllm_prefix_key_eq(pllm_prefix_key a, pllm_prefix_key b)
{
    return a.hi == b.hi && a.lo == b.lo;
}

/* key_{-1} */
pllm_prefix_key pllm_prefix_root_key(void);
/* key_i = H128(parent, tokens[0 .. n), ns) */
pllm_prefix_key pllm_prefix_key_next(pllm_prefix_key parent, const int32_t *tokens, int32_t n,
                                     uint64_t ns);

/* What a caller expects of an entry. */
typedef struct pllm_prefix_expect {
    uint64_t ns;
    pllm_prefix_key key, parent;
    int32_t depth, block_size;
    const int32_t *tokens; /* [block_size] */
    size_t raw_bytes;
} pllm_prefix_expect;

typedef enum pllm_prefix_verdict {
    PLLM_PREFIX_OK = 0,   /* a hit: kv holds the block */
    PLLM_PREFIX_CORRUPT,  /* fails its checksums or framing (truncated, flipped bytes) */
    PLLM_PREFIX_MISMATCH, /* a whole entry, but for another block (fields or tokens differ) */
} pllm_prefix_verdict;

/* Encode one entry (header + zstd frame of kv[0 .. x->raw_bytes)) into a malloc'd buffer. */
pllm_status pllm_prefix_entry_encode(uint8_t **out, size_t *out_len, const pllm_prefix_expect *x,
                                     const void *kv, int zstd_level);
/* Decode an entry from buf[0 .. n) against x; on PLLM_PREFIX_OK kv[0 .. x->raw_bytes) holds the
 * block (kv is scratch otherwise). why (may be NULL, 160 bytes) names the failed field. */
pllm_prefix_verdict pllm_prefix_entry_decode(const uint8_t *buf, size_t n,
                                             const pllm_prefix_expect *x, void *kv, char *why,
                                             size_t why_len);

typedef void (*pllm_prefix_warn_fn)(void *arg, const char *msg);

typedef struct pllm_prefix_store_params {
    const char *dir;          /* created if missing (one level) */
    size_t max_bytes;         /* size cap of the directory's entries; 0: 4 GiB */
    uint64_t ns;              /* namespace (above) */
    int32_t block_size;       /* tokens per block */
    size_t raw_bytes;         /* KV bytes of one block */
    int zstd_level;           /* 0: 1 (fast) */
    int32_t stale_seconds;    /* temporary files older than this are removed; 0: 600, <0: all */
    pllm_prefix_warn_fn warn; /* corrupt entries, write failures; NULL: stderr */
    void *warn_arg;
    /* tests: called after half of an entry's bytes are in its temporary file (to kill the
     * process mid-write) */
    void (*fault_mid_write)(void *arg);
    void *fault_arg;
} pllm_prefix_store_params;

typedef struct pllm_prefix_store_stats {
    int64_t hits;         /* blocks loaded */
    int64_t misses;       /* lookups with no file */
    int64_t corrupt;      /* corrupt entries found (ignored, removed) */
    int64_t mismatched;   /* whole entries for other blocks (ignored) */
    int64_t writes;       /* entries written */
    int64_t skipped;      /* saves of blocks already on disk */
    int64_t write_errors; /* saves that failed (the run went on) */
    int64_t evicted;      /* entries this store removed for the size cap */
    int64_t bytes_written;
    int64_t bytes_read;
    double seconds_read, seconds_write; /* time spent loading and saving (wall) */
} pllm_prefix_store_stats;

typedef struct pllm_prefix_store pllm_prefix_store;

/* Opens (creates) the directory, removes stale temporary files and enforces the cap. Fails
 * when dir cannot be created or is not a writable directory, naming it. */
pllm_status pllm_prefix_store_create(pllm_prefix_store **out, const pllm_prefix_store_params *p);
void pllm_prefix_store_free(pllm_prefix_store *s);

/* Whether an entry file for key exists (no verification). */
bool pllm_prefix_store_has(pllm_prefix_store *s, pllm_prefix_key key);
/* Load the block x describes into kv[0 .. raw_bytes): *hit false on a miss (no file, corrupt,
 * mismatched; see above). Errors only for a failed allocation. */
pllm_status pllm_prefix_store_get(pllm_prefix_store *s, const pllm_prefix_expect *x, void *kv,
                                  bool *hit);
/* Save a block (skipped when its file exists; kv is then not read and may be NULL). Never fails the
 * caller: a failure is counted and warned about; returns PLLM_OK except for a failed allocation. */
pllm_status pllm_prefix_store_put(pllm_prefix_store *s, const pllm_prefix_expect *x,
                                  const void *kv);
/* Enforce the cap now (normally automatic). */
void pllm_prefix_store_trim(pllm_prefix_store *s);
void pllm_prefix_store_get_stats(const pllm_prefix_store *s, pllm_prefix_store_stats *out);
/* Path of key's entry file (malloc'd; NULL on allocation failure). */
char *pllm_prefix_store_path(const pllm_prefix_store *s, pllm_prefix_key key);
