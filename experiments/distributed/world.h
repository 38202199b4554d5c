// The processes of one run: a single process (the default, and every command
// but train and sweep), or the N ranks of an `mpirun -np N` launch of a build
// with MPI. Everything attnlab asks of MPI is a method here and only
// world_mpi.cpp includes mpi.h; a build without MPI compiles world_mpi_stub.cpp
// instead. A later NCCL path for GPU data parallelism is another World.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace attnlab {

// Thrown on a rank that learns that another rank failed (that rank says why,
// in one line): the command exits 2 without a message of its own.
struct OtherRankFailed : std::runtime_error {
    OtherRankFailed() : std::runtime_error("another rank failed") {}
};

class World {
public:
    virtual ~World() = default;
    virtual int rank() const { return 0; }
    virtual int size() const { return 1; }
    bool root() const { return rank() == 0; }

    // The elementwise sum over every rank, in place on every rank (one
    // MPI_Allreduce; MPI fixes no order of the additions).
    virtual void sum(std::vector<float>& values) const { (void)values; }
    virtual void sum(std::vector<double>& values) const { (void)values; }
    virtual int64_t max(int64_t value) const { return value; }
    virtual int64_t min(int64_t value) const { return value; }
    // Sends `mine` to `partner` and receives its values of the same length.
    virtual std::vector<float> exchange(int partner, const std::vector<float>& mine) const;
    virtual std::vector<double> exchange(int partner, const std::vector<double>& mine) const;
    // Every rank's values, concatenated in rank order (their lengths may differ).
    virtual std::vector<double> gather_all(const std::vector<double>& mine) const { return mine; }
    // Rank 0's text, on every rank.
    virtual std::string broadcast(const std::string& text) const { return text; }
    // Point to point messages of integers (the sweep's cell hand-out).
    virtual void send(int to, const std::vector<int64_t>& message) const;
    // A message from any rank if one has arrived, without waiting: (from, message).
    virtual std::optional<std::pair<int, std::vector<int64_t>>> poll() const { return std::nullopt; }
    virtual std::vector<int64_t> receive(int from) const;
    // Ends every rank with `code` (MPI_Abort); a single process just exits.
    [[noreturn]] virtual void abort(int code) const;

    // Whether every rank got through a phase: returns when none failed; else the
    // lowest failing rank rethrows its own exception (the one line said) and every
    // other rank throws OtherRankFailed. Every rank must call it.
    void agree(const std::exception_ptr& failure) const;
};

// The world of one process alone (the default of everything that takes a World).
const World& single_world();

// The number of ranks the launcher says this process is one of (Open MPI's
// OMPI_COMM_WORLD_SIZE, or PMI_SIZE as srun and MPICH set it); 1 without one.
int launched_ranks();
// This process's rank as the launcher says (OMPI_COMM_WORLD_RANK or PMI_RANK); 0 without one.
int launched_rank();
// The ranks on this machine, Open MPI's OMPI_COMM_WORLD_LOCAL_SIZE; 1 without it.
int launched_local_ranks();

// The world of this process: MPI's when a launcher started more than one rank,
// else a single process. A build without MPI launched as several ranks is an
// Error saying so (every rank would train alone and write the same files).
// MPI_Finalize runs when the returned world is destroyed.
std::unique_ptr<World> make_world();

// The MPI world (world_mpi.cpp), or the Error of a build without it (world_mpi_stub.cpp).
std::unique_ptr<World> make_mpi_world();

}  // namespace attnlab
