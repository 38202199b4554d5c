#include "autograd/cpu/memory.h"

#include <malloc.h>

#include <algorithm>

namespace attnlab {

void keep_freed_memory(size_t up_to) {
    const int bytes = static_cast<int>(std::min<size_t>(up_to, size_t(1) << 30));
    mallopt(M_MMAP_THRESHOLD, bytes);  // allocations below it come from the heap
    mallopt(M_TRIM_THRESHOLD, bytes);  // and that much freed heap memory is not handed back
}

}  // namespace attnlab
