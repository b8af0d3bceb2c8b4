// libFuzzer target: the llm.c checkpoint reader (checkpoint/llmc.h). The input is the .bin file;
// a file the reader accepts has every slice of every tensor read as fp32.
#include <vector>

#include "checkpoint/llmc.h"
#include "fuzz/fuzz_input.h"
#include "runtime/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = zs::fuzz::write_scratch_file("input.bin", data, size);
  try {
    const zs::checkpoint::LlmcReader reader(path);
    std::vector<float> values;
    for (const zs::checkpoint::LlmcTensor& tensor : reader.tensors()) {
      values.resize(static_cast<size_t>(tensor.slice_numel()));
      if (!tensor.per_layer) {
        reader.read_f32(tensor.name, -1, values.data());
        continue;
      }
      for (int64_t layer = 0; layer < tensor.shape[0]; ++layer) {
        reader.read_f32(tensor.name, layer, values.data());
      }
    }
  } catch (const zs::Error&) {
    // A clean rejection of a bad file.
  }
  return 0;
}
