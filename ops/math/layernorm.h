// Layer normalization math for one row of C features, written once for the CPU loops
// (ops/layernorm.cc) and a future CUDA kernel (see ../../shared/STYLE.md, "One source of math").
//
// Forward:  mean = Σx / C, var = Σ(x − mean)² / C (biased; two passes, see layernorm_row_stats),
//           rstd = 1 / sqrt(var + eps), x̂ = (x − mean)·rstd, y = x̂·gamma + beta.
// Backward: with g = dy·gamma, dx = rstd·(g − mean(g) − x̂·mean(g·x̂)); dgamma = Σ_rows dy·x̂,
//           dbeta = Σ_rows dy.
//
// Row functions are templated on the storage type T of x, gamma and beta (float, Half or
// BFloat16: each converts to float explicitly) and on the storage type S of the gradient they
// write; all arithmetic is fp32 and sums run in index order, so a row's result does not depend
// on which thread computes it. Everything here is a pure function of its arguments: no state,
// safe from any thread, and free of host-only library calls.
#pragma once

#include <cmath>
#include <cstdint>

#include "runtime/macros.h"

namespace zs::ops::math {

// Per-element pieces, for kernels that reduce a row cooperatively.
ZS_HOST_DEVICE inline float layernorm_rstd(float variance, float eps) {
  return 1.0f / sqrtf(variance + eps);
}

ZS_HOST_DEVICE inline float layernorm_normalize(float x, float mean, float rstd) {
  return (x - mean) * rstd;
}

ZS_HOST_DEVICE inline float layernorm_affine(float x_hat, float gamma, float beta) {
  return x_hat * gamma + beta;
}

// dx of one element given the row means of g = dy·gamma and of g·x̂.
ZS_HOST_DEVICE inline float layernorm_dx(float g, float x_hat, float rstd, float mean_g,
                                         float mean_g_xhat) {
  return rstd * (g - mean_g - x_hat * mean_g_xhat);
}

// mean and rstd of one row. The mean is summed around the row's first element (exact
// differences for nearby values), so a large common offset such as 1000 + noise does not cost the
// sum its low bits; the variance is the centred sum of squares around that mean (two passes).
template <typename T>
ZS_HOST_DEVICE inline void layernorm_row_stats(const T* x, int64_t cols, float eps, float* mean,
                                               float* rstd) {
  const float shift = static_cast<float>(x[0]);
  float shifted_sum = 0.0f;
  for (int64_t j = 0; j < cols; ++j) shifted_sum += static_cast<float>(x[j]) - shift;
  const float row_mean = shift + shifted_sum / static_cast<float>(cols);
  float centred_squares = 0.0f;
  for (int64_t j = 0; j < cols; ++j) {
    const float d = static_cast<float>(x[j]) - row_mean;
    centred_squares += d * d;
  }
  *mean = row_mean;
  *rstd = layernorm_rstd(centred_squares / static_cast<float>(cols), eps);
}

// y = x̂·gamma + beta for one row, stored as T.
template <typename T>
ZS_HOST_DEVICE inline void layernorm_row_forward(const T* x, const T* gamma, const T* beta,
                                                 int64_t cols, float mean, float rstd, T* y) {
  for (int64_t j = 0; j < cols; ++j) {
    const float x_hat = layernorm_normalize(static_cast<float>(x[j]), mean, rstd);
    y[j] = T(layernorm_affine(x_hat, static_cast<float>(gamma[j]), static_cast<float>(beta[j])));
  }
}

// dx for one row from the fp32 upstream gradient dy; adds into dx when `accumulate`.
template <typename T, typename S>
ZS_HOST_DEVICE inline void layernorm_row_backward(const T* x, const float* dy, const T* gamma,
                                                  int64_t cols, float mean, float rstd, S* dx,
                                                  bool accumulate) {
  float sum_g = 0.0f;
  float sum_g_xhat = 0.0f;
  for (int64_t j = 0; j < cols; ++j) {
    const float g = dy[j] * static_cast<float>(gamma[j]);
    sum_g += g;
    sum_g_xhat += g * layernorm_normalize(static_cast<float>(x[j]), mean, rstd);
  }
  const float mean_g = sum_g / static_cast<float>(cols);
  const float mean_g_xhat = sum_g_xhat / static_cast<float>(cols);
  for (int64_t j = 0; j < cols; ++j) {
    const float g = dy[j] * static_cast<float>(gamma[j]);
    const float x_hat = layernorm_normalize(static_cast<float>(x[j]), mean, rstd);
    const float value = layernorm_dx(g, x_hat, rstd, mean_g, mean_g_xhat);
    dx[j] = accumulate ? S(static_cast<float>(dx[j]) + value) : S(value);
  }
}

// Adds one row's contribution to the parameter gradients: dgamma += dy·x̂, dbeta += dy.
// Either pointer may be null when that parameter needs no gradient.
template <typename T>
ZS_HOST_DEVICE inline void layernorm_row_param_grads(const T* x, const float* dy, int64_t cols,
                                                     float mean, float rstd, float* dgamma,
                                                     float* dbeta) {
  if (dgamma != nullptr) {
    for (int64_t j = 0; j < cols; ++j) {
      dgamma[j] += dy[j] * layernorm_normalize(static_cast<float>(x[j]), mean, rstd);
    }
  }
  if (dbeta != nullptr) {
    for (int64_t j = 0; j < cols; ++j) dbeta[j] += dy[j];
  }
}

}  // namespace zs::ops::math
