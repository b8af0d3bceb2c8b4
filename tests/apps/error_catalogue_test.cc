// The bad-input catalogue (docs/errors.md) is a test: every row backed by "catalogue" is run here
// exactly as the document writes it — zs-train (its path comes from CMake as ZS_TRAIN_BINARY) as
// a child process with the row's arguments, in a scratch directory holding the fixtures the
// document names — and must exit with the row's code and print the row's excerpt on standard
// error. A row backed by another test must name one that exists (a TEST/TEST_F/TEST_P in tests/,
// or a ctest name in tests/CMakeLists.txt), so the document cannot cite tests that are gone. The
// document's path comes from CMake as ZS_SOURCE_DIR. One test, single-threaded; its children are
// always reaped.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "data/token_file.h"
#include "tests/support/child_process.h"
#include "tests/support/scratch.h"

namespace zs::testing {
namespace {

namespace fs = std::filesystem;

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// One row of the catalogue table.
struct Row {
  std::string bad_input;
  std::string arguments;  // without the backticks; "—" when another test backs the row
  int exit_code = 0;
  std::string excerpt;
  std::string backed_by;
};

std::string trim(const std::string& s) {
  const size_t begin = s.find_first_not_of(" \t");
  const size_t end = s.find_last_not_of(" \t");
  return begin == std::string::npos ? "" : s.substr(begin, end - begin + 1);
}

std::string unquote(const std::string& s) {
  return s.size() >= 2 && s.front() == '`' && s.back() == '`' ? s.substr(1, s.size() - 2) : s;
}

// The rows of the table under "## Catalogue" (six cells each; the header and the rule skipped).
std::vector<Row> catalogue_rows(const std::string& markdown) {
  std::vector<Row> rows;
  std::istringstream lines(markdown.substr(markdown.find("## Catalogue")));
  std::string line;
  int table_lines = 0;
  while (std::getline(lines, line)) {
    if (line.rfind("|", 0) != 0) continue;
    if (++table_lines <= 2) continue;  // header and rule
    std::vector<std::string> cells;
    size_t at = 1;
    while (at < line.size()) {
      const size_t bar = line.find(" |", at);
      if (bar == std::string::npos) break;
      cells.push_back(trim(line.substr(at, bar - at)));
      at = bar + 2;
    }
    EXPECT_EQ(cells.size(), 6u) << "a catalogue row without six cells: " << line;
    if (cells.size() != 6) continue;
    Row row;
    row.bad_input = cells[1];
    row.arguments = unquote(cells[2]);
    row.exit_code = cells[3] == "≠ 0" ? -1 : std::stoi(cells[3]);
    row.excerpt = unquote(cells[4]);
    row.backed_by = cells[5];
    rows.push_back(row);
  }
  return rows;
}

// Every occurrence of `from` in `s` replaced by `to`.
std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) {
    s.replace(at, from.size(), to);
  }
  return s;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> words;
  std::istringstream in(s);
  for (std::string word; in >> word;) words.push_back(word);
  return words;
}

class ErrorCatalogue : public ::testing::Test {
 protected:
  // The placeholders of docs/errors.md, in the order they are expanded.
  std::string expand(const std::string& arguments) const {
    std::string s = replace_all(arguments, "{train}",
                                "{run} {model} --text {dir}/corpus.txt --micro-batch 2 --steps 2");
    s = replace_all(s, "{run}",
                    "--layers 2 --context 32 --ranks 2 --threads 1 --eval-batches 1 --no-progress");
    s = replace_all(s, "{model}", "--width 32 --heads 2");
    return replace_all(s, "{dir}", fs::path(dir_.path("corpus.txt")).parent_path().string());
  }

  Child zs_train(const std::string& arguments, const std::string& log) const {
    std::vector<std::string> args{ZS_TRAIN_BINARY};
    for (const std::string& word : split(expand(arguments))) args.push_back(word);
    return run_child(args, log);
  }

  // The fixtures docs/errors.md names, each made the way a user would come by it.
  void make_fixtures() {
    std::string corpus;
    for (int i = 0; corpus.size() < 12000; ++i) {
      corpus += "Line " + std::to_string(i) + ": the quick brown fox jumps over the lazy dog. ";
    }
    write_file(dir_.path("corpus.txt"), corpus);
    write_file(dir_.path("empty.txt"), "");
    write_file(dir_.path("ds_unknown.json"),
               R"({"train_micro_batch_size_per_gpu": 2, "bogus_key": 1})");
    write_file(dir_.path("ds_type.json"), R"({"train_micro_batch_size_per_gpu": "two"})");
    write_file(dir_.path("ds_stage2.json"), R"({"zero_optimization": {"stage": 2}})");
    write_file(dir_.path("ds_fp16_bf16.json"),
               R"({"fp16": {"enabled": true}, "bf16": {"enabled": true}})");
    write_file(dir_.path("model_type.json"), R"({"n_layer": 2, "width": "x"})");
    std::vector<uint32_t> tokens(4000, 3);
    tokens[1234] = 300;
    data::write_token_file(dir_.path("vocab300.bin"), tokens);
    tokens[1234] = 3;
    data::write_token_file(dir_.path("truncated.bin"), tokens);
    fs::resize_file(dir_.path("truncated.bin"), fs::file_size(dir_.path("truncated.bin")) / 2);

    // The width-32 model's weights and a checkpoint of it after 2 steps (2 ranks).
    const Child made = zs_train(
        "{train} --save-weights {dir}/w.safetensors --checkpoint-dir {dir}/ck "
        "--checkpoint-interval 1",
        dir_.path("fixtures.log"));
    ASSERT_EQ(made.exit_code, 0) << read_text(dir_.path("fixtures.log"));
    const std::string weights = read_text(dir_.path("w.safetensors"));
    ASSERT_GT(weights.size(), 3000u);
    write_file(dir_.path("w_truncated.safetensors"), weights.substr(0, 3000));
    const fs::path step = dir_.path("ck/step-000002");
    ASSERT_TRUE(fs::is_directory(step));
    for (const char* copy : {"ck_corrupt", "ck_truncated", "ck_norank", "ck_future"}) {
      fs::copy(step, dir_.path(copy), fs::copy_options::recursive);
    }
    {
      std::fstream rank(dir_.path("ck_corrupt/rank-00001.bin"),
                        std::ios::in | std::ios::out | std::ios::binary);
      rank.seekg(100);
      const char byte = static_cast<char>(rank.get() ^ 0x5a);
      rank.seekp(100);
      rank.put(byte);
    }
    fs::resize_file(dir_.path("ck_truncated/rank-00000.bin"), 1000);
    fs::remove(dir_.path("ck_norank/rank-00001.bin"));
    const std::string meta = read_text(dir_.path("ck_future/meta.json"));
    const std::string future = std::regex_replace(meta, std::regex(R"("format_version":\s*\d+)"),
                                                  R"("format_version": 99)");
    ASSERT_NE(future, meta);
    write_file(dir_.path("ck_future/meta.json"), future);
  }

  ScratchDir dir_;
};

// Whether the test sources name `backed_by`: "Suite.Name" as a TEST/TEST_F/TEST_P, or
// "ctest:name" as a test added in tests/CMakeLists.txt.
bool test_exists(const std::string& backed_by) {
  const fs::path tests = fs::path(ZS_SOURCE_DIR) / "tests";
  if (backed_by.rfind("ctest:", 0) == 0) {
    return read_text((tests / "CMakeLists.txt").string()).find("NAME " + backed_by.substr(6)) !=
           std::string::npos;
  }
  const size_t dot = backed_by.find('.');
  if (dot == std::string::npos) return false;
  const std::regex declared("TEST(_F|_P)?\\(" + backed_by.substr(0, dot) + ",\\s*" +
                            backed_by.substr(dot + 1) + "\\)");
  for (const auto& entry : fs::recursive_directory_iterator(tests)) {
    if (entry.path().extension() != ".cc") continue;
    if (std::regex_search(read_text(entry.path().string()), declared)) return true;
  }
  return false;
}

TEST_F(ErrorCatalogue, EveryRowFailsAsDocumented) {
  const std::string document = read_text(std::string(ZS_SOURCE_DIR) + "/docs/errors.md");
  const std::vector<Row> rows = catalogue_rows(document);
  ASSERT_GE(rows.size(), 30u) << "docs/errors.md lost its catalogue table";
  make_fixtures();
  if (HasFatalFailure()) return;
  int run = 0;
  for (const Row& row : rows) {
    SCOPED_TRACE(row.bad_input);
    if (row.backed_by != "catalogue") {
      EXPECT_TRUE(test_exists(row.backed_by))
          << "docs/errors.md: '" << row.bad_input << "' is backed by " << row.backed_by
          << ", which no test declares";
      continue;
    }
    const std::string log = dir_.path("row-" + std::to_string(++run) + ".log");
    const Child child = zs_train(row.arguments, log);
    const std::string output = read_text(log);
    EXPECT_EQ(child.exit_code, row.exit_code) << row.arguments << "\n" << output;
    EXPECT_NE(output.find(row.excerpt), std::string::npos)
        << "expected '" << row.excerpt << "' from " << row.arguments << "\n"
        << output;
  }
  EXPECT_GE(run, 20);
}

}  // namespace
}  // namespace zs::testing
