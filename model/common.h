/*
 * common.h: status codes, the thread-local error message, invariant checks, and small helpers
 * every module uses.
 *
 * Errors: a function that can fail returns pllm_status (PLLM_OK == 0). Before returning an
 * error it records a message with context (file, line, field, byte offset, value) through
 * pllm_errorf(); the caller reads it with pllm_errmsg(). The message is per thread, so worker
 * threads never clobber the caller's. pllm_errorf() returns its status so that
 *     return pllm_errorf(PLLM_ERR_FORMAT, "%s: bad magic", path);
 * reads as one statement. PLLM_ASSERT guards invariants (never input validation), stays on in
 * release builds, and aborts with the expression, file and line.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#define PLLM_NORETURN [[noreturn]]
#else
#define PLLM_NORETURN _Noreturn
#endif

typedef enum pllm_status {
    PLLM_OK = 0,
    PLLM_ERR_IO,          /* open/read/write/mmap failed */
    PLLM_ERR_FORMAT,      /* malformed input file or record */
    PLLM_ERR_UNSUPPORTED, /* well-formed but not supported (architecture, tensor type, ...) */
    PLLM_ERR_NOMEM,       /* allocation failed or a budget is too small */
    PLLM_ERR_INVALID,     /* invalid argument or parameter */
    PLLM_ERR_RANGE,       /* a value out of its allowed range (token id, context length) */
    PLLM_ERR_NOT_FOUND,   /* a file, key or tensor that should exist does not */
    PLLM_ERR_INTERRUPTED, /* stopped by a signal */
    PLLM_ERR_INTERNAL,    /* a bug: should never happen */
} pllm_status;

/* Short name of a status ("format error", ...). Never NULL. */
const char *pllm_status_str(pllm_status st);

/* Record a formatted message for this thread and return st. */
pllm_status pllm_errorf(pllm_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prefix the current message with more context ("loading model: " + message); returns st. */
pllm_status pllm_error_prefix(pllm_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* This thread's last message ("" when none). Valid until the next pllm_errorf on this thread. */
const char *pllm_errmsg(void);
void pllm_error_clear(void);

PLLM_NORETURN void pllm_assert_fail(const char *expr, const char *file, int line);
#define PLLM_ASSERT(x) ((x) ? (void)0 : pllm_assert_fail(#x, __FILE__, __LINE__))

/* Propagate a failing status: PLLM_TRY(f(...)); jumps nowhere, returns st. */
#define PLLM_TRY(call)                                                                             \
    do {                                                                                           \
        pllm_status pllm_try_st_ = (call);                                                         \
        if (pllm_try_st_ != PLLM_OK) return pllm_try_st_;                                          \
    } while (0)

#define PLLM_MIN(a, b) ((a) < (b) ? (a) : (b))
#define PLLM_MAX(a, b) ((a) > (b) ? (a) : (b))
#define PLLM_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* Allocation that reports failure through the error buffer (returns NULL on failure). */
void *pllm_malloc(size_t n);
void *pllm_calloc(size_t count, size_t size);
void *pllm_realloc(void *p, size_t n);
/* 64-byte aligned allocation for SIMD buffers; free with pllm_aligned_free. */
void *pllm_aligned_alloc(size_t n);
void pllm_aligned_free(void *p);
char *pllm_strdup(const char *s);

/* Overflow-checked size arithmetic: false on overflow. */
static inline bool pllm_mul_size(size_t a, size_t b, size_t *out) { return !__builtin_mul_overflow(a, b, out); }
static inline bool pllm_add_size(size_t a, size_t b, size_t *out) { return !__builtin_add_overflow(a, b, out); }

/* Monotonic clock in seconds. */
double pllm_now(void);

/* A growable array of int32 token ids. */
typedef struct pllm_tokens {
    int32_t *ids;
    size_t n, cap;
} pllm_tokens;
pllm_status pllm_tokens_push(pllm_tokens *t, int32_t id);
pllm_status pllm_tokens_append(pllm_tokens *t, const int32_t *ids, size_t n);
pllm_status pllm_tokens_reserve(pllm_tokens *t, size_t cap);
void pllm_tokens_free(pllm_tokens *t); /* frees ids and zeroes the struct */

/* A growable byte buffer, always NUL-terminated (s[n] == 0) once anything was appended. */
typedef struct pllm_buf {
    char *s;
    size_t n, cap;
} pllm_buf;
pllm_status pllm_buf_append(pllm_buf *b, const void *data, size_t n);
pllm_status pllm_buf_appendf(pllm_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void pllm_buf_free(pllm_buf *b);

#ifdef __cplusplus
}
#endif
