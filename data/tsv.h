// Text classification examples from a TSV file: one example per line, "text<TAB>label".
//
// Labels become int32 ids, either in order of first appearance in the file or, when a label list
// is given, by position in that list (the way to keep ids fixed across train and eval files).
// Lines are split at their one tab: a line with no tab or with more than one is malformed (a
// stray tab in the text would otherwise silently move into the label), as is an empty text or
// an empty label. A trailing '\r' (CRLF files) is dropped; blank lines are skipped. Errors name
// the file and the 1-based line: a malformed line is an IoError (the file is not in the format),
// a label missing from a given list is an InvalidArgument (the file does not fit the request).
//
// read_tsv returns a value the caller owns; it is a pure function of the file and options.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace zs::data {

struct ClassificationDataset {
  std::vector<std::string> texts;        // example i's text (raw bytes, as in the file)
  std::vector<int32_t> labels;           // example i's label id, an index into label_names
  std::vector<std::string> label_names;  // id -> name
  size_t size() const { return texts.size(); }
};

struct TsvOptions {
  // The label set in id order; empty: ids in order of first appearance in the file.
  std::vector<std::string> label_names;
  // Skip the first line (a header such as "sentence\tlabel").
  bool has_header = false;
};

ClassificationDataset read_tsv(const std::string& path, const TsvOptions& options = {});

}  // namespace zs::data
