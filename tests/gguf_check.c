/*
 * gguf_check: load a GGUF file the way pllm does and report the outcome (a test tool).
 *   gguf_check FILE          load as a model; print "OK <config>" or "ERROR <status>: <message>"
 *   gguf_check --dump FILE   parse only; print every metadata entry as one JSON line
 * Exit 0 on success, 1 on a reported error.
 */
#include "model/gguf.h"
#include "model/model.h"

#include <stdio.h>
#include <string.h>

static void print_json_str(const char *s, size_t n)
{
    putchar('"');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c < 0x20) printf("\\u%04x", c);
        else putchar(c);
    }
    putchar('"');
}

static void print_value(const pllm_gguf_kv *kv)
{
    switch (kv->type) {
    case PLLM_GGUF_STRING: print_json_str(kv->v.str.s, kv->v.str.len); break;
    case PLLM_GGUF_F32: case PLLM_GGUF_F64: printf("%.17g", kv->v.f); break;
    case PLLM_GGUF_I8: case PLLM_GGUF_I16: case PLLM_GGUF_I32: case PLLM_GGUF_I64: printf("%lld", (long long)kv->v.i); break;
    case PLLM_GGUF_BOOL: printf("%s", kv->v.u ? "true" : "false"); break;
    case PLLM_GGUF_ARRAY:
        putchar('[');
        for (uint64_t i = 0; i < kv->arr_n; i++) {
            if (i) putchar(',');
            if (kv->arr_type == PLLM_GGUF_STRING) {
                pllm_gguf_str s = pllm_gguf_arr_str(kv, i);
                print_json_str(s.s, s.len);
            } else if (kv->arr_type == PLLM_GGUF_F32 || kv->arr_type == PLLM_GGUF_F64) {
                printf("%.17g", pllm_gguf_arr_float(kv, i));
            } else if (kv->arr_type == PLLM_GGUF_ARRAY) {
                printf("null"); /* nested arrays are validated, not exposed */
            } else {
                printf("%lld", (long long)pllm_gguf_arr_int(kv, i));
            }
        }
        putchar(']');
        break;
    default: printf("%llu", (unsigned long long)kv->v.u); break;
    }
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--dump") == 0) {
        pllm_gguf *g;
        pllm_status st = pllm_gguf_open(&g, argv[2]);
        if (st != PLLM_OK) {
            printf("ERROR %s: %s\n", pllm_status_str(st), pllm_errmsg());
            return 1;
        }
        for (int64_t i = 0; i < g->n_kv; i++) {
            const pllm_gguf_kv *kv = &g->kv[i];
            printf("{\"key\": ");
            print_json_str(kv->key, strlen(kv->key));
            printf(", \"type\": \"%s\"", pllm_gguf_type_name(kv->type));
            if (kv->type == PLLM_GGUF_ARRAY) printf(", \"elem\": \"%s\"", pllm_gguf_type_name(kv->arr_type));
            printf(", \"value\": ");
            print_value(kv);
            printf("}\n");
        }
        for (int64_t i = 0; i < g->n_tensors; i++) {
            const pllm_gguf_tensor *t = &g->tensors[i];
            printf("{\"tensor\": \"%s\", \"type\": \"%s\", \"ne\": [%lld, %lld, %lld, %lld], \"nbytes\": %zu}\n", t->name,
                   pllm_dtype_name(t->dtype), (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                   (long long)t->ne[3], t->nbytes);
        }
        pllm_gguf_close(g);
        return 0;
    }
    if (argc != 2) {
        fprintf(stderr, "usage: gguf_check [--dump] FILE\n");
        return 2;
    }
    pllm_model *m;
    pllm_status st = pllm_model_load(&m, argv[1]);
    if (st != PLLM_OK) {
        printf("ERROR %s: %s\n", pllm_status_str(st), pllm_errmsg());
        return 1;
    }
    const pllm_model_config *c = &m->cfg;
    printf("OK arch=%s vocab=%d embd=%d layers=%d heads=%d kv_heads=%d head_dim=%d ff=%d ctx=%d tied=%d theta=%g eps=%g\n",
           pllm_arch_name(c->arch), c->n_vocab, c->n_embd, c->n_layer, c->n_head, c->n_head_kv, c->head_dim, c->n_ff,
           c->n_ctx_train, c->tied_embeddings, c->rope_theta, c->norm_eps);
    pllm_model_free(m);
    return 0;
}
