#include "cpu/kernels.h"

#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <cpuid.h>

/* F16C (CPUID.1:ECX bit 29): GCC's __builtin_cpu_supports knows it, clang 14's does not. */
static bool has_f16c(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
}
#endif

static const char *g_isa_names[PLLM_CPU_ISA_COUNT] = {"scalar", "avx2", "avx512", "avx512vnni"};

const char *pllm_cpu_isa_name(pllm_cpu_isa isa) { return (unsigned)isa < PLLM_CPU_ISA_COUNT ? g_isa_names[isa] : "?"; }

bool pllm_cpu_isa_available(pllm_cpu_isa isa)
{
    switch (isa) {
    case PLLM_CPU_ISA_SCALAR:
        return true;
#if defined(__x86_64__)
    case PLLM_CPU_ISA_AVX2:
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
    case PLLM_CPU_ISA_AVX512:
        return pllm_cpu_isa_available(PLLM_CPU_ISA_AVX2) && __builtin_cpu_supports("avx512f") &&
               __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
               __builtin_cpu_supports("avx512dq");
    case PLLM_CPU_ISA_AVX512VNNI:
        return pllm_cpu_isa_available(PLLM_CPU_ISA_AVX512) && __builtin_cpu_supports("avx512vnni");
#endif
    default:
        return false;
    }
}

const pllm_cpu_kernels *pllm_cpu_kernels_get(pllm_cpu_isa isa)
{
    if (!pllm_cpu_isa_available(isa)) return NULL;
    switch (isa) {
    case PLLM_CPU_ISA_SCALAR: return &pllm_cpu_kernels_scalar;
#if defined(__x86_64__)
    case PLLM_CPU_ISA_AVX2: return &pllm_cpu_kernels_avx2;
    case PLLM_CPU_ISA_AVX512: return &pllm_cpu_kernels_avx512;
    case PLLM_CPU_ISA_AVX512VNNI: return &pllm_cpu_kernels_avx512vnni;
#endif
    default: return NULL;
    }
}

pllm_cpu_isa pllm_cpu_isa_from_name(const char *name)
{
    for (int i = 0; i < PLLM_CPU_ISA_COUNT; i++)
        if (strcmp(name, g_isa_names[i]) == 0) return (pllm_cpu_isa)i;
    return PLLM_CPU_ISA_COUNT;
}

const pllm_cpu_kernels *pllm_cpu_kernels_best_upto(pllm_cpu_isa cap)
{
    if ((unsigned)cap >= PLLM_CPU_ISA_COUNT) cap = PLLM_CPU_ISA_COUNT - 1;
    for (int i = cap; i > 0; i--) {
        const pllm_cpu_kernels *k = pllm_cpu_kernels_get((pllm_cpu_isa)i);
        if (k) return k;
    }
    return &pllm_cpu_kernels_scalar;
}

const pllm_cpu_kernels *pllm_cpu_kernels_best(void)
{
    return pllm_cpu_kernels_best_upto(PLLM_CPU_ISA_COUNT - 1);
}
