// safetensors: round trips in every float dtype (with and without header padding), the streaming
// writer, and invalid files — truncated, bad JSON, bad dtype, offsets out of range, overlapping,
// holes, trailing bytes, duplicates — rejected with messages that name the file and tensor.
#include "checkpoint/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>

#include "checkpoint_test_util.h"
#include "runtime/half.h"

namespace zs::checkpoint {
namespace {

using testing::error_message;
using testing::read_bytes;
using testing::safetensors_bytes;
using testing::ScratchDir;
using testing::test_values;
using testing::write_bytes;

// What a value becomes after a trip through `dtype`.
float stored(float value, StoredDType dtype) {
  switch (dtype) {
    case StoredDType::kF16:
      return half_bits_to_float(float_to_half_bits(value));
    case StoredDType::kBF16:
      return bf16_bits_to_float(float_to_bf16_bits(value));
    default:
      return value;
  }
}

void expect_bits_equal(const std::vector<float>& actual, const std::vector<float>& expected,
                       const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  // An empty tensor's vectors have null data(), which memcmp must not get even for 0 bytes
  // (UBSan: its arguments are declared nonnull).
  if (actual.empty()) return;
  EXPECT_EQ(std::memcmp(actual.data(), expected.data(), actual.size() * sizeof(float)), 0) << what;
}

class SafetensorsRoundTrip : public ::testing::TestWithParam<StoredDType> {};

TEST_P(SafetensorsRoundTrip, EveryShapeComesBackAsWritten) {
  ScratchDir scratch;
  const StoredDType dtype = GetParam();
  const std::string path = scratch.path("weights.safetensors");
  struct Case {
    std::string name;
    Shape shape;
  };
  const std::vector<Case> cases = {{"b.matrix", {3, 5}},
                                   {"a.vector", {7}},
                                   {"scalar", {}},
                                   {"empty", {0, 4}},
                                   {"cube", {2, 3, 2}}};
  {
    SafetensorsWriter writer(path);
    writer.set_metadata("format", "pt");
    writer.set_metadata("note", "odd \"quoted\" text");
    for (const Case& c : cases) {
      const auto values = test_values(c.name, static_cast<size_t>(shape_numel(c.shape)));
      writer.add(c.name, c.shape, dtype, values.data());
    }
    writer.commit();
  }
  const SafetensorsReader reader(path);
  // Data order is the order of add(), whatever the JSON's key order.
  std::vector<std::string> expected_names;
  for (const Case& c : cases) expected_names.push_back(c.name);
  EXPECT_EQ(reader.names(), expected_names);
  EXPECT_EQ(reader.metadata().at("format"), "pt");
  EXPECT_EQ(reader.metadata().at("note"), "odd \"quoted\" text");
  EXPECT_EQ((8 + reader.header_bytes()) % 8, 0u) << "the data section starts 8-byte aligned";
  for (const Case& c : cases) {
    const SafetensorsTensorInfo& info = reader.info(c.name);
    EXPECT_EQ(info.dtype, dtype);
    EXPECT_EQ(info.shape, c.shape);
    EXPECT_EQ(info.nbytes(), shape_numel(c.shape) * stored_dtype_size(dtype));
    std::vector<float> expected = test_values(c.name, static_cast<size_t>(shape_numel(c.shape)));
    for (float& value : expected) value = stored(value, dtype);
    expect_bits_equal(reader.read_f32(c.name), expected, c.name);
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, SafetensorsRoundTrip,
                         ::testing::Values(StoredDType::kF32, StoredDType::kF16,
                                           StoredDType::kBF16),
                         [](const auto& info) { return stored_dtype_name(info.param); });

TEST(SafetensorsWriter, PadsTheHeaderWithSpacesToAMultipleOf8) {
  ScratchDir scratch;
  // Names of lengths 1..8 give JSON lengths of every residue mod 8.
  for (int length = 1; length <= 8; ++length) {
    const std::string path = scratch.path("pad" + std::to_string(length) + ".safetensors");
    const std::string name(static_cast<size_t>(length), 'w');
    const float value = 1.5f;
    SafetensorsWriter writer(path);
    writer.add(name, {1}, StoredDType::kF32, &value);
    writer.commit();
    const std::vector<uint8_t> bytes = read_bytes(path);
    uint64_t header = 0;
    std::memcpy(&header, bytes.data(), 8);
    EXPECT_EQ(header % 8, 0u);
    ASSERT_EQ(bytes.size(), 8 + header + 4);
    const std::string json(bytes.begin() + 8, bytes.begin() + 8 + static_cast<long>(header));
    const size_t close = json.find_last_of('}');
    EXPECT_EQ(json.find_first_not_of(' ', close + 1), std::string::npos) << "spaces only";
    EXPECT_EQ(SafetensorsReader(path).read_f32(name), std::vector<float>{1.5f});
  }
}

TEST(SafetensorsReader, ReadsAnUnpaddedHeaderWithUnalignedData) {
  ScratchDir scratch;
  const std::string path = scratch.path("unaligned.safetensors");
  // 1 byte of U8 first, so the F16 and F32 tensors start at odd offsets; the JSON length is odd.
  const std::string json = R"({"u":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                           R"("h":{"dtype":"F16","shape":[2],"data_offsets":[1,5]},)"
                           R"("f":{"dtype":"F32","shape":[1],"data_offsets":[5,9]}})";
  std::vector<uint8_t> bytes = safetensors_bytes(json, 9);
  const size_t data = 8 + json.size();
  const uint16_t halves[2] = {float_to_half_bits(0.5f), float_to_half_bits(-2.0f)};
  const float single = 3.25f;
  std::memcpy(bytes.data() + data + 1, halves, 4);
  std::memcpy(bytes.data() + data + 5, &single, 4);
  write_bytes(path, bytes);
  const SafetensorsReader reader(path);
  EXPECT_EQ(reader.names(), (std::vector<std::string>{"u", "h", "f"}));
  EXPECT_EQ(reader.read_f32("h"), (std::vector<float>{0.5f, -2.0f}));
  EXPECT_EQ(reader.read_f32("f"), std::vector<float>{3.25f});
  // Non-float tensors are listed but are not weights.
  EXPECT_EQ(reader.info("u").dtype, StoredDType::kU8);
  const std::string message = error_message<InvalidArgument>([&] { reader.read_f32("u"); });
  EXPECT_CONTAINS(message, "'u' is U8");
  EXPECT_CONTAINS(error_message<InvalidArgument>([&] { reader.info("nope"); }), "no tensor 'nope'");
}

TEST(SafetensorsWriter, StreamsDeclaredTensorsInAnyOrder) {
  ScratchDir scratch;
  const std::string path = scratch.path("streamed.safetensors");
  const auto first = test_values("first", 6);
  const auto second = test_values("second", 4);
  {
    SafetensorsWriter writer(path);
    writer.declare("first", {2, 3}, StoredDType::kBF16);
    writer.declare("second", {4}, StoredDType::kF32);
    writer.write("second", second.data());
    EXPECT_THROW(writer.declare("third", {1}, StoredDType::kF32), InvalidArgument);
    EXPECT_THROW(writer.set_metadata("late", "x"), InvalidArgument);
    EXPECT_THROW(writer.write("second", second.data()), InvalidArgument);  // twice
    EXPECT_THROW(writer.write("unknown", second.data()), InvalidArgument);
    EXPECT_CONTAINS(error_message<InvalidArgument>([&] { writer.commit(); }),
                    "'first' was declared but never written");
    EXPECT_FALSE(std::filesystem::exists(path));
    writer.write("first", first.data());
    writer.commit();
  }
  const SafetensorsReader reader(path);
  EXPECT_EQ(reader.names(), (std::vector<std::string>{"first", "second"}));
  EXPECT_EQ(reader.read_f32("second"), second);
  std::vector<float> expected = first;
  for (float& value : expected) value = stored(value, StoredDType::kBF16);
  expect_bits_equal(reader.read_f32("first"), expected, "first");
}

TEST(SafetensorsWriter, AnAbandonedWriteLeavesNoFile) {
  ScratchDir scratch;
  const std::string path = scratch.path("abandoned.safetensors");
  {
    SafetensorsWriter writer(path);
    const auto values = test_values("x", 100);
    writer.declare("x", {100}, StoredDType::kF32);
    writer.write("x", values.data());
  }
  EXPECT_TRUE(scratch.files().empty());
}

TEST(SafetensorsWriter, RejectsBadTensors) {
  ScratchDir scratch;
  SafetensorsWriter writer(scratch.path("bad.safetensors"));
  const float value = 0;
  writer.add("x", {1}, StoredDType::kF32, &value);
  EXPECT_CONTAINS(
      error_message<InvalidArgument>([&] { writer.add("x", {1}, StoredDType::kF32, &value); }),
      "added twice");
  EXPECT_THROW(writer.add("i", {1}, StoredDType::kI32, &value), InvalidArgument);
  EXPECT_THROW(writer.add("__metadata__", {1}, StoredDType::kF32, &value), InvalidArgument);
  EXPECT_THROW(writer.add("neg", {-1}, StoredDType::kF32, &value), InvalidArgument);
}

// Writes `bytes` and returns the CorruptCheckpoint message opening it gives.
std::string corrupt_message(const ScratchDir& scratch, const std::vector<uint8_t>& bytes) {
  const std::string path = scratch.path("corrupt.safetensors");
  write_bytes(path, bytes);
  const std::string message =
      error_message<CorruptCheckpoint>([&] { SafetensorsReader reader(path); });
  EXPECT_CONTAINS(message, path);
  return message;
}

TEST(SafetensorsReader, RejectsCorruptFilesNamingTheProblem) {
  ScratchDir scratch;
  const std::string one = R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  EXPECT_CONTAINS(corrupt_message(scratch, {1, 2, 3}), "shorter than the 8-byte header length");
  EXPECT_CONTAINS(corrupt_message(scratch, safetensors_bytes(one, 8, 4096)),
                  "declares a header of 4096 bytes");
  EXPECT_CONTAINS(corrupt_message(scratch, safetensors_bytes("[1, 2]", 0)),
                  "does not start with '{'");
  EXPECT_CONTAINS(corrupt_message(scratch, safetensors_bytes(R"({"t": {"dtype": )", 0)),
                  "does not parse");
  EXPECT_CONTAINS(
      corrupt_message(scratch, safetensors_bytes(
                                   R"({"t":{"dtype":"F12","shape":[2],"data_offsets":[0,8]}})", 8)),
      "tensor 't' has unknown dtype \"F12\"");
  EXPECT_CONTAINS(
      corrupt_message(scratch, safetensors_bytes(R"({"t":{"dtype":"F32","shape":[2]}})", 8)),
      "tensor 't' has no \"data_offsets\"");
  EXPECT_CONTAINS(
      corrupt_message(
          scratch,
          safetensors_bytes(R"({"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8)),
      "not a non-negative integer");
  EXPECT_CONTAINS(
      corrupt_message(scratch, safetensors_bytes(
                                   R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8)),
      "tensor 't' is F32 [3] (3 elements × 4 bytes) but its data_offsets span 8 bytes");
  // A truncated file: the offsets run past the end of the data.
  EXPECT_CONTAINS(corrupt_message(scratch, safetensors_bytes(one, 5)),
                  "tensor 't' has data_offsets [0, 8] outside the data section of 5 bytes");
  EXPECT_CONTAINS(
      corrupt_message(scratch,
                      safetensors_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                        R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                                        12)),
      "tensor 'b' (bytes [4, 12)) overlaps tensor 'a'");
  EXPECT_CONTAINS(
      corrupt_message(scratch,
                      safetensors_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                        R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                                        12)),
      "bytes [4, 8) of the data section before tensor 'b' belong to no tensor");
  EXPECT_CONTAINS(corrupt_message(scratch, safetensors_bytes(one, 12)),
                  "has 4 bytes after its last tensor");
  EXPECT_CONTAINS(
      corrupt_message(scratch,
                      safetensors_bytes(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                        R"("t":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                                        8)),
      "'t' appears twice");
  EXPECT_CONTAINS(corrupt_message(scratch, safetensors_bytes(R"({"__metadata__":{"n":3}})", 0)),
                  "__metadata__ entry 'n' is 3, not a string");
}

TEST(SafetensorsReader, ATruncatedWrittenFileIsCorrupt) {
  ScratchDir scratch;
  const std::string path = scratch.path("whole.safetensors");
  const auto values = test_values("v", 64);
  SafetensorsWriter writer(path);
  writer.add("v", {8, 8}, StoredDType::kF32, values.data());
  writer.commit();
  std::vector<uint8_t> bytes = read_bytes(path);
  bytes.resize(bytes.size() - 3);
  EXPECT_CONTAINS(corrupt_message(scratch, bytes), "tensor 'v' has data_offsets [0, 256] outside");
}

TEST(SafetensorsReader, AMissingFileIsAnIoError) {
  ScratchDir scratch;
  const std::string path = scratch.path("absent.safetensors");
  EXPECT_CONTAINS(error_message<IoError>([&] { SafetensorsReader reader(path); }), path);
}

TEST(StoredDType, ParsesCommonSpellings) {
  StoredDType dtype;
  ASSERT_TRUE(parse_stored_dtype("bf16", &dtype));
  EXPECT_EQ(dtype, StoredDType::kBF16);
  ASSERT_TRUE(parse_stored_dtype("fp16", &dtype));
  EXPECT_EQ(dtype, StoredDType::kF16);
  ASSERT_TRUE(parse_stored_dtype("float32", &dtype));
  EXPECT_EQ(dtype, StoredDType::kF32);
  ASSERT_TRUE(parse_stored_dtype("I64", &dtype));
  EXPECT_EQ(stored_dtype_size(dtype), 8u);
  EXPECT_FALSE(parse_stored_dtype("f12", &dtype));
}

}  // namespace
}  // namespace zs::checkpoint
