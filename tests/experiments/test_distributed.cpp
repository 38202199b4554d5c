// The parts of data-parallel training that need no second process: a batch's
// rows, the flat gradient buffer, the launcher's rank count, the single world.
// The ranks themselves are tested under mpirun (tests/cli/test_mpi.py).
#include <gtest/gtest.h>

#include <cstdlib>

#include "autograd/ops.h"
#include "autograd/rng.h"
#include "data/tasks.h"
#include "experiments/distributed/gradients.h"
#include "experiments/distributed/world.h"
#include "layers/basic.h"

namespace attnlab {
namespace {

TEST(Distributed, BatchRowsKeepTheWidthAndTheRows) {
    TaskConfig task;
    task.name = "translate";  // with a source side too
    TaskGenerator gen(task, 3, 0);
    const Batch batch = gen.next(6);
    const Batch part = batch_rows(batch, 2, 5);
    const size_t T = batch.targets.shape[1], S = batch.src.shape[1];
    ASSERT_EQ(part.targets.shape, (Shape{3, T}));
    ASSERT_EQ(part.src.shape, (Shape{3, S}));
    for (size_t r = 0; r < 3; ++r) {
        EXPECT_EQ(part.lengths[r], batch.lengths[r + 2]);
        EXPECT_EQ(part.src_lengths[r], batch.src_lengths[r + 2]);
        for (size_t t = 0; t < T; ++t) {
            EXPECT_EQ(part.inputs.values[r * T + t], batch.inputs.values[(r + 2) * T + t]);
            EXPECT_EQ(part.targets.values[r * T + t], batch.targets.values[(r + 2) * T + t]);
            EXPECT_EQ(part.loss_mask.values[r * T + t], batch.loss_mask.values[(r + 2) * T + t]);
        }
    }
    EXPECT_EQ(counted_positions(batch_rows(batch, 0, 3)) + counted_positions(batch_rows(batch, 3, 6)),
              counted_positions(batch));
    EXPECT_THROW(batch_rows(batch, 4, 7), Error);
}

TEST(Distributed, GradientsRoundTripThroughTheFlatBuffer) {
    Rng init(1);
    Linear used(3, 2, true, init), unused(2, 2, true, init);
    NamedTensors params = used.named_parameters();
    for (const auto& p : unused.named_parameters()) params.emplace_back("unused." + p.first, p.second);
    const Tensor x = Tensor::from_values({1, 2, 3, -1, 0.5, 2}, {2, 3});
    sum(used.forward(x)).backward();
    const std::vector<double> weight_grad = params[0].second.grad().values();

    std::vector<float> flat = pack_gradients(params);
    ASSERT_EQ(flat.size(), 6 + 2 + 4 + 2 + params.size());
    EXPECT_EQ(flat[flat.size() - 4], 1.0f);  // used.weight has a gradient
    EXPECT_EQ(flat.back(), 0.0f);            // unused.bias has none
    add_into(flat, flat);                    // two ranks that computed the same
    for (const auto& p : params) Tensor(p.second).zero_grad();
    unpack_gradients(params, flat);
    const std::vector<double> doubled = params[0].second.grad().values();
    for (size_t i = 0; i < weight_grad.size(); ++i) EXPECT_EQ(doubled[i], 2 * weight_grad[i]);
    EXPECT_FALSE(params[2].second.grad().defined()) << "a parameter no rank reached stays without a gradient";
    flat.pop_back();
    EXPECT_THROW(unpack_gradients(params, flat), Error);
}

TEST(Distributed, LaunchedRanksReadTheLauncher) {
    unsetenv("OMPI_COMM_WORLD_SIZE");
    unsetenv("PMI_SIZE");
    EXPECT_EQ(launched_ranks(), 1);
    setenv("PMI_SIZE", "4", 1);
    setenv("PMI_RANK", "3", 1);
    EXPECT_EQ(launched_ranks(), 4);
    EXPECT_EQ(launched_rank(), 3);
    setenv("OMPI_COMM_WORLD_SIZE", "2", 1);  // Open MPI's comes first
    EXPECT_EQ(launched_ranks(), 2);
    setenv("OMPI_COMM_WORLD_SIZE", "2x", 1);  // not a number: the next variable
    EXPECT_EQ(launched_ranks(), 4);
    unsetenv("OMPI_COMM_WORLD_SIZE");
    unsetenv("PMI_SIZE");
    unsetenv("PMI_RANK");
    EXPECT_EQ(launched_rank(), 0);
}

TEST(Distributed, OneProcessIsAWorldOfOne) {
    const World& world = single_world();
    EXPECT_EQ(world.size(), 1);
    EXPECT_TRUE(world.root());
    std::vector<float> values{1, 2};
    world.sum(values);
    EXPECT_EQ(values, (std::vector<float>{1, 2}));
    EXPECT_EQ(world.gather_all({1.0, 2.0}), (std::vector<double>{1.0, 2.0}));
    EXPECT_NO_THROW(world.agree(nullptr));
    const auto failure = std::make_exception_ptr(Error("[x] mine"));
    EXPECT_THROW(world.agree(failure), Error) << "the one failing rank rethrows its own";
    EXPECT_THROW(world.exchange(1, values), Error);
}

}  // namespace
}  // namespace attnlab
