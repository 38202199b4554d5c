// The float kernels for -march=haswell (AVX2, FMA), set in CMakeLists.txt.
#define ATTNLAB_KERNEL_ISA avx2
#include "autograd/cpu/kernels_impl.h"
