// The float kernels for -march=skylake-avx512, set in CMakeLists.txt.
#define ATTNLAB_KERNEL_ISA avx512
#include "autograd/cpu/kernels_impl.h"
