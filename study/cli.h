// zs-study's command line: `zs-study sync` (study/sync_study.h) and `zs-study scaling`
// (study/scaling_study.h), each printing its markdown table and writing it with its SVG charts.
#pragma once

namespace zs::study {

// Returns the exit code: 0 success, 2 bad usage or input, 3 the sync study found losses that
// differ between syncs (its report is still written), 1 any other failure.
int study_main(int argc, const char* const* argv);

}  // namespace zs::study
