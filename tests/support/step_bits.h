// Bit-for-bit comparison of training runs, for the tests that pin an invariant (resume, restart,
// offload): a float's bit pattern (so -0 vs +0 and NaN payloads count as differences, and a
// skipped fp16 step's NaN gradient norm equals itself), and one StepRecord against another —
// step, loss, learning rate, gradient norm, loss scale and skip flag. Header-only; pure.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "train/records.h"

namespace zs::testing {

inline uint32_t float_bits(float value) {
  uint32_t b;
  std::memcpy(&b, &value, sizeof(b));
  return b;
}

// `b` is `a` bit for bit; `what` names the comparison in failures.
inline void expect_same_step_bits(const train::StepRecord& a, const train::StepRecord& b,
                                  const std::string& what = "") {
  EXPECT_EQ(a.step, b.step) << what;
  EXPECT_EQ(float_bits(a.loss), float_bits(b.loss))
      << what << " step " << a.step << ": " << a.loss << " vs " << b.loss;
  EXPECT_EQ(float_bits(a.grad_norm), float_bits(b.grad_norm))
      << what << " step " << a.step << ": " << a.grad_norm << " vs " << b.grad_norm;
  EXPECT_EQ(float_bits(a.lr), float_bits(b.lr)) << what << " step " << a.step;
  EXPECT_EQ(float_bits(a.loss_scale), float_bits(b.loss_scale)) << what << " step " << a.step;
  EXPECT_EQ(a.skipped, b.skipped) << what << " step " << a.step;
}

// Every step record of run `b` is that of run `a` bit for bit, and there are as many.
inline void expect_same_steps(const train::TrainResult& a, const train::TrainResult& b,
                              const std::string& what = "") {
  ASSERT_EQ(a.steps.size(), b.steps.size()) << what;
  for (size_t i = 0; i < a.steps.size(); ++i) expect_same_step_bits(a.steps[i], b.steps[i], what);
}

}  // namespace zs::testing
