// Finite-difference gradient checks for op tests (header-only).
//
// check_gradients(fn, inputs) compares the autograd gradient of L = Σ_i w_i · fn(inputs)_i,
// with fixed random weights w (so every output element matters with its own weight), against
// central differences (L(x + h) − L(x − h)) / 2h evaluated in double from the fp32 outputs.
// Inputs must be fp32 CPU tensors; the ones with requires_grad are checked.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "runtime/autograd.h"
#include "runtime/tensor.h"
#include "tests/support/op_test.h"

namespace zs::testing {

// A tensor with values uniform in [lo, hi), from a seeded std::mt19937.
inline Tensor random_tensor(const Shape& shape, Allocator& allocator, uint32_t seed,
                            float lo = -1.0f, float hi = 1.0f, bool requires_grad = true) {
  Tensor t = Tensor::empty(shape, DType::kF32, allocator, MemoryCategory::kOther, "input");
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> values(static_cast<size_t>(t.numel()));
  for (float& v : values) v = dist(gen);
  t.copy_from(values);
  t.set_requires_grad(requires_grad);
  return t;
}

struct GradCheckOptions {
  double step = 1e-2;  // h: central differences are exact for quadratics, O(h^2) otherwise
  double atol = 2e-3;
  double rtol = 2e-2;
  uint32_t seed = 1234;
};

using OpFn = std::function<Tensor(const std::vector<Tensor>&)>;

inline double weighted_sum(const Tensor& out, const std::vector<double>& weights) {
  std::vector<float> values = out.to_vector();
  double sum = 0;
  for (size_t i = 0; i < values.size(); ++i) sum += weights[i] * static_cast<double>(values[i]);
  return sum;
}

// Returns the number of mismatching elements (and reports each through gtest, capped).
inline int check_gradients(const OpFn& fn, const std::vector<Tensor>& inputs,
                           GradCheckOptions options = {}) {
  current_tape().clear();  // one graph at a time (see runtime/autograd.h)
  // Analytic gradients: backward of Σ w·out.
  for (const Tensor& in : inputs) {
    if (in.requires_grad()) in.set_grad(Tensor());
  }
  Tensor out = fn(inputs);
  std::vector<double> weights(static_cast<size_t>(out.numel()));
  std::mt19937 gen(options.seed);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  for (double& w : weights) w = dist(gen);
  {
    // d(Σ w·out)/d out = w: seed out's gradient with the weights, then run the tape.
    Tensor seed_grad = Tensor::empty(out.shape(), out.dtype(), out.allocator(), "seed");
    seed_grad.copy_from(std::vector<float>(weights.begin(), weights.end()));
    backward_from(out, seed_grad);
  }
  int failures = 0;
  for (size_t which = 0; which < inputs.size(); ++which) {
    const Tensor& in = inputs[which];
    if (!in.requires_grad()) continue;
    Tensor grad = in.grad();
    EXPECT_TRUE(grad.defined()) << "input " << which << " received no gradient";
    if (!grad.defined()) {
      ++failures;
      continue;
    }
    std::vector<float> analytic = grad.to_vector();
    std::vector<float> values = in.to_vector();
    for (size_t i = 0; i < values.size(); ++i) {
      const float original = values[i];
      double losses[2];
      for (int side = 0; side < 2; ++side) {
        values[i] = original + static_cast<float>(side == 0 ? options.step : -options.step);
        in.copy_from(values);
        NoGradScope no_grad;
        losses[side] = weighted_sum(fn(inputs), weights);
      }
      values[i] = original;
      in.copy_from(values);
      const double numeric = (losses[0] - losses[1]) / (2 * options.step);
      const double error = std::fabs(numeric - analytic[i]);
      if (error > options.atol + options.rtol * std::fabs(numeric)) {
        if (++failures <= 10) {
          ADD_FAILURE() << "input " << which << " element " << i << ": analytic " << analytic[i]
                        << " vs numeric " << numeric;
        }
      }
    }
  }
  return failures;
}

}  // namespace zs::testing
