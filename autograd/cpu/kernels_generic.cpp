// The float kernels for plain x86-64 (SSE2; fused multiply-adds through libm's
// fmaf, exact, so that the results are the wider sets' bit for bit).
#define ATTNLAB_KERNEL_ISA generic
#include "autograd/cpu/kernels_impl.h"
