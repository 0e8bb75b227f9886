/* prefix_store.c: the on-disk KV block store (prefix_store.h). zstd compresses (a dependency
 * already, for .zst inputs), XXH3 keys and checks. */
#include "engine/prefix_store.h"

#include <dirent.h>
#include <stdarg.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>
#include <zstd.h>

#define DEFAULT_CAP  ((size_t)4 << 30)
#define ENTRY_SUFFIX ".kvb"
#define TMP_PREFIX   ".tmp-"

struct pllm_prefix_store {
    pllm_prefix_store_params p;
    char *dir;
    size_t scanned_bytes; /* entries' bytes at the last scan */
    size_t written_since; /* bytes this store wrote since */
    uint64_t tmp_counter;
    bool warned_write;
    uint8_t *buf; /* [buf_cap] a file's bytes */
    size_t buf_cap;
    pllm_prefix_store_stats st;
};

/* ---- keys ---- */

pllm_prefix_key pllm_prefix_root_key(void)
{
    return (pllm_prefix_key){0x6a09e667f3bcc908ull, 0xbb67ae8584caa73bull};
}

pllm_prefix_key pllm_prefix_key_next(pllm_prefix_key parent, const int32_t *tokens, int32_t n,
                                     uint64_t ns)
{
    XXH3_state_t st;
    XXH3_128bits_reset_withSeed(&st, ns);
    uint64_t pk[2] = {parent.hi, parent.lo};
    XXH3_128bits_update(&st, pk, sizeof pk);
    XXH3_128bits_update(&st, tokens, (size_t)n * sizeof *tokens);
    XXH128_hash_t h = XXH3_128bits_digest(&st);
    return (pllm_prefix_key){h.high64, h.low64};
}

/* ---- the entry format ---- */

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
    return v;
}
static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

pllm_status pllm_prefix_entry_encode(uint8_t **out, size_t *out_len, const pllm_prefix_expect *x,
                                     const void *kv, int zstd_level)
{
    *out = NULL;
    *out_len = 0;
    if (x->block_size < 1 || x->depth < 0)
        return pllm_errorf(PLLM_ERR_INVALID, "prefix store: block_size %d, depth %d", x->block_size,
                           x->depth);
    size_t hdr = PLLM_PREFIX_HEADER_BYTES(x->block_size), bound = ZSTD_compressBound(x->raw_bytes);
    uint8_t *b = pllm_malloc(hdr + bound);
    if (!b) return PLLM_ERR_NOMEM;
    ZSTD_CCtx *cc = ZSTD_createCCtx();
    if (!cc) {
        free(b);
        return PLLM_ERR_NOMEM;
    }
    ZSTD_CCtx_setParameter(cc, ZSTD_c_compressionLevel, zstd_level > 0 ? zstd_level : 1);
    ZSTD_CCtx_setParameter(cc, ZSTD_c_checksumFlag, 1);
    size_t comp = ZSTD_compress2(cc, b + hdr, bound, kv, x->raw_bytes);
    ZSTD_freeCCtx(cc);
    if (ZSTD_isError(comp)) {
        free(b);
        return pllm_errorf(PLLM_ERR_INTERNAL, "prefix store: zstd: %s", ZSTD_getErrorName(comp));
    }
    memset(b, 0, hdr);
    memcpy(b, PLLM_PREFIX_MAGIC, 8);
    put32(b + 8, PLLM_PREFIX_VERSION);
    put32(b + 12, (uint32_t)hdr);
    put64(b + 16, x->ns);
    put64(b + 24, x->key.hi);
    put64(b + 32, x->key.lo);
    put64(b + 40, x->parent.hi);
    put64(b + 48, x->parent.lo);
    put32(b + 56, (uint32_t)x->depth);
    put32(b + 60, (uint32_t)x->block_size);
    put64(b + 64, (uint64_t)x->raw_bytes);
    put64(b + 72, (uint64_t)comp);
    put64(b + 80, XXH3_64bits(b + hdr, comp));
    for (int32_t i = 0; i < x->block_size; i++)
        put32(b + 96 + 4 * (size_t)i, (uint32_t)x->tokens[i]);
    put64(b + hdr - 8, XXH3_64bits(b, hdr - 8));
    *out = b;
    *out_len = hdr + comp;
    return PLLM_OK;
}

#define WHY(...) (why ? (void)snprintf(why, why_len, __VA_ARGS__) : (void)0)

pllm_prefix_verdict pllm_prefix_entry_decode(const uint8_t *buf, size_t n,
                                             const pllm_prefix_expect *x, void *kv, char *why,
                                             size_t why_len)
{
    if (why && why_len) why[0] = 0;
    /* framing and checksums first: until they hold, no field is believed */
    if (n < 16) {
        WHY("truncated: %zu bytes, shorter than the fixed header", n);
        return PLLM_PREFIX_CORRUPT;
    }
    if (memcmp(buf, PLLM_PREFIX_MAGIC, 8) != 0) {
        WHY("bad magic (offset 0)");
        return PLLM_PREFIX_CORRUPT;
    }
    uint32_t version = get32(buf + 8), hdr = get32(buf + 12);
    if (version != PLLM_PREFIX_VERSION) {
        WHY("version %u, expected %d (offset 8)", version, PLLM_PREFIX_VERSION);
        return PLLM_PREFIX_CORRUPT;
    }
    if (hdr < PLLM_PREFIX_HEADER_BYTES(1) || (hdr - 104) % 4 != 0 || hdr > n) {
        WHY("header bytes %u invalid or past the end of the %zu-byte file (offset 12)", hdr, n);
        return PLLM_PREFIX_CORRUPT;
    }
    if (get64(buf + hdr - 8) != XXH3_64bits(buf, hdr - 8)) {
        WHY("header checksum mismatch (offset %u)", hdr - 8);
        return PLLM_PREFIX_CORRUPT;
    }
    uint32_t bs = get32(buf + 60);
    uint64_t raw = get64(buf + 64), comp = get64(buf + 72);
    if (PLLM_PREFIX_HEADER_BYTES(bs) != hdr) {
        WHY("block_size %u does not match header bytes %u (offset 60)", bs, hdr);
        return PLLM_PREFIX_CORRUPT;
    }
    if (comp != n - hdr) {
        WHY("truncated or extended: payload of %zu bytes, header says %llu (offset 72)", n - hdr,
            (unsigned long long)comp);
        return PLLM_PREFIX_CORRUPT;
    }
    if (comp > ZSTD_compressBound((size_t)PLLM_MIN(raw, (uint64_t)SIZE_MAX / 2))) {
        WHY("payload of %llu bytes, more than zstd's bound for %llu (offset 72)",
            (unsigned long long)comp, (unsigned long long)raw);
        return PLLM_PREFIX_CORRUPT;
    }
    if (get64(buf + 80) != XXH3_64bits(buf + hdr, (size_t)comp)) {
        WHY("payload checksum mismatch (offset 80)");
        return PLLM_PREFIX_CORRUPT;
    }
    /* a whole entry: is it the one asked for? */
    if (get64(buf + 16) != x->ns) {
        WHY("namespace differs (offset 16)");
        return PLLM_PREFIX_MISMATCH;
    }
    pllm_prefix_key key = {get64(buf + 24), get64(buf + 32)};
    pllm_prefix_key parent = {get64(buf + 40), get64(buf + 48)};
    if (!pllm_prefix_key_eq(key, x->key) || !pllm_prefix_key_eq(parent, x->parent)) {
        WHY("key or parent key differs (offset 24)");
        return PLLM_PREFIX_MISMATCH;
    }
    if ((int64_t)get32(buf + 56) != x->depth || (int64_t)bs != x->block_size ||
        raw != (uint64_t)x->raw_bytes) {
        WHY("depth %u / block_size %u / raw bytes %llu differ from %d / %d / %zu (offset 56)",
            get32(buf + 56), bs, (unsigned long long)raw, x->depth, x->block_size, x->raw_bytes);
        return PLLM_PREFIX_MISMATCH;
    }
    for (uint32_t i = 0; i < bs; i++)
        if ((int32_t)get32(buf + 96 + 4 * (size_t)i) != x->tokens[i]) {
            WHY("token %u differs (offset %zu)", i, 96 + 4 * (size_t)i);
            return PLLM_PREFIX_MISMATCH;
        }
    size_t frame = ZSTD_findFrameCompressedSize(buf + hdr, (size_t)comp);
    if (ZSTD_isError(frame) || frame != comp) {
        WHY("the payload is not exactly one zstd frame");
        return PLLM_PREFIX_CORRUPT;
    }
    unsigned long long fsz = ZSTD_getFrameContentSize(buf + hdr, (size_t)comp);
    if (fsz != raw) {
        WHY("zstd frame content size %llu, expected %llu", fsz, (unsigned long long)raw);
        return PLLM_PREFIX_CORRUPT;
    }
    size_t got = ZSTD_decompress(kv, (size_t)raw, buf + hdr, (size_t)comp);
    if (ZSTD_isError(got) || got != raw) {
        WHY("zstd: %s", ZSTD_isError(got) ? ZSTD_getErrorName(got) : "short frame");
        return PLLM_PREFIX_CORRUPT;
    }
    return PLLM_PREFIX_OK;
}

/* ---- the directory ---- */

static void warn(pllm_prefix_store *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void warn(pllm_prefix_store *s, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (s->p.warn)
        s->p.warn(s->p.warn_arg, msg);
    else
        fprintf(stderr, "pllm: warning: %s\n", msg);
}

char *pllm_prefix_store_path(const pllm_prefix_store *s, pllm_prefix_key key)
{
    pllm_buf b = {0};
    if (pllm_buf_appendf(&b, "%s/%016llx-%016llx%016llx" ENTRY_SUFFIX, s->dir,
                         (unsigned long long)s->p.ns, (unsigned long long)key.hi,
                         (unsigned long long)key.lo) != PLLM_OK) {
        free(b.s);
        return NULL;
    }
    return b.s;
}

static bool is_entry(const char *name)
{
    size_t n = strlen(name), sl = strlen(ENTRY_SUFFIX);
    return name[0] != '.' && n > sl && strcmp(name + n - sl, ENTRY_SUFFIX) == 0;
}

typedef struct dir_entry {
    char *name;
    size_t bytes;
    struct timespec mtime;
} dir_entry;

static int by_mtime(const void *a, const void *b)
{
    const dir_entry *x = a, *y = b;
    if (x->mtime.tv_sec != y->mtime.tv_sec) return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
    if (x->mtime.tv_nsec != y->mtime.tv_nsec) return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* Rescan under the directory's lock: remove stale temporary files, then entries least recently
 * used first while the total is over target. */
static void scan_and_trim(pllm_prefix_store *s, size_t target)
{
    pllm_buf lp = {0};
    if (pllm_buf_appendf(&lp, "%s/.lock", s->dir) != PLLM_OK) {
        free(lp.s);
        return;
    }
    int lfd = open(lp.s, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    free(lp.s);
    if (lfd >= 0) flock(lfd, LOCK_EX);
    DIR *d = opendir(s->dir);
    dir_entry *es = NULL;
    size_t n = 0, cap = 0, total = 0;
    time_t now = time(NULL);
    /* <0: every temporary file, without comparing clocks (a file's mtime may be a tick ahead
     * of time(NULL): kernels with fine-grained file timestamps read a finer clock) */
    bool all_stale = s->p.stale_seconds < 0;
    int32_t stale = s->p.stale_seconds == 0 ? 600 : PLLM_MAX(s->p.stale_seconds, 0);
    for (struct dirent *de; d && (de = readdir(d));) {
        bool tmp = strncmp(de->d_name, TMP_PREFIX, strlen(TMP_PREFIX)) == 0;
        if (!tmp && !is_entry(de->d_name)) continue;
        struct stat sb;
        if (fstatat(dirfd(d), de->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(sb.st_mode))
            continue;
        if (tmp) {
            if (all_stale || now - sb.st_mtime >= stale) unlinkat(dirfd(d), de->d_name, 0);
            continue;
        }
        if (n == cap) {
            size_t nc = cap ? 2 * cap : 256;
            dir_entry *ne = pllm_realloc(es, nc * sizeof *ne);
            if (!ne) break;
            es = ne;
            cap = nc;
        }
        es[n] = (dir_entry){
            .name = pllm_strdup(de->d_name), .bytes = (size_t)sb.st_size, .mtime = sb.st_mtim};
        if (!es[n].name) break;
        total += es[n].bytes;
        n++;
    }
    if (total > target && n > 0) {
        qsort(es, n, sizeof *es, by_mtime);
        for (size_t i = 0; i < n && total > target; i++) {
            if (unlinkat(dirfd(d), es[i].name, 0) == 0) s->st.evicted++;
            total -= es[i].bytes; /* gone either way (another run may have removed it) */
        }
    }
    for (size_t i = 0; i < n; i++) free(es[i].name);
    free(es);
    if (d) closedir(d);
    if (lfd >= 0) close(lfd); /* releases the lock */
    s->scanned_bytes = total;
    s->written_since = 0;
}

void pllm_prefix_store_trim(pllm_prefix_store *s)
{
    scan_and_trim(s, s->p.max_bytes - s->p.max_bytes / 8);
}

pllm_status pllm_prefix_store_create(pllm_prefix_store **out, const pllm_prefix_store_params *p)
{
    *out = NULL;
    if (!p->dir || !p->dir[0])
        return pllm_errorf(PLLM_ERR_INVALID, "prefix cache: no directory given");
    if (p->block_size < 1 || p->raw_bytes == 0)
        return pllm_errorf(PLLM_ERR_INVALID, "prefix cache: block_size %d, %zu bytes per block",
                           p->block_size, p->raw_bytes);
    if (mkdir(p->dir, 0755) != 0 && errno != EEXIST)
        return pllm_errorf(PLLM_ERR_IO, "prefix cache directory %s: cannot create it: %s", p->dir,
                           strerror(errno));
    struct stat sb;
    if (stat(p->dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return pllm_errorf(PLLM_ERR_IO, "prefix cache directory %s: not a directory", p->dir);
    if (access(p->dir, R_OK | W_OK | X_OK) != 0)
        return pllm_errorf(PLLM_ERR_IO, "prefix cache directory %s: not writable: %s", p->dir,
                           strerror(errno));
    pllm_prefix_store *s = pllm_calloc(1, sizeof *s);
    if (!s) return PLLM_ERR_NOMEM;
    s->p = *p;
    if (s->p.max_bytes == 0) s->p.max_bytes = DEFAULT_CAP;
    s->dir = pllm_strdup(p->dir);
    if (!s->dir) {
        free(s);
        return PLLM_ERR_NOMEM;
    }
    s->p.dir = s->dir;
    pllm_prefix_store_trim(s);
    *out = s;
    return PLLM_OK;
}

void pllm_prefix_store_free(pllm_prefix_store *s)
{
    if (!s) return;
    free(s->dir);
    free(s->buf);
    free(s);
}

void pllm_prefix_store_get_stats(const pllm_prefix_store *s, pllm_prefix_store_stats *out)
{
    *out = s->st;
}

bool pllm_prefix_store_has(pllm_prefix_store *s, pllm_prefix_key key)
{
    char *path = pllm_prefix_store_path(s, key);
    if (!path) return false;
    struct stat sb;
    bool ok = stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
    free(path);
    return ok;
}

static bool buf_reserve(pllm_prefix_store *s, size_t n)
{
    if (n <= s->buf_cap) return true;
    uint8_t *b = pllm_realloc(s->buf, n);
    if (!b) return false;
    s->buf = b;
    s->buf_cap = n;
    return true;
}

pllm_status pllm_prefix_store_get(pllm_prefix_store *s, const pllm_prefix_expect *x, void *kv,
                                  bool *hit)
{
    *hit = false;
    double t0 = pllm_now();
    char *path = pllm_prefix_store_path(s, x->key);
    if (!path) return PLLM_ERR_NOMEM;
    pllm_status st = PLLM_OK;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        s->st.misses++;
        goto out;
    }
    /* no entry is larger than its header plus zstd's bound on the block (the decoder checks
     * it): a longer file is corrupt without reading it */
    size_t limit = PLLM_PREFIX_HEADER_BYTES(x->block_size) + ZSTD_compressBound(x->raw_bytes);
    char why[160];
    if ((uint64_t)sb.st_size > (uint64_t)limit) {
        snprintf(why, sizeof why, "%lld bytes, more than an entry of this block can be",
                 (long long)sb.st_size);
        goto corrupt;
    }
    size_t want = (size_t)sb.st_size, got = 0;
    if (!buf_reserve(s, want ? want : 1)) {
        st = PLLM_ERR_NOMEM;
        goto out;
    }
    while (got < want) {
        ssize_t r = read(fd, s->buf + got, want - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    s->st.bytes_read += (int64_t)got;
    pllm_prefix_verdict v = pllm_prefix_entry_decode(s->buf, got, x, kv, why, sizeof why);
    if (v == PLLM_PREFIX_OK) {
        *hit = true;
        s->st.hits++;
        futimens(fd, NULL); /* recently used: evicted last */
    } else if (v == PLLM_PREFIX_MISMATCH) {
        s->st.mismatched++;
    } else {
    corrupt:
        s->st.corrupt++;
        /* renamed into place whole, so it was damaged after: remove it, a later save rewrites */
        bool removed = unlink(path) == 0;
        warn(s, "prefix cache: %s: corrupt entry (%s); ignored%s", path, why,
             removed ? " and removed" : "");
    }
out:
    if (fd >= 0) close(fd);
    free(path);
    s->st.seconds_read += pllm_now() - t0;
    return st;
}

static bool write_all(int fd, const uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

pllm_status pllm_prefix_store_put(pllm_prefix_store *s, const pllm_prefix_expect *x, const void *kv)
{
    if (pllm_prefix_store_has(s, x->key)) {
        s->st.skipped++;
        return PLLM_OK;
    }
    double t0 = pllm_now();
    uint8_t *b = NULL;
    size_t n = 0;
    pllm_status st = pllm_prefix_entry_encode(&b, &n, x, kv, s->p.zstd_level);
    if (st != PLLM_OK) return st == PLLM_ERR_NOMEM ? st : PLLM_OK;
    char *path = pllm_prefix_store_path(s, x->key);
    pllm_buf tmp = {0};
    if (!path || pllm_buf_appendf(&tmp, "%s/" TMP_PREFIX "%ld-%llu", s->dir, (long)getpid(),
                                  (unsigned long long)s->tmp_counter++) != PLLM_OK) {
        free(b);
        free(path);
        free(tmp.s);
        return PLLM_ERR_NOMEM;
    }
    const char *what = NULL;
    int fd = open(tmp.s, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        what = "create";
    } else {
        size_t half = n / 2;
        bool ok = write_all(fd, b, half);
        if (ok && s->p.fault_mid_write) s->p.fault_mid_write(s->p.fault_arg);
        ok = ok && write_all(fd, b + half, n - half);
        if (!ok) what = "write";
        if (close(fd) != 0 && !what) what = "close";
        if (!what && rename(tmp.s, path) != 0) what = "rename";
        if (what) unlink(tmp.s);
    }
    if (what) {
        s->st.write_errors++;
        if (!s->warned_write)
            warn(s, "prefix cache: cannot save %s (%s: %s); the run goes on without saving it",
                 path, what, strerror(errno));
        s->warned_write = true;
    } else {
        s->st.writes++;
        s->st.bytes_written += (int64_t)n;
        s->written_since += n;
    }
    free(b);
    free(path);
    free(tmp.s);
    s->st.seconds_write += pllm_now() - t0;
    if (s->scanned_bytes + s->written_since > s->p.max_bytes ||
        s->written_since > s->p.max_bytes / 8)
        pllm_prefix_store_trim(s);
    return PLLM_OK;
}
