// The tape: recording, reverse traversal, accumulation into grad buffers that are views,
// release of saved activations during backward, per-thread tapes and grad mode.
#include "runtime/autograd.h"

#include <gtest/gtest.h>

#include <thread>

#include "runtime/allocator.h"

namespace zs {
namespace {

// y = alpha * x, recorded by hand (the runtime has no ops of its own).
Tensor scaled(const Tensor& x, float alpha, Tensor saved = Tensor()) {
  Tensor y =
      Tensor::empty(x.shape(), DType::kF32, x.allocator(), MemoryCategory::kActivations, "scaled");
  std::vector<float> v = x.to_vector();
  for (float& e : v) e *= alpha;
  y.copy_from(v);
  if (needs_grad({&x})) {
    record_op("scaled", {&x}, {&y}, [alpha, saved](BackwardContext& ctx) {
      std::vector<float> g = ctx.grad_output(0).to_vector();
      for (float& e : g) e *= alpha;
      GradSink sink = ctx.grad_input(0);
      if (!sink) return;
      if (sink.accumulate) {
        Tensor tmp = Tensor::empty_like(sink.buffer);
        tmp.copy_from(g);
        accumulate_into(sink.buffer, tmp);
      } else {
        sink.buffer.copy_from(g);
      }
    });
  }
  return y;
}

// Σ x as a [1] tensor.
Tensor summed(const Tensor& x) {
  Tensor y = Tensor::empty({1}, DType::kF32, x.allocator(), MemoryCategory::kActivations, "sum");
  float s = 0;
  for (float e : x.to_vector()) s += e;
  y.fill(s);
  if (needs_grad({&x})) {
    record_op("sum", {&x}, {&y}, [](BackwardContext& ctx) {
      const float g = ctx.grad_output(0).item();
      GradSink sink = ctx.grad_input(0);
      std::vector<float> values =
          sink.accumulate ? sink.buffer.to_vector() : std::vector<float>(sink.buffer.numel(), 0);
      for (float& e : values) e += g;
      sink.buffer.copy_from(values);
    });
  }
  return y;
}

TEST(Autograd, ChainRuleAndLeafGradient) {
  CpuAllocator allocator(nullptr);
  Tensor x = Tensor::zeros({3}, DType::kF32, allocator, "x");
  x.copy_from({1, 2, 3});
  x.set_requires_grad(true);
  Tensor loss = summed(scaled(scaled(x, 2.0f), 5.0f));
  EXPECT_EQ(current_tape().size(), 3u);
  EXPECT_FLOAT_EQ(loss.item(), 60.0f);
  backward(loss);
  EXPECT_EQ(current_tape().size(), 0u);
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{10, 10, 10}));
  // A second backward accumulates into the existing leaf gradient.
  backward(summed(scaled(x, 1.0f)));
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{11, 11, 11}));
}

TEST(Autograd, GradientsAccumulateIntoFlatBufferViews) {
  MemoryTracker tracker;
  CpuAllocator allocator(&tracker);
  Tensor flat_grad = Tensor::zeros({10}, DType::kF32, allocator, "flat grad");
  Tensor a = Tensor::zeros({4}, DType::kF32, allocator, "a").set_requires_grad(true);
  Tensor b = Tensor::zeros({6}, DType::kF32, allocator, "b").set_requires_grad(true);
  a.set_grad(flat_grad.slice(0, {4}));
  b.set_grad(flat_grad.slice(4, {6}));
  const size_t grads_before = tracker.current(MemoryCategory::kGradients);
  backward(summed(scaled(a, 3.0f)));
  backward(summed(scaled(b, -1.0f)));
  backward(summed(scaled(a, 1.0f)));
  EXPECT_EQ(flat_grad.to_vector(), (std::vector<float>{4, 4, 4, 4, -1, -1, -1, -1, -1, -1}));
  // No gradient memory was allocated: everything went into the flat buffer.
  EXPECT_EQ(tracker.peak(MemoryCategory::kGradients), grads_before);
  EXPECT_THROW(a.set_grad(flat_grad.slice(0, {5})), InvalidArgument);
}

TEST(Autograd, EarlierNodesSeeLaterSavedTensorsFreed) {
  MemoryTracker tracker;
  CpuAllocator allocator(&tracker);
  Tensor x = Tensor::zeros({4}, DType::kF32, allocator, "x").set_requires_grad(true);
  size_t seen = 12345;
  // Node 1 (runs last in backward) measures activations.
  Tensor h = Tensor::zeros({4}, DType::kF32, allocator, MemoryCategory::kOther, "h");
  record_op("measure", {&x}, {&h},
            [&](BackwardContext&) { seen = tracker.current(MemoryCategory::kActivations); });
  // Node 2 saves an 8 KB activation that nothing else holds.
  Tensor y;
  {
    Tensor saved = Tensor::zeros({2048}, DType::kF32, allocator, MemoryCategory::kActivations, "s");
    y = scaled(h, 1.0f, saved);
  }
  Tensor loss = summed(y);
  EXPECT_GE(tracker.current(MemoryCategory::kActivations), 8192u);
  backward(loss);
  // When "measure" ran, node 2's saved tensor, the gradient of y and the loss's seed gradient
  // were already freed; only the live outputs y (16 B) and loss (4 B) plus the gradient of h
  // (16 B, an activation-category buffer since h is not a leaf) remained.
  EXPECT_EQ(seen, 16u + 4u + 16u);
  EXPECT_EQ(x.grad().defined(), false);  // "measure" wrote no gradient for x
}

TEST(Autograd, CheckpointRecordsOneNodeAndRecomputesInBackward) {
  MemoryTracker tracker;
  CpuAllocator allocator(&tracker);
  Tensor x = Tensor::zeros({3}, DType::kF32, allocator, "x");
  x.copy_from({1, 2, 3});
  x.set_requires_grad(true);
  int calls = 0;
  size_t tape_seen_inside = 99;
  const auto fn = [&](const Tensor& in) {
    ++calls;
    Tensor h = scaled(in, 2.0f);
    tape_seen_inside = current_tape().size();
    return scaled(h, 5.0f);
  };
  // Without grad mode it is the function, run once, recording nothing.
  {
    NoGradScope no_grad;
    EXPECT_EQ(checkpoint_activations("f", x, fn).to_vector(), (std::vector<float>{10, 20, 30}));
    EXPECT_EQ(calls, 1);
    EXPECT_EQ(current_tape().size(), 0u);
  }
  calls = 0;
  Tensor y = checkpoint_activations("f", x, fn);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(tape_seen_inside, 0u);  // the forward inside recorded nothing
  EXPECT_TRUE(y.requires_grad());
  EXPECT_EQ(y.to_vector(), (std::vector<float>{10, 20, 30}));
  Tensor loss = summed(y);
  EXPECT_EQ(current_tape().size(), 2u);  // "checkpoint f" and "sum"
  backward(loss);
  EXPECT_EQ(calls, 2);              // recomputed once, in backward
  EXPECT_EQ(tape_seen_inside, 1u);  // on a tape of its own: the first scaled
  EXPECT_EQ(current_tape().size(), 0u);
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{10, 10, 10}));
  // A gradient the input already has is added to, as a recorded function would.
  backward(summed(checkpoint_activations("f", x, fn)));
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{20, 20, 20}));
  // Returning a value that requires grad from outside is refused by name.
  Tensor outside = Tensor::zeros({3}, DType::kF32, allocator, "w").set_requires_grad(true);
  try {
    checkpoint_activations("g", x, [&](const Tensor&) { return outside; });
    ADD_FAILURE() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("checkpoint 'g'"), std::string::npos) << e.what();
  }
  current_tape().clear();
}

TEST(Autograd, GradModeScopeStopsRecording) {
  CpuAllocator allocator(nullptr);
  Tensor x = Tensor::zeros({2}, DType::kF32, allocator, "x").set_requires_grad(true);
  {
    NoGradScope no_grad;
    EXPECT_FALSE(grad_enabled());
    Tensor y = scaled(x, 2.0f);
    EXPECT_FALSE(y.requires_grad());
    EXPECT_EQ(current_tape().size(), 0u);
  }
  EXPECT_TRUE(grad_enabled());
  Tensor y = scaled(x, 2.0f);
  EXPECT_TRUE(y.requires_grad());
  EXPECT_FALSE(y.is_leaf());
  current_tape().clear();
}

TEST(Autograd, TapesArePerThread) {
  CpuAllocator allocator(nullptr);
  Tensor x = Tensor::zeros({2}, DType::kF32, allocator, "x").set_requires_grad(true);
  Tensor y = scaled(x, 2.0f);
  size_t other_size = 99;
  std::thread([&] { other_size = current_tape().size(); }).join();
  EXPECT_EQ(other_size, 0u);
  EXPECT_EQ(current_tape().size(), 1u);
  current_tape().clear();
}

TEST(Autograd, ViewsShareStorageAndPassGradients) {
  CpuAllocator allocator(nullptr);
  Tensor x = Tensor::zeros({2, 3}, DType::kF32, allocator, "x").set_requires_grad(true);
  x.copy_from({1, 2, 3, 4, 5, 6});
  Tensor v = scaled(x, 1.0f).view({3, -1});
  EXPECT_EQ(v.shape(), (Shape{3, 2}));
  Tensor row = v.slice(2, {2});  // elements 2, 3
  EXPECT_EQ(row.to_vector(), (std::vector<float>{3, 4}));
  backward(summed(scaled(row, 7.0f)));
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{0, 0, 7, 7, 0, 0}));
  EXPECT_THROW(x.view({4, 2}), InvalidArgument);
  EXPECT_THROW(x.view({-1, -1}), InvalidArgument);
}

TEST(Autograd, BackwardRejectsBadLosses) {
  CpuAllocator allocator(nullptr);
  Tensor x = Tensor::zeros({2}, DType::kF32, allocator, "x").set_requires_grad(true);
  EXPECT_THROW(backward(scaled(x, 1.0f)), InvalidArgument);  // not a scalar
  current_tape().clear();
  Tensor c = Tensor::zeros({1}, DType::kF32, allocator, "c");
  EXPECT_THROW(backward(c), InvalidArgument);  // does not require grad
}

TEST(Autograd, SeedScalesGradients) {
  CpuAllocator allocator(nullptr);
  Tensor x = Tensor::zeros({2}, DType::kF32, allocator, "x").set_requires_grad(true);
  backward(summed(x), 1024.0f);
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{1024, 1024}));
}

TEST(Tensor, DtypeAndNameChecks) {
  CpuAllocator allocator(nullptr);
  Tensor t = Tensor::zeros({2, 3}, DType::kBF16, allocator, "emb");
  EXPECT_EQ(t.nbytes(), 12u);
  try {
    (void)t.data<float>();
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'emb' [2, 3] bf16 accessed as fp32"), std::string::npos)
        << e.what();
  }
  t.copy_from({1, 2, 3, 4, 5, 0.5f});
  EXPECT_EQ(t.to_vector(), (std::vector<float>{1, 2, 3, 4, 5, 0.5f}));
  EXPECT_THROW(t.size(2), InvalidArgument);
  EXPECT_EQ(t.size(-1), 3);
  EXPECT_THROW(Tensor().raw_data(), InvalidArgument);
  EXPECT_THROW(parse_dtype("fp8"), InvalidArgument);
  EXPECT_EQ(parse_dtype("bfloat16"), DType::kBF16);
  EXPECT_EQ(Device::parse("cuda:3").str(), "cuda:3");
  EXPECT_THROW(Device::parse("gpu"), InvalidArgument);
}

}  // namespace
}  // namespace zs
