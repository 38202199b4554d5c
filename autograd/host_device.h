// Code both the CPU and the CUDA kernels compile (nvcc sees it as device code too).
#pragma once

#if defined(__CUDACC__)
#define ATTNLAB_HOST_DEVICE __host__ __device__
#else
#define ATTNLAB_HOST_DEVICE
#endif
