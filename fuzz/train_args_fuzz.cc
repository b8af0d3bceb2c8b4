// libFuzzer target: zs-train's argument vector (train/cli.h, parse_train_args). The input is the
// arguments after the program name, one per line; a command line that parses is then validated
// and translated as zs-train does before it trains.
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/config_checks.h"
#include "fuzz/fuzz_input.h"
#include "runtime/error.h"
#include "train/cli.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args = {"zs-train"};
  if (size > 0) {
    for (const std::string_view arg : zs::fuzz::split_input(data, size, "\n")) {
      args.emplace_back(arg);
    }
  }
  std::vector<const char*> argv;
  for (const std::string& arg : args) argv.push_back(arg.c_str());
  zs::train::TrainConfig config;
  std::vector<std::string> notes;
  std::string help;
  try {
    const bool asked_for_help = zs::train::parse_train_args(static_cast<int>(argv.size()),
                                                            argv.data(), config, &notes, &help);
    if (!asked_for_help) zs::fuzz::check_parsed_config(config);
  } catch (const zs::Error&) {
    // A clean rejection: an unknown flag, a bad value, a refused combination.
  }
  return 0;
}
