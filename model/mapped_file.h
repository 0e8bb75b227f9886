/*
 * mapped_file.h: a read-only memory mapping of a whole file that turns "the file was truncated
 * or rewritten while mapped" into an error message instead of a SIGBUS.
 *
 * The problem: model weights are mapped, not read. If the file is truncated while pllm runs
 * (or rewritten in place: `cp other.gguf model.gguf` truncates it first), the next read of a
 * page past the new end raises SIGBUS, which kills the process with no message. A rewrite of
 * the same size silently changes the weights under a running computation.
 *
 * What this module does:
 *   - open: fstat the file (regular files only), map it, keep the descriptor, and remember
 *     its size, inode and modification time. The format readers check every offset and size
 *     they read from the file against this size before use, so a file that is short when it
 *     is opened is an error at open.
 *   - a process-wide SIGBUS handler, installed at the first open, looks the faulting address
 *     up in a fixed table of live mappings. For a mapping whose owner polls (see below), a
 *     fault marks the mapping damaged and maps anonymous zero pages over it from the faulting
 *     page to its end, then returns: the faulting read and every later one read zeros, and
 *     the process goes on to its next check, which reports the damage. For a mapping nobody
 *     polls, zeros would go unnoticed, so the handler writes a message naming the file and
 *     the byte offset to stderr and lets the fault end the process (SIGBUS, as before, but
 *     explained). A fault outside every guarded mapping goes to the handler installed before
 *     (or the default action).
 *   - check: PLLM_ERR_IO with a message naming the file when the mapping was damaged, or when
 *     fstat shows another size or modification time than at open. It costs one fstat.
 *     poll() is check() plus a promise: the caller checks after every phase that reads the
 *     mapping (after loading; after each engine step, before emitting what that step
 *     computed) and stops on error, so results computed from zeros or from changed weights
 *     are never emitted; from the first poll() on, faults in the mapping read zeros.
 * Replacing the file by rename (the usual way to update a file) is harmless and not reported:
 * the mapping keeps the old inode alive.
 *
 * Global state: the table of guarded mappings is the one piece of process-global mutable
 * state, because a signal handler cannot be handed a context (dispositions are per process).
 * It has PLLM_MAPPED_FILE_SLOTS entries, is updated with atomics and read lock-free by the
 * handler (async-signal-safe: it only reads atomics and calls mmap/sigaction). When it is
 * full a mapping still works, unguarded (check still compares size and time).
 *
 * Ownership: open() fills a caller-owned struct; close() unmaps, closes and zeroes it, and
 * accepts a zeroed, failed or already closed struct (is_open false).
 */
#pragma once

#include "model/common.h"

#include <sys/types.h>

#define PLLM_MAPPED_FILE_SLOTS 256

typedef struct pllm_mapped_file {
    const uint8_t *data;  /* [size], read-only; NULL when size is 0 */
    size_t size;          /* file size at open */
    char *path;           /* as given, for messages */
    int fd;               /* kept open for check() */
    int slot;             /* index in the guard table; -1 when unguarded */
    bool is_open;         /* false for a zeroed, failed or closed struct */
    dev_t dev;
    ino_t ino;
    int64_t mtime_ns;
} pllm_mapped_file;

/* Map path read-only. Errors: PLLM_ERR_NOT_FOUND, PLLM_ERR_IO (not a regular file, open/mmap
 * failed), with the path in the message. On failure *m is left closed. */
pllm_status pllm_mapped_file_open(pllm_mapped_file *m, const char *path);
/* PLLM_OK while the file is as it was at open; else PLLM_ERR_IO saying what changed. */
pllm_status pllm_mapped_file_check(const pllm_mapped_file *m);
/* check(), and from now on faults in the mapping read zeros (the caller keeps checking). */
pllm_status pllm_mapped_file_poll(const pllm_mapped_file *m);
/* Whether faults read zeros (polled) or end the process with a message (the default). */
void pllm_mapped_file_set_polled(const pllm_mapped_file *m, bool polled);
/* Whether a read of the mapping faulted (the file lost bytes after open). */
bool pllm_mapped_file_damaged(const pllm_mapped_file *m);
void pllm_mapped_file_close(pllm_mapped_file *m);
