/*
 * device_impl.h: what kernel launchers (the .cu files) need from the device context, beyond
 * device.h: the native stream to launch on, and the launch-error check. C++ only.
 */
#pragma once

#include "cuda/device.h"

#include <cuda_runtime_api.h>

/* The context's stream (a cudaStream_t). */
cudaStream_t pllm_cuda_dev_stream(pllm_cuda_dev *dev);

/* After PLLM_LAUNCH: turn cudaGetLastError() into a status naming the kernel, file and line. */
pllm_status pllm_cuda_check_launch(const char *kernel, const char *file, int line);
#define PLLM_CUDA_LAUNCHED(kernel) pllm_cuda_check_launch(kernel, __FILE__, __LINE__)
