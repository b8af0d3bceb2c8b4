// libFuzzer target: the TSV reader (data/tsv.h). The first byte picks the options (bit 0: a
// header line; bit 1: a fixed label list), the rest is the file.
#include "data/tsv.h"
#include "fuzz/fuzz_input.h"
#include "runtime/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  zs::data::TsvOptions options;
  options.has_header = (data[0] & 1) != 0;
  if ((data[0] & 2) != 0) options.label_names = {"negative", "positive"};
  const std::string path = zs::fuzz::write_scratch_file("input.tsv", data + 1, size - 1);
  try {
    const zs::data::ClassificationDataset dataset = zs::data::read_tsv(path, options);
    for (size_t i = 0; i < dataset.size(); ++i) {
      const int32_t label = dataset.labels[i];
      if (label < 0 || static_cast<size_t>(label) >= dataset.label_names.size()) __builtin_trap();
    }
  } catch (const zs::Error&) {
    // A clean rejection of a malformed line or an unknown label.
  }
  return 0;
}
