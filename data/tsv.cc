// TSV parsing over a read-only mapping of the file.
#include "data/tsv.h"

#include <string_view>
#include <unordered_map>

#include "runtime/error.h"
#include "runtime/file_io.h"

namespace zs::data {
namespace {

// "a, b, c" (at most 10 names) for error messages.
std::string list_names(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < 10; ++i) {
    out += (i ? ", '" : "'") + names[i] + "'";
  }
  if (names.size() > 10) out += ", ... (" + std::to_string(names.size()) + " in all)";
  return out;
}

}  // namespace

ClassificationDataset read_tsv(const std::string& path, const TsvOptions& options) {
  ClassificationDataset dataset;
  std::unordered_map<std::string, int32_t> label_ids;
  const bool fixed_labels = !options.label_names.empty();
  for (const std::string& name : options.label_names) {
    ZS_CHECK(!name.empty(), "read_tsv('", path, "'): the given label list has an empty name");
    const bool inserted =
        label_ids.emplace(name, static_cast<int32_t>(dataset.label_names.size())).second;
    ZS_CHECK(inserted, "read_tsv('", path, "'): label '", name,
             "' appears twice in the given label list; each label needs one id");
    dataset.label_names.push_back(name);
  }

  const zs::detail::MappedFile file(path, "TSV file");
  const std::string_view content(reinterpret_cast<const char*>(file.data()), file.size());
  size_t line_number = 0;
  for (size_t begin = 0; begin < content.size();) {
    size_t end = content.find('\n', begin);
    if (end == std::string_view::npos) end = content.size();
    std::string_view line = content.substr(begin, end - begin);
    begin = end + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line_number == 1 && options.has_header) continue;
    if (line.empty()) continue;

    const size_t tab = line.find('\t');
    ZS_CHECK_AS(IoError, tab != std::string_view::npos, path, ":", line_number,
                ": expected 'text<TAB>label', found no tab; separate the text and its label "
                "with one tab");
    const size_t extra_tab = line.find('\t', tab + 1);
    ZS_CHECK_AS(IoError, extra_tab == std::string_view::npos, path, ":", line_number,
                ": expected 'text<TAB>label' with one tab, found another tab at column ",
                extra_tab + 1, "; remove tabs from the text");
    const std::string_view text = line.substr(0, tab);
    const std::string label(line.substr(tab + 1));
    ZS_CHECK_AS(IoError, !text.empty(), path, ":", line_number,
                ": the text before the tab is empty");
    ZS_CHECK_AS(IoError, !label.empty(), path, ":", line_number,
                ": the label after the tab is empty");

    auto found = label_ids.find(label);
    if (found == label_ids.end()) {
      ZS_CHECK(!fixed_labels, path, ":", line_number, ": label '", label,
               "' is not in the given label list (", list_names(options.label_names),
               "); add it to the list or fix the line");
      found = label_ids.emplace(label, static_cast<int32_t>(dataset.label_names.size())).first;
      dataset.label_names.push_back(label);
    }
    dataset.texts.emplace_back(text);
    dataset.labels.push_back(found->second);
  }
  return dataset;
}

}  // namespace zs::data
