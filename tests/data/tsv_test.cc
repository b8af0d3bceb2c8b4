// TSV classification files: label ids by first appearance or from a given list, CRLF, blank
// lines and headers, and malformed lines reported with file:line.
#include "data/tsv.h"

#include <gtest/gtest.h>

#include "data_test_util.h"
#include "runtime/error.h"

namespace zs::data {
namespace {

using testing::error_message;
using testing::ScratchDir;
using testing::write_text;

TEST(Tsv, LabelIdsFollowFirstAppearance) {
  ScratchDir scratch;
  const std::string path = scratch.path("a.tsv");
  write_text(path, "great movie\tpos\nawful\tneg\nfine, I guess\tneutral\nloved it\tpos\n");
  const ClassificationDataset data = read_tsv(path);
  ASSERT_EQ(data.size(), 4u);
  EXPECT_EQ(data.label_names, (std::vector<std::string>{"pos", "neg", "neutral"}));
  EXPECT_EQ(data.labels, (std::vector<int32_t>{0, 1, 2, 0}));
  EXPECT_EQ(data.texts[2], "fine, I guess");
}

TEST(Tsv, GivenLabelListFixesTheIds) {
  ScratchDir scratch;
  const std::string path = scratch.path("b.tsv");
  write_text(path, "great movie\tpos\nawful\tneg\n");
  TsvOptions options;
  options.label_names = {"neg", "neutral", "pos"};
  const ClassificationDataset data = read_tsv(path, options);
  EXPECT_EQ(data.labels, (std::vector<int32_t>{2, 0}));
  EXPECT_EQ(data.label_names, options.label_names);
}

TEST(Tsv, HeaderCrlfBlankLinesAndNoFinalNewline) {
  ScratchDir scratch;
  const std::string path = scratch.path("c.tsv");
  write_text(path, "sentence\tlabel\r\nfirst\t1\r\n\r\n\nsecond one\t0\r\nthird\t1");
  TsvOptions options;
  options.has_header = true;
  const ClassificationDataset data = read_tsv(path, options);
  EXPECT_EQ(data.texts, (std::vector<std::string>{"first", "second one", "third"}));
  EXPECT_EQ(data.label_names, (std::vector<std::string>{"1", "0"}));
  EXPECT_EQ(data.labels, (std::vector<int32_t>{0, 1, 0}));
}

TEST(Tsv, MalformedLinesAreReportedWithFileAndLine) {
  ScratchDir scratch;
  const std::string path = scratch.path("bad.tsv");
  write_text(path, "ok\tpos\n\nno tab here\n");
  std::string message = error_message<IoError>([&] { read_tsv(path); });
  EXPECT_CONTAINS(message, path + ":3: expected 'text<TAB>label', found no tab");

  write_text(path, "ok\tpos\nid\ttext\tpos\n");
  message = error_message<IoError>([&] { read_tsv(path); });
  EXPECT_CONTAINS(message, path +
                               ":2: expected 'text<TAB>label' with one tab, found another "
                               "tab at column 8");

  write_text(path, "ok\tpos\nok\tneg\nmissing label\t\n");
  EXPECT_CONTAINS(error_message<IoError>([&] { read_tsv(path); }),
                  path + ":3: the label after the tab is empty");

  write_text(path, "\tpos\n");
  EXPECT_CONTAINS(error_message<IoError>([&] { read_tsv(path); }),
                  path + ":1: the text before the tab is empty");
}

TEST(Tsv, LabelOutsideTheGivenListNamesTheLine) {
  ScratchDir scratch;
  const std::string path = scratch.path("unknown.tsv");
  write_text(path, "a\tpos\nb\tneg\nc\tmaybe\n");
  TsvOptions options;
  options.label_names = {"neg", "pos"};
  const std::string message = error_message<InvalidArgument>([&] { read_tsv(path, options); });
  EXPECT_CONTAINS(message,
                  path + ":3: label 'maybe' is not in the given label list ('neg', 'pos')");

  options.label_names = {"neg", "neg"};
  EXPECT_CONTAINS(error_message<InvalidArgument>([&] { read_tsv(path, options); }),
                  "label 'neg' appears twice");
}

TEST(Tsv, MissingFileIsAnIoError) {
  ScratchDir scratch;
  const std::string path = scratch.path("missing.tsv");
  EXPECT_CONTAINS(error_message<IoError>([&] { read_tsv(path); }),
                  "cannot open TSV file '" + path + "'");
}

}  // namespace
}  // namespace zs::data
