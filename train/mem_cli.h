// zs-mem's command line as a function, so tests run it in-process: a model (a GPT preset, or a
// bare parameter count), ranks, ZeRO stage(s), precision, optimizer, offload → the per-rank
// memory table of train/memory_model.h, the ZeRO paper's figure next to it, and with --budget
// the largest GPT preset that fits per stage.
//
// Not thread-safe only in that it writes to the given streams.
#pragma once

#include <ostream>

namespace zs::train {

// zs-mem. argv[0] is the program name. Returns the exit code: 0 success (also --help), 2 bad
// usage (unknown flag, bad value, inconsistent flags) with a message on `err`.
int mem_main(int argc, const char* const* argv, std::ostream& out, std::ostream& err);

}  // namespace zs::train
