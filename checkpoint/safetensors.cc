// safetensors: dtype table, header parsing and validation, the reader and the writer.
#include "checkpoint/safetensors.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "runtime/error.h"
#include "runtime/half.h"
#include "runtime/json_read.h"

namespace zs::checkpoint {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors files are little-endian and read by memcpy; a big-endian host needs "
              "byte swaps in safetensors.cc");

using Json = nlohmann::json;

// The safetensors specification caps the header at 100 MB; a larger length is corruption (or
// not a safetensors file), and refusing it early avoids parsing garbage.
constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;
constexpr const char* kMetadataKey = "__metadata__";
constexpr size_t kConvertChunk = size_t{1} << 16;  // elements converted per step

struct DTypeEntry {
  StoredDType dtype;
  const char* name;
  size_t size;
};
constexpr DTypeEntry kDTypes[] = {
    {StoredDType::kF32, "F32", 4},        {StoredDType::kF16, "F16", 2},
    {StoredDType::kBF16, "BF16", 2},      {StoredDType::kF64, "F64", 8},
    {StoredDType::kI64, "I64", 8},        {StoredDType::kI32, "I32", 4},
    {StoredDType::kI16, "I16", 2},        {StoredDType::kI8, "I8", 1},
    {StoredDType::kU64, "U64", 8},        {StoredDType::kU32, "U32", 4},
    {StoredDType::kU16, "U16", 2},        {StoredDType::kU8, "U8", 1},
    {StoredDType::kBool, "BOOL", 1},      {StoredDType::kF8E4M3, "F8_E4M3", 1},
    {StoredDType::kF8E5M2, "F8_E5M2", 1},
};

std::string known_dtype_list() {
  std::string list;
  for (const DTypeEntry& entry : kDTypes) {
    if (!list.empty()) list += ", ";
    list += entry.name;
  }
  return list;
}

bool parse_exact_dtype(const std::string& text, StoredDType* dtype) {
  for (const DTypeEntry& entry : kDTypes) {
    if (text == entry.name) {
      *dtype = entry.dtype;
      return true;
    }
  }
  return false;
}

// a × b, or false when it overflows uint64.
bool checked_mul(uint64_t a, uint64_t b, uint64_t* out) {
  if (a != 0 && b > std::numeric_limits<uint64_t>::max() / a) return false;
  *out = a * b;
  return true;
}

// A JSON value that must be an unsigned integer (safetensors offsets and dims).
bool as_u64(const Json& value, uint64_t* out) {
  if (value.is_number_unsigned()) {
    *out = value.get<uint64_t>();
    return true;
  }
  if (value.is_number_integer() && value.get<int64_t>() >= 0) {
    *out = static_cast<uint64_t>(value.get<int64_t>());
    return true;
  }
  return false;
}

// Parses one tensor's entry; `data_bytes` is the size of the data section.
SafetensorsTensorInfo parse_tensor_entry(const std::string& path, const std::string& name,
                                         const Json& entry, uint64_t data_bytes) {
  ZS_CHECK_AS(CorruptCheckpoint, entry.is_object(), "safetensors file '", path, "': tensor '", name,
              "' has a ", entry.type_name(),
              " where an object {dtype, shape, data_offsets} belongs; the header is corrupt");
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    ZS_CHECK_AS(CorruptCheckpoint, entry.contains(key), "safetensors file '", path, "': tensor '",
                name, "' has no \"", key, "\"; the header is corrupt");
  }
  SafetensorsTensorInfo info;
  const Json& dtype = entry["dtype"];
  ZS_CHECK_AS(CorruptCheckpoint, dtype.is_string(), "safetensors file '", path, "': tensor '", name,
              "' has a non-string dtype ", dtype.dump());
  ZS_CHECK_AS(CorruptCheckpoint, parse_exact_dtype(dtype.get<std::string>(), &info.dtype),
              "safetensors file '", path, "': tensor '", name, "' has unknown dtype \"",
              dtype.get<std::string>(), "\"; known dtypes are ", known_dtype_list(),
              " — the file is corrupt or from a newer safetensors version");
  const Json& shape = entry["shape"];
  ZS_CHECK_AS(CorruptCheckpoint, shape.is_array(), "safetensors file '", path, "': tensor '", name,
              "' has shape ", shape.dump(), ", not an array of sizes");
  uint64_t numel = 1;
  for (const Json& dim : shape) {
    uint64_t size = 0;
    ZS_CHECK_AS(
        CorruptCheckpoint,
        as_u64(dim, &size) && size <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()),
        "safetensors file '", path, "': tensor '", name, "' has shape ", shape.dump(),
        " with a size that is not a non-negative integer");
    ZS_CHECK_AS(CorruptCheckpoint, checked_mul(numel, size, &numel), "safetensors file '", path,
                "': tensor '", name, "' has shape ", shape.dump(),
                " whose element count overflows 64 bits");
    info.shape.push_back(static_cast<int64_t>(size));
  }
  const Json& offsets = entry["data_offsets"];
  ZS_CHECK_AS(CorruptCheckpoint,
              offsets.is_array() && offsets.size() == 2 && as_u64(offsets[0], &info.begin) &&
                  as_u64(offsets[1], &info.end),
              "safetensors file '", path, "': tensor '", name, "' has data_offsets ",
              offsets.dump(), "; expected [begin, end] with non-negative integers");
  ZS_CHECK_AS(CorruptCheckpoint, info.begin <= info.end && info.end <= data_bytes,
              "safetensors file '", path, "': tensor '", name, "' has data_offsets [", info.begin,
              ", ", info.end, "] outside the data section of ", data_bytes,
              " bytes; the file is truncated or its header is corrupt");
  uint64_t expected_bytes = 0;
  ZS_CHECK_AS(CorruptCheckpoint,
              checked_mul(numel, stored_dtype_size(info.dtype), &expected_bytes) &&
                  expected_bytes == info.end - info.begin,
              "safetensors file '", path, "': tensor '", name, "' is ",
              stored_dtype_name(info.dtype), " ", shape_str(info.shape), " (", numel,
              " elements × ", stored_dtype_size(info.dtype), " bytes) but its data_offsets span ",
              info.end - info.begin, " bytes; the header is corrupt");
  return info;
}

}  // namespace

const char* stored_dtype_name(StoredDType dtype) {
  for (const DTypeEntry& entry : kDTypes) {
    if (entry.dtype == dtype) return entry.name;
  }
  return "?";
}

size_t stored_dtype_size(StoredDType dtype) {
  for (const DTypeEntry& entry : kDTypes) {
    if (entry.dtype == dtype) return entry.size;
  }
  return 0;
}

bool is_float_dtype(StoredDType dtype) {
  return dtype == StoredDType::kF32 || dtype == StoredDType::kF16 || dtype == StoredDType::kBF16;
}

bool parse_stored_dtype(const std::string& text, StoredDType* dtype) {
  std::string upper;
  for (char c : text) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (upper == "FP32" || upper == "FLOAT32" || upper == "FLOAT") upper = "F32";
  if (upper == "FP16" || upper == "FLOAT16" || upper == "HALF") upper = "F16";
  if (upper == "BFLOAT16") upper = "BF16";
  return parse_exact_dtype(upper, dtype);
}

void encode_f32(const float* values, size_t count, StoredDType dtype, uint8_t* out) {
  switch (dtype) {
    case StoredDType::kF32:
      if (count > 0) std::memcpy(out, values, count * sizeof(float));
      return;
    case StoredDType::kF16:
    case StoredDType::kBF16: {
      // The bulk converters take uint16_t*; `out` may be unaligned, so convert in aligned chunks.
      uint16_t chunk[1024];
      for (size_t done = 0; done < count; done += 1024) {
        const size_t n = std::min<size_t>(1024, count - done);
        if (dtype == StoredDType::kF16) {
          f32_to_f16(values + done, chunk, n);
        } else {
          f32_to_bf16(values + done, chunk, n);
        }
        std::memcpy(out + done * 2, chunk, n * 2);
      }
      return;
    }
    default:
      ZS_THROW(InvalidArgument, "cannot store floats as ", stored_dtype_name(dtype),
               "; use F32, F16 or BF16");
  }
}

void decode_to_f32(const uint8_t* bytes, size_t count, StoredDType dtype, float* out) {
  switch (dtype) {
    case StoredDType::kF32:
      if (count > 0) std::memcpy(out, bytes, count * sizeof(float));
      return;
    case StoredDType::kF16:
    case StoredDType::kBF16: {
      uint16_t chunk[1024];
      for (size_t done = 0; done < count; done += 1024) {
        const size_t n = std::min<size_t>(1024, count - done);
        std::memcpy(chunk, bytes + done * 2, n * 2);
        if (dtype == StoredDType::kF16) {
          f16_to_f32(chunk, out + done, n);
        } else {
          bf16_to_f32(chunk, out + done, n);
        }
      }
      return;
    }
    default:
      ZS_THROW(InvalidArgument, "cannot read ", stored_dtype_name(dtype),
               " values as floats; only F32, F16 and BF16 tensors are weights");
  }
}

// ---------------------------------------------------------------------------------------------
// Reader

SafetensorsReader::SafetensorsReader(std::string path)
    : path_(std::move(path)), mapping_(path_, "safetensors file") {
  const uint64_t file_bytes = mapping_.size();
  ZS_CHECK_AS(CorruptCheckpoint, file_bytes >= 8, "safetensors file '", path_, "' is ", file_bytes,
              " bytes, shorter than the 8-byte header length every safetensors file starts "
              "with; it is truncated or not a safetensors file");
  std::memcpy(&header_bytes_, mapping_.data(), 8);
  ZS_CHECK_AS(CorruptCheckpoint,
              header_bytes_ <= kMaxHeaderBytes && header_bytes_ <= file_bytes - 8,
              "safetensors file '", path_, "' declares a header of ", header_bytes_,
              " bytes but the file is ", file_bytes, " bytes (at most ", kMaxHeaderBytes,
              " are allowed); it is truncated or not a safetensors file");
  const char* header_begin = reinterpret_cast<const char*>(mapping_.data() + 8);
  ZS_CHECK_AS(CorruptCheckpoint, header_bytes_ >= 2 && header_begin[0] == '{', "safetensors file '",
              path_,
              "': the header does not start with '{' (a JSON object); not a safetensors file");
  data_ = mapping_.data() + 8 + header_bytes_;
  const uint64_t data_bytes = file_bytes - 8 - header_bytes_;

  // Duplicate top-level keys are invalid in safetensors; the JSON library would keep the last
  // one silently, so the parse callback records them.
  std::set<std::string> seen;
  std::string duplicate;
  auto on_event = [&](int depth, Json::parse_event_t event, Json& parsed) {
    // A header nests 3 levels; a deeper one is refused before it exists (runtime/json_read.h).
    ZS_CHECK_AS(
        CorruptCheckpoint,
        (event != Json::parse_event_t::object_start && event != Json::parse_event_t::array_start) ||
            depth < kMaxJsonDepth,
        "safetensors file '", path_, "': its JSON header nests deeper than ", kMaxJsonDepth,
        " levels; the file is corrupt or not a safetensors file");
    if (event == Json::parse_event_t::key && depth == 1 &&
        !seen.insert(parsed.get<std::string>()).second && duplicate.empty()) {
      duplicate = parsed.get<std::string>();
    }
    return true;
  };
  Json header;
  try {
    header = Json::parse(header_begin, header_begin + header_bytes_, on_event);
  } catch (const Json::exception& error) {
    ZS_THROW(CorruptCheckpoint, "safetensors file '", path_, "': the ", header_bytes_,
             "-byte JSON header does not parse (", error.what(),
             "); the file is corrupt or not a safetensors file");
  }
  ZS_CHECK_AS(CorruptCheckpoint, header.is_object(), "safetensors file '", path_,
              "': the header is a JSON ", header.type_name(), ", not an object");
  ZS_CHECK_AS(CorruptCheckpoint, duplicate.empty(), "safetensors file '", path_, "': '", duplicate,
              "' appears twice in the header; the file is corrupt");

  for (auto item = header.begin(); item != header.end(); ++item) {
    if (item.key() == kMetadataKey) {
      ZS_CHECK_AS(CorruptCheckpoint, item.value().is_object(), "safetensors file '", path_,
                  "': __metadata__ is a ", item.value().type_name(), ", not an object of strings");
      for (auto meta = item.value().begin(); meta != item.value().end(); ++meta) {
        ZS_CHECK_AS(CorruptCheckpoint, meta.value().is_string(), "safetensors file '", path_,
                    "': __metadata__ entry '", meta.key(), "' is ", meta.value().dump(),
                    ", not a string (metadata is string → string)");
        metadata_[meta.key()] = meta.value().get<std::string>();
      }
      continue;
    }
    tensors_[item.key()] = parse_tensor_entry(path_, item.key(), item.value(), data_bytes);
    names_.push_back(item.key());
  }

  // File order; the sorted ranges must tile [0, data_bytes) exactly.
  std::sort(names_.begin(), names_.end(), [&](const std::string& a, const std::string& b) {
    const SafetensorsTensorInfo& x = tensors_.at(a);
    const SafetensorsTensorInfo& y = tensors_.at(b);
    return x.begin != y.begin ? x.begin < y.begin : (x.end != y.end ? x.end < y.end : a < b);
  });
  uint64_t covered = 0;
  std::string previous;
  for (const std::string& name : names_) {
    const SafetensorsTensorInfo& info = tensors_.at(name);
    ZS_CHECK_AS(CorruptCheckpoint, info.begin >= covered, "safetensors file '", path_,
                "': tensor '", name, "' (bytes [", info.begin, ", ", info.end,
                ")) overlaps tensor '", previous, "' (which ends at byte ", covered,
                "); the header is corrupt");
    ZS_CHECK_AS(CorruptCheckpoint, info.begin == covered, "safetensors file '", path_, "': bytes [",
                covered, ", ", info.begin, ") of the data section before tensor '", name,
                "' belong to no tensor; the header is corrupt");
    covered = info.end;
    if (info.end > info.begin) previous = name;
  }
  ZS_CHECK_AS(CorruptCheckpoint, covered == data_bytes, "safetensors file '", path_, "' has ",
              data_bytes - covered, " bytes after its last tensor (data section ", data_bytes,
              " bytes, tensors end at ", covered, "); the file is corrupt or was appended to");
}

const SafetensorsTensorInfo& SafetensorsReader::info(const std::string& name) const {
  auto found = tensors_.find(name);
  ZS_CHECK(found != tensors_.end(), "safetensors file '", path_, "' has no tensor '", name,
           "' (it holds ", names_.size(), " tensors; `zs-ckpt inspect` lists them)");
  return found->second;
}

const uint8_t* SafetensorsReader::raw(const std::string& name) const {
  return data_ + info(name).begin;
}

void SafetensorsReader::read_f32(const std::string& name, float* out) const {
  const SafetensorsTensorInfo& tensor = info(name);
  ZS_CHECK(is_float_dtype(tensor.dtype), "safetensors file '", path_, "': tensor '", name, "' is ",
           stored_dtype_name(tensor.dtype),
           "; only F32, F16 and BF16 tensors can be read as weights");
  decode_to_f32(data_ + tensor.begin, static_cast<size_t>(tensor.numel()), tensor.dtype, out);
}

std::vector<float> SafetensorsReader::read_f32(const std::string& name) const {
  std::vector<float> values(static_cast<size_t>(info(name).numel()));
  read_f32(name, values.data());
  return values;
}

// ---------------------------------------------------------------------------------------------
// Writer

SafetensorsWriter::SafetensorsWriter(std::string path) : file_(std::move(path)) {}

void SafetensorsWriter::set_metadata(const std::string& key, const std::string& value) {
  ZS_CHECK(!header_written_, "writing '", path(), "': metadata '", key,
           "' comes after the first write(); set metadata before writing tensors");
  metadata_[key] = value;
}

void SafetensorsWriter::declare(const std::string& name, const Shape& shape, StoredDType dtype) {
  ZS_CHECK(!header_written_, "writing '", path(), "': tensor '", name,
           "' is declared after the first write(); declare every tensor first");
  ZS_CHECK(!name.empty() && name != kMetadataKey, "writing '", path(), "': '", name,
           "' cannot name a tensor");
  ZS_CHECK(index_.count(name) == 0, "writing '", path(), "': tensor '", name,
           "' is added twice; names must be unique");
  ZS_CHECK(is_float_dtype(dtype), "writing '", path(), "': tensor '", name, "' as ",
           stored_dtype_name(dtype), "; the writer stores F32, F16 or BF16");
  for (int64_t size : shape) {
    ZS_CHECK(size >= 0, "writing '", path(), "': tensor '", name, "' has shape ", shape_str(shape),
             " with a negative size");
  }
  index_[name] = entries_.size();
  entries_.push_back(Entry{name, shape, dtype, 0, false, {}});
}

void SafetensorsWriter::add(const std::string& name, const Shape& shape, StoredDType dtype,
                            const float* values) {
  declare(name, shape, dtype);
  Entry& entry = entries_.back();
  const size_t count = static_cast<size_t>(shape_numel(shape));
  ZS_CHECK(values != nullptr || count == 0, "writing '", path(), "': null values for '", name, "'");
  entry.pending.resize(count * stored_dtype_size(dtype));
  encode_f32(values, count, dtype, entry.pending.data());
  entry.written = true;
}

SafetensorsWriter::Entry& SafetensorsWriter::find(const std::string& name) {
  auto found = index_.find(name);
  ZS_CHECK(found != index_.end(), "writing '", path(), "': tensor '", name,
           "' was not declared; declare() every tensor before the first write()");
  return entries_[found->second];
}

void SafetensorsWriter::write_header() {
  Json header = Json::object();
  if (!metadata_.empty()) header[kMetadataKey] = metadata_;
  uint64_t offset = 0;
  for (Entry& entry : entries_) {
    entry.begin = offset;
    const uint64_t bytes =
        static_cast<uint64_t>(shape_numel(entry.shape)) * stored_dtype_size(entry.dtype);
    header[entry.name] = {{"dtype", stored_dtype_name(entry.dtype)},
                          {"shape", entry.shape},
                          {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  // Pad with spaces (valid JSON whitespace) so the data section starts 8-byte aligned.
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t length = text.size();
  file_.write(&length, 8);
  file_.write(text.data(), text.size());
  data_begin_ = 8 + length;
  header_written_ = true;
  for (Entry& entry : entries_) {
    if (entry.pending.empty()) continue;
    file_.write_at(data_begin_ + entry.begin, entry.pending.data(), entry.pending.size());
    std::vector<uint8_t>().swap(entry.pending);
  }
}

void SafetensorsWriter::write(const std::string& name, const float* values) {
  ZS_CHECK(!file_.committed(), "'", path(), "' was already committed; create a new writer");
  Entry& entry = find(name);
  ZS_CHECK(!entry.written, "writing '", path(), "': tensor '", name, "' is written twice");
  const size_t count = static_cast<size_t>(shape_numel(entry.shape));
  ZS_CHECK(values != nullptr || count == 0, "writing '", path(), "': null values for '", name, "'");
  if (!header_written_) write_header();
  const size_t element_bytes = stored_dtype_size(entry.dtype);
  std::vector<uint8_t> encoded(std::min(count, kConvertChunk) * element_bytes);
  for (size_t done = 0; done < count; done += kConvertChunk) {
    const size_t n = std::min(kConvertChunk, count - done);
    encode_f32(values + done, n, entry.dtype, encoded.data());
    file_.write_at(data_begin_ + entry.begin + done * element_bytes, encoded.data(),
                   n * element_bytes);
  }
  entry.written = true;
}

void SafetensorsWriter::commit() {
  ZS_CHECK(!file_.committed(), "'", path(), "' was already committed; create a new writer");
  if (!header_written_) write_header();
  for (const Entry& entry : entries_) {
    ZS_CHECK(entry.written, "writing '", path(), "': tensor '", entry.name,
             "' was declared but never written; write every declared tensor before commit()");
  }
  file_.commit();
}

}  // namespace zs::checkpoint
