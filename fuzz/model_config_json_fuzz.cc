// libFuzzer target: the model-config JSON (--model-config FILE; train/config.h,
// apply_model_config_json). The input is the JSON text; a shape that applies is described as
// zs-train logs it.
#include <string>

#include "models/gpt.h"
#include "runtime/error.h"
#include "train/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  zs::models::GptConfig shape;
  try {
    zs::train::apply_model_config_json(text, "model.json", shape);
    (void)zs::models::describe(shape);
  } catch (const zs::Error&) {
    // A clean rejection: malformed JSON, an unknown key, a value that is not an integer.
  }
  return 0;
}
