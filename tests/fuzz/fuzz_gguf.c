/*
 * fuzz_gguf.c: GGUF files from anywhere. The input is a whole file image:
 *   1. pllm_gguf_parse() on the bytes; what it accepts must be in bounds: every key, string
 *      and array element, every tensor's data range (touched byte by byte, so ASan sees any
 *      view past the input), and lookups must find every entry;
 *   2. the tokenizer builder on the parsed metadata (tokenizer.ggml.*), and a short encode
 *      and decode with what it built;
 *   3. pllm_model_load() on the same bytes through a file (a memfd), as `pllm --model` does:
 *      hyperparameters, tensor shapes, the converted vectors, the description.
 */
#include "tests/fuzz/fuzz_common.h"

#include "model/gguf.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static int g_memfd = -1;
static char g_memfd_path[64];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    g_memfd = memfd_create("fuzz.gguf", MFD_CLOEXEC);
    if (g_memfd < 0) {
        perror("memfd_create");
        abort();
    }
    snprintf(g_memfd_path, sizeof g_memfd_path, "/proc/self/fd/%d", g_memfd);
    return 0;
}

static void check_kv(const pllm_gguf *g, const pllm_gguf_kv *kv)
{
    FUZZ_CHECK(pllm_gguf_find(g, kv->key) == kv, "key '%s' not found by lookup", kv->key);
    FUZZ_CHECK(kv->offset <= g->size, "value offset %zu past %zu", kv->offset, g->size);
    uint32_t u;
    float f;
    bool b;
    pllm_gguf_str s;
    FUZZ_ERR_HAS_MSG(pllm_gguf_get_u32(g, kv->key, &u));
    FUZZ_ERR_HAS_MSG(pllm_gguf_get_f32(g, kv->key, &f));
    FUZZ_ERR_HAS_MSG(pllm_gguf_get_bool(g, kv->key, &b));
    if (pllm_gguf_get_str(g, kv->key, &s) == PLLM_OK) {
        FUZZ_CHECK((const uint8_t *)s.s >= g->map && s.len <= g->size - (size_t)((const uint8_t *)s.s - g->map),
                   "string of '%s' out of bounds", kv->key);
        fuzz_touch(s.s, s.len);
    }
    if (kv->type != PLLM_GGUF_ARRAY) return;
    const pllm_gguf_kv *a;
    FUZZ_CHECK(pllm_gguf_get_arr(g, kv->key, PLLM_GGUF_TYPE_COUNT, &a) == PLLM_OK, "array '%s'", kv->key);
    uint64_t n = a->arr_n < 4096 ? a->arr_n : 4096;
    for (uint64_t i = 0; i < n; i++) {
        if (a->arr_type == PLLM_GGUF_STRING) {
            pllm_gguf_str e = pllm_gguf_arr_str(a, i);
            FUZZ_CHECK((const uint8_t *)e.s >= g->map && e.len <= g->size - (size_t)((const uint8_t *)e.s - g->map),
                       "element %llu of '%s' out of bounds", (unsigned long long)i, kv->key);
            fuzz_touch(e.s, e.len);
        } else if (a->arr_type != PLLM_GGUF_ARRAY) {
            (void)pllm_gguf_arr_int(a, i);
            (void)pllm_gguf_arr_float(a, i);
        }
    }
    /* the last element too (the loop above may stop early) */
    if (a->arr_n > n && a->arr_type == PLLM_GGUF_STRING) fuzz_touch(pllm_gguf_arr_str(a, a->arr_n - 1).s, 1);
}

static void check_tensor(const pllm_gguf *g, const pllm_gguf_tensor *t)
{
    FUZZ_CHECK(pllm_gguf_find_tensor(g, t->name) == t, "tensor '%s' not found by lookup", t->name);
    const uint8_t *d = t->data;
    FUZZ_CHECK(d >= g->map && d <= g->map + g->size && t->nbytes <= (size_t)(g->map + g->size - d),
               "tensor '%s' data out of bounds", t->name);
    FUZZ_CHECK(t->n_dims >= 1 && t->n_dims <= 4, "tensor '%s' n_dims %d", t->name, t->n_dims);
    size_t row = pllm_dtype_row_bytes(t->dtype, t->ne[0]);
    FUZZ_CHECK(row > 0 && t->nbytes % row == 0, "tensor '%s' nbytes %zu vs row %zu", t->name, t->nbytes, row);
    if (t->nbytes) {
        fuzz_touch(d, 1);
        fuzz_touch(d + t->nbytes - 1, 1);
    }
}

static void try_tokenizer(const pllm_gguf *g)
{
    pllm_tokenizer *tok = NULL;
    pllm_status st = pllm_tokenizer_from_gguf(&tok, g);
    FUZZ_ERR_HAS_MSG(st);
    fuzz_note("tokenizer", st);
    if (st != PLLM_OK) return;
    static const char text[] = "Hello <|im_start|>world\n\xff\xfe 123 \xe4\xb8\xad";
    pllm_tokens ids = {0};
    pllm_encode_opts eo = {.add_special = true, .parse_special = true};
    st = pllm_tokenizer_encode(tok, text, sizeof text - 1, &eo, &ids);
    FUZZ_ERR_HAS_MSG(st);
    int32_t nv = pllm_tokenizer_n_vocab(tok);
    for (size_t i = 0; i < ids.n; i++) FUZZ_CHECK(ids.ids[i] >= 0 && ids.ids[i] < nv, "id %d of %d", ids.ids[i], nv);
    pllm_buf out = {0};
    FUZZ_ERR_HAS_MSG(pllm_tokenizer_decode(tok, ids.ids, ids.n, false, &out));
    int32_t n_stop;
    const int32_t *stop = pllm_tokenizer_stop_ids(tok, &n_stop);
    for (int32_t i = 0; i < n_stop; i++) FUZZ_CHECK(stop[i] >= 0 && stop[i] < nv, "stop id %d of %d", stop[i], nv);
    pllm_buf_free(&out);
    pllm_tokens_free(&ids);
    pllm_tokenizer_free(tok);
}

static void try_model(const uint8_t *data, size_t size)
{
    if (ftruncate(g_memfd, 0) != 0 || pwrite(g_memfd, data, size, 0) != (ssize_t)size) abort();
    pllm_model *m = NULL;
    pllm_status st = pllm_model_load(&m, g_memfd_path);
    FUZZ_ERR_HAS_MSG(st);
    fuzz_note("model", st);
    if (st != PLLM_OK) return;
    const pllm_model_config *c = &m->cfg;
    FUZZ_CHECK(c->n_layer > 0 && c->n_embd > 0 && c->n_vocab > 0 && c->n_head > 0 && c->n_head_kv > 0,
               "bad config accepted");
    fuzz_touch(m->output_norm, (size_t)c->n_embd * sizeof(float));
    for (int32_t l = 0; l < c->n_layer; l++) {
        fuzz_touch(m->layers[l].attn_norm, (size_t)c->n_embd * sizeof(float));
        fuzz_touch(m->layers[l].ffn_norm, (size_t)c->n_embd * sizeof(float));
        const pllm_tensor *w = &m->layers[l].w_down;
        FUZZ_CHECK(w->n_rows == c->n_embd && w->n_cols == c->n_ff, "w_down shape");
        fuzz_touch((const uint8_t *)w->data + (size_t)(w->n_rows - 1) * w->row_bytes, w->row_bytes);
    }
    const pllm_tensor *e = &m->tok_embd;
    fuzz_touch((const uint8_t *)e->data + (size_t)(e->n_rows - 1) * e->row_bytes, e->row_bytes);
    FUZZ_CHECK(pllm_gguf_check_file(m->gguf) == PLLM_OK, "file changed: %s", pllm_errmsg());
    pllm_buf desc = {0};
    FUZZ_ERR_HAS_MSG(pllm_model_describe(m, &desc));
    pllm_buf_free(&desc);
    pllm_model_free(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    pllm_gguf *g = NULL;
    pllm_status st = pllm_gguf_parse(&g, data, size, "fuzz.gguf");
    FUZZ_ERR_HAS_MSG(st);
    fuzz_note("parse", st);
    if (st != PLLM_OK) {
        FUZZ_CHECK(g == NULL, "handle returned with an error");
        return 0;
    }
    for (int64_t i = 0; i < g->n_kv; i++) check_kv(g, &g->kv[i]);
    for (int64_t i = 0; i < g->n_tensors; i++) check_tensor(g, &g->tensors[i]);
    FUZZ_CHECK(pllm_gguf_find(g, "no.such.key") == NULL || g->n_kv > 0, "phantom key");
    try_tokenizer(g);
    pllm_gguf_close(g);
    try_model(data, size);
    return 0;
}
