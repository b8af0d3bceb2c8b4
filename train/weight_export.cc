// WeightExport (train/weight_export.h).
#include "train/weight_export.h"

#include <optional>
#include <string>

#include "checkpoint/gpt2_weights.h"
#include "runtime/logging.h"

namespace zs::train {

void WeightExport::on_end(int64_t /*steps*/) {
  const std::string& path = rank_.config.save_weights;
  if (path.empty()) return;
  std::optional<checkpoint::Gpt2WeightExporter> exporter;
  if (rank_.lead) {
    checkpoint::Gpt2ExportOptions options;
    checkpoint::weight_format_from_extension(path, &options.format);
    exporter.emplace(path, rank_.task.gpt()->config(), options);
  }
  rank_.sharded.visit_full_parameters(
      [&](const std::string& name, const Shape& shape, const float* data) {
        if (exporter) exporter->add(name, shape, data);
      });
  if (exporter) {
    exporter->commit();
    ZS_LOG_INFO("saved the full weights to {}", path);
  }
}

}  // namespace zs::train
