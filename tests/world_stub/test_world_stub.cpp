// A build without MPI (ATTNLAB_MPI=OFF, or no MPI found) compiles
// experiments/distributed/world_mpi_stub.cpp in place of world_mpi.cpp; this
// binary links that stub (its make_mpi_world comes first, so the archive's is
// never pulled in) and checks what such a build says when a launcher starts it
// as several ranks: one Error, naming the rank count and what to install.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "autograd/tensor.h"
#include "experiments/distributed/world.h"

namespace attnlab {
namespace {

TEST(WorldWithoutMpi, LaunchedAsRanksSaysSo) {
    setenv("OMPI_COMM_WORLD_SIZE", "3", 1);
    try {
        make_world();
        FAIL() << "a build without MPI launched as 3 ranks must refuse";
    } catch (const Error& e) {
        const std::string message = e.what();
        EXPECT_NE(message.find("launched as 3 ranks"), std::string::npos) << message;
        EXPECT_NE(message.find("built without MPI"), std::string::npos) << message;
        EXPECT_NE(message.find("libopenmpi-dev"), std::string::npos) << message;
    }
    unsetenv("OMPI_COMM_WORLD_SIZE");
    EXPECT_EQ(make_world()->size(), 1) << "without a launcher it runs as one process";
}

}  // namespace
}  // namespace attnlab
