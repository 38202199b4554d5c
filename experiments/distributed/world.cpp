// The single-process world, the launcher's rank count, and the choice between them.
#include "experiments/distributed/world.h"

#include <cstdlib>
#include <initializer_list>
#include <string>

#include "autograd/tensor.h"

namespace attnlab {

namespace {

[[noreturn]] void single_process(const char* what) {
    fail("world", std::string(what) + " needs other ranks, and this is a single process");
}

}  // namespace

std::vector<float> World::exchange(int, const std::vector<float>&) const { single_process("exchange"); }
std::vector<double> World::exchange(int, const std::vector<double>&) const { single_process("exchange"); }
void World::send(int, const std::vector<int64_t>&) const { single_process("send"); }
std::vector<int64_t> World::receive(int) const { single_process("receive"); }
void World::abort(int code) const { std::exit(code); }

void World::agree(const std::exception_ptr& failure) const {
    const int first = static_cast<int>(min(failure ? rank() : size()));
    if (first == size()) return;
    if (first == rank()) std::rethrow_exception(failure);
    throw OtherRankFailed();
}

const World& single_world() {
    static const World alone;
    return alone;
}

namespace {

// The first of the variables that holds a number >= `least`, else `otherwise`.
int launcher_number(std::initializer_list<const char*> names, long least, int otherwise) {
    for (const char* name : names) {
        const char* value = std::getenv(name);
        if (!value || !*value) continue;
        char* end = nullptr;
        const long n = std::strtol(value, &end, 10);
        if (*end == '\0' && n >= least && n < (1L << 30)) return static_cast<int>(n);
    }
    return otherwise;
}

}  // namespace

int launched_ranks() { return launcher_number({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}, 1, 1); }
int launched_rank() { return launcher_number({"OMPI_COMM_WORLD_RANK", "PMI_RANK"}, 0, 0); }
int launched_local_ranks() { return launcher_number({"OMPI_COMM_WORLD_LOCAL_SIZE"}, 1, 1); }

std::unique_ptr<World> make_world() {
    const int launched = launched_ranks();
    if (launched == 1) return std::make_unique<World>();
    std::unique_ptr<World> world = make_mpi_world();
    if (world->size() != launched)  // e.g. srun without MPI support: each process would train alone
        throw Error("[world] launched as " + std::to_string(launched) + " ranks, but MPI sees " +
                    std::to_string(world->size()) + "; start attnlab with mpirun (or srun --mpi=pmix)");
    return world;
}

}  // namespace attnlab
