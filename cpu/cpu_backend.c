#include "cpu/cpu_backend.h"

void pllm_cpu_params_defaults(pllm_cpu_params *p)
{
    p->n_threads = 0;
    p->kv_dtype = PLLM_DTYPE_F32;
}
