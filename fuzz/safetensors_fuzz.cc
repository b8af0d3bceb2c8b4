// libFuzzer target: the safetensors reader (checkpoint/safetensors.h). The input is the file; a
// file the reader accepts is read back whole, every tensor, so offsets it validated are used.
#include <vector>

#include "checkpoint/safetensors.h"
#include "fuzz/fuzz_input.h"
#include "runtime/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = zs::fuzz::write_scratch_file("input.safetensors", data, size);
  try {
    const zs::checkpoint::SafetensorsReader reader(path);
    uint8_t checksum = 0;
    for (const std::string& name : reader.names()) {
      const zs::checkpoint::SafetensorsTensorInfo& info = reader.info(name);
      const uint8_t* bytes = reader.raw(name);
      for (uint64_t i = 0; i < info.nbytes(); ++i) checksum ^= bytes[i];
      if (zs::checkpoint::is_float_dtype(info.dtype)) reader.read_f32(name);
    }
    (void)checksum;
  } catch (const zs::Error&) {
    // A clean rejection of a bad file.
  }
  return 0;
}
