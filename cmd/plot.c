/* plot.c: the run as an SVG picture (plot.h). Hand-written SVG: a few panels of lines and bars
 * need axes, ticks and text, which is less code than a dependency would bring. */
#include "cmd/plot.h"

#include "cmd/output.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- recording */

#define CMD_PLOT_MARK "pllm plot"

bool cmd_plot_is_ours(const char *path)
{
    char head[128] = "";
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    size_t n = fread(head, 1, sizeof head - 1, f);
    fclose(f);
    head[n] = 0;
    return strstr(head, "<!-- " CMD_PLOT_MARK " -->") != NULL;
}

void cmd_plot_init(cmd_plot *p, bool on, double t0)
{
    memset(p, 0, sizeof *p);
    p->on = on;
    p->t0 = t0;
    p->width = 0.05; /* 240 buckets of 50 ms: 12 s before the first merge */
    p->best_hit_rate = -1;
    for (int i = 0; i < PLOT_BUCKETS; i++) p->kv[i] = -1;
    p->ttft.rng = 0x9e3779b97f4a7c15ull;
    p->tpot.rng = 0xbf58476d1ce4e5b9ull;
    p->e2e.rng = 0x94d049bb133111ebull;
}

void cmd_plot_free(cmd_plot *p)
{
    free(p->ttft.v);
    free(p->tpot.v);
    free(p->e2e.v);
    p->ttft.v = p->tpot.v = p->e2e.v = NULL;
}

/* Merge bucket pairs until t (seconds since the start) falls inside the range. */
static int bucket_of(cmd_plot *p, double t)
{
    if (t < 0) t = 0;
    while (t >= p->width * PLOT_BUCKETS) {
        for (int i = 0; i < PLOT_BUCKETS / 2; i++) {
            p->tokens[i] = p->tokens[2 * i] + p->tokens[2 * i + 1];
            p->prompt[i] = p->prompt[2 * i] + p->prompt[2 * i + 1];
            p->cached[i] = p->cached[2 * i] + p->cached[2 * i + 1];
            int32_t a = p->kv[2 * i], b = p->kv[2 * i + 1];
            p->kv[i] = a > b ? a : b;
        }
        for (int i = PLOT_BUCKETS / 2; i < PLOT_BUCKETS; i++) {
            p->tokens[i] = p->prompt[i] = p->cached[i] = 0;
            p->kv[i] = -1;
        }
        p->width *= 2;
    }
    return (int)(t / p->width);
}

static void note_time(cmd_plot *p, double now)
{
    if (now - p->t0 > p->t_last) p->t_last = now - p->t0;
}

void cmd_plot_step(cmd_plot *p, double now, const pllm_engine_stats *es)
{
    if (!p->on) return;
    note_time(p, now);
    int b = bucket_of(p, now - p->t0);
    p->n_steps++;
    if (es->blocks_used > p->kv[b]) p->kv[b] = es->blocks_used;
    p->n_blocks = es->n_blocks;
}

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Reservoir sampling: a uniform sample of at most PLOT_SAMPLES of the values offered. */
static void sample_add(cmd_plot_sample *s, double v)
{
    if (!isfinite(v)) return;
    s->seen++;
    if (!s->v) {
        s->v = malloc(PLOT_SAMPLES * sizeof *s->v);
        if (!s->v) return;
    }
    if (s->n < PLOT_SAMPLES) {
        s->v[s->n++] = v;
        return;
    }
    uint64_t j = splitmix(&s->rng) % (uint64_t)s->seen;
    if (j < PLOT_SAMPLES) s->v[j] = v;
}

void cmd_plot_completion(cmd_plot *p, const pllm_completion *c)
{
    if (!p->on) return;
    note_time(p, c->t_finish);
    for (int32_t i = 0; c->token_times && i < c->n_tokens; i++) {
        note_time(p, c->token_times[i]);
        p->tokens[bucket_of(p, c->token_times[i] - p->t0)] += 1;
    }
    int b = bucket_of(p, c->t_finish - p->t0);
    p->prompt[b] += c->prompt_tokens;
    p->cached[b] += c->cached_tokens;
    if (c->finish == PLLM_FINISH_ERROR) return;
    if (c->n_tokens > 0 && c->t_first_token > 0)
        sample_add(&p->ttft, 1e3 * (c->t_first_token - c->t_arrival));
    if (c->n_tokens > 1)
        sample_add(&p->tpot, 1e3 * (c->t_finish - c->t_first_token) / (c->n_tokens - 1));
    sample_add(&p->e2e, 1e3 * (c->t_finish - c->t_arrival));
}

/* ---------------------------------------------------------------- drawing */

#define PLOT_POINTS 60
#define SVG_W       1080
#define SVG_H       720
#define PANEL_W     280
#define PANEL_H     230

typedef struct panel {
    double x, y, w, h;     /* the plotting area */
    double x0, x1, y0, y1; /* data ranges */
} panel;

/* A "nice" tick step (1, 2 or 5 times a power of ten) for about n ticks over [0, span]. */
static double nice_step(double span, int n)
{
    if (!(span > 0)) return 1;
    double raw = span / n, mag = pow(10, floor(log10(raw))), f = raw / mag;
    return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * mag;
}

static double px(const panel *p, double x)
{
    return p->x + (x - p->x0) / (p->x1 - p->x0) * p->w;
}

static double py(const panel *p, double y)
{
    return p->y + p->h - (y - p->y0) / (p->y1 - p->y0) * p->h;
}

static void fmt_num(char *out, size_t cap, double v)
{
    double a = fabs(v);
    if (a >= 1e6)
        snprintf(out, cap, "%.3gM", v / 1e6);
    else if (a >= 1e4)
        snprintf(out, cap, "%.3gk", v / 1e3);
    else
        snprintf(out, cap, "%.4g", v);
}

/* Frame, title, axis labels and ticks of a panel; y1 is rounded up to a tick. */
static void axes(pllm_buf *b, panel *p, const char *title, const char *xlabel, const char *ylabel)
{
    double ys = nice_step(p->y1 - p->y0, 4);
    p->y1 = p->y0 + ceil((p->y1 - p->y0) / ys - 1e-9) * ys;
    if (p->y1 <= p->y0) p->y1 = p->y0 + ys;
    double xs = nice_step(p->x1 - p->x0, 5);
    pllm_buf_appendf(
        b,
        "<g class=\"panel\">\n<text x=\"%.1f\" y=\"%.1f\" class=\"title\">%s</text>\n"
        "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" class=\"frame\"/>\n",
        p->x, p->y - 10, title, p->x, p->y, p->w, p->h);
    char t[32];
    for (double v = p->y0; v <= p->y1 + ys * 1e-6; v += ys) {
        fmt_num(t, sizeof t, v);
        pllm_buf_appendf(b,
                         "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" class=\"grid\"/>"
                         "<text x=\"%.1f\" y=\"%.1f\" class=\"ytick\">%s</text>\n",
                         p->x, p->x + p->w, py(p, v), py(p, v), p->x - 4, py(p, v) + 4, t);
    }
    for (double v = ceil(p->x0 / xs) * xs; v <= p->x1 + xs * 1e-6; v += xs) {
        fmt_num(t, sizeof t, v);
        pllm_buf_appendf(b, "<text x=\"%.1f\" y=\"%.1f\" class=\"xtick\">%s</text>\n", px(p, v),
                         p->y + p->h + 14, t);
    }
    pllm_buf_appendf(b,
                     "<text x=\"%.1f\" y=\"%.1f\" class=\"xlabel\">%s</text>\n"
                     "<text x=\"%.1f\" y=\"%.1f\" class=\"ylabel\" transform=\"rotate(-90 %.1f "
                     "%.1f)\">%s</text>\n</g>\n",
                     p->x + p->w / 2, p->y + p->h + 30, xlabel, p->x - 44, p->y + p->h / 2,
                     p->x - 44, p->y + p->h / 2, ylabel);
}

static void empty_note(pllm_buf *b, const panel *p, const char *what)
{
    pllm_buf_appendf(b, "<text x=\"%.1f\" y=\"%.1f\" class=\"empty\">%s</text>\n", p->x + p->w / 2,
                     p->y + p->h / 2, what);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double quantile(const double *v, int64_t n, double q)
{
    if (n == 0) return NAN;
    double at = q * (double)(n - 1);
    int64_t i = (int64_t)floor(at);
    if (i + 1 >= n) return v[n - 1];
    return v[i] + (at - (double)i) * (v[i + 1] - v[i]);
}

/* A latency histogram panel (40 bars from 0 to the 99.5th percentile; the rest in the last). */
static void histogram(pllm_buf *b, panel *p, const cmd_plot_sample *s, const char *id,
                      const char *title, const char *color)
{
    enum { NB = 40 };
    double *v = s->n ? malloc((size_t)s->n * sizeof *v) : NULL;
    int64_t n = v ? s->n : 0;
    if (v) memcpy(v, s->v, (size_t)n * sizeof *v);
    if (n) qsort(v, (size_t)n, sizeof *v, cmp_double);
    double hi = n ? quantile(v, n, 0.995) : 1;
    if (!(hi > 0)) hi = n && v[n - 1] > 0 ? v[n - 1] : 1;
    double counts[NB] = {0}, top = 0;
    for (int64_t i = 0; i < n; i++) {
        int k = (int)(v[i] / hi * NB);
        counts[k < 0 ? 0 : k >= NB ? NB - 1 : k]++;
    }
    for (int k = 0; k < NB; k++) top = counts[k] > top ? counts[k] : top;
    p->x0 = 0;
    p->x1 = hi;
    p->y0 = 0;
    p->y1 = top > 0 ? top * 1.08 : 1;
    char full[160];
    snprintf(full, sizeof full, "%s (%lld%s)", title, (long long)s->seen,
             s->seen > s->n ? " values, sampled" : " values");
    axes(b, p, full, "milliseconds", "completions");
    pllm_buf_appendf(b, "<g id=\"%s\" class=\"series\" data-n=\"%d\" fill=\"%s\">\n", id,
                     n ? NB : 0, color);
    for (int k = 0; n && k < NB; k++) {
        double x = px(p, hi * k / NB), w = p->w / NB, y = py(p, counts[k]);
        pllm_buf_appendf(b, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\"/>\n", x, y,
                         w > 1 ? w - 0.5 : w, p->y + p->h - y);
    }
    pllm_buf_appendf(b, "</g>\n");
    if (n) {
        double med = quantile(v, n, 0.5), p99 = quantile(v, n, 0.99);
        const struct {
            const char *name;
            double x;
        } marks[] = {{"median", med}, {"p99", p99}};
        for (int i = 0; i < 2; i++) {
            double x = px(p, marks[i].x < hi ? marks[i].x : hi);
            pllm_buf_appendf(b,
                             "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" "
                             "class=\"mark\"/><text x=\"%.1f\" y=\"%.1f\" class=\"marktext\">%s "
                             "%.1f</text>\n",
                             x, x, p->y, p->y + p->h, x > p->x + 0.7 * p->w ? x - 90 : x + 3,
                             p->y + 12 + 12 * i, marks[i].name, marks[i].x);
        }
    } else {
        empty_note(b, p, "no completions");
    }
    free(v);
}

/* A line over the time buckets: y[i] for the buckets where have[i] (NULL: all). */
static void time_line(pllm_buf *b, const panel *p, const char *id, const char *cls, const double *y,
                      const bool *have, int nb, double width)
{
    int n = 0;
    for (int i = 0; i < nb; i++) n += !have || have[i];
    pllm_buf_appendf(b, "<path id=\"%s\" class=\"%s\" data-n=\"%d\" d=\"", id, cls, n);
    bool first = true;
    for (int i = 0; i < nb; i++) {
        if (have && !have[i]) continue;
        pllm_buf_appendf(b, "%s%.2f %.2f", first ? "M" : " L", px(p, (i + 0.5) * width),
                         py(p, y[i]));
        first = false;
    }
    pllm_buf_appendf(b, "\"/>\n");
    if (n > 2) return;
    /* a point or two: dots, or a lone point would not show */
    for (int i = 0; i < nb; i++)
        if (!have || have[i])
            pllm_buf_appendf(b, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"3\" class=\"dot\"/>\n",
                             px(p, (i + 0.5) * width), py(p, y[i]));
}

int cmd_plot_write(const cmd_plot *p, const char *path, const char *title, const char *subtitle)
{
    if (!p->on) return 0;
    pllm_buf b = {0};
    double span = p->t_last > 0 ? p->t_last : p->width;
    int nb = (int)ceil(span / p->width);
    if (nb < 1) nb = 1;
    if (nb > PLOT_BUCKETS) nb = PLOT_BUCKETS;
    /* drawn in at most PLOT_POINTS groups of recorded buckets (a step's tokens share its time,
     * so single 50 ms buckets alternate between steps and none) */
    int k = (nb + PLOT_POINTS - 1) / PLOT_POINTS;
    /* and at least two engine steps wide on average, so a rate is not a step's on-off pulse */
    if (p->n_steps > 0) {
        int ks = (int)ceil(2.0 * span / (double)p->n_steps / p->width);
        if (ks > k) k = ks;
    }
    if (k > nb) k = nb;
    int ng = (nb + k - 1) / k;
    double gw = p->width * k, dur = ng * gw;
    double tok[PLOT_BUCKETS] = {0}, pro[PLOT_BUCKETS] = {0}, cac[PLOT_BUCKETS] = {0};
    int32_t kvu[PLOT_BUCKETS];
    for (int i = 0; i < ng; i++) kvu[i] = -1;
    for (int i = 0; i < nb; i++) {
        tok[i / k] += p->tokens[i];
        pro[i / k] += p->prompt[i];
        cac[i / k] += p->cached[i];
        if (p->kv[i] > kvu[i / k]) kvu[i / k] = p->kv[i];
    }
    pllm_buf_appendf(
        &b,
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
        "<!-- " CMD_PLOT_MARK " -->\n"
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d "
        "%d\" font-family=\"sans-serif\" font-size=\"11\">\n"
        "<style>\n"
        ".title{font-size:13px;font-weight:bold}.frame{fill:none;stroke:#444}"
        ".grid{stroke:#ddd}.ytick{text-anchor:end}.xtick{text-anchor:middle}"
        ".xlabel{text-anchor:middle}.ylabel{text-anchor:middle}"
        ".line{fill:none;stroke-width:1.6}.mark{stroke:#c00;stroke-dasharray:3 2}"
        ".dot{fill:#555}.marktext{fill:#c00}.empty{text-anchor:middle;fill:#888}\n"
        "</style>\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
        SVG_W, SVG_H, SVG_W, SVG_H);
    /* the titles are pllm's own text; escape what XML reserves anyway */
    const char *lines[2] = {title, subtitle};
    for (int i = 0; i < 2; i++) {
        if (!lines[i]) continue;
        pllm_buf_appendf(&b, "<text x=\"20\" y=\"%d\" font-size=\"%d\"%s>", 24 + 18 * i,
                         i ? 12 : 16, i ? " fill=\"#555\"" : " font-weight=\"bold\"");
        for (const char *c = lines[i]; *c; c++) {
            if (*c == '<')
                pllm_buf_appendf(&b, "&lt;");
            else if (*c == '>')
                pllm_buf_appendf(&b, "&gt;");
            else if (*c == '&')
                pllm_buf_appendf(&b, "&amp;");
            else if (*c == '"')
                pllm_buf_appendf(&b, "&quot;");
            else
                pllm_buf_append(&b, c, 1);
        }
        pllm_buf_appendf(&b, "</text>\n");
    }
    const double left[3] = {70, 425, 780}, top[2] = {90, 420};
    /* 1. output throughput */
    {
        panel q = {left[0], top[0], PANEL_W, PANEL_H, 0, dur, 0, 1};
        double y[PLOT_BUCKETS] = {0};
        for (int i = 0; i < ng; i++) {
            y[i] = tok[i] / gw;
            if (y[i] > q.y1) q.y1 = y[i];
        }
        q.y1 *= 1.08; /* headroom: the top of the line stays inside the frame */
        axes(&b, &q, "Output throughput", "seconds", "tokens / s");
        time_line(&b, &q, "throughput", "line\" stroke=\"#1f77b4", y, NULL, ng, gw);
    }
    /* 2. KV cache use */
    {
        panel q = {left[1], top[0], PANEL_W, PANEL_H, 0, dur, 0, 1};
        double y[PLOT_BUCKETS] = {0};
        bool have[PLOT_BUCKETS] = {0};
        for (int i = 0; i < ng; i++) {
            have[i] = kvu[i] >= 0;
            y[i] = have[i] ? kvu[i] : 0;
            if (y[i] * 1.15 > q.y1) q.y1 = y[i] * 1.15;
        }
        /* the cache's size as a line when the use comes near it, else in the title */
        bool full_scale = p->n_blocks > 0 && p->n_blocks <= 2 * q.y1;
        if (full_scale) q.y1 = p->n_blocks;
        char kt[96];
        snprintf(kt, sizeof kt, "KV cache blocks in use (of %d)", p->n_blocks);
        axes(&b, &q, kt, "seconds", "blocks");
        time_line(&b, &q, "kv_used", "line\" stroke=\"#2ca02c", y, have, ng, gw);
        if (full_scale)
            pllm_buf_appendf(
                &b,
                "<line id=\"kv_total\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" "
                "stroke=\"#888\" stroke-dasharray=\"5 3\" data-n=\"%d\"/>"
                "<text x=\"%.1f\" y=\"%.1f\" fill=\"#888\" text-anchor=\"end\">%d "
                "blocks</text>\n",
                q.x, q.x + q.w, py(&q, p->n_blocks), py(&q, p->n_blocks), p->n_blocks,
                q.x + q.w - 4, py(&q, p->n_blocks) + 13, p->n_blocks);
    }
    /* 3. prefix cache hit rate (cumulative) */
    {
        panel q = {left[2], top[0], PANEL_W, PANEL_H, 0, dur, 0, 100};
        double y[PLOT_BUCKETS] = {0}, pr = 0, ca = 0;
        bool have[PLOT_BUCKETS] = {0};
        for (int i = 0; i < ng; i++) {
            pr += pro[i];
            ca += cac[i];
            have[i] = pr > 0;
            y[i] = pr > 0 ? 100.0 * ca / pr : 0;
        }
        axes(&b, &q, "Prefix cache hit rate (finished requests)", "seconds", "% of prompt tokens");
        time_line(&b, &q, "hit_rate", "line\" stroke=\"#9467bd", y, have, ng, gw);
        if (pr > 0)
            pllm_buf_appendf(&b,
                             "<text x=\"%.1f\" y=\"%.1f\" fill=\"#9467bd\">achieved %.1f%%"
                             "</text>\n",
                             q.x + 6, q.y + 16, 100.0 * ca / pr);
        if (p->best_hit_rate >= 0) {
            double yy = py(&q, 100.0 * p->best_hit_rate);
            pllm_buf_appendf(&b,
                             "<line id=\"hit_best\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" "
                             "y2=\"%.1f\" stroke=\"#9467bd\" stroke-dasharray=\"5 3\" "
                             "data-n=\"1\"/><text x=\"%.1f\" y=\"%.1f\" fill=\"#9467bd\" "
                             "text-anchor=\"end\">best achievable %.1f%%</text>\n",
                             q.x, q.x + q.w, yy, yy, q.x + q.w - 4, yy - 4,
                             100.0 * p->best_hit_rate);
        }
    }
    /* 4-6. latency distributions */
    panel h1 = {left[0], top[1], PANEL_W, PANEL_H, 0, 1, 0, 1};
    panel h2 = {left[1], top[1], PANEL_W, PANEL_H, 0, 1, 0, 1};
    panel h3 = {left[2], top[1], PANEL_W, PANEL_H, 0, 1, 0, 1};
    histogram(&b, &h1, &p->ttft, "ttft_hist", "Time to first token", "#ff7f0e");
    histogram(&b, &h2, &p->tpot, "tpot_hist", "Time per output token", "#17becf");
    histogram(&b, &h3, &p->e2e, "e2e_hist", "End-to-end latency", "#d62728");
    pllm_buf_appendf(&b, "</svg>\n");
    if (!b.s) {
        fprintf(stderr, "pllm: --plot: out of memory\n");
        return 3;
    }
    int rc = cmd_output_write_text(path, b.s, b.n);
    pllm_buf_free(&b);
    return rc;
}
