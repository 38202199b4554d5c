#include "autograd/cpu/memory.h"

#include <malloc.h>

namespace attnlab {

void keep_freed_memory() {
    mallopt(M_MMAP_THRESHOLD, 1 << 30);  // allocations below 1 GiB come from the heap
    mallopt(M_TRIM_THRESHOLD, 1 << 30);  // and freed heap memory is not handed back
}

}  // namespace attnlab
