/*
 * fuzz_hf_dir.c: whole Hugging Face model directories through pllm_model_load(): config.json,
 * generation_config.json, model.safetensors.index.json and safetensors shards together, so the
 * index's weight_map, the shard lookups and the shape checks against config.json are fuzzed
 * with the files that feed them.
 *
 * Input: the files' contents separated by the line "\n#pllm-file#\n" (in the dictionary), in
 * the order of FILES below; an empty or missing part means the file is absent. The directory is
 * a per-process scratch directory (tmpfs when /dev/shm exists), rewritten for every input.
 */
#include "tests/fuzz/fuzz_common.h"

#include "model/model.h"

#include <string.h>

static const char *const FILES[] = {
    "config.json", "generation_config.json", "model.safetensors.index.json", "model.safetensors",
    "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
};
static const char SEP[] = "\n#pllm-file#\n";

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_scratch_dir();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *dir = fuzz_scratch_dir();
    const uint8_t *p = data, *end = data + size;
    for (size_t i = 0; i < PLLM_ARRAY_LEN(FILES); i++) {
        const uint8_t *q = p < end ? memmem(p, (size_t)(end - p), SEP, sizeof SEP - 1) : NULL;
        size_t n = p < end ? (size_t)((q ? q : end) - p) : 0;
        if (n) fuzz_write_file(dir, FILES[i], p, n);
        else fuzz_remove_file(dir, FILES[i]);
        p = q ? q + sizeof SEP - 1 : end;
    }
    pllm_model *m = NULL;
    pllm_status st = pllm_model_load(&m, dir);
    FUZZ_ERR_HAS_MSG(st);
    fuzz_note("model", st);
    if (st != PLLM_OK) {
        FUZZ_CHECK(m == NULL, "model returned with an error");
        return 0;
    }
    const pllm_model_config *c = &m->cfg;
    FUZZ_CHECK(m->format == PLLM_MODEL_HF && c->n_layer > 0 && c->n_embd > 0, "config");
    fuzz_touch(m->output_norm, (size_t)c->n_embd * sizeof(float));
    for (int32_t l = 0; l < c->n_layer; l++) {
        const pllm_layer_weights *w = &m->layers[l];
        fuzz_touch(w->attn_norm, (size_t)c->n_embd * sizeof(float));
        fuzz_touch(w->ffn_norm, (size_t)c->n_embd * sizeof(float));
        const pllm_tensor *ts[] = {&w->wq, &w->wk, &w->wv, &w->wo, &w->w_gate, &w->w_up, &w->w_down};
        for (size_t k = 0; k < PLLM_ARRAY_LEN(ts); k++) {
            FUZZ_CHECK(ts[k]->row_bytes > 0 && ts[k]->n_rows > 0, "tensor %zu of layer %d", k, l);
            fuzz_touch((const uint8_t *)ts[k]->data + (size_t)(ts[k]->n_rows - 1) * ts[k]->row_bytes, ts[k]->row_bytes);
        }
    }
    const pllm_tensor *o = &m->output;
    fuzz_touch((const uint8_t *)o->data + (size_t)(o->n_rows - 1) * o->row_bytes, o->row_bytes);
    for (int32_t i = 0; i < m->gen.n_eos; i++)
        FUZZ_CHECK(m->gen.eos_ids[i] >= 0 && m->gen.eos_ids[i] < c->n_vocab, "eos %d", m->gen.eos_ids[i]);
    pllm_buf desc = {0};
    FUZZ_ERR_HAS_MSG(pllm_model_describe(m, &desc));
    pllm_buf_free(&desc);
    pllm_model_free(m);
    return 0;
}
