// zs-train's command line: flags → TrainConfig (with a DeepSpeed JSON config underneath), and
// the program's main as a function, so tests run it in-process.
#pragma once

#include <string>
#include <vector>

#include "train/config.h"

namespace zs::train {

// Parses zs-train's arguments (argv[0] is the program name). A DeepSpeed config given with
// --deepspeed FILE (alias --deepspeed_config, --ds-config) is applied first and flags override
// it. Notes about DeepSpeed keys without effect go to `notes`. Throws InvalidArgument with
// CLI11's message for unknown flags or bad values; `help` (if not null) is set to the usage
// text and true is returned for --help.
bool parse_train_args(int argc, const char* const* argv, TrainConfig& config,
                      std::vector<std::string>* notes, std::string* help);

// The ZeRO stage from --strategy (empty: not given), --zero-stage (-1: not given) and the
// DeepSpeed config's zero_optimization.stage (-1: none). --strategy and --zero-stage must name
// the same stage, and so must the DeepSpeed file's stage when both are given (InvalidArgument
// naming both values otherwise: a stage silently taken from one of two disagreeing sources is a
// different memory and traffic plan than the user read; --strategy hybrid also needs
// hybrid_group > 0).
int resolve_stage(const std::string& strategy, int zero_stage_flag, int deepspeed_stage,
                  int hybrid_group);

// zs-train: parses, runs, prints. Returns the exit code: 0 success, 2 bad usage or input
// (InvalidArgument), 1 any other failure (I/O, out of memory, divergence, lost rank).
int train_main(int argc, const char* const* argv);

}  // namespace zs::train
