// The language-modelling and classification tasks: their data, models, losses and scoring.
#include "train/tasks.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <set>

#include "data/byte_tokenizer.h"
#include "data/token_file.h"
#include "data/tsv.h"
#include "models/bert.h"
#include "runtime/error.h"

namespace zs::train {
namespace {

// ---- Language modelling data
// ------------------------------------------------------------------------------------

struct LmData : TaskData {
  TaskKind kind() const override { return TaskKind::kLanguageModel; }
  std::string description() const override { return description_text; }
  int64_t train_items() const override { return train_range.count; }
  int64_t eval_items() const override { return eval_range.count; }
  std::unique_ptr<data::TokenDataset> train;
  std::unique_ptr<data::TokenDataset> eval_file;  // when eval data is a separate file
  data::WindowRange train_range;
  data::WindowRange eval_range;  // windows of eval_set(); count 0 = no evaluation
  bool byte_level = false;
  std::string description_text;
  const data::TokenDataset& eval_set() const { return eval_file ? *eval_file : *train; }
};

bool looks_binary(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  char buffer[4096];
  file.read(buffer, sizeof buffer);
  return std::find(buffer, buffer + file.gcount(), '\0') != buffer + file.gcount();
}

// Regular text files named by `paths` (directories: their files, not recursive), each once.
std::vector<std::string> text_files(const std::vector<std::string>& paths) {
  std::vector<std::string> files;
  std::set<std::string> seen;
  auto add = [&](const std::string& path) {
    char* real = realpath(path.c_str(), nullptr);
    if (!real) return;
    const std::string canonical(real);
    std::free(real);
    struct stat st {};
    if (stat(canonical.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return;
    if (!seen.insert(canonical).second || looks_binary(canonical)) return;
    files.push_back(canonical);
  };
  for (const std::string& path : paths) {
    struct stat st {};
    ZS_CHECK_AS(IoError, stat(path.c_str(), &st) == 0, "--text '", path,
                "': no such file or directory");
    if (!S_ISDIR(st.st_mode)) {
      ZS_CHECK(!looks_binary(path), "--text '", path,
               "' is a binary file (it contains NUL "
               "bytes); give text, or a token file with --data");
      add(path);
      continue;
    }
    DIR* dir = opendir(path.c_str());
    ZS_CHECK_AS(IoError, dir != nullptr, "--text '", path, "': cannot list the directory");
    std::vector<std::string> names;
    while (dirent* entry = readdir(dir)) {
      if (entry->d_name[0] != '.') names.push_back(entry->d_name);
    }
    closedir(dir);
    std::sort(names.begin(), names.end());
    for (const std::string& name : names) add(path + "/" + name);
  }
  return files;
}

// Encodes the text files byte-level into a token file that is unlinked once mapped (the mapping
// keeps the data; nothing is left behind).
std::unique_ptr<data::TokenDataset> encode_text(const std::vector<std::string>& paths,
                                                std::string* description) {
  const std::vector<std::string> files = text_files(paths);
  ZS_CHECK(!files.empty(), "--text: no text files found in ", paths.front());
  std::string text;
  for (const std::string& file : files) {
    std::ifstream in(file, std::ios::binary);
    text.append(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const char* tmp = std::getenv("TMPDIR");
  std::string dir = std::string(tmp && *tmp ? tmp : "/tmp") + "/zs-train-XXXXXX";
  ZS_CHECK_AS(IoError, mkdtemp(dir.data()) != nullptr, "cannot create a temporary directory ", dir,
              " for the encoded text; set TMPDIR to a writable directory");
  const std::string path = dir + "/text.tokens";
  std::unique_ptr<data::TokenDataset> dataset;
  try {
    data::TokenWriteOptions options;
    options.vocab_size = data::ByteTokenizer::kVocabSize;
    data::write_token_file(path, data::ByteTokenizer().encode(text), options);
    dataset = std::make_unique<data::TokenDataset>(path, data::ByteTokenizer::kVocabSize);
  } catch (...) {
    unlink(path.c_str());
    rmdir(dir.c_str());
    throw;
  }
  unlink(path.c_str());
  rmdir(dir.c_str());
  *description = std::to_string(text.size()) + " bytes of text from " +
                 std::to_string(files.size()) + " file" + (files.size() == 1 ? "" : "s") +
                 " (byte-level)";
  return dataset;
}

std::unique_ptr<LmData> load_lm_data(const TrainConfig& c, const models::GptConfig& model,
                                     int64_t seq) {
  ZS_CHECK(!c.data.empty() || !c.text.empty(),
           "no training data: give --data FILE (a token "
           "file) or --text FILE|DIR (raw text, encoded byte-level)");
  auto owned = std::make_unique<LmData>();
  LmData& d = *owned;
  const uint32_t vocab = static_cast<uint32_t>(model.vocab_size);
  if (!c.text.empty()) {
    ZS_CHECK(model.vocab_size >= 256,
             "--text is encoded byte-level (256 token ids) but the model's "
             "vocab_size is ",
             model.vocab_size, "; use --vocab-size 256 or more");
    d.train = encode_text(c.text, &d.description_text);
    d.byte_level = true;
    // Said here, naming what the user gave: past this point the text is a temporary token file.
    ZS_CHECK(d.train->size() >= static_cast<uint64_t>(seq) + 1, "--text ", c.text.front(), ": ",
             d.description_text, " is shorter than one window of seq_len + 1 = ", seq + 1,
             " bytes; give more text or a shorter --seq-len/--context");
  } else {
    d.train = std::make_unique<data::TokenDataset>(c.data, vocab);
    d.description_text = c.data + " (" + std::to_string(d.train->size()) + " tokens, " +
                         data::token_file_format_name(d.train->info().format) + ")";
  }
  const int64_t windows = data::lm_num_windows(*d.train, seq);
  if (!c.eval_data.empty()) {
    d.eval_file = std::make_unique<data::TokenDataset>(c.eval_data, vocab);
    d.eval_range = {0, data::lm_num_windows(*d.eval_file, seq)};
    d.train_range = {0, windows};
    d.description_text += ", eval " + c.eval_data;
  } else {
    int64_t held = static_cast<int64_t>(std::floor(static_cast<double>(windows) * c.eval_fraction));
    if (c.eval_fraction > 0 && held == 0 && windows >= 2) held = 1;
    d.train_range = {0, windows - held};
    d.eval_range = {windows - held, held};
    if (held > 0) {
      d.description_text += ", last " + std::to_string(held) + " of " + std::to_string(windows) +
                            " windows held out for eval";
    }
  }
  return owned;
}

// ---- Classification data -----------------------------------------------------------------------

// Position 0 of every sequence is this byte: the [CLS] token the classifier pools. (A control
// byte that text files do not contain; ids are bytes, as for language modelling.)
constexpr char kClsByte = '\x01';  // as examples/classifier_finetune.cc

struct ClassificationData : TaskData {
  TaskKind kind() const override { return TaskKind::kClassification; }
  std::string description() const override { return description_text; }
  int64_t train_items() const override { return static_cast<int64_t>(train.size()); }
  int64_t eval_items() const override { return static_cast<int64_t>(eval.size()); }
  data::ClassificationDataset train;
  data::ClassificationDataset eval;
  std::string description_text;
};

data::ClassificationDataset with_cls(data::ClassificationDataset set) {
  for (std::string& text : set.texts) text.insert(text.begin(), kClsByte);
  return set;
}

std::unique_ptr<ClassificationData> load_classification_data(const TrainConfig& c,
                                                             const models::GptConfig& model) {
  ZS_CHECK(c.text.empty(),
           "--text is raw text for language modelling; classification reads "
           "--data FILE.tsv (text<TAB>label per line)");
  ZS_CHECK(model.vocab_size >= 256,
           "classification reads bytes (256 ids) but the model's "
           "vocab_size is ",
           model.vocab_size, "; use --vocab-size 256 or more");
  auto d = std::make_unique<ClassificationData>();
  data::ClassificationDataset all = data::read_tsv(c.data);
  ZS_CHECK(all.label_names.size() >= 2, "'", c.data, "' has ", all.label_names.size(),
           " distinct label(s); classification needs at least 2");
  if (!c.eval_data.empty()) {
    data::TsvOptions options;
    options.label_names = all.label_names;  // the same ids in both files
    d->eval = with_cls(data::read_tsv(c.eval_data, options));
    d->train = with_cls(std::move(all));
  } else {
    // Hold out the tail of the training file.
    const size_t n = all.size();
    size_t held = static_cast<size_t>(std::floor(static_cast<double>(n) * c.eval_fraction));
    if (c.eval_fraction > 0 && held == 0 && n >= 2) held = 1;
    d->eval.label_names = d->train.label_names = all.label_names;
    for (size_t i = 0; i < n; ++i) {
      data::ClassificationDataset& to = i < n - held ? d->train : d->eval;
      to.texts.push_back(std::move(all.texts[i]));
      to.labels.push_back(all.labels[i]);
    }
    d->train = with_cls(std::move(d->train));
    d->eval = with_cls(std::move(d->eval));
  }
  d->description_text = c.data + " (" + std::to_string(d->train.size()) + " examples, " +
                        std::to_string(d->train.label_names.size()) + " classes), " +
                        std::to_string(d->eval.size()) + " held-out examples" +
                        (c.eval_data.empty() ? "" : " from " + c.eval_data);
  return d;
}

// ---- Tasks -------------------------------------------------------------------------------------

class LanguageModelTask : public Task {
 public:
  LanguageModelTask(const LmData& data, const models::GptConfig& shape, int64_t seq)
      : data_(data), model_(shape), seq_(seq) {}
  models::Module& model() override { return model_; }
  std::string describe_model() const override {
    return "GPT: " + models::describe(model_.config());
  }
  std::unique_ptr<data::BatchSampler> sampler(const data::SamplerOptions& options) const override {
    return std::make_unique<data::LmWindowSampler>(*data_.train, seq_, options, data_.train_range);
  }
  Tensor loss(const data::Batch& batch) override { return model_.loss(batch.ids, batch.targets); }
  EvalSums evaluate(const std::vector<int64_t>& items, int64_t rows, Allocator& allocator,
                    const ToCompute& to_compute) override {
    Tensor ids = Tensor::empty({rows, seq_}, DType::kI32, allocator, "eval ids");
    Tensor targets = Tensor::empty({rows, seq_}, DType::kI32, allocator, "eval targets");
    const data::TokenDataset& set = data_.eval_set();
    for (int64_t i = 0; i < rows; ++i) {
      int32_t* id = ids.data<int32_t>() + i * seq_;
      int32_t* target = targets.data<int32_t>() + i * seq_;
      if (i < static_cast<int64_t>(items.size())) {
        data::read_lm_window(set, data_.eval_range.first + items[i], seq_, id, target);
      } else {
        std::fill(id, id + seq_, 0);
        std::fill(target, target + seq_, -100);  // ignored by the loss
      }
    }
    const float loss = model_.loss(to_compute(ids), to_compute(targets)).item();
    EvalSums sums;
    sums.count = static_cast<double>(items.size() * seq_);
    if (!items.empty()) sums.loss_sum = static_cast<double>(loss) * sums.count;
    return sums;
  }
  int64_t tokens_per_row() const override { return seq_; }
  models::Gpt* gpt() override { return &model_; }

 private:
  const LmData& data_;
  models::Gpt model_;
  int64_t seq_;
};

models::BertConfig bert_config(const models::GptConfig& shape, int64_t num_classes) {
  models::BertConfig b;
  b.vocab_size = shape.vocab_size;
  b.context = shape.context;
  b.width = shape.width;
  b.n_head = shape.n_head;
  b.n_layer = shape.n_layer;
  b.num_classes = num_classes;
  return b;
}

class ClassificationTask : public Task {
 public:
  ClassificationTask(const ClassificationData& data, const models::GptConfig& shape, int64_t seq)
      : data_(data),
        model_(bert_config(shape, static_cast<int64_t>(data.train.label_names.size()))),
        seq_(seq) {}
  models::Module& model() override { return model_; }
  std::string describe_model() const override {
    const models::BertConfig& b = model_.config();
    return "BERT-style classifier: " + std::to_string(b.n_layer) + " layers, width " +
           std::to_string(b.width) + ", " + std::to_string(b.n_head) + " heads, " +
           std::to_string(b.num_classes) + " classes, context " + std::to_string(b.context);
  }
  std::unique_ptr<data::BatchSampler> sampler(const data::SamplerOptions& options) const override {
    return std::make_unique<data::ClassificationSampler>(data_.train, seq_, options);
  }
  Tensor loss(const data::Batch& batch) override {
    return model_.loss(batch.ids, batch.lengths, batch.targets);
  }
  EvalSums evaluate(const std::vector<int64_t>& items, int64_t rows, Allocator& allocator,
                    const ToCompute& to_compute) override {
    Tensor ids = Tensor::empty({rows, seq_}, DType::kI32, allocator, "eval ids");
    Tensor lengths = Tensor::empty({rows}, DType::kI32, allocator, "eval lengths");
    static const std::string kPadding(1, kClsByte);  // padding rows: [CLS] alone, not scored
    for (int64_t i = 0; i < rows; ++i) {
      const std::string& text = i < static_cast<int64_t>(items.size())
                                    ? data_.eval.texts[static_cast<size_t>(items[i])]
                                    : kPadding;
      lengths.data<int32_t>()[i] =
          data::encode_example(text, seq_, /*pad_id=*/0, ids.data<int32_t>() + i * seq_);
    }
    const std::vector<float> logits =
        model_.logits(to_compute(ids), to_compute(lengths)).to_vector();
    const int64_t classes = model_.config().num_classes;
    const auto metric_start = std::chrono::steady_clock::now();
    EvalSums sums;
    for (size_t i = 0; i < items.size(); ++i) {
      const float* row = logits.data() + i * classes;
      const int32_t label = data_.eval.labels[static_cast<size_t>(items[i])];
      const float top = *std::max_element(row, row + classes);
      double z = 0;
      for (int64_t k = 0; k < classes; ++k) z += std::exp(static_cast<double>(row[k] - top));
      sums.loss_sum += std::log(z) + top - row[label];
      // The first arg-max on ties, as models::count_correct.
      sums.correct += (std::max_element(row, row + classes) - row) == label ? 1 : 0;
      sums.count += 1;
    }
    sums.metric_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - metric_start).count();
    return sums;
  }
  int64_t tokens_per_row() const override { return seq_; }

 private:
  const ClassificationData& data_;
  models::BertClassifier model_;
  int64_t seq_;
};

}  // namespace

TaskKind resolve_task(const TrainConfig& c) {
  if (c.task == "lm") return TaskKind::kLanguageModel;
  if (c.task == "classify") return TaskKind::kClassification;
  ZS_CHECK(c.task == "auto", "--task must be lm, classify or auto, got '", c.task, "'");
  const bool tsv = c.data.size() > 4 && c.data.compare(c.data.size() - 4, 4, ".tsv") == 0;
  return tsv ? TaskKind::kClassification : TaskKind::kLanguageModel;
}

std::unique_ptr<TaskData> load_task_data(const TrainConfig& c, const models::GptConfig& shape,
                                         int64_t seq) {
  if (resolve_task(c) == TaskKind::kClassification) return load_classification_data(c, shape);
  return load_lm_data(c, shape, seq);
}

std::unique_ptr<Task> make_task(const TaskData& data, const models::GptConfig& shape, int64_t seq) {
  if (data.kind() == TaskKind::kClassification) {
    return std::make_unique<ClassificationTask>(static_cast<const ClassificationData&>(data), shape,
                                                seq);
  }
  return std::make_unique<LanguageModelTask>(static_cast<const LmData&>(data), shape, seq);
}

bool byte_level(const TaskData& data) {
  return data.kind() == TaskKind::kLanguageModel && static_cast<const LmData&>(data).byte_level;
}

}  // namespace zs::train
