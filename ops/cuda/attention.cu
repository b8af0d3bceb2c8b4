// Fused self-attention kernels (see nn_kernels.h): the plain-kernel path (no cuDNN), one warp per
// row, with the masking and softmax math of ops/math/softmax.h so the formulas are the CPU op's.
//
// Register layout: a warp owns one row of one head; lane l keeps elements d = l + 32·c
// (c < kChunks = ⌈D/32⌉, rounded up to 1, 2, 4 or 8) of each head vector it needs, zero where
// d >= D. A dot product is a per-lane partial over its chunks plus a butterfly warp sum, so every
// lane ends with the same bits; the same function computes a score in the forward, the dQ and the
// dK/dV kernels, so the backward recomputes the forward's scores exactly (the probabilities are
// exp(s − lse), as on the CPU).
//
// Forward: keys stream in tiles of 32; lane jj of a tile holds key j0 + jj's score; the tile's
// max, probabilities and sum are warp reductions, merged into the row's running statistics with
// math::softmax_stats_merge, and the output accumulator is rescaled by the same factor. Nothing of
// size T·T is stored; the row's log-sum-exp is saved for backward.
//
// Backward, deterministic and atomic-free, three kernels in stream order:
//   delta_i = Σ_d dO_i·O_i                                   (one warp per query row)
//   dQ_i = scale · Σ_{j visible to i} dS_ij · K_j              (one warp per query row, j
//   ascending) dK_j = scale · Σ_{i that see j} dS_ij · Q_i,  dV_j = Σ_i P_ij · dO_i   (one warp per
//   key row,
//          i ascending)
// with P_ij = exp(S_ij − lse_i), dP_ij = dO_i·V_j, dS_ij = P_ij · (dP_ij − delta_i). Every element
// of dqkv is written by exactly one lane, once.
#include <climits>
#include <cmath>
#include <type_traits>

#include "ops/cuda/launch.cuh"
#include "ops/cuda/nn_kernels.h"
#include "ops/math/softmax.h"
#include "runtime/cuda/check.h"

namespace zs::ops::cuda {
namespace {

using detail::load;
using detail::store;
using detail::warp_sum;

constexpr int kWarp = 32;
constexpr int kRowsPerBlock = 4;  // 128 threads: 4 consecutive rows of one head share K/V in L1
constexpr unsigned int kFullMask = 0xffffffffu;

struct Geometry {
  int64_t batch = 0;
  int64_t seq = 0;       // T
  int64_t channels = 0;  // C
  int64_t heads = 0;     // H
  int64_t head_dim = 0;  // D
  float scale = 1.0f;    // 1 / sqrt(D), computed on the host as the CPU op does
  bool causal = false;
};

// The warp's row of the [B, H, T] grid (also its index into lse and delta) and its coordinates.
struct RowIndex {
  int64_t row;
  int64_t b, h, t;
};

__device__ __forceinline__ RowIndex warp_row(const Geometry& g) {
  RowIndex r;
  r.row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  r.t = r.row % g.seq;
  const int64_t pair = r.row / g.seq;
  r.b = pair / g.heads;
  r.h = pair % g.heads;
  return r;
}

__device__ __forceinline__ int64_t valid_keys(const int32_t* valid_lengths, int64_t b,
                                              int64_t seq) {
  if (valid_lengths == nullptr) return seq;
  const int64_t length = valid_lengths[b];
  return length < 0 ? 0 : (length > seq ? seq : length);
}

__device__ __forceinline__ float warp_max(float value) {
  for (int offset = 16; offset > 0; offset /= 2) {
    value = fmaxf(value, __shfl_xor_sync(kFullMask, value, offset));
  }
  return value;
}

template <int kChunks, typename T>
__device__ __forceinline__ void load_head(const T* p, int64_t head_dim, int lane,
                                          float (&v)[kChunks]) {
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int64_t d = lane + kWarp * c;
    v[c] = d < head_dim ? load(p, d) : 0.0f;
  }
}

template <int kChunks>
__device__ __forceinline__ float warp_dot(const float (&a)[kChunks], const float (&b)[kChunks]) {
  float partial = 0.0f;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) partial += a[c] * b[c];
  return warp_sum(partial);
}

// scale · q·k. __fmul_rn is never contracted with what follows, so a score has the same bits in
// every kernel whatever expression it feeds.
template <int kChunks>
__device__ __forceinline__ float score(const float (&q)[kChunks], const float (&k)[kChunks],
                                       float scale) {
  return __fmul_rn(scale, warp_dot(q, k));
}

template <typename T, int kChunks>
__global__ void attention_forward_kernel(const T* qkv, T* out, float* lse, Geometry g,
                                         const int32_t* valid_lengths, int32_t* first_bad_length) {
  const RowIndex r = warp_row(g);
  if (r.row >= g.batch * g.heads * g.seq) return;  // whole warps leave: shuffles stay complete
  const int lane = threadIdx.x % kWarp;
  if (valid_lengths != nullptr && r.h == 0 && r.t == 0 && lane == 0) {
    const int32_t length = valid_lengths[r.b];
    if (length < 0 || length > g.seq) atomicMin(first_bad_length, static_cast<int32_t>(r.b));
  }
  const int64_t visible =
      math::masked_row_length(r.t, g.causal, valid_keys(valid_lengths, r.b, g.seq));
  const int64_t ld = 3 * g.channels;
  const T* q_row = qkv + (r.b * g.seq + r.t) * ld + r.h * g.head_dim;
  const T* k_base = qkv + r.b * g.seq * ld + g.channels + r.h * g.head_dim;
  const T* v_base = k_base + g.channels;

  float q[kChunks];
  load_head(q_row, g.head_dim, lane, q);
  float o[kChunks] = {};
  math::SoftmaxStats stats = math::softmax_stats_empty();
  for (int64_t j0 = 0; j0 < visible; j0 += kWarp) {
    const int tile = static_cast<int>(visible - j0 < kWarp ? visible - j0 : kWarp);
    float my_score = -INFINITY;  // lanes past the tile: probability exp_approx(-inf) = 0
    for (int jj = 0; jj < tile; ++jj) {
      float k[kChunks];
      load_head(k_base + (j0 + jj) * ld, g.head_dim, lane, k);
      const float s = score(q, k, g.scale);
      if (lane == jj) my_score = s;
    }
    // Probabilities relative to the new running max; the old sum and the accumulator are
    // rescaled by exp(old max − new max), which is 0 on the first tile (old max −inf). Merging
    // {new_max, tile_sum} is then exactly that rescale plus the tile's sum (exp_approx(0) = 1).
    const float new_max = fmaxf(stats.max, warp_max(my_score));
    const float p = math::exp_approx(my_score - new_max);
    const float rescale = math::exp_approx(stats.max - new_max);
    stats = math::softmax_stats_merge(stats, math::SoftmaxStats{new_max, warp_sum(p)});
#pragma unroll
    for (int c = 0; c < kChunks; ++c) o[c] *= rescale;
    for (int jj = 0; jj < tile; ++jj) {
      const float p_j = __shfl_sync(kFullMask, p, jj);
      float v[kChunks];
      load_head(v_base + (j0 + jj) * ld, g.head_dim, lane, v);
#pragma unroll
      for (int c = 0; c < kChunks; ++c) o[c] += p_j * v[c];
    }
  }
  // A row that sees no key outputs zeros (the CPU's k = 0 GEMM), never 0/0.
  const float inv_sum = visible > 0 ? 1.0f / stats.sum : 0.0f;
  T* out_row = out + (r.b * g.seq + r.t) * g.channels + r.h * g.head_dim;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int64_t d = lane + kWarp * c;
    if (d < g.head_dim) store(out_row, d, o[c] * inv_sum);
  }
  if (lane == 0) lse[r.row] = math::softmax_stats_lse(stats);  // −inf when visible == 0
}

template <typename T, int kChunks>
__global__ void attention_delta_kernel(const T* out, const T* dout, float* delta, Geometry g) {
  const RowIndex r = warp_row(g);
  if (r.row >= g.batch * g.heads * g.seq) return;
  const int lane = threadIdx.x % kWarp;
  const int64_t offset = (r.b * g.seq + r.t) * g.channels + r.h * g.head_dim;
  float o[kChunks];
  float d_o[kChunks];
  load_head(out + offset, g.head_dim, lane, o);
  load_head(dout + offset, g.head_dim, lane, d_o);
  const float sum = warp_dot(d_o, o);
  if (lane == 0) delta[r.row] = sum;
}

template <typename S>
__device__ __forceinline__ void write_grad(S* p, int64_t d, float value, bool accumulate) {
  store(p, d, accumulate ? load(p, d) + value : value);
}

template <typename T, typename S, int kChunks>
__global__ void attention_dq_kernel(const T* qkv, const T* dout, const float* lse,
                                    const float* delta, S* dqkv, Geometry g,
                                    const int32_t* valid_lengths, bool accumulate) {
  const RowIndex r = warp_row(g);
  if (r.row >= g.batch * g.heads * g.seq) return;
  const int lane = threadIdx.x % kWarp;
  const int64_t visible =
      math::masked_row_length(r.t, g.causal, valid_keys(valid_lengths, r.b, g.seq));
  const int64_t ld = 3 * g.channels;
  const int64_t q_offset = (r.b * g.seq + r.t) * ld + r.h * g.head_dim;
  const T* k_base = qkv + r.b * g.seq * ld + g.channels + r.h * g.head_dim;
  const T* v_base = k_base + g.channels;
  float q[kChunks];
  float d_o[kChunks];
  load_head(qkv + q_offset, g.head_dim, lane, q);
  load_head(dout + (r.b * g.seq + r.t) * g.channels + r.h * g.head_dim, g.head_dim, lane, d_o);
  float dq[kChunks] = {};
  if (visible > 0) {  // lse is −inf for a row without keys: never read it then
    const float row_lse = lse[r.row];
    const float row_delta = delta[r.row];
    for (int64_t j = 0; j < visible; ++j) {
      float k[kChunks];
      float v[kChunks];
      load_head(k_base + j * ld, g.head_dim, lane, k);
      load_head(v_base + j * ld, g.head_dim, lane, v);
      const float p = math::softmax_prob_from_lse(score(q, k, g.scale), row_lse);
      const float ds = math::softmax_backward(p, warp_dot(d_o, v), row_delta);
#pragma unroll
      for (int c = 0; c < kChunks; ++c) dq[c] += ds * k[c];
    }
  }
  S* dq_row = dqkv + q_offset;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int64_t d = lane + kWarp * c;
    if (d < g.head_dim) write_grad(dq_row, d, g.scale * dq[c], accumulate);
  }
}

template <typename T, typename S, int kChunks>
__global__ void attention_dkv_kernel(const T* qkv, const T* dout, const float* lse,
                                     const float* delta, S* dqkv, Geometry g,
                                     const int32_t* valid_lengths, bool accumulate) {
  const RowIndex r = warp_row(g);  // r.t is the key position j
  if (r.row >= g.batch * g.heads * g.seq) return;
  const int lane = threadIdx.x % kWarp;
  const int64_t valid = valid_keys(valid_lengths, r.b, g.seq);
  const int64_t ld = 3 * g.channels;
  const int64_t k_offset = (r.b * g.seq + r.t) * ld + g.channels + r.h * g.head_dim;
  const T* q_base = qkv + r.b * g.seq * ld + r.h * g.head_dim;
  const T* dout_base = dout + r.b * g.seq * g.channels + r.h * g.head_dim;
  const int64_t lse_base = (r.b * g.heads + r.h) * g.seq;
  float k[kChunks];
  float v[kChunks];
  load_head(qkv + k_offset, g.head_dim, lane, k);
  load_head(qkv + k_offset + g.channels, g.head_dim, lane, v);
  float dk[kChunks] = {};
  float dv[kChunks] = {};
  // Query i sees key j iff j < masked_row_length(i, causal, valid): j < valid, and i >= j when
  // causal. A padded key (j >= valid) is seen by no query: zero dK and dV.
  if (r.t < valid) {
    for (int64_t i = g.causal ? r.t : 0; i < g.seq; ++i) {
      float q[kChunks];
      float d_o[kChunks];
      load_head(q_base + i * ld, g.head_dim, lane, q);
      load_head(dout_base + i * g.channels, g.head_dim, lane, d_o);
      const float p = math::softmax_prob_from_lse(score(q, k, g.scale), lse[lse_base + i]);
      const float ds = math::softmax_backward(p, warp_dot(d_o, v), delta[lse_base + i]);
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        dv[c] += p * d_o[c];
        dk[c] += ds * q[c];
      }
    }
  }
  S* dk_row = dqkv + k_offset;
  S* dv_row = dk_row + g.channels;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int64_t d = lane + kWarp * c;
    if (d < g.head_dim) {
      write_grad(dk_row, d, g.scale * dk[c], accumulate);
      write_grad(dv_row, d, dv[c], accumulate);
    }
  }
}

Geometry check_geometry(const char* op, int64_t batch, int64_t seq, int64_t channels,
                        int64_t n_head, bool causal) {
  ZS_CHECK(batch >= 0 && seq >= 0 && channels >= 0, op, ": batch ", batch, ", seq ", seq,
           ", channels ", channels, "; none may be negative");
  ZS_CHECK(n_head >= 1, op, ": n_head must be at least 1, got ", n_head);
  ZS_CHECK(channels % n_head == 0, op, ": channels = ", channels,
           " must be a multiple of n_head = ", n_head, " (qkv's last dim is 3 * n_head * D)");
  Geometry g;
  g.batch = batch;
  g.seq = seq;
  g.channels = channels;
  g.heads = n_head;
  g.head_dim = channels / n_head;
  g.causal = causal;
  ZS_CHECK(g.head_dim <= kAttentionMaxHeadDim, op,
           ": head_dim D = channels / n_head = ", g.head_dim, " exceeds ", kAttentionMaxHeadDim,
           ", the largest this kernel keeps in registers; use more heads (or the CPU op)");
  ZS_CHECK(seq <= INT32_MAX, op, ": seq = ", seq, " exceeds 2^31-1");
  if (g.head_dim > 0) g.scale = 1.0f / std::sqrt(static_cast<float>(g.head_dim));
  const int64_t rows = batch * n_head * seq;
  ZS_CHECK(rows / kRowsPerBlock < INT32_MAX, op, ": ", rows,
           " rows (batch * n_head * seq) exceed one grid");
  return g;
}

unsigned int row_blocks(const Geometry& g) {
  const int64_t rows = g.batch * g.heads * g.seq;
  return static_cast<unsigned int>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
}

// Calls fn(std::integral_constant<int, kChunks>) with the register chunk count for head_dim.
template <typename Fn>
void dispatch_chunks(int64_t head_dim, Fn&& fn) {
  if (head_dim <= 32) {
    fn(std::integral_constant<int, 1>{});
  } else if (head_dim <= 64) {
    fn(std::integral_constant<int, 2>{});
  } else if (head_dim <= 128) {
    fn(std::integral_constant<int, 4>{});
  } else {
    fn(std::integral_constant<int, 8>{});
  }
}

}  // namespace

void attention_forward(const void* qkv, void* out, float* lse, int64_t batch, int64_t seq,
                       int64_t channels, int64_t n_head, bool causal, const int32_t* valid_lengths,
                       int32_t* first_bad_length, DType dtype, cudaStream_t stream) {
  constexpr const char* kOp = "cuda attention_forward";
  const Geometry g = check_geometry(kOp, batch, seq, channels, n_head, causal);
  ZS_CHECK(valid_lengths == nullptr || first_bad_length != nullptr, kOp,
           ": with valid_lengths, first_bad_length must be a device int32 (set to INT32_MAX "
           "before the call)");
  ZS_DISPATCH_FLOAT(dtype, kOp, T, {
    if (batch == 0 || seq == 0 || channels == 0) return;
    ZS_CHECK(lse != nullptr, kOp, ": lse (fp32 [batch, n_head, seq]) must be a device pointer");
    dispatch_chunks(g.head_dim, [&](auto chunks) {
      constexpr int kChunks = decltype(chunks)::value;
      attention_forward_kernel<T, kChunks><<<row_blocks(g), kRowsPerBlock * kWarp, 0, stream>>>(
          static_cast<const T*>(qkv), static_cast<T*>(out), lse, g, valid_lengths,
          first_bad_length);
      ZS_CUDA_CHECK(cudaGetLastError());
    });
  });
}

void attention_backward(const void* qkv, const void* out, const float* lse, const void* dout,
                        float* delta, void* dqkv, int64_t batch, int64_t seq, int64_t channels,
                        int64_t n_head, bool causal, const int32_t* valid_lengths, DType dtype,
                        DType dqkv_dtype, bool accumulate, cudaStream_t stream) {
  constexpr const char* kOp = "cuda attention_backward";
  const Geometry g = check_geometry(kOp, batch, seq, channels, n_head, causal);
  ZS_CHECK(dqkv_dtype == dtype || dqkv_dtype == DType::kF32, kOp, ": dqkv is ",
           dtype_name(dqkv_dtype), " but must be qkv's dtype (", dtype_name(dtype), ") or fp32");
  ZS_DISPATCH_FLOAT(dtype, kOp, T, {
    if (batch == 0 || seq == 0 || channels == 0) return;
    ZS_CHECK(lse != nullptr && delta != nullptr, kOp,
             ": lse (the forward's) and delta (batch * n_head * seq floats of workspace) must be "
             "device pointers");
    dispatch_chunks(g.head_dim, [&](auto chunks) {
      constexpr int kChunks = decltype(chunks)::value;
      const unsigned int blocks = row_blocks(g);
      constexpr int kThreads = kRowsPerBlock * kWarp;
      const T* qkv_t = static_cast<const T*>(qkv);
      const T* dout_t = static_cast<const T*>(dout);
      attention_delta_kernel<T, kChunks>
          <<<blocks, kThreads, 0, stream>>>(static_cast<const T*>(out), dout_t, delta, g);
      ZS_CUDA_CHECK(cudaGetLastError());
      const auto launch_grads = [&](auto sink_tag) {
        using S = decltype(sink_tag);
        S* sink = static_cast<S*>(dqkv);
        attention_dq_kernel<T, S, kChunks><<<blocks, kThreads, 0, stream>>>(
            qkv_t, dout_t, lse, delta, sink, g, valid_lengths, accumulate);
        ZS_CUDA_CHECK(cudaGetLastError());
        attention_dkv_kernel<T, S, kChunks><<<blocks, kThreads, 0, stream>>>(
            qkv_t, dout_t, lse, delta, sink, g, valid_lengths, accumulate);
        ZS_CUDA_CHECK(cudaGetLastError());
      };
      if (dqkv_dtype == DType::kF32) {
        launch_grads(float{});
      } else {
        launch_grads(T{});
      }
    });
  });
}

}  // namespace zs::ops::cuda
