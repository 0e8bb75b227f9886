#include "cmd/options.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const cmd_opt *find_long(const cmd_spec *s, const char *name, size_t len)
{
    for (size_t i = 0; i < s->n_opts; i++)
        if (strlen(s->opts[i].name) == len && strncmp(s->opts[i].name, name, len) == 0)
            return &s->opts[i];
    return NULL;
}

/* Spellings users bring from vLLM and llama.cpp, accepted where the meaning is the same
 * (the target must be an option of the command). */
static const struct {
    const char *alias, *name;
} ALIASES[] = {
    {"max-num-seqs", "max-seqs"},                      /* vLLM */
    {"max-num-batched-tokens", "max-batched-tokens"},  /* vLLM */
    {"gpu-memory-utilization", "gpu-memory-fraction"}, /* vLLM */
    {"n-predict", "max-tokens"},                       /* llama.cpp */
    {"ctx-size", "max-model-len"},                     /* llama.cpp */
};

static const cmd_opt *find_option(const cmd_spec *s, const char *name, size_t len)
{
    const cmd_opt *o = find_long(s, name, len);
    for (size_t i = 0; !o && i < sizeof ALIASES / sizeof ALIASES[0]; i++)
        if (strlen(ALIASES[i].alias) == len && strncmp(ALIASES[i].alias, name, len) == 0)
            o = find_long(s, ALIASES[i].name, strlen(ALIASES[i].name));
    return o;
}

/* Levenshtein distance of a[0..na) and b (bounded lengths: option names). */
static size_t edit_distance(const char *a, size_t na, const char *b)
{
    size_t nb = strlen(b);
    if (na > 63 || nb > 63) return 64;
    size_t row[64];
    for (size_t j = 0; j <= nb; j++) row[j] = j;
    for (size_t i = 1; i <= na; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= nb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (row[j] + 1 < best) best = row[j] + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[nb];
}

const char *cmd_closest_option(const cmd_spec *s, const char *name, size_t len)
{
    const char *best = NULL;
    size_t best_d = (size_t)-1;
    for (size_t i = 0; i < s->n_opts; i++) {
        size_t d = edit_distance(name, len, s->opts[i].name);
        /* a name that contains the given one, or is contained in it ("--temp", "--seeds") */
        size_t nl = strlen(s->opts[i].name);
        if (len >= 3 && ((nl > len && strncmp(s->opts[i].name, name, len) == 0) ||
                         (len > nl && strncmp(name, s->opts[i].name, nl) == 0)))
            d = d < 2 ? d : 2;
        if (d < best_d) {
            best_d = d;
            best = s->opts[i].name;
        }
    }
    for (size_t i = 0; i < sizeof ALIASES / sizeof ALIASES[0]; i++) { /* vLLM's, misspelt */
        const cmd_opt *o = find_long(s, ALIASES[i].name, strlen(ALIASES[i].name));
        size_t d = edit_distance(name, len, ALIASES[i].alias);
        if (o && d < best_d) {
            best_d = d;
            best = o->name;
        }
    }
    size_t limit = len / 3 > 2 ? len / 3 : 2;
    return best && best_d <= limit ? best : NULL;
}

static const cmd_opt *find_short(const cmd_spec *s, char c)
{
    for (size_t i = 0; i < s->n_opts; i++)
        if (s->opts[i].short_name == c) return &s->opts[i];
    return NULL;
}

static int set_value(const cmd_opt *o, const char *val)
{
    char *end;
    errno = 0;
    switch (o->kind) {
    case CMD_OPT_INT: {
        long v = strtol(val, &end, 10);
        if (*val == 0 || *end || errno || v < INT32_MIN || v > INT32_MAX) goto bad;
        *(int32_t *)o->dst = (int32_t)v;
        break;
    }
    case CMD_OPT_INT64: {
        long long v = strtoll(val, &end, 10);
        if (*val == 0 || *end || errno) goto bad;
        *(int64_t *)o->dst = v;
        break;
    }
    case CMD_OPT_FLOAT: {
        float v = strtof(val, &end);
        if (*val == 0 || *end || errno || isnan(v)) goto bad;
        *(float *)o->dst = v;
        break;
    }
    case CMD_OPT_STR:
        *(const char **)o->dst = val;
        break;
    case CMD_OPT_STRS: {
        cmd_strs *s = o->dst;
        if (s->n >= (int)(sizeof s->v / sizeof s->v[0])) {
            fprintf(stderr, "pllm: option --%s given too many times (at most %zu)\n", o->name,
                    sizeof s->v / sizeof s->v[0]);
            return 2;
        }
        s->v[s->n++] = val;
        break;
    }
    case CMD_OPT_FLAG:
        *(bool *)o->dst = true;
        break;
    }
    if (o->seen) *o->seen = true;
    return 0;
bad:
    fprintf(stderr, "pllm: option --%s: '%s' is not a valid %s\n", o->name, val,
            o->kind == CMD_OPT_FLOAT ? "number" : "integer");
    return 2;
}

int cmd_parse(const cmd_spec *spec, int argc, char **argv, const char **pos, int *n_pos)
{
    *n_pos = 0;
    bool only_pos = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const cmd_opt *o = NULL;
        const char *val = NULL;
        if (!only_pos && strcmp(a, "--") == 0) {
            only_pos = true;
            continue;
        }
        if (!only_pos && (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0)) {
            cmd_print_help(spec, stdout);
            return 1;
        }
        if (!only_pos && a[0] == '-' && a[1] == '-') {
            const char *eq = strchr(a + 2, '=');
            size_t len = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
            o = find_option(spec, a + 2, len);
            if (!o) {
                const char *near = cmd_closest_option(spec, a + 2, len);
                if (near)
                    fprintf(stderr,
                            "pllm: unknown option '%.*s'; did you mean --%s? (see %s --help)\n",
                            (int)(len + 2), a, near, argv[0]);
                else
                    fprintf(stderr, "pllm: unknown option '%.*s' (see %s --help)\n", (int)(len + 2),
                            a, argv[0]);
                return 2;
            }
            if (eq) val = eq + 1;
        } else if (!only_pos && a[0] == '-' && a[1] && a[2] == 0) {
            o = find_short(spec, a[1]);
            if (!o) {
                fprintf(stderr, "pllm: unknown option '%s' (see %s --help)\n", a, argv[0]);
                return 2;
            }
        } else {
            if (*n_pos >= spec->max_pos) {
                fprintf(stderr, "pllm: unexpected argument '%s'\nusage: %s\n", a, spec->usage);
                return 2;
            }
            pos[(*n_pos)++] = a;
            continue;
        }
        if (o->kind == CMD_OPT_FLAG) {
            if (val) {
                fprintf(stderr, "pllm: option --%s takes no value\n", o->name);
                return 2;
            }
        } else if (!val) {
            if (i + 1 >= argc) {
                fprintf(stderr, "pllm: option --%s needs a value (%s)\n", o->name,
                        o->metavar ? o->metavar : "VALUE");
                return 2;
            }
            val = argv[++i];
        }
        int rc = set_value(o, val);
        if (rc) return rc;
    }
    if (*n_pos < spec->min_pos) {
        if (spec->missing)
            fprintf(stderr, "pllm: %s: missing %s\nusage: %s\n", argv[0], spec->missing,
                    spec->usage);
        else
            fprintf(stderr, "pllm: missing argument\nusage: %s\n", spec->usage);
        return 2;
    }
    return 0;
}

void cmd_print_help(const cmd_spec *spec, FILE *f)
{
    fprintf(f, "usage: %s\n\n%s\n\noptions:\n", spec->usage, spec->summary);
    for (size_t i = 0; i < spec->n_opts; i++) {
        const cmd_opt *o = &spec->opts[i];
        char left[96];
        int n = 0;
        if (o->short_name) n = snprintf(left, sizeof left, "-%c, ", o->short_name);
        snprintf(left + n, sizeof left - (size_t)n, "--%s%s%s", o->name, o->metavar ? " " : "",
                 o->metavar ? o->metavar : "");
        fprintf(f, "  %-28s %s", left, o->help);
        if (o->defval) fprintf(f, " (default: %s)", o->defval);
        fputc('\n', f);
    }
    fprintf(f, "  %-28s %s\n", "-h, --help", "show this help");
    bool any = false;
    for (size_t i = 0; i < sizeof ALIASES / sizeof ALIASES[0]; i++) {
        if (!find_long(spec, ALIASES[i].name, strlen(ALIASES[i].name))) continue;
        fprintf(f, "%s--%s = --%s", any ? ", " : "\naliases (vLLM, llama.cpp): ", ALIASES[i].alias,
                ALIASES[i].name);
        any = true;
    }
    if (any) fputc('\n', f);
}
