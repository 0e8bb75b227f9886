#include "model/common.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PLLM_ERRMSG_CAP 2048
static _Thread_local char g_errmsg[PLLM_ERRMSG_CAP];

const char *pllm_status_str(pllm_status st)
{
    switch (st) {
    case PLLM_OK: return "ok";
    case PLLM_ERR_IO: return "I/O error";
    case PLLM_ERR_FORMAT: return "format error";
    case PLLM_ERR_UNSUPPORTED: return "unsupported";
    case PLLM_ERR_NOMEM: return "out of memory";
    case PLLM_ERR_INVALID: return "invalid argument";
    case PLLM_ERR_RANGE: return "out of range";
    case PLLM_ERR_NOT_FOUND: return "not found";
    case PLLM_ERR_INTERRUPTED: return "interrupted";
    case PLLM_ERR_INTERNAL: return "internal error";
    }
    return "unknown status";
}

pllm_status pllm_errorf(pllm_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_errmsg, sizeof g_errmsg, fmt, ap);
    va_end(ap);
    return st;
}

pllm_status pllm_error_prefix(pllm_status st, const char *fmt, ...)
{
    char prefix[512], old[PLLM_ERRMSG_CAP];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, g_errmsg, sizeof old);
    size_t np = strlen(prefix), no = strlen(old);
    if (np > sizeof g_errmsg - 1) np = sizeof g_errmsg - 1;
    if (no > sizeof g_errmsg - 1 - np) no = sizeof g_errmsg - 1 - np;
    memcpy(g_errmsg, prefix, np);
    memcpy(g_errmsg + np, old, no);
    g_errmsg[np + no] = 0;
    return st;
}

const char *pllm_errmsg(void) { return g_errmsg; }
void pllm_error_clear(void) { g_errmsg[0] = 0; }

void pllm_assert_fail(const char *expr, const char *file, int line)
{
    fprintf(stderr, "pllm: assertion failed: %s (%s:%d)\n", expr, file, line);
    abort();
}

void *pllm_malloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) pllm_errorf(PLLM_ERR_NOMEM, "out of memory allocating %zu bytes", n);
    return p;
}

void *pllm_calloc(size_t count, size_t size)
{
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) pllm_errorf(PLLM_ERR_NOMEM, "out of memory allocating %zu x %zu bytes", count, size);
    return p;
}

void *pllm_realloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q) pllm_errorf(PLLM_ERR_NOMEM, "out of memory reallocating %zu bytes", n);
    return q;
}

void *pllm_aligned_alloc(size_t n)
{
    void *p = NULL;
    size_t rounded = (n + 63) & ~(size_t)63;
    if (posix_memalign(&p, 64, rounded ? rounded : 64) != 0) {
        pllm_errorf(PLLM_ERR_NOMEM, "out of memory allocating %zu aligned bytes", n);
        return NULL;
    }
    return p;
}

void pllm_aligned_free(void *p) { free(p); }

char *pllm_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = pllm_malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

double pllm_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

pllm_status pllm_tokens_reserve(pllm_tokens *t, size_t cap)
{
    if (cap <= t->cap) return PLLM_OK;
    size_t ncap = t->cap ? t->cap : 16;
    while (ncap < cap) ncap *= 2;
    int32_t *ids = pllm_realloc(t->ids, ncap * sizeof *ids);
    if (!ids) return PLLM_ERR_NOMEM;
    t->ids = ids;
    t->cap = ncap;
    return PLLM_OK;
}

pllm_status pllm_tokens_push(pllm_tokens *t, int32_t id)
{
    if (t->n == t->cap) PLLM_TRY(pllm_tokens_reserve(t, t->n + 1));
    t->ids[t->n++] = id;
    return PLLM_OK;
}

pllm_status pllm_tokens_append(pllm_tokens *t, const int32_t *ids, size_t n)
{
    PLLM_TRY(pllm_tokens_reserve(t, t->n + n));
    if (n) memcpy(t->ids + t->n, ids, n * sizeof *ids);
    t->n += n;
    return PLLM_OK;
}

void pllm_tokens_free(pllm_tokens *t)
{
    if (!t) return;
    free(t->ids);
    memset(t, 0, sizeof *t);
}

static pllm_status buf_reserve(pllm_buf *b, size_t need)
{
    if (need <= b->cap) return PLLM_OK;
    size_t ncap = b->cap ? b->cap : 64;
    while (ncap < need) ncap *= 2;
    char *s = pllm_realloc(b->s, ncap);
    if (!s) return PLLM_ERR_NOMEM;
    b->s = s;
    b->cap = ncap;
    return PLLM_OK;
}

pllm_status pllm_buf_append(pllm_buf *b, const void *data, size_t n)
{
    PLLM_TRY(buf_reserve(b, b->n + n + 1));
    if (n) memcpy(b->s + b->n, data, n);
    b->n += n;
    b->s[b->n] = 0;
    return PLLM_OK;
}

pllm_status pllm_buf_appendf(pllm_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (len < 0) return pllm_errorf(PLLM_ERR_INTERNAL, "bad format string");
    PLLM_TRY(buf_reserve(b, b->n + (size_t)len + 1));
    va_start(ap, fmt);
    vsnprintf(b->s + b->n, (size_t)len + 1, fmt, ap);
    va_end(ap);
    b->n += (size_t)len;
    return PLLM_OK;
}

void pllm_buf_free(pllm_buf *b)
{
    if (!b) return;
    free(b->s);
    memset(b, 0, sizeof *b);
}
