// The float kernels for plain x86-64 (SSE2).
#define ATTNLAB_KERNEL_ISA base
#include "autograd/cpu/kernels_impl.h"
