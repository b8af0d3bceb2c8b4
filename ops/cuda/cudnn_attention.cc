// The cuDNN fused attention forward (see cudnn_attention.h for the contract): the backend graph
// built in C, one execution plan per (shape, dtype, causal) key and handle, and the per-thread
// handle cache. Built with ZS_HAVE_CUDNN=1 when CMake found cuDNN (ops/cuda/CMakeLists.txt);
// otherwise the same functions exist and the forward answers "built without cuDNN".
//
// The graph, with the tensor uids of the variant pack (non-virtual) and of the intermediates
// (virtual, never in memory), in the order the operations are listed:
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
// Errors: building descriptors goes through ZS_CUDNN_CHECK, except the finalizes, whose
// NOT_SUPPORTED statuses are answers (the key is cached as refused); an execution plan that does
// not finalize for one engine config (NOT_SUPPORTED or BAD_PARAM, as cudnn-frontend skips
// candidates) moves on to the next config. Everything else throws.
#include "ops/cuda/cudnn_attention.h"

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "ops/cuda/handle_cache.h"
#include "runtime/error.h"
#include "runtime/logging.h"

#if ZS_HAVE_CUDNN
#include <cudnn_graph.h>

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

// What a plan depends on: the shape, the dtype and the mask (the pointers go in the variant pack).
struct AttentionKey {
  int64_t batch = 0;
  int64_t seq = 0;
  int64_t channels = 0;
  int64_t heads = 0;
  bool causal = false;
  DType dtype = DType::kF32;

  int64_t head_dim() const { return channels / heads; }
  bool operator==(const AttentionKey& other) const {
    return batch == other.batch && seq == other.seq && channels == other.channels &&
           heads == other.heads && causal == other.causal && dtype == other.dtype;
  }
  std::string describe() const {
    return ::zs::detail::concat("[B=", batch, ", T=", seq, ", C=", channels, ", H=", heads,
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
  return "";
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

constexpr int64_t kAlignment = 16;  // bytes; Q/K/V/O/Stats pointers are checked per call

// Tensor uids (see the file comment).
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
  // Every descriptor the plan was built from (tensors, operations, graph, engine config), kept
  // alive for the plan's lifetime; declared before `plan` so that the plan is destroyed first.
  std::vector<BackendDescriptor> parts;
  std::vector<BackendDescriptor> plan;  // 0 or 1 execution plan
};

// The operation graph of a key, built into `entry.parts`; returns the graph descriptor's index.
class GraphBuilder {
 public:
  GraphBuilder(PlanEntry& entry, cudnnHandle_t handle) : entry_(entry), handle_(handle) {}

  size_t build() {
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
      const size_t mask_value = tensor(kUidMaskValue, f32, scalar, scalar, false, true);
      const size_t row = tensor(kUidRow, CUDNN_DATA_INT32, scores_dims, scores_strides, true);
      const size_t col = tensor(kUidCol, CUDNN_DATA_INT32, scores_dims, scores_strides, true);
      const size_t keep = tensor(kUidKeep, CUDNN_DATA_BOOLEAN, scores_dims, scores_strides, true);
      const size_t masked = tensor(kUidMasked, f32, scores_dims, scores_strides, true);
      pointwise(CUDNN_POINTWISE_GEN_INDEX, f32, scores, kNone, kNone, row, /*axis=*/2);
      pointwise(CUDNN_POINTWISE_GEN_INDEX, f32, scores, kNone, kNone, col, /*axis=*/3);
      pointwise(CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, row, col, kNone, keep);
      pointwise(CUDNN_POINTWISE_BINARY_SELECT, f32, scores, mask_value, keep, masked);
      scores = masked;
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

    std::vector<cudnnBackendDescriptor_t> raw_ops;
    for (size_t i : ops_) raw_ops.push_back(entry_.parts[i].get());
    BackendDescriptor graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
              static_cast<int64_t>(raw_ops.size()), raw_ops.data());
    graph.set_handle(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, handle_);
    graph.finalize("the operation graph");
    return keep(std::move(graph));
  }

 private:
  static constexpr size_t kNone = static_cast<size_t>(-1);

  size_t keep(BackendDescriptor&& d) {
    entry_.parts.push_back(std::move(d));
    return entry_.parts.size() - 1;
  }
  const BackendDescriptor& part(size_t i) const { return entry_.parts[i]; }

  size_t tensor(int64_t uid, cudnnDataType_t type, const std::vector<int64_t>& dims,
                const std::vector<int64_t>& strides, bool is_virtual = false,
                bool by_value = false) {
    BackendDescriptor t(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    t.set_data_type(CUDNN_ATTR_TENSOR_DATA_TYPE, type);
    t.set_int64s(CUDNN_ATTR_TENSOR_DIMENSIONS, dims);
    t.set_int64s(CUDNN_ATTR_TENSOR_STRIDES, strides);
    t.set_int64(CUDNN_ATTR_TENSOR_UNIQUE_ID, uid);
    t.set_int64(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, kAlignment);
    t.set_bool(CUDNN_ATTR_TENSOR_IS_VIRTUAL, is_virtual);
    if (by_value) t.set_bool(CUDNN_ATTR_TENSOR_IS_BY_VALUE, true);
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
  // Used only while a forward runs (the stream is alive then); the destructor touches neither.
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
      try {
        GraphBuilder builder(*entry, handle);
        build_plan(*entry, handle, builder.build());
        entry->supported = true;
      } catch (const Refused& refused) {
        entry->refusal = refused.reason;
        entry->plan.clear();
        entry->parts.clear();
      }
    }
    if (!entry->supported) {
      ZS_LOG_DEBUG("attention: cuDNN fused forward not used for {}: {}", key.describe(),
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

bool cudnn_attention_forward(CudnnHandle& handle, const void* qkv, void* out, float* lse,
                             int64_t batch, int64_t seq, int64_t channels, int64_t n_head,
                             bool causal, DType dtype, const CudnnWorkspaceFn& workspace,
                             std::string* why_not) {
  auto refuse = [why_not](std::string reason) {
    if (why_not != nullptr) *why_not = std::move(reason);
    return false;
  };
  if (!cudnn_attention_enabled()) return refuse("disabled by ZS_CUDNN_ATTENTION=0");
  ZS_CHECK(batch >= 0 && seq >= 0 && channels >= 0 && n_head >= 1 && channels % n_head == 0,
           "cudnn attention: bad sizes batch = ", batch, ", seq = ", seq, ", channels = ", channels,
           ", n_head = ", n_head, " (channels must be a multiple of n_head)");
  if (batch == 0 || seq == 0 || channels == 0) return refuse("empty problem");
  if (!aligned16(qkv) || !aligned16(out) || !aligned16(lse)) {
    return refuse("qkv, out or lse is not 16-byte aligned");
  }
  const AttentionKey key{batch, seq, channels, n_head, causal, dtype};
  zs::cuda::DeviceGuard guard(handle.stream().device());
  CudnnHandle::State& state = handle.state();
  PlanEntry& entry = state.entry_for(key);
  if (!entry.supported) return refuse(entry.refusal);

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
  BackendDescriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.set_int64s(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, uids);
  pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
           static_cast<int64_t>(pointers.size()), pointers.data());
  pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace_ptr);
  ::zs::cuda::detail::cudnn_check(pack.try_finalize(), "cudnnBackendFinalize(variant pack)",
                                  __FILE__, __LINE__);
  ZS_CUDNN_CHECK(cudnnBackendExecute(state.handle, entry.plan.front().get(), pack.get()));
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

bool cudnn_attention_forward(CudnnHandle& handle, const void*, void*, float*, int64_t, int64_t,
                             int64_t, int64_t, bool, DType, const CudnnWorkspaceFn&,
                             std::string* why_not) {
  const char* reason = "built without cuDNN";
  if (!handle.state().logged) {
    handle.state().logged = true;
    ZS_LOG_DEBUG("attention: cuDNN fused forward not used: {}", reason);
  }
  if (why_not != nullptr) *why_not = reason;
  return false;
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
