// Sharded checkpoint directories for zs-ckpt: inspect, and GPT-2 weights read parameter by
// parameter (checkpoint/checkpoint_weights.h).
#include "checkpoint/checkpoint_weights.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <iomanip>

#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/file_checksum.h"
#include "checkpoint/shard_files.h"
#include "runtime/error.h"
#include "runtime/json_read.h"
#include "runtime/logging.h"

namespace zs::checkpoint {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kMetaFile = "meta.json";

const json& file_entry(const json& meta, int rank) {
  return meta.at("files").at(static_cast<size_t>(rank));
}

// Runs `body`, which reads meta.json's keys: a key that is missing or of another type is a
// CorruptCheckpoint naming the file, not a JSON exception that no caller expects.
template <typename Body>
auto reading_meta(const std::string& dir, Body&& body) -> decltype(body()) {
  try {
    return body();
  } catch (const json::exception& e) {
    ZS_THROW(CorruptCheckpoint, "checkpoint metadata '", (fs::path(dir) / kMetaFile).string(),
             "' is not what zeroshard writes: ", e.what(),
             "; the metadata is corrupt — use another checkpoint");
  }
}

Checksum file_checksum(const json& meta, int rank) {
  return Checksum::parse(file_entry(meta, rank).at("checksum").get<std::string>());
}

// The GPT shape the metadata records; InvalidArgument for a checkpoint of another model.
models::GptConfig gpt_config(const json& meta, const std::string& dir) {
  const json& model = meta.at("model");
  ZS_CHECK(model.is_object(), "checkpoint '", dir,
           "' is not of a GPT (its metadata has no model shape); there are no GPT-2 weights in it");
  models::GptConfig config;
  config.n_layer = metadata_integer(model.at("n_layer"), dir, "model.n_layer");
  config.width = metadata_integer(model.at("width"), dir, "model.width");
  config.n_head = metadata_integer(model.at("n_head"), dir, "model.n_head");
  config.vocab_size = metadata_integer(model.at("vocab_size"), dir, "model.vocab_size");
  config.context = metadata_integer(model.at("context"), dir, "model.context");
  return config;
}

uint64_t peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<uint64_t>(usage.ru_maxrss) * 1024;  // Linux: KiB
}

// The resident set now (Linux: /proc/self/statm's second field, in pages); 0 if unknown.
uint64_t rss_bytes() {
  std::ifstream statm("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

}  // namespace

std::string resolve_step_dir(const std::string& path) {
  if (fs::exists(fs::path(path) / kMetaFile)) return path;
  // A checkpoint directory: the step directories --resume auto tries, in its order, the first
  // whose metadata reads (the others are named with the reason they were skipped).
  std::string note;
  const std::vector<std::string> candidates =
      fs::is_directory(path) ? resume_candidates(path, &note) : std::vector<std::string>();
  ZS_CHECK(!candidates.empty(), "'", path,
           "' is not a checkpoint: name a step directory (DIR/step-000120, with meta.json) or a "
           "checkpoint directory that holds step directories");
  if (!note.empty()) ZS_LOG_WARN("{}", note);
  std::string skipped;
  for (const std::string& dir : candidates) {
    try {
      read_checkpoint_meta(dir);
      if (!skipped.empty()) ZS_LOG_WARN("{}: using {}", skipped, dir);
      return dir;
    } catch (const CorruptCheckpoint& e) {
      skipped += (skipped.empty() ? "skipped " : "; skipped ") + dir + " (" + e.what() + ")";
    }  // a format version from a newer zeroshard (InvalidArgument) stops here, as on resume
  }
  ZS_THROW(CorruptCheckpoint, "no checkpoint in '", path, "' has readable metadata: ", skipped);
}

namespace {

constexpr const char* kMetaChecksum = "meta_checksum";

std::string meta_text(const json& meta) { return meta.dump(1) + "\n"; }

}  // namespace

std::string seal_checkpoint_meta(json meta) {
  meta.erase(kMetaChecksum);
  const std::string text = meta_text(meta);
  meta[kMetaChecksum] = FileChecksum::of(text.data(), text.size()).text();
  return meta_text(meta);
}

void check_checkpoint_meta_seal(const json& meta, const std::string& path) {
  const auto version = meta.find("format_version");
  if (version == meta.end() || !version->is_number_integer() || version->get<int64_t>() < 3) {
    return;
  }
  const auto seal = meta.find(kMetaChecksum);
  ZS_CHECK_AS(CorruptCheckpoint, seal != meta.end() && seal->is_string(), "checkpoint metadata '",
              path, "' has no ", kMetaChecksum,
              " (format version 3 writes one): it was edited or torn; use another checkpoint");
  json unsealed = meta;
  unsealed.erase(kMetaChecksum);
  const std::string text = meta_text(unsealed);
  const Checksum expected = Checksum::parse(seal->get<std::string>());
  const Checksum actual = FileChecksum::of(text.data(), text.size(), expected.algorithm);
  ZS_CHECK_AS(CorruptCheckpoint, actual == expected, "checkpoint metadata '", path,
              "' does not match its ", kMetaChecksum, " (", expected.text(), "; its text gives ",
              actual.text(),
              "): it was edited after the save (a changed completed_steps would skip or repeat "
              "data); use another checkpoint");
}

json read_checkpoint_meta(const std::string& dir) {
  const std::string path = (fs::path(dir) / kMetaFile).string();
  std::ifstream in(path);
  ZS_CHECK_AS(CorruptCheckpoint, in.good(), "checkpoint '", dir, "' has no readable ", kMetaFile,
              " (a torn save?)");
  return reading_meta(dir, [&] {
    json meta = parse_json_bounded<CorruptCheckpoint>(
        std::string(std::istreambuf_iterator<char>(in), {}), "checkpoint metadata '" + path + "'");
    const int64_t version = metadata_integer(meta.at("format_version"), dir, "format_version");
    check_format_version(static_cast<int>(std::clamp<int64_t>(version, INT32_MIN, INT32_MAX)), dir);
    check_checkpoint_meta_seal(meta, path);
    const int64_t world = metadata_integer(meta.at("world_size"), dir, "world_size");
    ZS_CHECK_AS(CorruptCheckpoint,
                world >= 1 && static_cast<size_t>(world) == meta.at("files").size(),
                "checkpoint metadata '", path, "' lists ", meta.at("files").size(),
                " rank files for ", world, " ranks");
    return meta;
  });
}

models::GptConfig checkpoint_gpt_config(const std::string& path) {
  const std::string dir = resolve_step_dir(path);
  const json meta = read_checkpoint_meta(dir);
  return reading_meta(dir, [&] { return gpt_config(meta, dir); });
}

void inspect_checkpoint(const std::string& path, std::ostream& out) {
  const std::string dir = resolve_step_dir(path);
  reading_meta(dir, [&] {
    const json meta = read_checkpoint_meta(dir);
    const SavedLayout layout(meta, dir);
    out << "checkpoint: " << dir << " (" << meta.value("format", std::string("?")) << ", version "
        << meta.at("format_version").dump() << ")\n";
    out << "step: " << meta.at("completed_steps").dump() << "\n";
    out << "world size: " << meta.at("world_size").dump() << ", stage " << meta.at("stage").dump()
        << ", hybrid group " << meta.at("hybrid_group").dump() << ", alignment "
        << meta.at("alignment").dump() << "\n";
    const json& model = meta.at("model");
    if (model.is_object()) {
      out << "model: GPT, " << models::describe(gpt_config(meta, dir)) << "\n";
    } else {
      out << "model: " << meta.at("flags").value("model", std::string("?")) << " (no GPT shape)\n";
    }
    const json& optimizer = meta.at("optimizer");
    out << "optimizer: " << optimizer.at("kind").get<std::string>() << ", "
        << optimizer.at("steps").dump() << " steps, state "
        << meta.at("layout").at("optimizer_state").dump() << ", hyperparameters "
        << optimizer.at("hyperparameters").dump() << "\n";
    const json& scaler = meta.at("loss_scaler");
    out << "loss scale: "
        << (scaler.is_null()
                ? std::string("none")
                : scaler.at("scale").dump() + " (good steps " + scaler.at("good_steps").dump() +
                      ", skipped steps " + scaler.at("skipped_steps").dump() + ")")
        << "\n";

    out << "files: " << layout.world_size() << "\n";
    std::string first_error;
    for (int r = 0; r < layout.world_size(); ++r) {
      const json& entry = file_entry(meta, r);
      const std::string file = rank_file_path(dir, meta, r);
      std::string verdict = "ok";
      try {
        verify_file(file, layout.file_bytes(r), file_checksum(meta, r));
      } catch (const CorruptCheckpoint& e) {
        verdict = fs::exists(file) ? "MISMATCH" : "MISSING";
        if (first_error.empty()) first_error = e.what();
      }
      out << "  " << entry.at("name").get<std::string>() << "  " << std::setw(12)
          << entry.at("bytes").dump() << "  " << entry.at("checksum").get<std::string>() << "  "
          << verdict << "\n";
    }
    size_t width = 4;
    for (const auto& p : layout.parameters()) width = std::max(width, p.name.size());
    int64_t total = 0;
    out << "parameters: " << layout.parameters().size() << "\n";
    for (const auto& p : layout.parameters()) {
      out << "  " << std::left << std::setw(static_cast<int>(width)) << p.name << "  "
          << shape_str(p.shape) << std::right << "\n";
      total += shape_numel(p.shape);
    }
    out << "parameter count: " << total << "\n";
    ZS_CHECK_AS(CorruptCheckpoint, first_error.empty(), first_error);
  });
}

CheckpointWeights::CheckpointWeights(const std::string& path)
    : dir_(resolve_step_dir(path)), meta_(read_checkpoint_meta(dir_)) {
  reading_meta(dir_, [&] {
    config_ = gpt_config(meta_, dir_);
    layout_ = std::make_unique<SavedLayout>(meta_, dir_);
    for (int r = 0; r < layout_->world_size(); ++r) {
      const std::string file = rank_file_path(dir_, meta_, r);
      verify_file(file, layout_->file_bytes(r), file_checksum(meta_, r));
      files_.emplace_back(file, std::ios::binary);
      ZS_CHECK_AS(CorruptCheckpoint, files_.back().good(), "cannot open '", file, "'");
    }
  });
}

int64_t CheckpointWeights::completed_steps() const {
  return reading_meta(
      dir_, [&] { return metadata_integer(meta_.at("completed_steps"), dir_, "completed_steps"); });
}

void CheckpointWeights::fill(const std::string& name, const Shape& shape, float* dst) {
  const auto& params = layout_->parameters();
  const auto found = std::find_if(params.begin(), params.end(),
                                  [&](const SavedLayout::Parameter& p) { return p.name == name; });
  ZS_CHECK(found != params.end(), "checkpoint '", dir_, "' has no tensor '", name, "'");
  ZS_CHECK(found->shape == shape, "checkpoint '", dir_, "' holds tensor '", name, "' of shape ",
           shape_str(found->shape), " where ", shape_str(shape), " is wanted");
  for (const SavedLayout::Span& span : layout_->spans(name, 0, shape_numel(shape), 0)) {
    std::ifstream& file = files_.at(static_cast<size_t>(span.rank));
    file.seekg(static_cast<std::streamoff>(span.file_offset));
    file.read(reinterpret_cast<char*>(dst + span.element),
              static_cast<std::streamsize>(span.count * static_cast<int64_t>(sizeof(float))));
    ZS_CHECK_AS(CorruptCheckpoint, file.good(), "cannot read '",
                rank_file_path(dir_, meta_, span.rank), "' at byte ", span.file_offset);
  }
}

ExportReport export_checkpoint(const std::string& path, const std::string& output,
                               const Gpt2ExportOptions& options) {
  ExportReport report;
  report.rss_before_bytes = rss_bytes();
  CheckpointWeights weights(path);
  Gpt2WeightExporter exporter(output, weights.config(), options);
  std::vector<float> values;
  for (const SavedLayout::Parameter& p : weights.layout().parameters()) {
    // One tensor at a time: the buffer is replaced, not grown, so it never holds two.
    values.clear();
    values.shrink_to_fit();
    values.resize(static_cast<size_t>(shape_numel(p.shape)));
    weights.fill(p.name, p.shape, values.data());
    exporter.add(p.name, p.shape, values.data());
    const uint64_t bytes = values.size() * sizeof(float);
    report.largest_tensor_bytes = std::max(report.largest_tensor_bytes, bytes);
    report.model_bytes += bytes;
  }
  exporter.commit();
  report.peak_rss_bytes = peak_rss_bytes();
  return report;
}

}  // namespace zs::checkpoint
