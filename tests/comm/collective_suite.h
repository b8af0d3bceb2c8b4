// Backend-agnostic collective test suite (header-only): every collective of a Communicator
// against a serial reference, for fp32, fp16, bf16, int32 and int64 and sizes 0, 1, 7, 4097 and ~1M
// elements, on whatever group `comm` spans. The local tests call it from N rank threads; the
// MPI tests call it from a main run under mpirun. Every rank of the group must call it with the
// same options (it issues the same collectives in the same order on every rank).
//
// Inputs are closed-form, so every rank computes every expected result without communicating:
// element i of a buffer that rank r fills carries the code c(r, i, salt), an integer in
// [-128, 127] (the salt differs per collective, so stale data from an earlier call never
// passes). A code c is stored as c/8 in fp32/fp16/bf16 — exact in all three, and sums of such
// values over any realistic number of ranks are exact in fp32, so the reference does not depend
// on summation order — as c·65537 in int32 (both halves of the word move) and as
// c·0x0001000100010001 in int64 (all four 16-bit quarters move; sums over up to 2^7 ranks stay
// exact).
//
// Expected values, bit for bit (no tolerance anywhere):
// - sum: the exact fp32 sum, rounded once to fp16/bf16 (round to nearest even). A backend that
//   accumulates in the 16-bit type, or rounds per step, fails.
// - avg: that fp32 sum divided by size() in fp32 (one fp32 rounding when size() is not a power of
//   two), then rounded once to fp16/bf16. A backend must divide, not multiply by 1/size().
//   int32/int64: the integer sum divided by size() with C++ `/` (truncation toward zero).
// - max / min: exact. Integer sums: exact (the codes cannot overflow).
// - reduce_scatter/all_gather: the size list is the per-rank shard size. all_gather runs twice:
//   from a separate shard, and in place (the shard is the rank's slot of full).
// - broadcast, gather, scatter: run once from every root.
// - send/recv: a ring (rank r sends to r+1 and receives from r−1); even ranks send first and odd
//   ranks receive first, so the ring cannot deadlock even if a backend's send waits for the
//   matching recv. Skipped on one rank (there is no peer).
//
// Failures are reported with EXPECT-style non-fatal failures that name the collective, reduce
// op, dtype, size, root and rank, plus the first mismatching element and the mismatch count.
// The suite never returns early on a mismatch, so a wrong result on one rank does not leave the
// other ranks waiting in a collective; errors thrown by the communicator propagate.
//
// Thread-safety: each call uses only `comm` and buffers it allocates itself; ranks that are
// threads of one process may run it concurrently.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "runtime/allocator.h"
#include "runtime/half.h"
#include "runtime/tensor.h"

namespace zs::testing {

struct CollectiveSuiteOptions {
  // Element counts (per-rank shard counts for reduce_scatter / all_gather / gather / scatter).
  std::vector<int64_t> sizes = {0, 1, 7, 4097, (int64_t{1} << 20) + 3};
  std::vector<DType> dtypes = {DType::kF32, DType::kF16, DType::kBF16, DType::kI32, DType::kI64};
  // Timeout and tag of every collective the suite issues.
  comm::CollectiveOptions collective = {};
};

namespace suite_detail {

// The code of element `index` of a buffer filled by `rank` for the collective `salt`.
inline int32_t code(int rank, int64_t index, int salt) {
  const uint64_t x = static_cast<uint64_t>(rank) * 131u + static_cast<uint64_t>(index) * 29u +
                     static_cast<uint64_t>(salt) * 53u + (static_cast<uint64_t>(index) >> 8);
  return static_cast<int32_t>(x & 255u) - 128;
}

inline float float_of(int32_t c) { return static_cast<float>(c) * 0.125f; }
inline int32_t int_of(int32_t c) { return c * 65537; }
inline int64_t int64_of(int32_t c) { return int64_t{c} * int64_t{0x0001000100010001}; }

// Stores a float (already exact or to be rounded once) as element j of a `dtype` buffer.
inline void store_float(void* base, DType dtype, size_t j, float value) {
  switch (dtype) {
    case DType::kF32:
      static_cast<float*>(base)[j] = value;
      break;
    case DType::kF16:
      static_cast<uint16_t*>(base)[j] = float_to_half_bits(value);
      break;
    case DType::kBF16:
      static_cast<uint16_t*>(base)[j] = float_to_bf16_bits(value);
      break;
    case DType::kI32:
      static_cast<int32_t*>(base)[j] = static_cast<int32_t>(value);
      break;
    case DType::kI64:
      static_cast<int64_t*>(base)[j] = static_cast<int64_t>(value);
      break;
  }
}

// Fills `count` elements of `base` so that element j holds code_of(j). The dtype switch is
// outside the loops (this runs over hundreds of millions of elements per suite).
template <typename CodeOf>
void fill_codes(void* base, DType dtype, size_t count, CodeOf code_of) {
  switch (dtype) {
    case DType::kF32: {
      auto* out = static_cast<float*>(base);
      for (size_t j = 0; j < count; ++j) out[j] = float_of(code_of(j));
      break;
    }
    case DType::kI32: {
      auto* out = static_cast<int32_t*>(base);
      for (size_t j = 0; j < count; ++j) out[j] = int_of(code_of(j));
      break;
    }
    case DType::kI64: {
      auto* out = static_cast<int64_t*>(base);
      for (size_t j = 0; j < count; ++j) out[j] = int64_of(code_of(j));
      break;
    }
    case DType::kF16:
    case DType::kBF16: {
      uint16_t bits_of_code[256];  // codes are in [-128, 127]
      for (int c = -128; c < 128; ++c) {
        bits_of_code[c + 128] = dtype == DType::kF16 ? float_to_half_bits(float_of(c))
                                                     : float_to_bf16_bits(float_of(c));
      }
      auto* out = static_cast<uint16_t*>(base);
      for (size_t j = 0; j < count; ++j) out[j] = bits_of_code[code_of(j) + 128];
      break;
    }
  }
}

// A byte pattern no code produces for any dtype (0xA5A5 as fp16/bf16 is a negative normal with a
// fraction no c/8 has; 0xA5A5A5A5 is not c·65537 or c/8, and 0xA5A5A5A5A5A5A5A5 not
// c·0x0001000100010001), to show untouched output.
inline void fill_sentinel(const Tensor& t) {
  if (t.nbytes() > 0) std::memset(t.raw_data(), 0xA5, t.nbytes());
}

inline std::string element_string(const void* base, DType dtype, size_t j) {
  std::ostringstream out;
  switch (dtype) {
    case DType::kF32: {
      const float v = static_cast<const float*>(base)[j];
      uint32_t bits;
      std::memcpy(&bits, &v, sizeof bits);
      out << v << " (0x" << std::hex << bits << ")";
      break;
    }
    case DType::kF16: {
      const uint16_t bits = static_cast<const uint16_t*>(base)[j];
      out << half_bits_to_float(bits) << " (0x" << std::hex << bits << ")";
      break;
    }
    case DType::kBF16: {
      const uint16_t bits = static_cast<const uint16_t*>(base)[j];
      out << bf16_bits_to_float(bits) << " (0x" << std::hex << bits << ")";
      break;
    }
    case DType::kI32:
      out << static_cast<const int32_t*>(base)[j];
      break;
    case DType::kI64:
      out << static_cast<const int64_t*>(base)[j];
      break;
  }
  return out.str();
}

// Compares `actual` with the expected bytes element by element; one failure per buffer, naming
// `what`, the first mismatch and how many elements differ.
inline void expect_equal_bits(const std::string& what, const Tensor& actual,
                              const std::vector<unsigned char>& expected) {
  const size_t esize = dtype_size(actual.dtype());
  const size_t count = static_cast<size_t>(actual.numel());
  if (count * esize != expected.size()) {
    ADD_FAILURE() << what << ": output holds " << count << " elements, the reference "
                  << expected.size() / esize;
    return;
  }
  if (count == 0) return;
  const auto* got = static_cast<const unsigned char*>(actual.raw_data());
  if (std::memcmp(got, expected.data(), expected.size()) == 0) return;
  size_t first = count;
  size_t mismatches = 0;
  for (size_t j = 0; j < count; ++j) {
    if (std::memcmp(got + j * esize, expected.data() + j * esize, esize) != 0) {
      if (first == count) first = j;
      ++mismatches;
    }
  }
  ADD_FAILURE() << what << ": " << mismatches << " of " << count
                << " elements differ from the serial reference; first at element " << first
                << ": expected " << element_string(expected.data(), actual.dtype(), first)
                << ", got " << element_string(got, actual.dtype(), first);
}

template <comm::ReduceOp kOp, typename T>
inline T combine_reference(T acc, T x) {
  if constexpr (kOp == comm::ReduceOp::kSum || kOp == comm::ReduceOp::kAvg) {
    return acc + x;
  } else if constexpr (kOp == comm::ReduceOp::kMax) {
    return x > acc ? x : acc;
  } else {
    return x < acc ? x : acc;
  }
}

// The integer reduction of `count` elements into `out`: value_of maps a code to the element.
template <comm::ReduceOp kOp, typename Int, typename ValueOf, typename CodeOf>
void integer_reference(unsigned char* out, int size, size_t count, ValueOf value_of,
                       CodeOf code_of) {
  auto* result = reinterpret_cast<Int*>(out);
  for (size_t j = 0; j < count; ++j) {
    Int acc = value_of(code_of(0, j));
    for (int q = 1; q < size; ++q) acc = combine_reference<kOp>(acc, value_of(code_of(q, j)));
    if (kOp == comm::ReduceOp::kAvg) acc /= size;
    result[j] = acc;
  }
}

template <comm::ReduceOp kOp, typename CodeOf>
std::vector<unsigned char> reduced_reference_op(DType dtype, int size, size_t count,
                                                CodeOf code_of) {
  std::vector<unsigned char> out(count * dtype_size(dtype));
  if (dtype == DType::kI32) {
    integer_reference<kOp, int32_t>(out.data(), size, count, int_of, code_of);
    return out;
  }
  if (dtype == DType::kI64) {
    integer_reference<kOp, int64_t>(out.data(), size, count, int64_of, code_of);
    return out;
  }
  std::vector<float> result(count);
  for (size_t j = 0; j < count; ++j) {
    float acc = float_of(code_of(0, j));
    for (int q = 1; q < size; ++q) acc = combine_reference<kOp>(acc, float_of(code_of(q, j)));
    if (kOp == comm::ReduceOp::kAvg) acc /= static_cast<float>(size);
    result[j] = acc;
  }
  for (size_t j = 0; j < count; ++j) store_float(out.data(), dtype, j, result[j]);
  return out;
}

// Expected bytes of `count` elements, each the reduction over ranks 0..size−1 of
// code_of(rank, j), with the rounding rules in the file comment.
template <typename CodeOf>
std::vector<unsigned char> reduced_reference(DType dtype, comm::ReduceOp op, int size, size_t count,
                                             CodeOf code_of) {
  switch (op) {
    case comm::ReduceOp::kSum:
      return reduced_reference_op<comm::ReduceOp::kSum>(dtype, size, count, code_of);
    case comm::ReduceOp::kAvg:
      return reduced_reference_op<comm::ReduceOp::kAvg>(dtype, size, count, code_of);
    case comm::ReduceOp::kMax:
      return reduced_reference_op<comm::ReduceOp::kMax>(dtype, size, count, code_of);
    case comm::ReduceOp::kMin:
      return reduced_reference_op<comm::ReduceOp::kMin>(dtype, size, count, code_of);
  }
  return {};
}

// Expected bytes of `blocks` blocks of `count` elements, element i of block q = code_of(q, i)
// (a gathered buffer, rank-major).
template <typename CodeOf>
std::vector<unsigned char> plain_reference(DType dtype, int blocks, size_t count, CodeOf code_of) {
  const size_t block_bytes = count * dtype_size(dtype);
  std::vector<unsigned char> out(block_bytes * static_cast<size_t>(blocks));
  for (int q = 0; q < blocks; ++q) {
    fill_codes(out.data() + block_bytes * static_cast<size_t>(q), dtype, count,
               [&](size_t i) { return code_of(q, i); });
  }
  return out;
}

inline std::string label(const char* collective, const char* op, DType dtype, int64_t count,
                         int root, const comm::Communicator& comm) {
  std::ostringstream out;
  out << collective;
  if (op) out << " " << op;
  out << " " << dtype_name(dtype) << " count=" << count;
  if (root >= 0) out << " root=" << root;
  out << " on rank " << comm.rank() << " of " << comm.size() << " (" << comm.backend_name() << ")";
  return out.str();
}

constexpr comm::ReduceOp kOps[] = {comm::ReduceOp::kSum, comm::ReduceOp::kAvg, comm::ReduceOp::kMax,
                                   comm::ReduceOp::kMin};

class Suite {
 public:
  Suite(comm::Communicator& comm, const CollectiveSuiteOptions& options)
      : comm_(comm), options_(options), rank_(comm.rank()), size_(comm.size()) {}

  Tensor buffer(int64_t count, DType dtype, const char* name) {
    return Tensor::empty({count}, dtype, allocator_, MemoryCategory::kCommBuffers, name);
  }

  // Four all_reduces (one per op) in flight at once, then checked: also exercises the queue.
  void all_reduce(DType dtype, int64_t count, int salt) {
    std::vector<Tensor> tensors;
    std::vector<comm::WorkPtr> works;
    const size_t n = static_cast<size_t>(count);
    for (int k = 0; k < 4; ++k) {
      Tensor t = buffer(count, dtype, "all_reduce.data");
      const int s = salt + k;
      fill_codes(data(t), dtype, n, [&](size_t j) { return code(rank_, j, s); });
      works.push_back(comm_.all_reduce(t, kOps[k], options_.collective));
      tensors.push_back(t);
    }
    for (int k = 0; k < 4; ++k) {
      works[k]->wait();
      const int s = salt + k;
      expect_equal_bits(label("all_reduce", comm::reduce_op_name(kOps[k]), dtype, count, -1, comm_),
                        tensors[k],
                        reduced_reference(dtype, kOps[k], size_, n,
                                          [&](int q, size_t j) { return code(q, j, s); }));
    }
  }

  void reduce_scatter(DType dtype, int64_t count, int salt) {
    const size_t n = static_cast<size_t>(count);
    for (int k = 0; k < 4; ++k) {
      const int s = salt + k;
      Tensor full = buffer(count * size_, dtype, "reduce_scatter.full");
      Tensor shard = buffer(count, dtype, "reduce_scatter.shard");
      fill_codes(data(full), dtype, n * size_, [&](size_t j) { return code(rank_, j, s); });
      fill_sentinel(shard);
      comm_.reduce_scatter(full, shard, kOps[k], options_.collective)->wait();
      const size_t begin = n * static_cast<size_t>(rank_);
      expect_equal_bits(
          label("reduce_scatter", comm::reduce_op_name(kOps[k]), dtype, count, -1, comm_), shard,
          reduced_reference(dtype, kOps[k], size_, n,
                            [&](int q, size_t j) { return code(q, begin + j, s); }));
    }
  }

  void all_gather(DType dtype, int64_t count, int salt) {
    const size_t n = static_cast<size_t>(count);
    Tensor shard = buffer(count, dtype, "all_gather.shard");
    Tensor full = buffer(count * size_, dtype, "all_gather.full");
    fill_codes(data(shard), dtype, n, [&](size_t j) { return code(rank_, j, salt); });
    fill_sentinel(full);
    comm_.all_gather(shard, full, options_.collective)->wait();
    expect_equal_bits(
        label("all_gather", nullptr, dtype, count, -1, comm_), full,
        plain_reference(dtype, size_, n, [&](int q, size_t i) { return code(q, i, salt); }));
  }

  // The in-place form: the shard is this rank's slot of full (Communicator::rank_slice). The
  // other slots start as sentinels, which the gather must overwrite; the rank's own must stay.
  void all_gather_in_place(DType dtype, int64_t count, int salt) {
    const size_t n = static_cast<size_t>(count);
    Tensor full = buffer(count * size_, dtype, "all_gather_in_place.full");
    fill_sentinel(full);
    Tensor shard = comm_.rank_slice(full);
    fill_codes(data(shard), dtype, n, [&](size_t j) { return code(rank_, j, salt); });
    comm_.all_gather(shard, full, options_.collective)->wait();
    expect_equal_bits(
        label("all_gather (in place)", nullptr, dtype, count, -1, comm_), full,
        plain_reference(dtype, size_, n, [&](int q, size_t i) { return code(q, i, salt); }));
  }

  void broadcast(DType dtype, int64_t count, int salt) {
    const size_t n = static_cast<size_t>(count);
    for (int root = 0; root < size_; ++root) {
      const int s = salt + root;
      Tensor t = buffer(count, dtype, "broadcast.data");
      // Non-roots start from their own codes, which the broadcast must overwrite.
      fill_codes(data(t), dtype, n, [&](size_t j) { return code(rank_, j, s); });
      comm_.broadcast(t, root, options_.collective)->wait();
      expect_equal_bits(
          label("broadcast", nullptr, dtype, count, root, comm_), t,
          plain_reference(dtype, 1, n, [&](int, size_t j) { return code(root, j, s); }));
    }
  }

  void gather(DType dtype, int64_t count, int salt) {
    const size_t n = static_cast<size_t>(count);
    for (int root = 0; root < size_; ++root) {
      const int s = salt + root;
      Tensor in = buffer(count, dtype, "gather.in");
      fill_codes(data(in), dtype, n, [&](size_t j) { return code(rank_, j, s); });
      Tensor out;  // undefined off the root, as the Communicator allows
      if (rank_ == root) {
        out = buffer(count * size_, dtype, "gather.out");
        fill_sentinel(out);
      }
      comm_.gather(in, out, root, options_.collective)->wait();
      if (rank_ == root) {
        expect_equal_bits(
            label("gather", nullptr, dtype, count, root, comm_), out,
            plain_reference(dtype, size_, n, [&](int q, size_t i) { return code(q, i, s); }));
      }
      expect_equal_bits(
          label("gather (input left unchanged)", nullptr, dtype, count, root, comm_), in,
          plain_reference(dtype, 1, n, [&](int, size_t j) { return code(rank_, j, s); }));
    }
  }

  void scatter(DType dtype, int64_t count, int salt) {
    const size_t n = static_cast<size_t>(count);
    for (int root = 0; root < size_; ++root) {
      const int s = salt + root;
      Tensor in;  // undefined off the root
      if (rank_ == root) {
        in = buffer(count * size_, dtype, "scatter.in");
        // Slice q of the root's input is what rank q must receive; codes of (q + root) so the
        // data is visibly the root's, not a rank's own.
        for (int q = 0; q < size_; ++q) {
          fill_codes(static_cast<char*>(data(in)) + q * n * dtype_size(dtype), dtype, n,
                     [&](size_t i) { return code(q + 7 * root, i, s); });
        }
      }
      Tensor out = buffer(count, dtype, "scatter.out");
      fill_sentinel(out);
      comm_.scatter(in, out, root, options_.collective)->wait();
      expect_equal_bits(label("scatter", nullptr, dtype, count, root, comm_), out,
                        plain_reference(dtype, 1, n, [&](int, size_t j) {
                          return code(rank_ + 7 * root, j, s);
                        }));
    }
  }

  void send_recv_ring(DType dtype, int64_t count, int salt) {
    if (size_ < 2) return;
    const size_t n = static_cast<size_t>(count);
    const int next = (rank_ + 1) % size_;
    const int prev = (rank_ + size_ - 1) % size_;
    Tensor outgoing = buffer(count, dtype, "ring.outgoing");
    Tensor incoming = buffer(count, dtype, "ring.incoming");
    fill_codes(data(outgoing), dtype, n, [&](size_t j) { return code(rank_, j, salt); });
    fill_sentinel(incoming);
    if (rank_ % 2 == 0) {
      comm_.send(outgoing, next, options_.collective)->wait();
      comm_.recv(incoming, prev, options_.collective)->wait();
    } else {
      comm_.recv(incoming, prev, options_.collective)->wait();
      comm_.send(outgoing, next, options_.collective)->wait();
    }
    expect_equal_bits(
        label("recv (ring)", nullptr, dtype, count, -1, comm_), incoming,
        plain_reference(dtype, 1, n, [&](int, size_t j) { return code(prev, j, salt); }));
  }

  void run() {
    int salt = 1;
    comm_.barrier(options_.collective)->wait();
    for (DType dtype : options_.dtypes) {
      for (int64_t count : options_.sizes) {
        all_reduce(dtype, count, salt);
        salt += 4;
        reduce_scatter(dtype, count, salt);
        salt += 4;
        all_gather(dtype, count, salt);
        salt += 1;
        all_gather_in_place(dtype, count, salt);
        salt += 1;
        broadcast(dtype, count, salt);
        salt += size_;
        gather(dtype, count, salt);
        salt += size_;
        scatter(dtype, count, salt);
        salt += size_;
        send_recv_ring(dtype, count, salt);
        salt += 1;
      }
    }
    // Barriers back to back, then one in flight with a collective queued behind it.
    for (int k = 0; k < 3; ++k) comm_.barrier(options_.collective)->wait();
    comm::WorkPtr barrier = comm_.barrier(options_.collective);
    Tensor t = buffer(1, DType::kI32, "barrier.probe");
    t.data<int32_t>()[0] = rank_ + 1;
    comm::WorkPtr sum = comm_.all_reduce(t, comm::ReduceOp::kSum, options_.collective);
    barrier->wait();
    sum->wait();
    EXPECT_EQ(t.data<int32_t>()[0], size_ * (size_ + 1) / 2)
        << "all_reduce after barrier on rank " << rank_ << " of " << size_;
  }

 private:
  static void* data(const Tensor& t) { return t.numel() > 0 ? t.raw_data() : nullptr; }

  comm::Communicator& comm_;
  const CollectiveSuiteOptions& options_;
  const int rank_;
  const int size_;
  CpuAllocator allocator_{nullptr};
};

}  // namespace suite_detail

// Runs every collective of `comm` against the serial reference (see the file comment). Call it
// on every rank of the group with the same options.
inline void run_collective_suite(comm::Communicator& comm,
                                 const CollectiveSuiteOptions& options = {}) {
  suite_detail::Suite suite(comm, options);
  suite.run();
}

}  // namespace zs::testing
