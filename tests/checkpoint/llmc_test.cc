// llm.c GPT-2 checkpoints: the header words and tensor order as llm.c lays them out, round trips
// in fp32 (version 3) and bf16 (version 5), and invalid files rejected by name.
#include "checkpoint/llmc.h"

#include <gtest/gtest.h>

#include <cstring>

#include "checkpoint_test_util.h"
#include "runtime/half.h"

namespace zs::checkpoint {
namespace {

using testing::error_message;
using testing::read_bytes;
using testing::ScratchDir;
using testing::test_values;
using testing::write_bytes;

LlmcConfig tiny_llmc_config() {
  LlmcConfig config;
  config.max_seq_len = 6;
  config.vocab_size = 10;
  config.padded_vocab_size = 16;
  config.n_layer = 2;
  config.n_head = 2;
  config.channels = 8;
  return config;
}

std::string slice_name(const LlmcTensor& tensor, int64_t layer) {
  return tensor.name + "/" + std::to_string(layer);
}

// Writes every slice of every tensor with its own test values.
void write_all(LlmcWriter& writer) {
  for (const LlmcTensor& t : llmc_layout(writer.config())) {
    const int64_t layers = t.per_layer ? t.shape[0] : 1;
    for (int64_t l = 0; l < layers; ++l) {
      const int64_t layer = t.per_layer ? l : -1;
      const auto values = test_values(slice_name(t, layer), static_cast<size_t>(t.slice_numel()));
      writer.write(t.name, layer, values.data());
    }
  }
}

TEST(Llmc, LayoutIsLlmcsOrderAndSizes) {
  const LlmcConfig c = tiny_llmc_config();
  const std::vector<LlmcTensor> tensors = llmc_layout(c);
  const std::vector<std::string> names = {"wte",      "wpe",      "ln1w", "ln1b", "qkvw", "qkvb",
                                          "attprojw", "attprojb", "ln2w", "ln2b", "fcw",  "fcb",
                                          "fcprojw",  "fcprojb",  "lnfw", "lnfb"};
  ASSERT_EQ(tensors.size(), names.size());
  for (size_t i = 0; i < names.size(); ++i) EXPECT_EQ(tensors[i].name, names[i]);
  const int64_t L = 2, C = 8;
  EXPECT_EQ(tensors[0].shape, (Shape{16, C}));  // padded vocab rows
  EXPECT_EQ(tensors[4].shape, (Shape{L, 3 * C, C}));
  EXPECT_EQ(tensors[12].shape, (Shape{L, C, 4 * C}));
  // Back to back: each starts where the previous ends; the total is GPT-2's parameter count
  // with the padded vocab: (Vp + maxT)·C + L·12·C² + L·13·C + 2·C.
  uint64_t offset = 0;
  for (const LlmcTensor& t : tensors) {
    EXPECT_EQ(t.first_element, offset) << t.name;
    offset += static_cast<uint64_t>(t.numel());
  }
  EXPECT_EQ(offset, static_cast<uint64_t>((16 + 6) * C + L * 12 * C * C + L * 13 * C + 2 * C));
  EXPECT_EQ(llmc_padded_vocab(50257), 50304);
  EXPECT_EQ(llmc_padded_vocab(128), 128);
}

class LlmcRoundTrip : public ::testing::TestWithParam<StoredDType> {};

TEST_P(LlmcRoundTrip, EverySliceComesBackAsWritten) {
  ScratchDir scratch;
  const StoredDType dtype = GetParam();
  const std::string path = scratch.path("model.bin");
  {
    LlmcWriter writer(path, tiny_llmc_config(), dtype);
    write_all(writer);
    writer.commit();
  }
  // The header words as llm.c reads them.
  const std::vector<uint8_t> bytes = read_bytes(path);
  int32_t header[8];
  std::memcpy(header, bytes.data(), sizeof header);
  EXPECT_EQ(header[0], 20240326);
  EXPECT_EQ(header[1], dtype == StoredDType::kBF16 ? 5 : 3);
  EXPECT_EQ(header[2], 6);   // maxT
  EXPECT_EQ(header[3], 10);  // V
  EXPECT_EQ(header[4], 2);   // L
  EXPECT_EQ(header[5], 2);   // NH
  EXPECT_EQ(header[6], 8);   // C
  EXPECT_EQ(header[7], 16);  // Vp

  const LlmcReader reader(path);
  EXPECT_EQ(reader.dtype(), dtype);
  EXPECT_EQ(reader.config().padded_vocab_size, 16);
  for (const LlmcTensor& t : reader.tensors()) {
    const int64_t layers = t.per_layer ? t.shape[0] : 1;
    for (int64_t l = 0; l < layers; ++l) {
      const int64_t layer = t.per_layer ? l : -1;
      std::vector<float> expected =
          test_values(slice_name(t, layer), static_cast<size_t>(t.slice_numel()));
      if (dtype == StoredDType::kBF16) {
        for (float& value : expected) value = bf16_bits_to_float(float_to_bf16_bits(value));
      }
      std::vector<float> actual(expected.size());
      reader.read_f32(t.name, layer, actual.data());
      EXPECT_EQ(std::memcmp(actual.data(), expected.data(), actual.size() * 4), 0)
          << slice_name(t, layer);
    }
  }
  // The first `count` elements only (wte's first V rows).
  std::vector<float> all(16 * 8), rows(10 * 8, -7.0f);
  reader.read_f32("wte", -1, all.data());
  reader.read_f32("wte", -1, rows.data(), 10 * 8);
  EXPECT_EQ(rows, std::vector<float>(all.begin(), all.begin() + 80));
  EXPECT_THROW(reader.read_f32("qkvw", 2, rows.data()), InvalidArgument);  // layer out of range
  EXPECT_THROW(reader.read_f32("wte", 0, rows.data()), InvalidArgument);   // not per layer
  EXPECT_THROW(reader.tensor("lm_head"), InvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, LlmcRoundTrip,
                         ::testing::Values(StoredDType::kF32, StoredDType::kBF16),
                         [](const auto& info) { return stored_dtype_name(info.param); });

TEST(LlmcWriter, CommitNeedsEverySliceAndRejectsRepeats) {
  ScratchDir scratch;
  const std::string path = scratch.path("partial.bin");
  LlmcWriter writer(path, tiny_llmc_config());
  const auto values = test_values("x", 16 * 8);
  writer.write("wte", -1, values.data());
  EXPECT_CONTAINS(error_message<InvalidArgument>([&] { writer.write("wte", -1, values.data()); }),
                  "written twice");
  EXPECT_CONTAINS(error_message<InvalidArgument>([&] { writer.commit(); }),
                  "'wpe' was never written");
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_THROW(LlmcWriter(scratch.path("f16.bin"), tiny_llmc_config(), StoredDType::kF16),
               InvalidArgument);
}

std::string corrupt_message(const ScratchDir& scratch, const std::vector<uint8_t>& bytes) {
  const std::string path = scratch.path("corrupt.bin");
  write_bytes(path, bytes);
  const std::string message = error_message<CorruptCheckpoint>([&] { LlmcReader reader(path); });
  EXPECT_CONTAINS(message, path);
  return message;
}

TEST(LlmcReader, RejectsInvalidFilesNamingTheProblem) {
  ScratchDir scratch;
  const std::string good = scratch.path("good.bin");
  {
    LlmcWriter writer(good, tiny_llmc_config());
    write_all(writer);
    writer.commit();
  }
  const std::vector<uint8_t> bytes = read_bytes(good);
  auto with_word = [&](int index, int32_t value) {
    std::vector<uint8_t> copy = bytes;
    std::memcpy(copy.data() + 4 * index, &value, 4);
    return copy;
  };
  EXPECT_CONTAINS(
      corrupt_message(scratch, std::vector<uint8_t>(bytes.begin(), bytes.begin() + 100)),
      "shorter than the 1024-byte header");
  EXPECT_CONTAINS(corrupt_message(scratch, with_word(0, 20240520)),
                  "starts with magic 20240520, not 20240326");
  EXPECT_CONTAINS(corrupt_message(scratch, with_word(1, 4)), "has version 4");
  EXPECT_CONTAINS(corrupt_message(scratch, with_word(5, 3)), "C must be divisible by NH");
  EXPECT_CONTAINS(corrupt_message(scratch, with_word(7, 9)), "Vp must be at least V");
  std::vector<uint8_t> truncated(bytes.begin(), bytes.end() - 4);
  EXPECT_CONTAINS(corrupt_message(scratch, truncated), "the file is truncated");
  std::vector<uint8_t> longer = bytes;
  longer.resize(bytes.size() + 4);
  EXPECT_CONTAINS(corrupt_message(scratch, longer), "the file is too long");
  EXPECT_CONTAINS(corrupt_message(scratch, with_word(6, 16)),
                  "(maxT 6, V 10, Vp 16, L 2, NH 2, C 16, F32) needs");
  EXPECT_CONTAINS(corrupt_message(scratch, with_word(6, 1 << 30)), "parameter count exceeds 2^48");
}

}  // namespace
}  // namespace zs::checkpoint
