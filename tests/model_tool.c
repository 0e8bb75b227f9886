/*
 * model_tool: the model loader and the reference dequantizer, driven by the Python tests.
 *
 *   model_tool load PATH               load a GGUF file or an HF directory; print the model's
 *                                      description (pllm_model_describe) on line 1 and, on line 2,
 *                                      the greedy defaults with the generation defaults applied;
 *                                      or "ERROR <status>: <message>" (exit 1)
 *   model_tool dequant DTYPE N IN OUT  dequantize N elements of DTYPE (a pllm dtype name) from the
 *                                      raw bytes of IN into float32 OUT (pllm_dequantize_row)
 *   model_tool supported DTYPE         exit 0 when pllm_dtype_supported(DTYPE)
 *   model_tool recheck PATH            load, print "loaded", wait for a line on stdin (the test
 *                                      changes a file meanwhile), then print the outcome of
 *                                      pllm_model_check_files: "OK" or "ERROR <status>: <message>"
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/dtype.h"
#include "model/model.h"
#include "model/sampling.h"

static int dtype_by_name(const char *s, pllm_dtype *out)
{
    for (int d = 0; d < PLLM_DTYPE_COUNT; d++)
        if (strcmp(pllm_dtype_name((pllm_dtype)d), s) == 0) {
            *out = (pllm_dtype)d;
            return 0;
        }
    return -1;
}

static int cmd_load(const char *path)
{
    pllm_model *m = NULL;
    pllm_status st = pllm_model_load(&m, path);
    if (st != PLLM_OK) {
        printf("ERROR %s: %s\n", pllm_status_str(st), pllm_errmsg());
        return 1;
    }
    pllm_buf b = {0};
    st = pllm_model_describe(m, &b);
    if (st != PLLM_OK) {
        printf("ERROR %s: %s\n", pllm_status_str(st), pllm_errmsg());
        pllm_model_free(m);
        return 1;
    }
    pllm_sampling_params p;
    pllm_sampling_defaults(&p);
    int n = pllm_model_apply_generation_defaults(m, &p);
    printf("%s\n{\"n_set\": %d, \"temperature\": %.9g, \"top_k\": %d, \"top_p\": %.9g, \"min_p\": "
           "%.9g, \"repetition_penalty\": %.9g}\n",
           b.s, n, (double)p.temperature, p.top_k, (double)p.top_p, (double)p.min_p,
           (double)p.repetition_penalty);
    pllm_buf_free(&b);
    pllm_model_free(m);
    return 0;
}

static int cmd_dequant(const char *dtname, const char *ns, const char *in, const char *outp)
{
    pllm_dtype dt;
    if (dtype_by_name(dtname, &dt)) {
        fprintf(stderr, "model_tool: unknown dtype %s\n", dtname);
        return 2;
    }
    long long n = atoll(ns);
    size_t bytes = pllm_dtype_row_bytes(dt, n);
    if (n <= 0 || bytes == 0) {
        fprintf(stderr, "model_tool: %lld elements is not a whole number of %s blocks\n", n,
                dtname);
        return 2;
    }
    FILE *f = fopen(in, "rb");
    void *src = malloc(bytes);
    float *dst = malloc(sizeof(float) * (size_t)n);
    if (!f || !src || !dst || fread(src, 1, bytes, f) != bytes) {
        fprintf(stderr, "model_tool: cannot read %zu bytes from %s\n", bytes, in);
        return 2;
    }
    fclose(f);
    pllm_dequantize_row(dst, src, dt, n);
    f = fopen(outp, "wb");
    if (!f || fwrite(dst, sizeof(float), (size_t)n, f) != (size_t)n) {
        fprintf(stderr, "model_tool: cannot write %s\n", outp);
        return 2;
    }
    fclose(f);
    free(src);
    free(dst);
    return 0;
}

static int cmd_recheck(const char *path)
{
    pllm_model *m = NULL;
    pllm_status st = pllm_model_load(&m, path);
    if (st != PLLM_OK) {
        printf("ERROR %s: %s\n", pllm_status_str(st), pllm_errmsg());
        return 1;
    }
    printf("loaded\n");
    fflush(stdout);
    char line[64];
    if (!fgets(line, sizeof line, stdin)) line[0] = 0;
    st = pllm_model_check_files(m);
    if (st == PLLM_OK)
        printf("OK\n");
    else
        printf("ERROR %s: %s\n", pllm_status_str(st), pllm_errmsg());
    pllm_model_free(m);
    return st == PLLM_OK ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "recheck") == 0) return cmd_recheck(argv[2]);
    if (argc == 3 && strcmp(argv[1], "load") == 0) return cmd_load(argv[2]);
    if (argc == 6 && strcmp(argv[1], "dequant") == 0)
        return cmd_dequant(argv[2], argv[3], argv[4], argv[5]);
    if (argc == 3 && strcmp(argv[1], "supported") == 0) {
        pllm_dtype dt;
        return dtype_by_name(argv[2], &dt) == 0 && pllm_dtype_supported(dt) ? 0 : 1;
    }
    fprintf(
        stderr,
        "usage: model_tool load PATH | dequant DTYPE N IN OUT | supported DTYPE | recheck PATH\n");
    return 2;
}
