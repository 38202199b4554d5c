#include "autograd/cpu/blas.h"
#include "autograd/cpu/memory.h"
#include "experiments/cli/commands.h"

int main(int argc, char** argv) {
    attnlab::keep_freed_memory();
    attnlab::stop_blas_workers();  // attnlab's own pool does the threading
    return attnlab::run_cli(argc, argv);
}
