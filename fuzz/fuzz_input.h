// Helpers the libFuzzer targets share (docs/fuzzing.md): turning one fuzz input into what a
// parser reads — a file at a path, a set of files in a directory, an argument vector.
//
// The parsers of outside input read paths (most of them through a memory mapping), so a target
// writes the input to a file in a scratch directory of its own and parses that. Each target
// catches zs::Error — the clean errors a parser is meant to throw for bad input — and nothing
// else: any other exception, a sanitizer report or a signal is a crash that libFuzzer keeps.
//
// Ownership and thread-safety: libFuzzer runs one input at a time per process; the scratch
// directory belongs to the process (its pid is in the name) and is removed at exit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace zs::fuzz {

// The process's scratch directory (created on first use, under $TMPDIR or /tmp).
const std::string& scratch_dir();

// Writes `size` bytes to `name` in the scratch directory (replacing it); returns its path.
std::string write_scratch_file(const std::string& name, const uint8_t* data, size_t size);

// A fresh, empty directory `name` in the scratch directory; returns its path.
std::string fresh_scratch_dir(const std::string& name);

// The parts of `data` between occurrences of `separator` (an input with no separator is one
// part). Several files travel in one fuzz input this way; scripts/make_fuzz_corpus.sh joins
// seeds with the same separators.
std::vector<std::string_view> split_input(const uint8_t* data, size_t size,
                                          std::string_view separator);

// Separates the files of a sharded-checkpoint input: meta.json, then rank-00000.bin, ...
constexpr std::string_view kFileSeparator = "\n--zs-fuzz-file--\n";

}  // namespace zs::fuzz
