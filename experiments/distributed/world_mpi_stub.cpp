// Stands in for world_mpi.cpp in a build without MPI (CMake picks one of the two).
#include "autograd/tensor.h"
#include "experiments/distributed/world.h"

namespace attnlab {

std::unique_ptr<World> make_mpi_world() {
    throw Error("[world] launched as " + std::to_string(launched_ranks()) +
                " ranks, but this attnlab was built without MPI: install libopenmpi-dev and openmpi-bin "
                "(scripts/setup.sh does) and build again, or run it without mpirun");
}

}  // namespace attnlab
