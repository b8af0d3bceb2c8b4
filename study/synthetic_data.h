// The studies' data: a synthetic RTE-like entailment set, written as zs-train's TSV
// (text<TAB>label). Each line is "premise | hypothesis" built from templates over a few
// subjects, verbs, adjectives, objects and places; the hypothesis either restates part of the
// premise (entailment) or contradicts it — another subject, a negation or another place
// (not_entailment) — half each; as in RTE, surface cues carry part of the label. It is
// learnable by a small byte-level encoder and stands in for GLUE RTE (2,490 training pairs,
// sequence length 128 in the course set-up), which this repository does not ship: timings and
// traffic depend on the shapes, not on the words. Pure functions; deterministic in `seed`.
#pragma once

#include <cstdint>
#include <string>

namespace zs::study {

// Line `index` of the set (with its trailing newline).
std::string entailment_line(uint64_t seed, uint64_t index);
// Writes `examples` lines to `path` (replacing it). Throws IoError if it cannot be written.
void write_entailment_tsv(const std::string& path, int64_t examples, uint64_t seed);

}  // namespace zs::study
