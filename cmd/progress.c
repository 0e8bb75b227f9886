#include "cmd/progress.h"

#include "model/common.h"

#include <string.h>
#include <unistd.h>

void cmd_progress_init(cmd_progress *p, bool quiet, double log_interval, const char *what,
                       double t_start)
{
    memset(p, 0, sizeof *p);
    p->enabled = !quiet;
    p->tty = isatty(STDERR_FILENO);
    p->interval = log_interval > 0 ? log_interval : 10;
    p->t_start = p->t_last = t_start;
    p->what = what;
}

static void fmt_duration(char *out, size_t cap, double s)
{
    if (!(s >= 0) || s > 1e8) {
        snprintf(out, cap, "?");
        return;
    }
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(out, cap, "%ldh%02ldm", t / 3600, t / 60 % 60);
    else if (t >= 60)
        snprintf(out, cap, "%ldm%02lds", t / 60, t % 60);
    else
        snprintf(out, cap, "%lds", t);
}

static void render(const cmd_progress *p, const cmd_progress_state *s, double now, char *out,
                   size_t cap)
{
    double el = now - p->t_start;
    char total[32], pct[16] = "", eta[24] = "?";
    if (s->total < 0)
        snprintf(total, sizeof total, "?");
    else
        snprintf(total, sizeof total, "%s%lld", s->total_estimated ? "~" : "", (long long)s->total);
    if (s->total > 0)
        snprintf(pct, sizeof pct, " %.1f%%", 100.0 * (double)s->done / (double)s->total);
    if (s->total >= 0 && s->done > 0 && el > 0)
        fmt_duration(eta, sizeof eta, (double)(s->total - s->done) * el / (double)s->done);
    double tps = el > 0 ? (double)s->output_tokens / el : 0;
    double hit = s->prompt_tokens ? 100.0 * (double)s->cached_tokens / (double)s->prompt_tokens : 0;
    int n = snprintf(out, cap, "[pllm %s] %lld/%s req%s | %.1f tok/s | ETA %s | cache hit %.1f%%",
                     p->what, (long long)s->done, total, pct, tps, eta, hit);
    if (s->failed && n > 0 && (size_t)n < cap)
        snprintf(out + n, cap - (size_t)n, " | %lld failed", (long long)s->failed);
}

void cmd_progress_update(cmd_progress *p, const cmd_progress_state *s, bool force)
{
    if (!p->enabled) return;
    double now = pllm_now();
    double every = p->tty ? 0.25 : p->interval;
    if (!force && now - p->t_last < every) return;
    p->t_last = now;
    char line[256];
    render(p, s, now, line, sizeof line);
    if (p->tty) {
        fprintf(stderr, "\r\033[K%s", line);
        p->line_open = true;
    } else {
        fprintf(stderr, "%s\n", line);
    }
    fflush(stderr);
}

void cmd_progress_clear(cmd_progress *p)
{
    if (p->enabled && p->tty && p->line_open) {
        fprintf(stderr, "\r\033[K");
        p->line_open = false;
    }
}

void cmd_progress_finish(cmd_progress *p, const cmd_progress_state *s)
{
    if (!p->enabled) return;
    if (p->tty) {
        cmd_progress_update(p, s, true);
        fputc('\n', stderr);
        p->line_open = false;
    } else if (pllm_now() - p->t_start >= p->interval) {
        cmd_progress_update(p, s,
                            true); /* a closing log line for runs long enough to have had some */
    }
}
