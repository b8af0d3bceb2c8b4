// Wrap your own model: a user-defined Module (a residual-MLP regressor) made into sharded units
// by ShardedModel with a custom wrap type, trained with ZeRO-3 and AdamW on 2 ranks that are
// threads of this process (the local backend). Rank 0 prints the loss as it falls.
//
// The model code knows nothing about sharding: it declares parameters and computes a forward.
// ShardedModel turns every module whose type name is in `wrap_types` into a unit (its
// parameters flattened, sharded over the ranks, gathered just in time for its forward and
// backward); the root takes whatever no unit claimed. Copy this file and replace the model and
// the data.
//
// Usage: zs-example-custom-model [steps=300] [ranks=2] [stage=3]
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "comm/local/local_backend.h"
#include "models/layers.h"
#include "ops/cpu/gemm.h"
#include "ops/elementwise.h"
#include "ops/gelu.h"
#include "optim/adamw.h"
#include "runtime/allocator.h"
#include "runtime/autograd.h"
#include "runtime/logging.h"
#include "runtime/rng.h"
#include "sharding/sharded_model.h"

using zs::Tensor;
using zs::models::Linear;

// ---- The model: the part you write. ~30 lines. ----

// x + fc2(gelu(fc1(x))). Its type name, "ResidualMlp", is what the wrap policy matches below.
class ResidualMlp : public zs::models::Module {
 public:
  explicit ResidualMlp(int64_t width)
      : Module("ResidualMlp"),
        fc1_(emplace<Linear>("fc1", width, 4 * width, true, 1.0f / std::sqrt(width))),
        fc2_(emplace<Linear>("fc2", 4 * width, width, true, 0.5f / std::sqrt(4 * width))) {}

 protected:
  Tensor forward(const Tensor& x) override { return zs::ops::add(x, fc2_(zs::ops::gelu(fc1_(x)))); }

 private:
  Linear& fc1_;
  Linear& fc2_;
};

// inputs [B, in] -> one prediction per row [B, 1]. Parameters are named by their path from the
// root ("blocks.1.fc2.weight"); the names key the initial values, so every rank agrees.
class Regressor : public zs::models::Module {
 public:
  Regressor(int64_t inputs, int64_t width, int depth)
      : Module("Regressor"),
        in_(emplace<Linear>("in", inputs, width, true, 1.0f / std::sqrt(inputs))),
        blocks_(emplace<zs::models::Sequential>("blocks")),
        out_(emplace<Linear>("out", width, 1)) {
    for (int i = 0; i < depth; ++i) blocks_.append(std::make_unique<ResidualMlp>(width));
  }

 protected:
  // Everything that reads a parameter of the root ("in", "out") runs inside the root's forward:
  // under stage 3 the root's parameters are gathered exactly for the duration of this call.
  Tensor forward(const Tensor& x) override { return out_(blocks_(in_(x))); }

 private:
  Linear& in_;
  zs::models::Sequential& blocks_;
  Linear& out_;
};

// ---- The data: a smooth nonlinear function of 8 inputs, as a stand-in for yours. ----

constexpr int64_t kInputs = 8;
constexpr int64_t kGlobalBatch = 64;

// Example i of an endless synthetic stream: x uniform in [-1, 1]^8, y = f(x).
void example(uint64_t i, float* x, float* y) {
  for (int64_t j = 0; j < kInputs; ++j) {
    x[j] = zs::uniform(zs::rng_key(1, "inputs"), i * kInputs + j, -1.0f, 1.0f);
  }
  *y = std::sin(3 * x[0]) * x[1] + x[2] * x[2] - x[3] * x[4] + 0.5f * std::cos(2 * x[5] + x[6]);
}

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 300;
  const int ranks = argc > 2 ? std::atoi(argv[2]) : 2;
  const int stage = argc > 3 ? std::atoi(argv[3]) : 3;
  if (steps < 1 || ranks < 1 || kGlobalBatch % ranks != 0 || stage < 0 || stage > 3) {
    std::fprintf(stderr, "usage: %s [steps >= 1] [ranks dividing %lld] [stage 0..3]\n", argv[0],
                 static_cast<long long>(kGlobalBatch));
    return 2;
  }
  float first_loss = 0, last_loss = 0;
  try {
    // One call per rank, each on its own thread with its own Communicator. Under mpirun the
    // same body would run once per process.
    zs::comm::run_local_ranks(ranks, [&](zs::comm::Communicator& comm) {
      zs::ops::cpu::set_intra_op_threads(1);  // ranks share the cores
      zs::CpuAllocator allocator(nullptr);
      Regressor model(kInputs, 64, 3);  // every rank builds the same (unallocated) model

      // ---- Sharding: the part that is zeroshard's. ----
      zs::sharding::ShardingConfig sharding;
      sharding.stage = stage;                 // 0 = DDP, 1, 2, 3 = full sharding
      sharding.wrap_types = {"ResidualMlp"};  // each block is a unit; the root takes in/out
      sharding.seed = 7;                      // initial values: same on every rank and stage
      zs::sharding::ShardedModel sharded(model, comm, allocator, sharding);
      // The optimizer sees only this rank's shard of each unit (master weights + gradients).
      zs::optim::AdamWOptions adam;
      adam.weight_decay = 0.01f;
      zs::optim::AdamW optimizer(sharded.local_shards(), adam);
      if (comm.rank() == 0) {
        ZS_LOG_INFO("regressor: {} parameters in {} units, ZeRO stage {} on {} ranks",
                    model.num_parameters(), sharded.units().size(), stage, ranks);
      }

      const int64_t local_batch = kGlobalBatch / ranks;
      Tensor x = Tensor::empty({local_batch, kInputs}, zs::DType::kF32, allocator, "x");
      Tensor y = Tensor::empty({local_batch, 1}, zs::DType::kF32, allocator, "y");
      Tensor loss_avg = Tensor::empty({1}, zs::DType::kF32, allocator, "loss_avg");
      for (int step = 0; step < steps; ++step) {
        // Each rank takes its own contiguous part of the step's global batch.
        for (int64_t b = 0; b < local_batch; ++b) {
          const uint64_t i =
              static_cast<uint64_t>(step * kGlobalBatch + comm.rank() * local_batch + b);
          example(i, x.data<float>() + b * kInputs, y.data<float>() + b);
        }
        // Mean squared error: Σ (prediction − y)² / batch, with the ops' autograd.
        Tensor error = zs::ops::add(model(x), zs::ops::scale(y, -1.0f));
        Tensor loss = zs::ops::scale(zs::ops::sum_of_squares(error), 1.0f / local_batch);

        zs::backward(loss);         // gathers units back as backward reaches them
        sharded.finish_backward();  // gradients reduce-scattered (averaged over ranks)
        optimizer.step(step < 20 ? 3e-3f * (step + 1) / 20 : 3e-3f);
        sharded.after_step();

        loss_avg.fill(loss.item());
        comm.all_reduce(loss_avg, zs::comm::ReduceOp::kAvg)->wait();  // for printing only
        if (comm.rank() == 0) {
          last_loss = loss_avg.item();
          if (step == 0) first_loss = last_loss;
          if (step % 25 == 0 || step == steps - 1) {
            ZS_LOG_INFO("step {:4d}  mse {:.5f}", step, last_loss);
          }
        }
      }
    });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  std::printf("mse %.5f -> %.5f over %d steps (fresh examples every step)\n", first_loss, last_loss,
              steps);
  if (!(last_loss < 0.5f * first_loss)) {
    std::fprintf(stderr, "error: the loss did not fall by half; the run is not learning\n");
    return 1;
  }
  // The last line, for scripts and the test that runs this example: the loss fell by half.
  std::printf("loss fell: %.5f -> %.5f\n", first_loss, last_loss);
  return 0;
}
