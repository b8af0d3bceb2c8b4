// libFuzzer target: the DeepSpeed JSON config (train/config.h, apply_deepspeed_json). The input is
// the JSON text; a config that applies is then validated and translated as zs-train does.
#include <string>
#include <vector>

#include "fuzz/config_checks.h"
#include "runtime/error.h"
#include "train/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  zs::train::TrainConfig config;
  std::vector<std::string> notes;
  try {
    zs::train::apply_deepspeed_json(text, "ds_config.json", config, &notes);
    zs::fuzz::check_parsed_config(config);
  } catch (const zs::Error&) {
    // A clean rejection: malformed JSON, an unknown key, a wrong type, an invalid value.
  }
  return 0;
}
