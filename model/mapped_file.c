/* mapped_file.c: guarded read-only file mappings (see mapped_file.h). */
#include "model/mapped_file.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* A slot is free (0), being filled or emptied (1), or live (2). The handler reads start and
 * len only after it saw state 2 (acquire); open() writes them before publishing 2 (release),
 * and close() takes the slot back to 1 before unmapping. */
typedef struct guard_slot {
    atomic_int state;
    atomic_uintptr_t start;
    atomic_size_t len; /* rounded up to whole pages */
    atomic_int damaged;
    atomic_int polled;             /* zero-fill and mark (1), or explain and die (0) */
    _Atomic(const char *) path;    /* for the message; lives as long as the slot */
} guard_slot;

static guard_slot g_slots[PLLM_MAPPED_FILE_SLOTS];
static struct sigaction g_prev_bus;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static bool g_installed;

/* Async-signal-safe decimal. */
static size_t fmt_size(char *buf, size_t v)
{
    char tmp[24];
    size_t n = 0, k = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n) buf[k++] = tmp[--n];
    return k;
}

static void put(const char *s, size_t n)
{
    while (n > 0) {
        ssize_t w = write(2, s, n);
        if (w <= 0) return;
        s += w;
        n -= (size_t)w;
    }
}

static void explain(const char *path, size_t offset)
{
    static const char a[] = "pllm: fatal: ", b[] = ": bus error reading byte offset ",
                      c[] = " of the mapped file: it was truncated or rewritten while in use\n";
    char num[24];
    put(a, sizeof a - 1);
    put(path ? path : "(model file)", strlen(path ? path : "(model file)"));
    put(b, sizeof b - 1);
    put(num, fmt_size(num, offset));
    put(c, sizeof c - 1);
}

static void on_sigbus(int sig, siginfo_t *si, void *uctx)
{
    uintptr_t a = (uintptr_t)si->si_addr;
    for (int i = 0; i < PLLM_MAPPED_FILE_SLOTS; i++) {
        guard_slot *s = &g_slots[i];
        if (atomic_load_explicit(&s->state, memory_order_acquire) != 2) continue;
        uintptr_t start = atomic_load_explicit(&s->start, memory_order_relaxed);
        size_t len = atomic_load_explicit(&s->len, memory_order_relaxed);
        if (a < start || a - start >= len) continue;
        atomic_store(&s->damaged, 1);
        if (!atomic_load(&s->polled)) {
            explain(atomic_load(&s->path), (size_t)(a - start));
            break;
        }
        uintptr_t page = a & ~((uintptr_t)sysconf(_SC_PAGESIZE) - 1);
        void *p = mmap((void *)page, start + len - page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
                       -1, 0);
        if (p != MAP_FAILED) return; /* the read is retried and sees zeros */
        break;
    }
    /* Not ours (or the remap failed): what would have happened without us. */
    if (g_prev_bus.sa_flags & SA_SIGINFO) {
        if (g_prev_bus.sa_sigaction) {
            g_prev_bus.sa_sigaction(sig, si, uctx);
            return;
        }
    } else if (g_prev_bus.sa_handler != SIG_DFL && g_prev_bus.sa_handler != SIG_IGN) {
        g_prev_bus.sa_handler(sig);
        return;
    }
    /* Default action: restore it and return; the faulting access repeats and ends the process
     * with SIGBUS (a signal raised by a fault cannot be ignored). */
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(SIGBUS, &dfl, NULL);
}

static void install_handler(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    g_installed = sigaction(SIGBUS, &sa, &g_prev_bus) == 0;
}

static int guard_add(const void *start, size_t len, const char *path)
{
    pthread_once(&g_once, install_handler);
    if (!g_installed) return -1;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t plen = (len + page - 1) / page * page;
    for (int i = 0; i < PLLM_MAPPED_FILE_SLOTS; i++) {
        int expect = 0;
        if (!atomic_compare_exchange_strong(&g_slots[i].state, &expect, 1)) continue;
        atomic_store_explicit(&g_slots[i].start, (uintptr_t)start, memory_order_relaxed);
        atomic_store_explicit(&g_slots[i].len, plen, memory_order_relaxed);
        atomic_store(&g_slots[i].damaged, 0);
        atomic_store(&g_slots[i].polled, 0);
        atomic_store(&g_slots[i].path, path);
        atomic_store_explicit(&g_slots[i].state, 2, memory_order_release);
        return i;
    }
    return -1;
}

pllm_status pllm_mapped_file_open(pllm_mapped_file *m, const char *path)
{
    memset(m, 0, sizeof *m);
    m->slot = -1;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return pllm_errorf(errno == ENOENT ? PLLM_ERR_NOT_FOUND : PLLM_ERR_IO, "%s: cannot open: %s", path,
                           strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return pllm_errorf(PLLM_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return pllm_errorf(PLLM_ERR_IO, "%s: not a regular file", path);
    }
    if (sb.st_size < 0 || (uint64_t)sb.st_size > (uint64_t)SIZE_MAX / 2) {
        close(fd);
        return pllm_errorf(PLLM_ERR_IO, "%s: file size %lld cannot be mapped", path, (long long)sb.st_size);
    }
    m->path = pllm_strdup(path);
    if (!m->path) {
        close(fd);
        return PLLM_ERR_NOMEM;
    }
    m->size = (size_t)sb.st_size;
    m->dev = sb.st_dev;
    m->ino = sb.st_ino;
    m->mtime_ns = (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec;
    m->fd = fd;
    m->is_open = true;
    if (m->size > 0) {
        void *p = mmap(NULL, m->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            pllm_mapped_file_close(m);
            return pllm_errorf(PLLM_ERR_IO, "%s: cannot mmap %zu bytes: %s", path, (size_t)sb.st_size, strerror(e));
        }
        m->data = p;
        m->slot = guard_add(p, m->size, m->path);
    }
    return PLLM_OK;
}

bool pllm_mapped_file_damaged(const pllm_mapped_file *m)
{
    return m->is_open && m->slot >= 0 && atomic_load(&g_slots[m->slot].damaged) != 0;
}

pllm_status pllm_mapped_file_check(const pllm_mapped_file *m)
{
    if (!m->is_open) return PLLM_OK;
    struct stat sb;
    if (fstat(m->fd, &sb) != 0)
        return pllm_errorf(PLLM_ERR_IO, "%s: cannot stat the model file while in use: %s", m->path, strerror(errno));
    int64_t mt = (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec;
    bool damaged = pllm_mapped_file_damaged(m);
    if ((size_t)sb.st_size != m->size || damaged)
        return pllm_errorf(PLLM_ERR_IO,
                           "%s: the file was truncated or rewritten while in use (%zu bytes when opened, %lld now%s); "
                           "what was computed from it since then is not valid",
                           m->path, m->size, (long long)sb.st_size,
                           damaged ? "; reading it raised a bus error" : "");
    if (mt != m->mtime_ns)
        return pllm_errorf(PLLM_ERR_IO,
                           "%s: the file was modified while in use (same size, %zu bytes, new modification time); "
                           "what was computed from it since then is not valid",
                           m->path, m->size);
    return PLLM_OK;
}

pllm_status pllm_mapped_file_poll(const pllm_mapped_file *m)
{
    pllm_mapped_file_set_polled(m, true);
    return pllm_mapped_file_check(m);
}

void pllm_mapped_file_set_polled(const pllm_mapped_file *m, bool polled)
{
    if (m->is_open && m->slot >= 0) atomic_store(&g_slots[m->slot].polled, polled ? 1 : 0);
}

void pllm_mapped_file_close(pllm_mapped_file *m)
{
    if (!m || !m->is_open) return;
    if (m->slot >= 0) {
        guard_slot *s = &g_slots[m->slot];
        atomic_store(&s->state, 1);
        atomic_store(&s->path, NULL);
        atomic_store_explicit(&s->start, 0, memory_order_relaxed);
        atomic_store_explicit(&s->len, 0, memory_order_relaxed);
        atomic_store(&s->state, 0);
    }
    if (m->data) munmap((void *)m->data, m->size);
    close(m->fd);
    free(m->path);
    memset(m, 0, sizeof *m);
    m->slot = -1;
}
