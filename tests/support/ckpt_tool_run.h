// zs-ckpt run in-process by the tests (checkpoint/ckpt_tool.h's run_ckpt_tool): the exit code and
// what it printed to stdout and stderr. Header-only; a pure function of its arguments and the
// files they name.
#pragma once

#include <sstream>
#include <string>
#include <vector>

#include "checkpoint/ckpt_tool.h"

namespace zs::testing {

struct ToolRun {
  int code;
  std::string out, err;
};

// Runs `zs-ckpt args...`.
inline ToolRun run_zs_ckpt(std::vector<std::string> args) {
  args.insert(args.begin(), "zs-ckpt");
  std::vector<const char*> argv;
  for (const std::string& arg : args) argv.push_back(arg.c_str());
  std::ostringstream out, err;
  const int code = checkpoint::run_ckpt_tool(static_cast<int>(argv.size()), argv.data(), out, err);
  return {code, out.str(), err.str()};
}

}  // namespace zs::testing
