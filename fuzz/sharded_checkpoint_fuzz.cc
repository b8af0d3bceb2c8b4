// libFuzzer target: a sharded checkpoint's step directory — its metadata (meta.json) and the rank
// files it describes (checkpoint/checkpoint_weights.h, checkpoint/reshard.h,
// checkpoint/shard_files.h). The input is meta.json, then each rank file, joined by
// fuzz::kFileSeparator (scripts/make_fuzz_corpus.sh builds seeds from a real save). The directory
// is inspected as `zs-ckpt inspect DIR` does, and every saved parameter is read back through the
// byte ranges the metadata gives, as `zs-ckpt export` and `zs-train --init-from DIR` do.
#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint/checkpoint_weights.h"
#include "checkpoint/shard_files.h"
#include "fuzz/fuzz_input.h"
#include "runtime/error.h"

namespace {

// Parameters larger than this are not read back: a fuzzed shape could ask for any amount of
// memory, and the spans of a few thousand elements already cover every path of the reader.
constexpr int64_t kMaxReadNumel = int64_t{1} << 20;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<std::string_view> parts =
      zs::fuzz::split_input(data, size, zs::fuzz::kFileSeparator);
  const std::string dir = zs::fuzz::fresh_scratch_dir("step-000001");
  zs::fuzz::write_scratch_file("step-000001/meta.json",
                               reinterpret_cast<const uint8_t*>(parts[0].data()), parts[0].size());
  for (size_t rank = 1; rank < parts.size(); ++rank) {
    zs::fuzz::write_scratch_file(
        "step-000001/" + zs::checkpoint::rank_file_name(static_cast<int>(rank - 1)),
        reinterpret_cast<const uint8_t*>(parts[rank].data()), parts[rank].size());
  }
  try {
    std::ostringstream listing;
    zs::checkpoint::inspect_checkpoint(dir, listing);
  } catch (const zs::Error&) {
    // A clean rejection of bad metadata or a rank file that does not verify.
  }
  try {
    zs::checkpoint::CheckpointWeights weights(dir);
    std::vector<float> values;
    for (const auto& parameter : weights.layout().parameters()) {
      const int64_t numel = zs::shape_numel(parameter.shape);
      if (numel < 0 || numel > kMaxReadNumel) continue;
      values.resize(static_cast<size_t>(numel));
      weights.fill(parameter.name, parameter.shape, values.data());
    }
  } catch (const zs::Error&) {
    // As above.
  }
  return 0;
}
