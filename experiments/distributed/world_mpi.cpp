// The MPI world: Open MPI (or any MPI) under the World interface. The only file
// that includes mpi.h. Every call is on the main thread (MPI_THREAD_FUNNELED:
// the trainer's worker threads never touch MPI).
#include <mpi.h>

#include <cstdlib>
#include <string>

#include "autograd/tensor.h"
#include "experiments/distributed/world.h"

namespace attnlab {

namespace {

constexpr int kMessageTag = 17;

void check(int code, const char* what) {
    if (code == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    MPI_Error_string(code, text, &length);
    throw Error(std::string("[world] ") + what + " failed: " + std::string(text, static_cast<size_t>(length)));
}

class MpiWorld final : public World {
public:
    MpiWorld() {
        int provided = 0;
        check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
        // Errors come back as codes (and then as an Error), not as MPI's own abort.
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
        MPI_Comm_size(MPI_COMM_WORLD, &size_);
    }
    ~MpiWorld() override { MPI_Finalize(); }

    int rank() const override { return rank_; }
    int size() const override { return size_; }

    void sum(std::vector<float>& values) const override {
        check(MPI_Allreduce(MPI_IN_PLACE, values.data(), static_cast<int>(values.size()), MPI_FLOAT, MPI_SUM,
                            MPI_COMM_WORLD), "MPI_Allreduce");
    }
    void sum(std::vector<double>& values) const override {
        check(MPI_Allreduce(MPI_IN_PLACE, values.data(), static_cast<int>(values.size()), MPI_DOUBLE, MPI_SUM,
                            MPI_COMM_WORLD), "MPI_Allreduce");
    }
    int64_t max(int64_t value) const override { return reduce(value, MPI_MAX); }
    int64_t min(int64_t value) const override { return reduce(value, MPI_MIN); }

    std::vector<float> exchange(int partner, const std::vector<float>& mine) const override {
        return swap_with(partner, mine, MPI_FLOAT);
    }
    std::vector<double> exchange(int partner, const std::vector<double>& mine) const override {
        return swap_with(partner, mine, MPI_DOUBLE);
    }

    std::vector<double> gather_all(const std::vector<double>& mine) const override {
        const int count = static_cast<int>(mine.size());
        std::vector<int> counts(static_cast<size_t>(size_));
        check(MPI_Allgather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, MPI_COMM_WORLD), "MPI_Allgather");
        std::vector<int> offsets(counts.size(), 0);
        for (size_t r = 1; r < counts.size(); ++r) offsets[r] = offsets[r - 1] + counts[r - 1];
        std::vector<double> all(static_cast<size_t>(offsets.back() + counts.back()));
        check(MPI_Allgatherv(mine.data(), count, MPI_DOUBLE, all.data(), counts.data(), offsets.data(), MPI_DOUBLE,
                             MPI_COMM_WORLD), "MPI_Allgatherv");
        return all;
    }

    std::string broadcast(const std::string& text) const override {
        int length = static_cast<int>(text.size());
        check(MPI_Bcast(&length, 1, MPI_INT, 0, MPI_COMM_WORLD), "MPI_Bcast");
        std::string out = root() ? text : std::string(static_cast<size_t>(length), '\0');
        check(MPI_Bcast(out.data(), length, MPI_CHAR, 0, MPI_COMM_WORLD), "MPI_Bcast");
        return out;
    }

    void send(int to, const std::vector<int64_t>& message) const override {
        check(MPI_Send(message.data(), static_cast<int>(message.size()), MPI_INT64_T, to, kMessageTag,
                       MPI_COMM_WORLD), "MPI_Send");
    }
    std::optional<std::pair<int, std::vector<int64_t>>> poll() const override {
        int arrived = 0;
        MPI_Status status;
        check(MPI_Iprobe(MPI_ANY_SOURCE, kMessageTag, MPI_COMM_WORLD, &arrived, &status), "MPI_Iprobe");
        if (!arrived) return std::nullopt;
        return std::make_pair(status.MPI_SOURCE, receive(status.MPI_SOURCE));
    }
    std::vector<int64_t> receive(int from) const override {
        MPI_Status status;
        check(MPI_Probe(from, kMessageTag, MPI_COMM_WORLD, &status), "MPI_Probe");
        int count = 0;
        MPI_Get_count(&status, MPI_INT64_T, &count);
        std::vector<int64_t> message(static_cast<size_t>(count));
        check(MPI_Recv(message.data(), count, MPI_INT64_T, from, kMessageTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
              "MPI_Recv");
        return message;
    }

    [[noreturn]] void abort(int code) const override {
        MPI_Abort(MPI_COMM_WORLD, code);
        std::exit(code);
    }

private:
    template <class T>
    std::vector<T> swap_with(int partner, const std::vector<T>& mine, MPI_Datatype type) const {
        std::vector<T> theirs(mine.size());
        const int count = static_cast<int>(mine.size());
        check(MPI_Sendrecv(mine.data(), count, type, partner, 0, theirs.data(), count, type, partner, 0, MPI_COMM_WORLD,
                           MPI_STATUS_IGNORE), "MPI_Sendrecv");
        return theirs;
    }
    int64_t reduce(int64_t value, MPI_Op op) const {
        int64_t out = 0;
        check(MPI_Allreduce(&value, &out, 1, MPI_INT64_T, op, MPI_COMM_WORLD), "MPI_Allreduce");
        return out;
    }

    int rank_ = 0;
    int size_ = 1;
};

}  // namespace

std::unique_ptr<World> make_mpi_world() { return std::make_unique<MpiWorld>(); }

}  // namespace attnlab
