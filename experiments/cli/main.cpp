#include "autograd/cpu/memory.h"
#include "experiments/cli/commands.h"

int main(int argc, char** argv) {
    attnlab::keep_freed_memory();
    return attnlab::run_cli(argc, argv);
}
