// Code both the CPU and the CUDA kernels compile (nvcc sees it as device code too).
#pragma once

#if defined(__CUDACC__)
#define ATTNLAB_HOST_DEVICE __host__ __device__
// Always inlined: the small templates of dual.h are instantiated alike in the
// CPU kernels of every instruction set (kernels_impl.h), each compiled with its
// own -march; an out-of-line copy could be shared between them, and the linker
// might keep the widest set's copy for a CPU that cannot run it.
#define ATTNLAB_INLINE __host__ __device__ __forceinline__
#else
#define ATTNLAB_HOST_DEVICE
#define ATTNLAB_INLINE [[gnu::always_inline]] inline
#endif
