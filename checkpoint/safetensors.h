// safetensors files: a validating, memory-mapped reader and a crash-safe writer.
//
// Format (public, https://github.com/huggingface/safetensors): an 8-byte little-endian unsigned
// header length N, then N bytes of UTF-8 JSON, then the data section. The JSON object maps each
// tensor name to {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]} — byte offsets
// relative to the start of the data section — plus an optional "__metadata__" object of
// string → string. Tensor data is little-endian, row-major, and the data section is covered
// exactly: no overlaps, no holes, nothing after the last tensor. The header may be padded with
// spaces; the writer pads it so that the data section starts at a multiple of 8 bytes.
//
// Errors. A file that cannot be opened or mapped is an IoError. A file that is not a valid
// safetensors file (header length past the end, bad JSON, unknown dtype, offsets out of range,
// overlapping or leaving holes, a byte count that is not shape × dtype size, duplicate names)
// is a CorruptCheckpoint naming the file, the tensor and the problem. Asking a valid file for
// something it does not hold (an unknown name, floats from an integer tensor) is an
// InvalidArgument.
//
// Ownership and thread-safety. SafetensorsReader owns its mapping (move-only) and is immutable
// after construction: its const methods may be called from any number of threads.
// SafetensorsWriter owns a temporary file until commit() and is used from one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/file_io.h"
#include "runtime/tensor.h"

namespace zs::checkpoint {

// The element types a checkpoint file can name. Only kF32, kF16 and kBF16 are read or written
// as floats; the others are listed (inspect shows them) but rejected by read_f32.
enum class StoredDType : uint8_t {
  kF32,
  kF16,
  kBF16,
  kF64,
  kI64,
  kI32,
  kI16,
  kI8,
  kU64,
  kU32,
  kU16,
  kU8,
  kBool,
  kF8E4M3,
  kF8E5M2,
};
const char* stored_dtype_name(StoredDType dtype);  // the safetensors spelling: "F32", "BF16"
size_t stored_dtype_size(StoredDType dtype);       // bytes per element
bool is_float_dtype(StoredDType dtype);            // F32, F16 or BF16
// Parses "F32", "f16", "bf16", "fp32", "float32", ... (case-insensitive); false if unknown.
bool parse_stored_dtype(const std::string& text, StoredDType* dtype);

// values[i] → out bytes in `dtype` (F32, F16 or BF16; round to nearest even), and back.
void encode_f32(const float* values, size_t count, StoredDType dtype, uint8_t* out);
void decode_to_f32(const uint8_t* bytes, size_t count, StoredDType dtype, float* out);

struct SafetensorsTensorInfo {
  StoredDType dtype = StoredDType::kF32;
  Shape shape;
  uint64_t begin = 0;  // byte offsets within the data section
  uint64_t end = 0;
  int64_t numel() const { return shape_numel(shape); }
  uint64_t nbytes() const { return end - begin; }
};

class SafetensorsReader {
 public:
  // Maps and validates the whole header (see the file comment for what is checked).
  explicit SafetensorsReader(std::string path);
  SafetensorsReader(SafetensorsReader&&) noexcept = default;
  SafetensorsReader& operator=(SafetensorsReader&&) noexcept = default;

  const std::string& path() const { return path_; }
  // Tensor names in the order of their data in the file.
  const std::vector<std::string>& names() const { return names_; }
  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
  // Throws InvalidArgument naming the file and the tensor if there is no such tensor.
  const SafetensorsTensorInfo& info(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  uint64_t header_bytes() const { return header_bytes_; }  // N, the JSON's length
  uint64_t file_bytes() const { return mapping_.size(); }

  // The tensor's raw bytes in the mapping (nbytes() of them; may be unaligned).
  const uint8_t* raw(const std::string& name) const;
  // out[0, numel) = the tensor as fp32 (F16 and BF16 widen exactly). Throws InvalidArgument for
  // a tensor that is not F32, F16 or BF16.
  void read_f32(const std::string& name, float* out) const;
  std::vector<float> read_f32(const std::string& name) const;

 private:
  std::string path_;
  zs::detail::MappedFile mapping_;
  uint64_t header_bytes_ = 0;
  const uint8_t* data_ = nullptr;  // start of the data section
  std::vector<std::string> names_;
  std::unordered_map<std::string, SafetensorsTensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// Writes a safetensors file from fp32 values, converted to F32, F16 or BF16.
//
// The header precedes the data, so it is final only once every tensor is known. Two ways to add
// tensors, both before commit():
//  - add(name, shape, dtype, values): declares the tensor and keeps its encoded bytes in memory
//    until the header is written. Simple; for files that fit in memory twice.
//  - declare(name, shape, dtype) for every tensor first, then write(name, values) in any order:
//    the first write() fixes the header and each tensor streams straight to its place in the
//    file, so a model larger than memory can be exported one parameter at a time.
// After the first write(), declare() and add() are errors. Nothing appears at `path` until
// commit(), which checks every declared tensor was written, then fsyncs and renames a temporary
// file over `path`; a writer destroyed without commit() leaves `path` as it was.
class SafetensorsWriter {
 public:
  explicit SafetensorsWriter(std::string path);
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  // Header metadata ("__metadata__"); before the first write().
  void set_metadata(const std::string& key, const std::string& value);
  void declare(const std::string& name, const Shape& shape, StoredDType dtype);
  void add(const std::string& name, const Shape& shape, StoredDType dtype, const float* values);
  // values: the declared tensor's numel() fp32 values.
  void write(const std::string& name, const float* values);
  void commit();

  const std::string& path() const { return file_.path(); }

 private:
  struct Entry {
    std::string name;
    Shape shape;
    StoredDType dtype;
    uint64_t begin = 0;  // in the data section, once the header is fixed
    bool written = false;
    std::vector<uint8_t> pending;  // encoded bytes from add(), until the header is written
  };
  Entry& find(const std::string& name);
  void write_header();  // fixes the layout, writes the header and the pending tensors

  zs::detail::AtomicFileWriter file_;
  std::vector<Entry> entries_;
  std::unordered_map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
  uint64_t data_begin_ = 0;  // 8 + padded header length, once written
  bool header_written_ = false;
};

}  // namespace zs::checkpoint
