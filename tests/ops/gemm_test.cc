// Tests of ops/cpu/gemm.h: sgemm against a naive double-precision reference on all four transpose
// combinations, odd sizes, padded and strided leading dimensions, the beta = 0 / beta = 1 / k = 0
// contracts, argument checks, calls from inside an OpenMP parallel region, and the per-thread
// intra-op thread setting with two ranks-as-threads calling at once. Whatever backend this build
// chose (ZS_GEMM) is the one under test.
#include "ops/cpu/gemm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "runtime/error.h"

namespace zs::ops::cpu {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// A row-major matrix stored rows x ld (ld >= cols); the padding holds a sentinel so a test can
// see that sgemm never wrote it.
struct StridedMatrix {
  int64_t rows, cols, ld;
  std::vector<float> values;

  StridedMatrix(int64_t rows, int64_t cols, int64_t pad, float fill = -7.0f)
      : rows(rows), cols(cols), ld(cols + pad), values(std::max<int64_t>(1, rows * ld), fill) {}
  float& at(int64_t i, int64_t j) { return values[i * ld + j]; }
  float at(int64_t i, int64_t j) const { return values[i * ld + j]; }
  float* data() { return values.data(); }
  const float* data() const { return values.data(); }
};

StridedMatrix random_matrix(int64_t rows, int64_t cols, int64_t pad, std::mt19937& rng) {
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  StridedMatrix matrix(rows, cols, pad);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) matrix.at(i, j) = uniform(rng);
  return matrix;
}

struct GemmCase {
  bool trans_a, trans_b;
  int64_t m, n, k;
  float alpha, beta;
  int64_t pad;  // extra floats per row of A, B and C
};

std::string describe(const GemmCase& g) {
  return "trans_a=" + std::to_string(g.trans_a) + " trans_b=" + std::to_string(g.trans_b) +
         " m=" + std::to_string(g.m) + " n=" + std::to_string(g.n) + " k=" + std::to_string(g.k) +
         " alpha=" + std::to_string(g.alpha) + " beta=" + std::to_string(g.beta) +
         " pad=" + std::to_string(g.pad);
}

// Runs sgemm on random operands (C starts random, or NaN when beta == 0) and compares with a
// double-precision reference. Returns the number of mismatches (0 on success) so a thread can
// report it without gtest assertions off the main thread.
int64_t run_and_compare(const GemmCase& g, uint32_t seed, std::string* first_mismatch) {
  std::mt19937 rng(seed);
  StridedMatrix a =
      g.trans_a ? random_matrix(g.k, g.m, g.pad, rng) : random_matrix(g.m, g.k, g.pad, rng);
  StridedMatrix b =
      g.trans_b ? random_matrix(g.n, g.k, g.pad, rng) : random_matrix(g.k, g.n, g.pad, rng);
  StridedMatrix c = random_matrix(g.m, g.n, g.pad, rng);
  if (g.beta == 0.0f) {
    for (int64_t i = 0; i < g.m; ++i)
      for (int64_t j = 0; j < g.n; ++j) c.at(i, j) = kNaN;
  }
  const StridedMatrix c_before = c;

  sgemm(g.trans_a, g.trans_b, g.m, g.n, g.k, g.alpha, a.data(), a.ld, b.data(), b.ld, g.beta,
        c.data(), c.ld);

  auto op_a = [&](int64_t i, int64_t p) { return g.trans_a ? a.at(p, i) : a.at(i, p); };
  auto op_b = [&](int64_t p, int64_t j) { return g.trans_b ? b.at(j, p) : b.at(p, j); };
  // Tolerance: each C entry is a k-term fp32 dot product, scaled by alpha and added to beta * C.
  // Whatever order and blocking the backend sums in, the rounding error of such an inner product
  // is at most gamma_k * sum_p |a_ip * b_pj| with gamma_k ~ k * u, u = 2^-24 (Higham, Accuracy
  // and Stability of Numerical Algorithms, 2nd ed., eq. 3.5); scaling by alpha and adding
  // beta * c add a few roundings more. So the error is bounded by (k + 3) * u times the magnitude
  // sum |alpha| * sum_p |a_ip * b_pj| + |beta * c_ij|, which we double for margin. The inputs are
  // exact floats and the reference is computed in double, whose own error (~k * 2^-53) is
  // negligible. Bounding against the magnitude sum rather than |c_ij| keeps the test sound under
  // cancellation, while a wrong element, transpose or stride gives errors of order 1.
  const double u = std::ldexp(1.0, -24);
  const double tolerance = 2.0 * static_cast<double>(g.k + 3) * u;
  int64_t mismatches = 0;
  for (int64_t i = 0; i < g.m; ++i) {
    for (int64_t j = 0; j < g.n; ++j) {
      double dot = 0.0, magnitude = 0.0;
      for (int64_t p = 0; p < g.k; ++p) {
        double term = static_cast<double>(op_a(i, p)) * op_b(p, j);
        dot += term;
        magnitude += std::fabs(term);
      }
      double old_c = g.beta == 0.0f ? 0.0 : static_cast<double>(c_before.at(i, j));
      double expected = g.alpha * dot + g.beta * old_c;
      double bound = tolerance * (std::fabs(g.alpha) * magnitude + std::fabs(g.beta * old_c));
      double got = c.at(i, j);
      if (!(std::fabs(got - expected) <= bound)) {
        if (mismatches++ == 0 && first_mismatch) {
          *first_mismatch = describe(g) + ": C(" + std::to_string(i) + "," + std::to_string(j) +
                            ") = " + std::to_string(got) + ", expected " +
                            std::to_string(expected) + " +- " + std::to_string(bound);
        }
      }
    }
    // The padding after each row of C is not part of C and must keep its sentinel.
    for (int64_t j = g.n; j < c.ld; ++j) {
      if (c.at(i, j) != c_before.at(i, j)) {
        if (mismatches++ == 0 && first_mismatch) {
          *first_mismatch = describe(g) + ": padding C(" + std::to_string(i) + "," +
                            std::to_string(j) + ") was overwritten";
        }
      }
    }
  }
  return mismatches;
}

void expect_matches_reference(const GemmCase& g, uint32_t seed = 1) {
  std::string first_mismatch;
  EXPECT_EQ(run_and_compare(g, seed, &first_mismatch), 0) << first_mismatch;
}

// Odd sizes on both sides of the backends' block sizes, each alone and against the others.
const std::vector<std::vector<int64_t>> kOddSizes = {
    {1, 1, 1}, {1, 7, 33}, {7, 1, 257}, {33, 257, 1}, {7, 33, 7}, {257, 33, 7}, {33, 257, 65},
};

TEST(Sgemm, AllTransposeCombinationsOnOddSizes) {
  IntraOpThreadsScope threads(1);
  for (bool trans_a : {false, true})
    for (bool trans_b : {false, true})
      for (const auto& size : kOddSizes)
        expect_matches_reference({trans_a, trans_b, size[0], size[1], size[2], 1.0f, 0.0f, 0});
}

TEST(Sgemm, PaddedLeadingDimensions) {
  IntraOpThreadsScope threads(1);
  for (bool trans_a : {false, true})
    for (bool trans_b : {false, true})
      for (const auto& size : kOddSizes)
        for (int64_t pad : {1, 5, 16})
          expect_matches_reference(
              {trans_a, trans_b, size[0], size[1], size[2], -0.75f, 0.5f, pad});
}

// Big enough (> 5M multiply-adds, ten times gemm.cc's minimum per thread) that two intra-op
// threads split the work, along the rows and along the columns of C, with sizes that are not
// multiples of the split alignment.
TEST(Sgemm, TwoIntraOpThreadsMatchReference) {
  IntraOpThreadsScope threads(2);
  for (bool trans_a : {false, true})
    for (bool trans_b : {false, true}) {
      expect_matches_reference({trans_a, trans_b, 257, 131, 161, 1.0f, 0.0f, 3});
      expect_matches_reference({trans_a, trans_b, 131, 257, 161, 2.0f, 1.0f, 0});
    }
}

// Attention-style use: one sgemm per head inside the op's own `omp parallel for`, with shapes
// that would be split if called alone. Each call must still be right.
TEST(Sgemm, CallsInsideAnOpenMpParallelRegion) {
  IntraOpThreadsScope threads(2);
  constexpr int kHeads = 4;
  std::vector<int64_t> mismatches(kHeads, -1);
  std::vector<std::string> first_mismatch(kHeads);
#pragma omp parallel for num_threads(2)
  for (int head = 0; head < kHeads; ++head) {
    mismatches[head] = run_and_compare({head % 2 == 1, head / 2 == 1, 257, 131, 161, 1.0f, 0.0f, 1},
                                       static_cast<uint32_t>(50 + head), &first_mismatch[head]);
  }
  for (int head = 0; head < kHeads; ++head) {
    EXPECT_EQ(mismatches[head], 0) << "head " << head << ": " << first_mismatch[head];
  }
}

TEST(Sgemm, BetaZeroNeverReadsNaNInC) {
  // run_and_compare fills C with NaN when beta == 0; any read of it would show as NaN.
  for (int threads : {1, 2}) {
    IntraOpThreadsScope scope(threads);
    for (bool trans_a : {false, true})
      for (bool trans_b : {false, true}) {
        expect_matches_reference({trans_a, trans_b, 33, 257, 65, 1.0f, 0.0f, 2});
        expect_matches_reference({trans_a, trans_b, 300, 200, 97, 1.0f, 0.0f, 0});
      }
  }
}

TEST(Sgemm, BetaOneAccumulates) {
  for (int threads : {1, 2}) {
    IntraOpThreadsScope scope(threads);
    for (bool trans_a : {false, true})
      for (bool trans_b : {false, true}) {
        expect_matches_reference({trans_a, trans_b, 7, 33, 257, 1.0f, 1.0f, 0});
        expect_matches_reference({trans_a, trans_b, 300, 200, 97, 1.0f, 1.0f, 1});
      }
  }
  // Closed form: accumulating ones x ones twice into C = 1 gives 1 + 2k everywhere.
  const int64_t m = 5, n = 6, k = 7;
  std::vector<float> ones_a(m * k, 1.0f), ones_b(k * n, 1.0f), c(m * n, 1.0f);
  for (int pass = 0; pass < 2; ++pass)
    sgemm(false, false, m, n, k, 1.0f, ones_a.data(), k, ones_b.data(), n, 1.0f, c.data(), n);
  for (float value : c) EXPECT_EQ(value, 1.0f + 2.0f * k);
}

TEST(Sgemm, KZeroScalesC) {
  // A and B are empty (and may be null): C = beta * C, and beta = 0 clears NaN garbage.
  std::vector<float> c = {1.0f, -2.0f, 3.0f, -4.0f, 5.0f, -6.0f};
  sgemm(false, false, 2, 3, 0, 1.0f, nullptr, 1, nullptr, 3, 0.5f, c.data(), 3);
  EXPECT_EQ(c, (std::vector<float>{0.5f, -1.0f, 1.5f, -2.0f, 2.5f, -3.0f}));
  sgemm(true, true, 2, 3, 0, 1.0f, nullptr, 2, nullptr, 1, 1.0f, c.data(), 3);
  EXPECT_EQ(c, (std::vector<float>{0.5f, -1.0f, 1.5f, -2.0f, 2.5f, -3.0f}));
  std::vector<float> garbage(6, kNaN);
  sgemm(false, true, 2, 3, 0, 1.0f, nullptr, 1, nullptr, 1, 0.0f, garbage.data(), 3);
  EXPECT_EQ(garbage, std::vector<float>(6, 0.0f));
}

TEST(Sgemm, EmptyOutputIsANoOp) {
  // An empty matrix may be null; a non-empty one that the call does not need must still be valid.
  std::vector<float> operand(12, kNaN);
  sgemm(false, false, 0, 4, 3, 1.0f, nullptr, 3, operand.data(), 4, 0.0f, nullptr, 4);
  sgemm(false, false, 4, 0, 3, 1.0f, operand.data(), 3, nullptr, 1, 0.0f, nullptr, 1);
  for (float value : operand) EXPECT_TRUE(std::isnan(value));
}

// One attention head: S = Q_h K_h^T where Q_h and K_h are column slices of a [T, 3C] qkv buffer
// (ld = 3C), then O_h = S V_h written into a column slice of a [T, C] output (ld = C).
TEST(Sgemm, AttentionHeadViewsInsideQkvBuffer) {
  const int64_t tokens = 37, channels = 48, heads = 4, head_dim = channels / heads;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> qkv(tokens * 3 * channels);
  for (float& value : qkv) value = uniform(rng);
  std::vector<float> scores(tokens * tokens, kNaN), out(tokens * channels, kNaN);
  const int64_t head = 2;
  const float* q = qkv.data() + head * head_dim;
  const float* k = qkv.data() + channels + head * head_dim;
  const float* v = qkv.data() + 2 * channels + head * head_dim;
  float* o = out.data() + head * head_dim;
  sgemm(false, true, tokens, tokens, head_dim, 0.5f, q, 3 * channels, k, 3 * channels, 0.0f,
        scores.data(), tokens);
  sgemm(false, false, tokens, head_dim, tokens, 1.0f, scores.data(), tokens, v, 3 * channels, 0.0f,
        o, channels);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t s = 0; s < tokens; ++s) {
      double expected = 0.0;
      for (int64_t d = 0; d < head_dim; ++d)
        expected += static_cast<double>(q[t * 3 * channels + d]) * k[s * 3 * channels + d];
      EXPECT_NEAR(scores[t * tokens + s], 0.5 * expected, 1e-5) << "t=" << t << " s=" << s;
    }
    for (int64_t d = 0; d < head_dim; ++d) {
      double expected = 0.0;
      for (int64_t s = 0; s < tokens; ++s)
        expected += static_cast<double>(scores[t * tokens + s]) * v[s * 3 * channels + d];
      EXPECT_NEAR(o[t * channels + d], expected, 1e-4) << "t=" << t << " d=" << d;
    }
    // Other heads' columns of the output are untouched.
    for (int64_t col = 0; col < channels; ++col) {
      if (col / head_dim != head) {
        EXPECT_TRUE(std::isnan(out[t * channels + col]));
      }
    }
  }
}

// Runs `call` and expects InvalidArgument whose message mentions `needle`.
template <typename Call>
void expect_invalid_argument(Call call, const std::string& needle) {
  try {
    call();
    ADD_FAILURE() << "expected InvalidArgument mentioning '" << needle << "'";
  } catch (const InvalidArgument& error) {
    EXPECT_NE(std::string(error.what()).find(needle), std::string::npos) << error.what();
  }
}

TEST(Sgemm, BadArgumentsThrowInvalidArgument) {
  std::vector<float> a(64, 1.0f), b(64, 1.0f), c(64, 0.0f);
  const float* pa = a.data();
  const float* pb = b.data();
  float* pc = c.data();
  expect_invalid_argument([&] { sgemm(false, false, -1, 2, 2, 1, pa, 2, pb, 2, 0, pc, 2); },
                          "non-negative");
  expect_invalid_argument([&] { sgemm(false, false, 2, 2, -3, 1, pa, 2, pb, 2, 0, pc, 2); },
                          "non-negative");
  // A is m x k = 2 x 3 (lda >= 3); transposed it is stored k x m = 3 x 2 (lda >= 2).
  expect_invalid_argument([&] { sgemm(false, false, 2, 4, 3, 1, pa, 2, pb, 4, 0, pc, 4); }, "lda");
  expect_invalid_argument([&] { sgemm(true, false, 5, 4, 3, 1, pa, 4, pb, 4, 0, pc, 4); }, "lda");
  // B is k x n = 3 x 4 (ldb >= 4); transposed it is stored n x k = 4 x 3 (ldb >= 3).
  expect_invalid_argument([&] { sgemm(false, false, 2, 4, 3, 1, pa, 3, pb, 3, 0, pc, 4); }, "ldb");
  expect_invalid_argument([&] { sgemm(false, true, 2, 4, 3, 1, pa, 3, pb, 2, 0, pc, 4); }, "ldb");
  expect_invalid_argument([&] { sgemm(false, false, 2, 4, 3, 1, pa, 3, pb, 4, 0, pc, 3); }, "ldc");
  // A leading dimension of 0 is never valid, even for an empty matrix.
  expect_invalid_argument([&] { sgemm(false, false, 0, 0, 0, 1, pa, 0, pb, 1, 0, pc, 1); }, "lda");
  expect_invalid_argument([&] { sgemm(false, false, 2, 4, 3, 1, nullptr, 3, pb, 4, 0, pc, 4); },
                          "A is null");
  expect_invalid_argument([&] { sgemm(false, false, 2, 4, 3, 1, pa, 3, nullptr, 4, 0, pc, 4); },
                          "B is null");
  expect_invalid_argument([&] { sgemm(false, false, 2, 4, 3, 1, pa, 3, pb, 4, 0, nullptr, 4); },
                          "C is null");
  const int64_t too_big = int64_t{INT_MAX} + 1;
  expect_invalid_argument([&] { sgemm(false, false, 1, 1, 1, 1, pa, 1, pb, too_big, 0, pc, 1); },
                          "fit in an int");
  expect_invalid_argument([] { set_intra_op_threads(0); }, "at least 1");
}

TEST(IntraOpThreads, ScopeSetsAndRestoresCallingThreadOnly) {
  const int outer = intra_op_threads();
  {
    IntraOpThreadsScope scope(3);
    EXPECT_EQ(intra_op_threads(), 3);
    int seen_by_other_thread = 0;
    std::thread other([&] { seen_by_other_thread = intra_op_threads(); });
    other.join();
    EXPECT_NE(seen_by_other_thread, 0);
    EXPECT_EQ(seen_by_other_thread, outer) << "the setting leaked into another thread";
  }
  EXPECT_EQ(intra_op_threads(), outer);
}

// Two ranks-as-threads calling sgemm at once on shapes that take the backends' blocked (and, with
// two intra-op threads, split) paths. Each must get correct results, keep its own setting, and
// leave the other's and the main thread's alone. One intra-op thread per rank is the setting for
// ranks that share the cores; two per rank oversubscribes this machine but must still be right.
void run_two_ranks(int threads_per_rank) {
  const int main_threads = intra_op_threads();
  constexpr int kRanks = 2;
  std::vector<int64_t> mismatches(kRanks, -1);
  std::vector<int> threads_seen(kRanks, 0);
  std::vector<std::string> first_mismatch(kRanks);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < kRanks; ++rank) {
    ranks.emplace_back([&, rank] {
      set_intra_op_threads(threads_per_rank);
      int64_t total = 0;
      for (int step = 0; step < 6; ++step) {
        bool trans_a = (step + rank) % 2 == 1, trans_b = step % 3 == 0;
        total += run_and_compare(
            {trans_a, trans_b, 160 + 16 * rank, 192, 128, 1.0f, step % 2 == 0 ? 0.0f : 1.0f, rank},
            static_cast<uint32_t>(100 * rank + step), &first_mismatch[rank]);
      }
      mismatches[rank] = total;
      threads_seen[rank] = intra_op_threads();
    });
  }
  for (auto& rank : ranks) rank.join();
  for (int rank = 0; rank < kRanks; ++rank) {
    EXPECT_EQ(mismatches[rank], 0) << "rank " << rank << ": " << first_mismatch[rank];
    EXPECT_EQ(threads_seen[rank], threads_per_rank) << "rank " << rank;
  }
  EXPECT_EQ(intra_op_threads(), main_threads);
}

TEST(IntraOpThreads, TwoRanksWithOneThreadEachCallSgemmConcurrently) { run_two_ranks(1); }

TEST(IntraOpThreads, TwoRanksWithTwoThreadsEachCallSgemmConcurrently) { run_two_ranks(2); }

TEST(Gemm, BackendNameIsKnown) {
  const std::string name = gemm_backend_name();
  EXPECT_TRUE(name == "eigen" || name == "openblas") << name;
}

}  // namespace
}  // namespace zs::ops::cpu
