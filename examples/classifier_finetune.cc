// Fine-tune the BERT-style classifier (models/bert.h) on a TSV file of "text<TAB>label" lines,
// byte-tokenized, with ZeRO on ranks that are threads of this process (the local backend).
//
// Data: data/tsv.h reads the file (label ids in order of first appearance; the eval file uses
// the train file's label list), every text gets a [CLS] byte (0x01, a control byte absent from
// text) in front, and a ClassificationSampler cuts each step's global batch into the ranks'
// parts, padding with byte 0 and giving each row's valid length; a BatchLoader thread prepares
// the next batch while the current step runs. Without a TSV argument the program writes a small
// SYNTHETIC sentiment-like dataset (template sentences with positive or negative adjectives)
// and trains on it: it shows the machinery works, not how well a real task goes.
//
// Accuracy is computed distributed: each rank scores its part of every evaluation batch and the
// (correct, scored) counts are all-reduced, so every rank knows the result. The sampler drops a
// last partial batch, so the tail is scored in batches of one example per rank: fewer than
// `ranks` examples may go unscored; the count printed says how many were scored.
//
// Usage: zs-example-classifier [train.tsv [eval.tsv]] [--stage 0..3] [--ranks N] [--steps K]
//   defaults: synthetic data, stage 3, 2 ranks, 500 steps. Without eval.tsv, every 10th example
//   of train.tsv is held out for evaluation.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "comm/local/local_backend.h"
#include "data/loader.h"
#include "data/sampler.h"
#include "data/tsv.h"
#include "models/bert.h"
#include "ops/cpu/gemm.h"
#include "optim/adamw.h"
#include "optim/schedule.h"
#include "runtime/allocator.h"
#include "runtime/autograd.h"
#include "runtime/logging.h"
#include "runtime/rng.h"
#include "sharding/sharded_model.h"
#include "train/shard_views.h"

namespace {

constexpr char kCls = '\x01';  // the [CLS] token: pooled by the classifier
constexpr int32_t kPad = 0;
constexpr int64_t kGlobalBatch = 32;
constexpr int64_t kEvalBatch = 32;

// ---- The synthetic dataset (used when no TSV is given). ----

const char* const kPositive[] = {"wonderful", "delightful", "brilliant", "charming",
                                 "superb",    "moving",     "gorgeous",  "joyful"};
const char* const kNegative[] = {"dreadful", "boring", "clumsy", "tedious",
                                 "awful",    "bland",  "messy",  "dull"};
const char* const kNouns[] = {"film",   "movie", "story",      "ending", "cast",
                              "script", "show",  "soundtrack", "plot",   "performance"};
const char* const kAdverbs[] = {"really", "quite", "truly", "rather", "so", "just"};

// Sentence i of stream `salt`: one of five templates around a noun and a positive or negative
// adjective, with the label ("positive" or "negative").
std::string synthetic_line(uint32_t salt, uint64_t i) {
  auto pick = [&](const char* what, uint64_t n) {
    return static_cast<size_t>(zs::random_bits(zs::rng_key(2024, what, salt), i) % n);
  };
  const bool positive = pick("label", 2) == 0;
  const std::string adj = positive ? kPositive[pick("adj", 8)] : kNegative[pick("adj", 8)];
  const std::string noun = kNouns[pick("noun", 10)];
  const std::string adverb = kAdverbs[pick("adverb", 6)];
  std::string text;
  switch (pick("template", 5)) {
    case 0:
      text = "the " + noun + " was " + adverb + " " + adj;
      break;
    case 1:
      text = "what a " + adj + " " + noun;
      break;
    case 2:
      text = "i found the " + noun + " " + adj + " from start to finish";
      break;
    case 3:
      text = "a " + adverb + " " + adj + " " + noun + ", if you ask me";
      break;
    default:
      text = "honestly, the " + noun + " felt " + adj;
      break;
  }
  return text + "\t" + (positive ? "positive" : "negative") + "\n";
}

std::string write_synthetic(const std::string& path, uint32_t salt, int64_t lines) {
  std::ofstream out(path, std::ios::trunc);
  for (int64_t i = 0; i < lines; ++i) out << synthetic_line(salt, static_cast<uint64_t>(i));
  if (!out) throw std::runtime_error("cannot write " + path);
  return path;
}

// ---- Distributed accuracy. ----

struct Accuracy {
  int64_t correct = 0;
  int64_t scored = 0;
  double percent() const { return scored ? 100.0 * correct / scored : 0.0; }
};

// This rank's (correct, scored) over the full batches of `global_batch` examples of `dataset`,
// in file order, each rank scoring its part. Returns how many examples the batches covered.
int64_t score_batches(zs::models::BertClassifier& model,
                      const zs::data::ClassificationDataset& dataset, int64_t global_batch,
                      int64_t seq, zs::comm::Communicator& comm, zs::Allocator& allocator,
                      Accuracy& local) {
  if (global_batch == 0) return 0;
  zs::data::SamplerOptions options;
  options.global_batch = global_batch;
  options.rank = comm.rank();
  options.world_size = comm.size();
  options.shuffle = false;
  zs::data::ClassificationSampler sampler(dataset, seq, options, kPad);
  zs::data::Batch part = sampler.make_batch(allocator);
  zs::NoGradScope no_grad;
  zs::data::BatchPosition position;
  for (int64_t step = 0; step < sampler.steps_per_epoch(); ++step) {
    sampler.fill(position, part);
    local.correct += zs::models::count_correct(model.logits(part.ids, part.lengths), part.targets);
    local.scored += sampler.local_batch();
    position = sampler.next(position);
  }
  return sampler.steps_per_epoch() * global_batch;
}

// Accuracy over `dataset`, distributed: batches of kEvalBatch, then the tail that does not fill
// one in batches of one example per rank (fewer than `world` examples stay unscored). The counts
// are all-reduced, so every rank returns the same numbers. A collective: every rank calls it.
Accuracy evaluate(zs::models::BertClassifier& model, const zs::data::ClassificationDataset& dataset,
                  int64_t seq, zs::comm::Communicator& comm, zs::Allocator& allocator) {
  const int64_t world = comm.size();
  const int64_t size = static_cast<int64_t>(dataset.size());
  Accuracy local;
  const int64_t covered = score_batches(model, dataset, size >= kEvalBatch ? kEvalBatch : 0, seq,
                                        comm, allocator, local);
  zs::data::ClassificationDataset tail;
  tail.label_names = dataset.label_names;
  tail.texts.assign(dataset.texts.begin() + covered, dataset.texts.end());
  tail.labels.assign(dataset.labels.begin() + covered, dataset.labels.end());
  score_batches(model, tail, static_cast<int64_t>(tail.size()) >= world ? world : 0, seq, comm,
                allocator, local);
  zs::Tensor counts = zs::Tensor::empty({2}, zs::DType::kI32, allocator, "accuracy counts");
  counts.data<int32_t>()[0] = static_cast<int32_t>(local.correct);
  counts.data<int32_t>()[1] = static_cast<int32_t>(local.scored);
  comm.all_reduce(counts, zs::comm::ReduceOp::kSum)->wait();
  return {counts.data<int32_t>()[0], counts.data<int32_t>()[1]};
}

int usage(const char* program) {
  std::fprintf(stderr,
               "usage: %s [train.tsv [eval.tsv]] [--stage 0..3] [--ranks N dividing %lld] "
               "[--steps K >= 1]\n",
               program, static_cast<long long>(kGlobalBatch));
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  int stage = 3, ranks = 2, steps = 500;
  std::vector<std::string> paths;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if ((arg == "--stage" || arg == "--ranks" || arg == "--steps") && i + 1 < argc) {
      const int value = std::atoi(argv[++i]);
      (arg == "--stage" ? stage : arg == "--ranks" ? ranks : steps) = value;
    } else if (!arg.empty() && arg[0] != '-' && paths.size() < 2) {
      paths.push_back(arg);
    } else {
      return usage(argv[0]);
    }
  }
  if (stage < 0 || stage > 3 || ranks < 1 || kGlobalBatch % ranks != 0 || steps < 1) {
    return usage(argv[0]);
  }

  zs::data::ClassificationDataset train, eval;
  const bool synthetic = paths.empty();
  try {
    if (synthetic) {
      const std::filesystem::path dir = std::filesystem::temp_directory_path();
      paths.push_back(write_synthetic((dir / "zs_synthetic_sentiment_train.tsv").string(), 0, 512));
      paths.push_back(write_synthetic((dir / "zs_synthetic_sentiment_eval.tsv").string(), 1, 128));
      std::printf(
          "no TSV given: wrote a SYNTHETIC sentiment-like dataset (template sentences, not real "
          "reviews): %s (512 lines), %s (128 lines)\n",
          paths[0].c_str(), paths[1].c_str());
      std::fflush(stdout);  // before the rank threads' log lines
    }
    train = zs::data::read_tsv(paths[0]);
    if (paths.size() > 1) {
      zs::data::TsvOptions options;
      options.label_names = train.label_names;  // the same ids as in training
      eval = zs::data::read_tsv(paths[1], options);
    } else {  // hold out every 10th example
      zs::data::ClassificationDataset kept;
      kept.label_names = eval.label_names = train.label_names;
      for (size_t i = 0; i < train.size(); ++i) {
        auto& to = i % 10 == 9 ? eval : kept;
        to.texts.push_back(train.texts[i]);
        to.labels.push_back(train.labels[i]);
      }
      train = std::move(kept);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  // The [CLS] byte in front of every text; the model pools its position.
  for (auto* dataset : {&train, &eval}) {
    for (std::string& text : dataset->texts) text.insert(text.begin(), kCls);
  }
  if (static_cast<int64_t>(train.size()) < kGlobalBatch) {
    std::fprintf(stderr, "error: %s has %zu examples, fewer than one batch of %lld\n",
                 paths[0].c_str(), train.size(), static_cast<long long>(kGlobalBatch));
    return 1;
  }

  zs::models::BertConfig config;
  config.vocab_size = 256;  // bytes
  config.context = 64;      // longer texts are truncated to their first 63 bytes
  config.width = 64;
  config.n_head = 4;
  config.n_layer = 2;
  config.num_classes = static_cast<int64_t>(train.label_names.size());
  config.pad_id = kPad;
  if (config.num_classes < 2) {
    std::fprintf(stderr, "error: %s has a single label; a classifier needs at least two\n",
                 paths[0].c_str());
    return 1;
  }
  const int threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / ranks);
  std::atomic<bool> learned{false};
  float first_mean = 0, last_mean = 0;  // rank 0's first and last windowed losses

  try {
    zs::comm::run_local_ranks(ranks, [&](zs::comm::Communicator& comm) {
      zs::ops::cpu::set_intra_op_threads(threads);
      const bool lead = comm.rank() == 0;
      zs::CpuAllocator allocator(nullptr);
      zs::models::BertClassifier model(config);
      zs::sharding::ShardingConfig sharding;  // default wrap policy: each encoder Block a unit
      sharding.stage = stage;
      sharding.seed = 1;
      zs::sharding::ShardedModel sharded(model, comm, allocator, sharding);
      zs::optim::AdamWOptions adam;
      adam.weight_decay = 0.01f;
      const std::vector<zs::optim::ShardView> views = sharded.local_shards();
      zs::optim::AdamW optimizer(views, adam);
      const auto schedule = zs::optim::LrSchedule::warmup_cosine(1e-3f, 1e-4f, 20, steps);

      zs::data::SamplerOptions options;
      options.global_batch = kGlobalBatch;
      options.rank = comm.rank();
      options.world_size = comm.size();
      options.seed = 7;
      options.stream = "train";
      zs::data::ClassificationSampler sampler(train, config.context, options, kPad);
      zs::data::LoaderOptions loading;
      loading.num_batches = steps;
      zs::data::BatchLoader loader(sampler, allocator, loading);
      if (lead) {
        ZS_LOG_INFO(
            "classifier: {} parameters ({} layers, width {}), {} classes, {} train / {} eval "
            "examples, ZeRO stage {} on {} local ranks x {} threads, global batch {}",
            model.num_parameters(), config.n_layer, config.width, config.num_classes, train.size(),
            eval.size(), stage, ranks, threads, kGlobalBatch);
      }

      zs::Tensor loss_avg = zs::Tensor::empty({1}, zs::DType::kF32, allocator, "loss");
      constexpr int kLogEvery = 25;
      float window = 0, first_window = -1, last_window = 0;  // means over kLogEvery steps
      for (int step = 0; step < steps; ++step) {
        // The lease keeps the batch (whose ids and labels the tape refers to) until backward ran.
        zs::data::BatchLease batch = loader.next();
        zs::Tensor loss = model.loss(batch->ids, batch->lengths, batch->targets);
        loss_avg.fill(loss.item());
        zs::backward(loss);
        sharded.finish_backward();
        zs::train::clip_gradients(sharded, views, 1.0f);
        optimizer.step(schedule.lr(step));
        sharded.after_step();
        batch.release();
        comm.all_reduce(loss_avg, zs::comm::ReduceOp::kAvg)->wait();  // the mean over ranks
        window += loss_avg.item();
        if (step % kLogEvery == kLogEvery - 1 || step == steps - 1) {
          const int in_window = step % kLogEvery + 1;
          last_window = window / static_cast<float>(in_window);
          if (first_window < 0) first_window = last_window;
          window = 0;
          if (lead) {
            ZS_LOG_INFO("step {:4d}  loss {:.4f} (mean of the last {} steps)  lr {:.2e}", step + 1,
                        last_window, in_window, schedule.lr(step));
          }
        }
      }
      const Accuracy on_train = evaluate(model, train, config.context, comm, allocator);
      const Accuracy on_eval = evaluate(model, eval, config.context, comm, allocator);
      if (lead) {
        ZS_LOG_INFO("loss {:.4f} -> {:.4f} (first and last {}-step means) over {} steps",
                    first_window, last_window, kLogEvery, steps);
        ZS_LOG_INFO(
            "train accuracy {:.1f}% ({}/{} scored)   eval accuracy {:.1f}% ({}/{} scored){}",
            on_train.percent(), on_train.correct, on_train.scored, on_eval.percent(),
            on_eval.correct, on_eval.scored, synthetic ? "   [synthetic data]" : "");
        first_mean = first_window;
        last_mean = last_window;
        learned = last_window < 0.5f * first_window;
      }
    });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  if (synthetic && !learned) {
    std::fprintf(stderr,
                 "error: the loss did not fall by half on the synthetic data (too few --steps?)\n");
    return 1;
  }
  // The last line, for scripts and the test that runs this example (on real data the loss is
  // reported, not judged).
  std::printf("loss %s: %.4f -> %.4f\n", learned ? "fell" : "did not fall by half", first_mean,
              last_mean);
  return 0;
}
