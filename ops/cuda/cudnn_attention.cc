// The cuDNN fused attention forward and backward (see cudnn_attention.h for the contracts): the
// backend graphs built in C, one execution plan per (pass, shape, dtype, causal) key and handle,
// and the per-thread handle cache. Built with ZS_HAVE_CUDNN=1 when CMake found cuDNN
// (ops/cuda/CMakeLists.txt); otherwise the same functions exist and answer "built without cuDNN".
//
// The forward graph, with the tensor uids of the variant pack (non-virtual) and of the
// intermediates (virtual, never in memory), in the order the operations are listed:
//   Q (1), Kᵀ (2: K's buffer with the T and D dims and strides swapped), V (3), O (4),
//   Stats (5) = the lse buffer, scale (6) and mask value (7): fp32 by-value scalars [1,1,1,1]
//   (host floats in the variant pack, read when the plan is executed).
//   matmul        Q · Kᵀ                          → S (101)      fp32 [B,H,T,T]
//   pointwise MUL S × scale                       → Z (102)
//   causal only:
//     GEN_INDEX axis 2 (row) of Z                 → row (103)    int32
//     GEN_INDEX axis 3 (column) of Z              → col (104)    int32
//     CMP_GE    row >= col                        → keep (105)   boolean
//     BINARY_SELECT keep ? Z : mask value         → Zm (106)     (mask value = lowest float)
//   reduction MAX over the last dim               → M (107)      fp32 [B,H,T,1]
//   SUB Z − M → (108), EXP → E (109), reduction ADD of E → L (110) [B,H,T,1]
//   LOG L → (111), ADD M + log L                  → Stats (5)    = log Σ exp(z), natural log
//   DIV E / L                                     → P (112)      qkv's dtype (the engine wants
//                                                                the second matmul's A in the
//                                                                i/o type)
//   matmul        P · V                           → O (4)
// This is the decomposition cudnn-frontend emits for SDPA with generate_stats and a top-left
// causal mask before cuDNN 9.21 (its CompositeSoftmaxNode and causal score modifier), the
// pattern the runtime-fusion flash attention engine matches.
//
// The backward graph follows cudnn-frontend's CompositeSDPABackwardNode (include/cudnn_frontend/
// node/scaled_dot_product_flash_attention.h, the composite path used before the unified
// SDPA_BWD operation) for MHA without bias, dropout, padding or ALiBi, attn_scale by value, a
// top-left causal mask as its diagonal band (right bound 0) and the fp32 dQ accumulator (the
// frontend's choice on cuDNN >= 9.0 unless dBias or determinism is asked for). Frontend graphs
// take their virtual tensors' dtypes from the intermediate type (fp32, as in its SDPA samples)
// unless set; the ones it sets are marked. Non-virtual: Q (1), Kᵀ (2), Vᵀ (3: V's buffer with T
// and D swapped, as Kᵀ), O (4), Stats (5), scale (6), mask value (7), dO (8), dQ (9), dK (10),
// dV (11) (strided views of dqkv, or of the staging copy when accumulating), one (12: by-value
// 1.0), dot (13: fp32 [B,H,T,1] strides [H·T,T,1,1], the frontend's "softmax_sum", in our
// workspace), dQ accumulator (14: fp32 [B,H,T,D] packed, in our workspace, zeroed before each
// run — the frontend memsets it only below cuDNN 9.6, zeroing always is harmless; if cuDNN
// refuses the graph, it is built once more with this tensor F16x16-reordered, as the frontend's
// releases for cuDNN 8.9 and 9.0 emitted it). In order:
//   pointwise MUL dO ⊙ O                          → (201)  fp32 [B,H,T,D], strides as the
//                                                          frontend's [H·T·D, T·D, H·D, 1]
//   reduction ADD over D                          → (202)  fp32 [B,H,T,1]
//   pointwise MUL × one                           → dot (13)
//   matmul        Q · Kᵀ                          → S (203)      fp32 [B,H,T,T]
//   pointwise MUL S × scale                       → (204)
//   pointwise SUB − Stats                         → Z (205)
//   causal only (the frontend's diagonal band, after the Stats subtraction):
//     GEN_INDEX axis 2 / axis 3 of Z → row (206) / col (207) int32, CMP_GE → keep (208) boolean,
//     BINARY_SELECT keep ? Z : mask value → Zm (209)
//   pointwise EXP                                 → P (210)      fp32
//   RESHAPE P                                     → Pᵀ (211)     [B,H,T,T] strides
//                                                                [H·T·T, T·T, 1, T], i/o dtype
//   matmul        Pᵀ · dO                         → dV (11)
//   matmul        dO · Vᵀ                         → dP (212)     fp32
//   pointwise SUB dP − dot                        → (213)
//   pointwise MUL × P                             → (214)
//   pointwise MUL × scale                         → dS (215)     fp32
//   RESHAPE dS                                    → dSᵀ (216)    as Pᵀ, i/o dtype
//   matmul        dSᵀ · Q                         → dK (10)
//   RESHAPE Kᵀ                                    → K (217)      [B,H,T,D] strides [T·3C,D,3C,1],
//                                                                fp32 (the frontend sets no
//                                                                dtype here: intermediate)
//   matmul        dS · K                          → dQ accumulator (14)
//   pointwise IDENTITY                            → dQ (9)
// The backward's workspace (one callback call): the plan's workspace, then the dQ accumulator,
// the dot rows and, when accumulating, the staging dqkv, each at a multiple of 256 bytes.
//
// Errors: building descriptors goes through ZS_CUDNN_CHECK, except the finalizes, whose
// NOT_SUPPORTED statuses are answers (the key is cached as refused); an execution plan that does
// not finalize for one engine config (NOT_SUPPORTED or BAD_PARAM, as cudnn-frontend skips
// candidates) moves on to the next config. Everything else throws.
#include "ops/cuda/cudnn_attention.h"

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <utility>
#include <vector>

#include "ops/cuda/handle_cache.h"
#include "runtime/error.h"
#include "runtime/logging.h"

#if ZS_HAVE_CUDNN
#include <cudnn_graph.h>

#include "ops/cuda/kernels.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/cudnn_check.h"
#endif

namespace zs::ops::cuda {

bool cudnn_attention_enabled() {
  const char* value = std::getenv("ZS_CUDNN_ATTENTION");
  return value == nullptr || std::strcmp(value, "0") != 0;
}

#if ZS_HAVE_CUDNN

namespace {

// What a plan depends on: the pass, the shape, the dtype and the mask (the pointers go in the
// variant pack).
struct AttentionKey {
  int64_t batch = 0;
  int64_t seq = 0;
  int64_t channels = 0;
  int64_t heads = 0;
  bool causal = false;
  DType dtype = DType::kF32;
  bool backward = false;

  int64_t head_dim() const { return channels / heads; }
  const char* pass() const { return backward ? "backward" : "forward"; }
  bool operator==(const AttentionKey& other) const {
    return backward == other.backward && batch == other.batch && seq == other.seq &&
           channels == other.channels && heads == other.heads && causal == other.causal &&
           dtype == other.dtype;
  }
  std::string describe() const {
    return ::zs::detail::concat(pass(), " [B=", batch, ", T=", seq, ", C=", channels, ", H=", heads,
                                ", D=", head_dim(), causal ? ", causal" : ", bidirectional", ", ",
                                dtype_name(dtype), "]");
  }
};

// The refusals that need neither cuDNN nor the device ("" when the key may be tried).
std::string shape_refusal(const AttentionKey& key) {
  if (key.dtype != DType::kF16 && key.dtype != DType::kBF16) {
    return ::zs::detail::concat("dtype ", dtype_name(key.dtype),
                                ": the fused flash attention engine takes fp16 or bf16 only");
  }
  const int64_t d = key.head_dim();
  if (d % 8 != 0 || d > 128) {
    return ::zs::detail::concat("head_dim ", d, " is not a multiple of 8 in [8, 128]");
  }
  if (key.backward && key.seq == 1) {
    return "T = 1: cudnn-frontend's SDPA backward does not support s_q = s_kv = 1";
  }
  return "";
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

constexpr int64_t kAlignment = 16;  // bytes; Q/K/V/O/Stats pointers are checked per call

// Forward tensor uids (see the file comment).
enum : int64_t {
  kUidQ = 1,
  kUidKT = 2,
  kUidV = 3,
  kUidO = 4,
  kUidStats = 5,
  kUidScale = 6,
  kUidMaskValue = 7,
  kUidS = 101,
  kUidScaled = 102,
  kUidRow = 103,
  kUidCol = 104,
  kUidKeep = 105,
  kUidMasked = 106,
  kUidMax = 107,
  kUidCentered = 108,
  kUidExp = 109,
  kUidSumExp = 110,
  kUidLogSum = 111,
  kUidProbs = 112,
};

// Backward tensor uids (see the file comment).
enum : int64_t {
  kBwdQ = 1,
  kBwdKT = 2,
  kBwdVT = 3,
  kBwdO = 4,
  kBwdStats = 5,
  kBwdScale = 6,
  kBwdMaskValue = 7,
  kBwdDO = 8,
  kBwdDQ = 9,
  kBwdDK = 10,
  kBwdDV = 11,
  kBwdOne = 12,
  kBwdDot = 13,
  kBwdDQAccum = 14,
  kBwdDOxO = 201,
  kBwdRowSum = 202,
  kBwdS = 203,
  kBwdScaled = 204,
  kBwdCentered = 205,
  kBwdRow = 206,
  kBwdCol = 207,
  kBwdKeep = 208,
  kBwdMasked = 209,
  kBwdProbs = 210,
  kBwdProbsT = 211,
  kBwdDP = 212,
  kBwdDPMinusDot = 213,
  kBwdDSUnscaled = 214,
  kBwdDS = 215,
  kBwdDST = 216,
  kBwdK = 217,
};

// Workspace regions of the backward start at multiples of this (bytes).
constexpr size_t kRegionAlignment = 256;
size_t round_up_region(size_t bytes) {
  return (bytes + kRegionAlignment - 1) / kRegionAlignment * kRegionAlignment;
}

// A cuDNN status that means "cannot do this" rather than "something broke", carried out of the
// graph construction to the key's cache entry.
struct Refused {
  std::string reason;
};

// RAII owner of one cudnnBackendDescriptor_t (move-only).
class BackendDescriptor {
 public:
  explicit BackendDescriptor(cudnnBackendDescriptorType_t type) {
    ZS_CUDNN_CHECK(cudnnBackendCreateDescriptor(type, &desc_));
  }
  ~BackendDescriptor() {
    if (desc_ != nullptr) ZS_CUDNN_CHECK_WARN(cudnnBackendDestroyDescriptor(desc_));
  }
  BackendDescriptor(BackendDescriptor&& other) noexcept : desc_(other.desc_) {
    other.desc_ = nullptr;
  }
  BackendDescriptor& operator=(BackendDescriptor&& other) noexcept {
    std::swap(desc_, other.desc_);
    return *this;
  }
  ZS_DISALLOW_COPY(BackendDescriptor);

  cudnnBackendDescriptor_t get() const { return desc_; }

  void set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
           const void* values) {
    ZS_CUDNN_CHECK(cudnnBackendSetAttribute(desc_, name, type, count, values));
  }
  void set_int64(cudnnBackendAttributeName_t name, int64_t value) {
    set(name, CUDNN_TYPE_INT64, 1, &value);
  }
  void set_int64s(cudnnBackendAttributeName_t name, const std::vector<int64_t>& values) {
    set(name, CUDNN_TYPE_INT64, static_cast<int64_t>(values.size()), values.data());
  }
  void set_bool(cudnnBackendAttributeName_t name, bool value) {
    set(name, CUDNN_TYPE_BOOLEAN, 1, &value);
  }
  void set_data_type(cudnnBackendAttributeName_t name, cudnnDataType_t value) {
    set(name, CUDNN_TYPE_DATA_TYPE, 1, &value);
  }
  void set_descriptor(cudnnBackendAttributeName_t name, const BackendDescriptor& value) {
    const cudnnBackendDescriptor_t raw = value.get();
    set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw);
  }
  void set_handle(cudnnBackendAttributeName_t name, cudnnHandle_t handle) {
    set(name, CUDNN_TYPE_HANDLE, 1, &handle);
  }

  // Finalizes; a NOT_SUPPORTED status throws Refused naming `what`, other failures throw errors.
  void finalize(const char* what) {
    const cudnnStatus_t status = try_finalize();
    if (status == CUDNN_STATUS_SUCCESS) return;
    if (::zs::cuda::detail::cudnn_not_supported(status)) {
      throw Refused{::zs::detail::concat(
          what, ": ", ::zs::cuda::detail::cudnn_error_message(status, "cudnnBackendFinalize"))};
    }
    ::zs::cuda::detail::cudnn_check(status, "cudnnBackendFinalize", __FILE__, __LINE__);
  }
  // The raw status, for callers that treat some failures as answers.
  cudnnStatus_t try_finalize() {
    return cudnnBackendFinalize(desc_);  // zs-unchecked: NOT_SUPPORTED is an answer (callers)
  }

 private:
  cudnnBackendDescriptor_t desc_ = nullptr;
};

cudnnDataType_t io_data_type(DType dtype) {
  return dtype == DType::kBF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
}

// One execution plan (or the reason there is none) for a key on one handle.
struct PlanEntry {
  AttentionKey key;
  bool supported = false;
  std::string refusal;
  int64_t workspace_bytes = 0;
  // By-value scalars: the variant pack points at these host floats.
  float scale = 1.0f;
  float mask_value = std::numeric_limits<float>::lowest();
  float one = 1.0f;
  // Every descriptor the plan was built from (tensors, operations, graph, engine config), kept
  // alive for the plan's lifetime; declared before `plan` so that the plan is destroyed first.
  std::vector<BackendDescriptor> parts;
  std::vector<BackendDescriptor> plan;  // 0 or 1 execution plan
};

// The operation graph of a key, built into `entry.parts`; returns the graph descriptor's index.
class GraphBuilder {
 public:
  // `reordered_dq_accum`: the backward's dQ accumulator in CUDNN_TENSOR_REORDERING_F16x16.
  GraphBuilder(PlanEntry& entry, cudnnHandle_t handle, bool reordered_dq_accum)
      : entry_(entry), handle_(handle), reordered_dq_accum_(reordered_dq_accum) {}

  size_t build() { return entry_.key.backward ? build_backward() : build_forward(); }

 private:
  static constexpr size_t kNone = static_cast<size_t>(-1);

  size_t build_forward() {
    const AttentionKey& k = entry_.key;
    const int64_t B = k.batch, T = k.seq, C = k.channels, H = k.heads, D = k.head_dim();
    const cudnnDataType_t io = io_data_type(k.dtype);
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    const std::vector<int64_t> scores_dims{B, H, T, T}, scores_strides{H * T * T, T * T, T, 1};
    const std::vector<int64_t> row_dims{B, H, T, 1}, row_strides{H * T, T, 1, 1};
    const std::vector<int64_t> scalar{1, 1, 1, 1};

    // Q, K, V: strided views of qkv [B, T, 3C]; K transposed by swapping its last two dims.
    const size_t q = tensor(kUidQ, io, {B, H, T, D}, {T * 3 * C, D, 3 * C, 1});
    const size_t kt = tensor(kUidKT, io, {B, H, D, T}, {T * 3 * C, D, 1, 3 * C});
    const size_t v = tensor(kUidV, io, {B, H, T, D}, {T * 3 * C, D, 3 * C, 1});
    const size_t o = tensor(kUidO, io, {B, H, T, D}, {T * C, D, C, 1});
    const size_t stats = tensor(kUidStats, f32, row_dims, row_strides);
    const size_t scale = tensor(kUidScale, f32, scalar, scalar, /*is_virtual=*/false, true);

    const size_t s = tensor(kUidS, f32, scores_dims, scores_strides, true);
    matmul(q, kt, s);
    size_t scores = tensor(kUidScaled, f32, scores_dims, scores_strides, true);
    pointwise(CUDNN_POINTWISE_MUL, f32, s, scale, kNone, scores);
    if (k.causal) {
      scores = causal_mask(scores, {kUidMaskValue, kUidRow, kUidCol, kUidKeep, kUidMasked},
                           scores_dims, scores_strides);
    }
    // Softmax with stats.
    const size_t max = tensor(kUidMax, f32, row_dims, row_strides, true);
    const size_t centered = tensor(kUidCentered, f32, scores_dims, scores_strides, true);
    const size_t exp = tensor(kUidExp, f32, scores_dims, scores_strides, true);
    const size_t sum_exp = tensor(kUidSumExp, f32, row_dims, row_strides, true);
    const size_t log_sum = tensor(kUidLogSum, f32, row_dims, row_strides, true);
    const size_t probs = tensor(kUidProbs, io, scores_dims, scores_strides, true);
    reduction(CUDNN_REDUCE_TENSOR_MAX, scores, max);
    pointwise(CUDNN_POINTWISE_SUB, f32, scores, max, kNone, centered);
    pointwise(CUDNN_POINTWISE_EXP, f32, centered, kNone, kNone, exp);
    reduction(CUDNN_REDUCE_TENSOR_ADD, exp, sum_exp);
    pointwise(CUDNN_POINTWISE_LOG, f32, sum_exp, kNone, kNone, log_sum);
    pointwise(CUDNN_POINTWISE_ADD, f32, max, log_sum, kNone, stats);
    pointwise(CUDNN_POINTWISE_DIV, f32, exp, sum_exp, kNone, probs);
    matmul(probs, v, o);
    return finish_graph();
  }

  // cudnn-frontend's composite SDPA backward (see the file comment for the tensors).
  size_t build_backward() {
    const AttentionKey& k = entry_.key;
    const int64_t B = k.batch, T = k.seq, C = k.channels, H = k.heads, D = k.head_dim();
    const cudnnDataType_t io = io_data_type(k.dtype);
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    const std::vector<int64_t> head_dims{B, H, T, D};
    const std::vector<int64_t> qkv_strides{T * 3 * C, D, 3 * C, 1};
    const std::vector<int64_t> transposed_dims{B, H, D, T};
    const std::vector<int64_t> transposed_strides{T * 3 * C, D, 1, 3 * C};
    const std::vector<int64_t> out_strides{T * C, D, C, 1};
    const std::vector<int64_t> scores_dims{B, H, T, T}, scores_strides{H * T * T, T * T, T, 1};
    const std::vector<int64_t> scores_t_strides{H * T * T, T * T, 1, T};
    const std::vector<int64_t> row_dims{B, H, T, 1}, row_strides{H * T, T, 1, 1};
    const std::vector<int64_t> scalar{1, 1, 1, 1};

    const size_t q = tensor(kBwdQ, io, head_dims, qkv_strides);
    const size_t kt = tensor(kBwdKT, io, transposed_dims, transposed_strides);
    const size_t vt = tensor(kBwdVT, io, transposed_dims, transposed_strides);
    const size_t o = tensor(kBwdO, io, head_dims, out_strides);
    const size_t d_o = tensor(kBwdDO, io, head_dims, out_strides);
    const size_t stats = tensor(kBwdStats, f32, row_dims, row_strides);
    const size_t scale = tensor(kBwdScale, f32, scalar, scalar, /*is_virtual=*/false, true);
    const size_t one = tensor(kBwdOne, f32, scalar, scalar, false, true);
    const size_t dq = tensor(kBwdDQ, io, head_dims, qkv_strides);
    const size_t dk = tensor(kBwdDK, io, head_dims, qkv_strides);
    const size_t dv = tensor(kBwdDV, io, head_dims, qkv_strides);

    // dot = Σ_d dO ⊙ O (× 1: the frontend's dropout-scale slot), a non-virtual fp32 row tensor.
    const size_t do_x_o =
        tensor(kBwdDOxO, f32, head_dims, {H * T * D, T * D, H * D, 1}, /*is_virtual=*/true);
    const size_t row_sum = tensor(kBwdRowSum, f32, row_dims, row_strides, true);
    const size_t dot = tensor(kBwdDot, f32, row_dims, row_strides);
    pointwise(CUDNN_POINTWISE_MUL, f32, d_o, o, kNone, do_x_o);
    reduction(CUDNN_REDUCE_TENSOR_ADD, do_x_o, row_sum);
    pointwise(CUDNN_POINTWISE_MUL, f32, row_sum, one, kNone, dot);

    // P = exp(Q·Kᵀ × scale − Stats), masked.
    const size_t s = tensor(kBwdS, f32, scores_dims, scores_strides, true);
    const size_t scaled = tensor(kBwdScaled, f32, scores_dims, scores_strides, true);
    size_t centered = tensor(kBwdCentered, f32, scores_dims, scores_strides, true);
    matmul(q, kt, s);
    pointwise(CUDNN_POINTWISE_MUL, f32, s, scale, kNone, scaled);
    pointwise(CUDNN_POINTWISE_SUB, f32, scaled, stats, kNone, centered);
    if (k.causal) {
      centered = causal_mask(centered, {kBwdMaskValue, kBwdRow, kBwdCol, kBwdKeep, kBwdMasked},
                             scores_dims, scores_strides);
    }
    const size_t probs = tensor(kBwdProbs, f32, scores_dims, scores_strides, true);
    pointwise(CUDNN_POINTWISE_EXP, f32, centered, kNone, kNone, probs);

    // dV = Pᵀ · dO.
    const size_t probs_t = tensor(kBwdProbsT, io, scores_dims, scores_t_strides, true);
    reshape(probs, probs_t);
    matmul(probs_t, d_o, dv);

    // dS = (dO · Vᵀ − dot) ⊙ P × scale.
    const size_t dp = tensor(kBwdDP, f32, scores_dims, scores_strides, true);
    const size_t dp_minus_dot = tensor(kBwdDPMinusDot, f32, scores_dims, scores_strides, true);
    const size_t ds_unscaled = tensor(kBwdDSUnscaled, f32, scores_dims, scores_strides, true);
    const size_t ds = tensor(kBwdDS, f32, scores_dims, scores_strides, true);
    matmul(d_o, vt, dp);
    pointwise(CUDNN_POINTWISE_SUB, f32, dp, dot, kNone, dp_minus_dot);
    pointwise(CUDNN_POINTWISE_MUL, f32, dp_minus_dot, probs, kNone, ds_unscaled);
    pointwise(CUDNN_POINTWISE_MUL, f32, ds_unscaled, scale, kNone, ds);

    // dK = dSᵀ · Q.
    const size_t ds_t = tensor(kBwdDST, io, scores_dims, scores_t_strides, true);
    reshape(ds, ds_t);
    matmul(ds_t, q, dk);

    // dQ = dS · K into the fp32 accumulator, then copied out.
    const size_t key = tensor(kBwdK, f32, head_dims, qkv_strides, true);
    const size_t dq_accum =
        tensor(kBwdDQAccum, f32, head_dims, {H * T * D, T * D, D, 1}, /*is_virtual=*/false, false,
               reordered_dq_accum_ ? CUDNN_TENSOR_REORDERING_F16x16 : CUDNN_TENSOR_REORDERING_NONE);
    reshape(kt, key);
    matmul(ds, key, dq_accum);
    pointwise(CUDNN_POINTWISE_IDENTITY, f32, dq_accum, kNone, kNone, dq);
    return finish_graph();
  }

  // The operation graph of the operations listed so far, finalized; returns its index.
  size_t finish_graph() {
    std::vector<cudnnBackendDescriptor_t> raw_ops;
    for (size_t i : ops_) raw_ops.push_back(entry_.parts[i].get());
    BackendDescriptor graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
              static_cast<int64_t>(raw_ops.size()), raw_ops.data());
    graph.set_handle(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, handle_);
    graph.finalize("the operation graph");
    return keep(std::move(graph));
  }

  size_t keep(BackendDescriptor&& d) {
    entry_.parts.push_back(std::move(d));
    return entry_.parts.size() - 1;
  }
  const BackendDescriptor& part(size_t i) const { return entry_.parts[i]; }

  size_t tensor(int64_t uid, cudnnDataType_t type, const std::vector<int64_t>& dims,
                const std::vector<int64_t>& strides, bool is_virtual = false, bool by_value = false,
                cudnnBackendTensorReordering_t reordering = CUDNN_TENSOR_REORDERING_NONE) {
    BackendDescriptor t(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    t.set_data_type(CUDNN_ATTR_TENSOR_DATA_TYPE, type);
    t.set_int64s(CUDNN_ATTR_TENSOR_DIMENSIONS, dims);
    t.set_int64s(CUDNN_ATTR_TENSOR_STRIDES, strides);
    t.set_int64(CUDNN_ATTR_TENSOR_UNIQUE_ID, uid);
    t.set_int64(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, kAlignment);
    t.set_bool(CUDNN_ATTR_TENSOR_IS_VIRTUAL, is_virtual);
    if (by_value) t.set_bool(CUDNN_ATTR_TENSOR_IS_BY_VALUE, true);
    if (reordering != CUDNN_TENSOR_REORDERING_NONE) {
      t.set(CUDNN_ATTR_TENSOR_REORDERING_MODE, CUDNN_TYPE_TENSOR_REORDERING_MODE, 1, &reordering);
    }
    t.finalize("a tensor descriptor");
    return keep(std::move(t));
  }

  void matmul(size_t a, size_t b, size_t c) {
    BackendDescriptor desc(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    desc.set_data_type(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_DATA_FLOAT);
    desc.finalize("a matmul descriptor");
    BackendDescriptor op(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    op.set_descriptor(CUDNN_ATTR_OPERATION_MATMUL_ADESC, part(a));
    op.set_descriptor(CUDNN_ATTR_OPERATION_MATMUL_BDESC, part(b));
    op.set_descriptor(CUDNN_ATTR_OPERATION_MATMUL_CDESC, part(c));
    op.set_descriptor(CUDNN_ATTR_OPERATION_MATMUL_DESC, desc);
    op.finalize("a matmul operation");
    keep(std::move(desc));
    ops_.push_back(keep(std::move(op)));
  }

  // y = mode(x[, b[, t]]): IN_0 → X, IN_1 → B, IN_2 → T (BINARY_SELECT: t ? x : b).
  void pointwise(cudnnPointwiseMode_t mode, cudnnDataType_t math, size_t x, size_t b, size_t t,
                 size_t y, int64_t axis = -1) {
    BackendDescriptor desc(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    desc.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    desc.set_data_type(CUDNN_ATTR_POINTWISE_MATH_PREC, math);
    if (axis >= 0) desc.set_int64(CUDNN_ATTR_POINTWISE_AXIS, axis);
    desc.finalize("a pointwise descriptor");
    BackendDescriptor op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    op.set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, desc);
    op.set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, part(x));
    if (b != kNone) op.set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, part(b));
    if (t != kNone) op.set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, part(t));
    op.set_descriptor(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, part(y));
    op.finalize("a pointwise operation");
    keep(std::move(desc));
    ops_.push_back(keep(std::move(op)));
  }

  // y = x with other dims and strides (the frontend's transposes of P, dS and Kᵀ).
  // The uids of the causal mask's tensors: the mask value (a by-value scalar in the variant pack)
  // and the virtual row index, column index, keep flag and masked scores.
  struct MaskUids {
    int64_t mask_value, row, col, keep, masked;
  };

  // The causal mask over `scores` [B,H,T,T] (fp32): GEN_INDEX of the row (axis 2) and the column
  // (axis 3), keep = row >= column, masked = keep ? scores : mask value. Returns `masked`.
  size_t causal_mask(size_t scores, const MaskUids& uids, const std::vector<int64_t>& dims,
                     const std::vector<int64_t>& strides) {
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    const std::vector<int64_t> scalar{1, 1, 1, 1};
    const size_t mask_value = tensor(uids.mask_value, f32, scalar, scalar, false, true);
    const size_t row = tensor(uids.row, CUDNN_DATA_INT32, dims, strides, true);
    const size_t col = tensor(uids.col, CUDNN_DATA_INT32, dims, strides, true);
    const size_t keep = tensor(uids.keep, CUDNN_DATA_BOOLEAN, dims, strides, true);
    const size_t masked = tensor(uids.masked, f32, dims, strides, true);
    pointwise(CUDNN_POINTWISE_GEN_INDEX, f32, scores, kNone, kNone, row, /*axis=*/2);
    pointwise(CUDNN_POINTWISE_GEN_INDEX, f32, scores, kNone, kNone, col, /*axis=*/3);
    pointwise(CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, row, col, kNone, keep);
    pointwise(CUDNN_POINTWISE_BINARY_SELECT, f32, scores, mask_value, keep, masked);
    return masked;
  }

  void reshape(size_t x, size_t y) {
    BackendDescriptor op(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    op.set_descriptor(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, part(x));
    op.set_descriptor(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, part(y));
    op.finalize("a reshape operation");
    ops_.push_back(keep(std::move(op)));
  }

  void reduction(cudnnReduceTensorOp_t reduce, size_t x, size_t y) {
    BackendDescriptor desc(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    desc.set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &reduce);
    desc.set_data_type(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_DATA_FLOAT);
    desc.finalize("a reduction descriptor");
    BackendDescriptor op(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    op.set_descriptor(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, part(x));
    op.set_descriptor(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, part(y));
    op.set_descriptor(CUDNN_ATTR_OPERATION_REDUCTION_DESC, desc);
    op.finalize("a reduction operation");
    keep(std::move(desc));
    ops_.push_back(keep(std::move(op)));
  }

  PlanEntry& entry_;
  cudnnHandle_t handle_;
  bool reordered_dq_accum_;
  std::vector<size_t> ops_;  // indices into entry_.parts, in graph order
};

// The first engine config of the heuristics (mode A, then B) that finalizes into an execution
// plan, stored in entry.plan; throws Refused when there is none.
void build_plan(PlanEntry& entry, cudnnHandle_t handle, size_t graph) {
  std::string last_refusal = "the heuristics returned no engine config";
  for (const cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_B}) {
    const char* mode_name = mode == CUDNN_HEUR_MODE_A ? "A" : "B";
    BackendDescriptor heuristics(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    heuristics.set_descriptor(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, entry.parts[graph]);
    heuristics.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    const cudnnStatus_t heuristics_status = heuristics.try_finalize();
    if (::zs::cuda::detail::cudnn_not_supported(heuristics_status)) {
      last_refusal = ::zs::detail::concat(
          "heuristics mode ", mode_name, ": ",
          ::zs::cuda::detail::cudnn_error_message(heuristics_status, "cudnnBackendFinalize"));
      continue;
    }
    ::zs::cuda::detail::cudnn_check(heuristics_status, "cudnnBackendFinalize(heuristics)", __FILE__,
                                    __LINE__);
    int64_t available = 0;
    ZS_CUDNN_CHECK(cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                            CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &available, nullptr));
    if (available <= 0) continue;
    std::vector<BackendDescriptor> configs;
    std::vector<cudnnBackendDescriptor_t> raw_configs;
    for (int64_t i = 0; i < available; ++i) {
      configs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
      raw_configs.push_back(configs.back().get());
    }
    int64_t returned = 0;
    ZS_CUDNN_CHECK(cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                            CUDNN_TYPE_BACKEND_DESCRIPTOR, available, &returned,
                                            raw_configs.data()));
    for (int64_t i = 0; i < returned && i < available; ++i) {
      BackendDescriptor& config = configs[static_cast<size_t>(i)];
      BackendDescriptor plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      plan.set_handle(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, handle);
      plan.set_descriptor(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, config);
      const cudnnStatus_t status = plan.try_finalize();
      if (status == CUDNN_STATUS_SUCCESS) {
        int64_t count = 0;
        ZS_CUDNN_CHECK(
            cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                     CUDNN_TYPE_INT64, 1, &count, &entry.workspace_bytes));
        entry.parts.push_back(std::move(config));
        entry.plan.push_back(std::move(plan));
        return;
      }
      const int category = CUDNN_STATUS_CATEGORY(status);
      if (category != CUDNN_STATUS_NOT_SUPPORTED && category != CUDNN_STATUS_BAD_PARAM) {
        ::zs::cuda::detail::cudnn_check(status, "cudnnBackendFinalize(execution plan)", __FILE__,
                                        __LINE__);
      }
      last_refusal = ::zs::detail::concat(
          "heuristics mode ", mode_name, ", engine config ", i, " of ", returned, ": ",
          ::zs::cuda::detail::cudnn_error_message(status, "cudnnBackendFinalize(execution plan)"));
    }
  }
  throw Refused{"no engine config finalized into an execution plan (last: " + last_refusal + ")"};
}

}  // namespace

struct CudnnHandle::State {
  // Used only while a forward or backward runs (the stream is alive then); the destructor touches
  // neither.
  const zs::cuda::Stream& stream;
  cudnnHandle_t handle = nullptr;  // created by ensure_handle()
  int compute_major = -1;          // of the stream's device, queried once
  // Few keys per run (one per attention shape of the model): a vector beats a map.
  std::vector<std::unique_ptr<PlanEntry>> entries;

  explicit State(const zs::cuda::Stream& s) : stream(s) {}
  ZS_DISALLOW_COPY(State);
  ~State() {
    entries.clear();  // plans before the handle they were built for
    if (handle != nullptr) ZS_CUDNN_CHECK_WARN(cudnnDestroy(handle));
  }

  void ensure_handle() {
    if (handle != nullptr) return;
    ZS_CUDNN_CHECK(cudnnCreate(&handle));
    try {
      ZS_CUDNN_CHECK(cudnnSetStream(handle, stream.get()));
    } catch (...) {
      ZS_CUDNN_CHECK_WARN(cudnnDestroy(handle));
      handle = nullptr;
      throw;
    }
  }

  // Before destruction when the stream may be gone (its allocator is): move the handle to the
  // legacy default stream so that cudnnDestroy never touches a destroyed stream.
  void forget_stream() {
    if (handle != nullptr) ZS_CUDNN_CHECK_WARN(cudnnSetStream(handle, nullptr));
  }

  // The device-level refusal ("" when cuDNN may be tried), queried once per handle.
  std::string device_refusal(const AttentionKey& key) {
    const size_t version = cudnnGetVersion();
    // cuDNN 9 encodes major·10000 + minor·100 + patch, cuDNN 8 major·1000 + minor·100 + patch.
    const bool v9 = version >= 90000;
    if (!v9 && (version < 8900 || version >= 10000)) {
      return ::zs::detail::concat("cuDNN version ", version, " is below 8.9");
    }
    if (!v9 && key.seq % 64 != 0) {
      return ::zs::detail::concat("cuDNN ", version,
                                  " (< 9.0) needs the sequence length to be a multiple of 64");
    }
    // cudnn-frontend declines SDPA, forward and backward, on these two releases.
    if (version == 91000 || version == 91001) {
      return ::zs::detail::concat("cuDNN ", version,
                                  ": fused attention has known bugs in 9.10.0 and 9.10.1");
    }
    if (key.backward) {
      // What cudnn-frontend's SDPA backward declines or works around for this graph (its
      // validate_sdpa_backward_support_surface and CompositeSDPABackwardNode).
      if (version <= 91500 && key.seq % 128 != 0) {
        return ::zs::detail::concat(
            "cuDNN ", version, " (<= 9.15.0) with T = ", key.seq,
            " not a multiple of 128: cudnn-frontend adds a padding mask to the backward there "
            "(without it the gradients can be NaN), which this graph does not have");
      }
      if (version < 8906 && key.head_dim() % 64 != 0) {
        return ::zs::detail::concat(
            "cuDNN ", version, " (< 8.9.6) needs head_dim to be a multiple of 64 for backward");
      }
    }
    if (compute_major < 0) {
      ZS_CUDA_CHECK(cudaDeviceGetAttribute(&compute_major, cudaDevAttrComputeCapabilityMajor,
                                           stream.device()));
    }
    if (compute_major < 8) {
      return ::zs::detail::concat("cuda:", stream.device(), " has compute capability ",
                                  compute_major, ".x, below the 8.0 fused attention needs");
    }
    return "";
  }

  PlanEntry& entry_for(const AttentionKey& key) {
    for (const auto& entry : entries) {
      if (entry->key == key) return *entry;
    }
    auto entry = std::make_unique<PlanEntry>();
    entry->key = key;
    entry->scale = 1.0f / std::sqrt(static_cast<float>(key.head_dim()));
    entry->refusal = shape_refusal(key);
    if (entry->refusal.empty()) entry->refusal = device_refusal(key);
    if (entry->refusal.empty()) {
      ensure_handle();
      // The backward's dQ accumulator as cudnn-frontend emits it now (plain fp32), else
      // F16x16-reordered as its releases for cuDNN 8.9 and 9.0 did: only the graph reads it back,
      // so its layout is cuDNN's business and either form computes the same gradient.
      for (const bool reordered_dq_accum : {false, true}) {
        if (reordered_dq_accum && !key.backward) break;
        try {
          GraphBuilder builder(*entry, handle, reordered_dq_accum);
          build_plan(*entry, handle, builder.build());
          entry->supported = true;
          break;
        } catch (const Refused& refused) {
          entry->refusal =
              reordered_dq_accum
                  ? entry->refusal + "; with an F16x16 dQ accumulator: " + refused.reason
                  : refused.reason;
          entry->plan.clear();
          entry->parts.clear();
        }
      }
      if (entry->supported) entry->refusal.clear();
    }
    if (!entry->supported) {
      ZS_LOG_DEBUG("attention: cuDNN fused {} not used for {}: {}", key.pass(), key.describe(),
                   entry->refusal);
    }
    entries.push_back(std::move(entry));
    return *entries.back();
  }
};

CudnnHandle::CudnnHandle(const zs::cuda::Stream& stream)
    : stream_(stream), state_(std::make_unique<State>(stream)) {}

CudnnHandle::~CudnnHandle() = default;

namespace {
void forget_stream(CudnnHandle& handle) { handle.state().forget_stream(); }
}  // namespace

namespace {
// Returns false, with `reason` in *why_not when asked for.
bool refuse(std::string* why_not, std::string reason) {
  if (why_not != nullptr) *why_not = std::move(reason);
  return false;
}

// The checks made at every call before a plan is looked up (not cached): "" when cuDNN may be
// tried, else why not. Sizes that make no attention problem throw.
std::string per_call_refusal(const char* what, int64_t batch, int64_t seq, int64_t channels,
                             int64_t n_head, std::initializer_list<const void*> pointers) {
  if (!cudnn_attention_enabled()) return "disabled by ZS_CUDNN_ATTENTION=0";
  ZS_CHECK(batch >= 0 && seq >= 0 && channels >= 0 && n_head >= 1 && channels % n_head == 0, what,
           ": bad sizes batch = ", batch, ", seq = ", seq, ", channels = ", channels,
           ", n_head = ", n_head, " (channels must be a multiple of n_head)");
  if (batch == 0 || seq == 0 || channels == 0) return "empty problem";
  for (const void* p : pointers) {
    if (!aligned16(p)) return "a buffer is not 16-byte aligned";
  }
  return "";
}

// Runs `entry`'s plan on the handle's stream with the tensors `uids` ↔ `pointers` (by-value
// scalars as host pointers) and the plan's `workspace`.
void execute_plan(CudnnHandle::State& state, PlanEntry& entry, const std::vector<int64_t>& uids,
                  std::vector<void*> pointers, void* workspace) {
  BackendDescriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.set_int64s(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, uids);
  pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
           static_cast<int64_t>(pointers.size()), pointers.data());
  pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
  ::zs::cuda::detail::cudnn_check(pack.try_finalize(), "cudnnBackendFinalize(variant pack)",
                                  __FILE__, __LINE__);
  ZS_CUDNN_CHECK(cudnnBackendExecute(state.handle, entry.plan.front().get(), pack.get()));
}
}  // namespace

bool cudnn_attention_forward(CudnnHandle& handle, const void* qkv, void* out, float* lse,
                             int64_t batch, int64_t seq, int64_t channels, int64_t n_head,
                             bool causal, DType dtype, const CudnnWorkspaceFn& workspace,
                             std::string* why_not) {
  const std::string declined =
      per_call_refusal("cudnn attention", batch, seq, channels, n_head, {qkv, out, lse});
  if (!declined.empty()) return refuse(why_not, declined);
  const AttentionKey key{batch, seq, channels, n_head, causal, dtype};
  zs::cuda::DeviceGuard guard(handle.stream().device());
  CudnnHandle::State& state = handle.state();
  PlanEntry& entry = state.entry_for(key);
  if (!entry.supported) return refuse(why_not, entry.refusal);

  void* workspace_ptr = nullptr;
  if (entry.workspace_bytes > 0) {
    workspace_ptr = workspace(static_cast<size_t>(entry.workspace_bytes));
    ZS_CHECK(workspace_ptr != nullptr, "cudnn attention: the workspace callback returned null for ",
             entry.workspace_bytes, " bytes");
  }
  const size_t element = dtype_size(dtype);
  const char* base = static_cast<const char*>(qkv);
  std::vector<int64_t> uids{kUidQ, kUidKT, kUidV, kUidO, kUidStats, kUidScale};
  std::vector<void*> pointers{const_cast<char*>(base),
                              const_cast<char*>(base + static_cast<size_t>(channels) * element),
                              const_cast<char*>(base + static_cast<size_t>(2 * channels) * element),
                              out,
                              lse,
                              &entry.scale};
  if (causal) {
    uids.push_back(kUidMaskValue);
    pointers.push_back(&entry.mask_value);
  }
  execute_plan(state, entry, uids, pointers, workspace_ptr);
  return true;
}

bool cudnn_attention_backward(CudnnHandle& handle, const void* qkv, const void* out,
                              const float* lse, const void* dout, void* dqkv, int64_t batch,
                              int64_t seq, int64_t channels, int64_t n_head, bool causal,
                              DType dtype, bool accumulate, const CudnnWorkspaceFn& workspace,
                              std::string* why_not) {
  const std::string declined = per_call_refusal("cudnn attention backward", batch, seq, channels,
                                                n_head, {qkv, out, lse, dout, dqkv});
  if (!declined.empty()) return refuse(why_not, declined);
  AttentionKey key{batch, seq, channels, n_head, causal, dtype};
  key.backward = true;
  zs::cuda::DeviceGuard guard(handle.stream().device());
  CudnnHandle::State& state = handle.state();
  PlanEntry& entry = state.entry_for(key);
  if (!entry.supported) return refuse(why_not, entry.refusal);

  // One workspace for the plan, the fp32 dQ accumulator, the dot rows and, when accumulating,
  // the staging dqkv that cuDNN writes and kernels.h add then adds into dqkv.
  const size_t element = dtype_size(dtype);
  const auto rows = static_cast<size_t>(batch * n_head * seq);
  const size_t plan_bytes = round_up_region(static_cast<size_t>(entry.workspace_bytes));
  const size_t dq_accum_bytes = rows * static_cast<size_t>(key.head_dim()) * sizeof(float);
  const size_t dot_bytes = rows * sizeof(float);
  const size_t dqkv_elements = static_cast<size_t>(batch * seq * 3 * channels);
  const size_t staging_bytes = accumulate ? dqkv_elements * element : 0;
  const size_t total =
      plan_bytes + round_up_region(dq_accum_bytes) + round_up_region(dot_bytes) + staging_bytes;
  char* workspace_base = static_cast<char*>(workspace(total));
  ZS_CHECK(workspace_base != nullptr,
           "cudnn attention backward: the workspace callback returned null for ", total, " bytes");
  void* plan_workspace = entry.workspace_bytes > 0 ? workspace_base : nullptr;
  char* dq_accum = workspace_base + plan_bytes;
  char* dot = dq_accum + round_up_region(dq_accum_bytes);
  char* target = accumulate ? dot + round_up_region(dot_bytes) : static_cast<char*>(dqkv);
  // Zeroed on the stream before the plan runs: the engine adds partial dQ sums into it.
  ZS_CUDA_CHECK(cudaMemsetAsync(dq_accum, 0, dq_accum_bytes, handle.stream().get()));

  const char* qkv_base = static_cast<const char*>(qkv);
  const size_t column = static_cast<size_t>(channels) * element;  // bytes from q to k, k to v
  std::vector<int64_t> uids{kBwdQ,   kBwdKT, kBwdVT, kBwdO,  kBwdDO,  kBwdStats,  kBwdScale,
                            kBwdOne, kBwdDQ, kBwdDK, kBwdDV, kBwdDot, kBwdDQAccum};
  std::vector<void*> pointers{const_cast<char*>(qkv_base),
                              const_cast<char*>(qkv_base + column),
                              const_cast<char*>(qkv_base + 2 * column),
                              const_cast<void*>(out),
                              const_cast<void*>(dout),
                              const_cast<float*>(lse),
                              &entry.scale,
                              &entry.one,
                              target,
                              target + column,
                              target + 2 * column,
                              dot,
                              dq_accum};
  if (causal) {
    uids.push_back(kBwdMaskValue);
    pointers.push_back(&entry.mask_value);
  }
  execute_plan(state, entry, uids, pointers, plan_workspace);
  if (accumulate) {
    add(dqkv, target, dqkv, static_cast<int64_t>(dqkv_elements), dtype, handle.stream().get());
  }
  return true;
}

#else  // !ZS_HAVE_CUDNN

struct CudnnHandle::State {
  bool logged = false;
};

CudnnHandle::CudnnHandle(const zs::cuda::Stream& stream)
    : stream_(stream), state_(std::make_unique<State>()) {}

CudnnHandle::~CudnnHandle() = default;

namespace {
void forget_stream(CudnnHandle&) {}
}  // namespace

namespace {
bool refuse_without_cudnn(CudnnHandle& handle, std::string* why_not) {
  const char* reason = "built without cuDNN";
  if (!handle.state().logged) {
    handle.state().logged = true;
    ZS_LOG_DEBUG("attention: cuDNN fused forward and backward not used: {}", reason);
  }
  if (why_not != nullptr) *why_not = reason;
  return false;
}
}  // namespace

bool cudnn_attention_forward(CudnnHandle& handle, const void*, void*, float*, int64_t, int64_t,
                             int64_t, int64_t, bool, DType, const CudnnWorkspaceFn&,
                             std::string* why_not) {
  return refuse_without_cudnn(handle, why_not);
}

bool cudnn_attention_backward(CudnnHandle& handle, const void*, const void*, const float*,
                              const void*, void*, int64_t, int64_t, int64_t, int64_t, bool, DType,
                              bool, const CudnnWorkspaceFn&, std::string* why_not) {
  return refuse_without_cudnn(handle, why_not);
}

#endif  // ZS_HAVE_CUDNN

// ---- the per-thread handle cache (ops/cuda/handle_cache.h)

namespace {
thread_local ThreadHandleCache<CudnnHandle> t_cudnn_handles(&forget_stream);
}  // namespace

CudnnHandle& thread_cudnn_handle(const zs::cuda::CudaAllocator& allocator) {
  return t_cudnn_handles.get(allocator);
}

}  // namespace zs::ops::cuda
