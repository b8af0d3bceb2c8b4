// make_checkpointer, data_position and the sharded checkpointer behind them (train/checkpoints.h).
//
// Every step of a save or a restore that can fail on some ranks is closed by one small
// all-reduce over the world (agree) that doubles as the barrier and as the agreement on whether
// every rank succeeded, so an error on one rank stops every rank at the same point, with the
// failing rank's own error on that rank and an error naming it on the others. All of them run on
// the rank's thread, in the same order on every rank; the writer thread only writes a file.
//
// A save: (1) rank 0 makes the temporary directory (its name reaches every rank); (2) every rank
// snapshots its file into its RankFileWriter's bounded buffer (checkpoint/rank_file_writer.h),
// which writes and fsyncs it in the background, and rank 0 takes the metadata as of the save
// point; then training goes on. (3) At each following step boundary (publish) the ranks agree
// on whether every file is written, with the checksums and write times in the same all-reduce;
// once they are, rank 0 writes meta.json, renames the directory, replaces `latest` and prunes,
// and the ranks agree on that. A failed write stops every rank there. Before the next save and
// at the end of the run the ranks wait for the writes instead; --checkpoint-async off waits
// right after the snapshot, through the same code. A restore is two steps: every rank reads the
// metadata and verifies the files it reads (its own, or the saved files that hold its masters
// when the checkpoint has another unit plan or, at stage 0, spreads them over every rank's
// file), the ranks agree, then all apply.
#include "train/checkpoints.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/checkpoint_weights.h"
#include "checkpoint/rank_file_writer.h"
#include "checkpoint/reshard.h"
#include "checkpoint/shard_files.h"
#include "runtime/clock.h"
#include "runtime/error.h"
#include "runtime/file_io.h"
#include "runtime/json_read.h"
#include "runtime/logging.h"

namespace zs::train {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

constexpr const char* kMetaFile = "meta.json";

// The run's flags as they were resolved (what --help names them), for the metadata.
json flags_json(const TrainConfig& c) {
  return {{"task", c.task},
          {"model", c.model},
          {"model_config", c.model_config},
          {"init_from", c.init_from},
          {"data", c.data},
          {"eval_data", c.eval_data},
          {"text", c.text},
          {"seq_len", c.seq_len},
          {"micro_batch", c.micro_batch},
          {"grad_accum", c.grad_accum},
          {"backend", c.backend},
          {"device", c.device},
          {"ranks", c.ranks},
          {"zero_stage", c.stage},
          {"hybrid_group", c.hybrid_group},
          {"precision", dtype_name(c.precision)},
          {"reduce_dtype", dtype_name(c.reduce_dtype_set ? c.reduce_dtype : c.precision)},
          {"static_loss_scale", c.static_loss_scale},
          {"optimizer", c.optimizer},
          {"lr", c.lr},
          {"min_lr", c.min_lr},
          {"warmup", c.warmup_steps},
          {"decay", optim::lr_decay_name(c.decay)},
          {"weight_decay", c.weight_decay},
          {"beta1", c.beta1},
          {"beta2", c.beta2},
          {"eps", c.eps},
          {"momentum", c.momentum},
          {"nesterov", c.nesterov},
          {"clip", c.clip},
          {"steps", c.steps},
          {"epochs", c.epochs},
          {"seed", c.seed},
          {"checkpoint_dir", c.checkpoint_dir},
          {"checkpoint_interval", c.checkpoint_interval},
          {"keep_checkpoints", c.keep_checkpoints},
          {"resume", c.resume},
          {"checkpoint_async", c.checkpoint_async},
          {"checkpoint_buffer", c.checkpoint_buffer}};
}

// A 64-bit value as four 16-bit pieces, each exact in an fp32 all-reduce.
void put_u64(std::vector<float>& row, size_t at, uint64_t value) {
  for (size_t i = 0; i < 4; ++i) row[at + i] = static_cast<float>((value >> (16 * i)) & 0xffff);
}
uint64_t get_u64(const float* pieces) {
  uint64_t value = 0;
  for (size_t i = 0; i < 4; ++i) value |= static_cast<uint64_t>(pieces[i]) << (16 * i);
  return value;
}

class ShardedCheckpointer final : public Checkpointer {
 public:
  ShardedCheckpointer(const TrainConfig& config, const TrainState& state)
      : c_(config),
        s_(state),
        rank_(state.comm->rank()),
        world_(state.comm->size()),
        lead_(rank_ == 0),
        plan_(translate(config, rank_, world_)),
        writer_(config.checkpoint_buffer, *config.file_system) {
    // Which rank's file holds each rank's state (a hybrid replica's: its first group's source).
    for (int r = 0; r < world_; ++r) sources_.push_back(checkpoint::file_source_rank(*s_.model, r));
    // The snapshot buffer, allocated and faulted in now rather than on the first save's stall
    // (a hybrid replica writes no file and needs none).
    if (!c_.checkpoint_dir.empty() && sources_[static_cast<size_t>(rank_)] == rank_) {
      writer_.reserve(checkpoint::rank_file_bytes(*s_.model, rank_, *s_.optimizer));
    }
  }

  int64_t restore() override;
  bool due(int64_t completed, bool last) const override {
    return !c_.checkpoint_dir.empty() &&
           (last || (c_.checkpoint_interval > 0 && completed % c_.checkpoint_interval == 0));
  }
  void save(int64_t completed) override;
  void publish(bool wait) override;

 private:
  const FileSystem& files() const { return *c_.file_system; }
  // A save whose rank files are being written in the background.
  std::vector<int> sources_;  // per rank: the rank whose file holds its state (file_source_rank)
  struct PendingSave {
    int64_t completed = 0;
    std::string temp;  // its temporary directory
    // Rank 0: the metadata as of the save point (the scaler and the optimizer's step count
    // change with the next step); the checksums are added when it is published.
    json meta;
    std::exception_ptr error;  // this rank's snapshot or write failed
    std::optional<checkpoint::RankFileWriter::Written> written;
    double stall = 0;  // seconds the training loop spent in this save, on this rank
  };

  // Each rank's `mine` (all of the same width) as one row of a [world × width] table that every
  // rank gets: one all-reduce of a zero table with each rank's own row filled in (sums of one
  // value and zeros are exact). Also the barrier of the step it closes.
  std::vector<float> agree(const std::vector<float>& mine, const std::string& what) const;
  // The text of rank `rank`'s `error` (that rank passes its own; the others anything), on every
  // rank: a collective.
  std::string error_text_of(int rank, const std::exception_ptr& error) const;
  // The metadata of the state now, after `completed` steps (the files' checksums are not known
  // yet: publish adds them).
  json metadata(int64_t completed) const;
  // Verifies `dir` on every rank and, when all agree, loads it and returns its completed steps.
  // A corrupt or torn checkpoint: -1 when `skip_corrupt`, else the error (naming the file);
  // an incompatible one (version, world size, stage, model) is an error either way.
  int64_t load(const std::string& dir, bool skip_corrupt);
  // Throws unless `meta` can be loaded here (version, global batch, model); true when it has this
  // run's unit plan (world size, stage, hybrid group, alignment): each rank then reads its own
  // file whole, else the files are resharded (checkpoint/reshard.h).
  bool check_compatible(const json& meta, const std::string& dir) const;
  // Opens and verifies the files rank `rank` reads of checkpoint `dir` (metadata `meta`) and
  // returns what writes them into this rank's masters and optimizer state: with the same unit
  // plan its own file, whole, where that holds all its masters, else the byte ranges of the
  // files that hold them (checkpoint/reshard.h; stage 0 on several ranks reads every file).
  std::function<void()> open_files(const std::string& dir, const json& meta, bool same_plan,
                                   int rank) const;
  // Why rank `rank` could not verify its file of `dir`, told on a rank that could verify its own
  // (and so parsed `meta`): the same check of that rank's file, run here. The error path only.
  std::string peer_failure(const std::string& dir, const json& meta, int rank) const;

  const TrainConfig& c_;
  const TrainState s_;
  const int rank_;
  const int world_;
  const bool lead_;
  const TrainPlan plan_;
  std::optional<PendingSave> pending_;
  // Last: destroyed first, so an unfinished write is abandoned before anything it names goes.
  checkpoint::RankFileWriter writer_;
};

std::vector<float> ShardedCheckpointer::agree(const std::vector<float>& mine,
                                              const std::string& what) const {
  const size_t width = mine.size();
  std::vector<float> table(width * static_cast<size_t>(world_), 0.0f);
  std::copy(mine.begin(), mine.end(), table.begin() + static_cast<ptrdiff_t>(width * rank_));
  Tensor t = Tensor::empty({static_cast<int64_t>(table.size())}, DType::kF32, *s_.compute,
                           MemoryCategory::kCommBuffers, "checkpoint: " + what);
  t.copy_from(table);
  s_.comm->all_reduce(t, comm::ReduceOp::kSum, {{}, "checkpoint: " + what})->wait();
  return t.to_vector();
}

std::string ShardedCheckpointer::error_text_of(int rank, const std::exception_ptr& error) const {
  // The text travels as one byte per float (exact), kText bytes at most.
  constexpr size_t kText = 512;
  std::vector<float> mine(kText, 0.0f);
  if (rank == rank_ && error) {
    std::string text;
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      text = e.what();
    } catch (...) {
      text = "an unknown error";
    }
    for (size_t i = 0; i < std::min(text.size(), kText - 1); ++i) {
      mine[i] = static_cast<float>(static_cast<unsigned char>(text[i]));
    }
  }
  const std::vector<float> all = agree(mine, "the failed rank's error");
  std::string text;
  for (size_t i = 0; i < kText; ++i) {
    const float c = all[kText * static_cast<size_t>(rank) + i];
    if (c == 0.0f) break;
    text.push_back(static_cast<char>(static_cast<unsigned char>(c)));
  }
  return text.empty() ? std::string("(its error was not told)") : text;
}

json ShardedCheckpointer::metadata(int64_t completed) const {
  json files = json::array();
  for (int r = 0; r < world_; ++r) {
    // A hybrid replica's entry names its source's file: it writes none (same shards, same bits).
    files.push_back({{"rank", r},
                     {"name", checkpoint::rank_file_name(sources_[static_cast<size_t>(r)])},
                     {"bytes", checkpoint::rank_file_bytes(*s_.model, r, *s_.optimizer)}});
  }
  json model = nullptr;
  if (s_.gpt) {
    model = {{"n_layer", s_.gpt->n_layer},
             {"width", s_.gpt->width},
             {"n_head", s_.gpt->n_head},
             {"vocab_size", s_.gpt->vocab_size},
             {"context", s_.gpt->context}};
  }
  const OptimizerSettings& o = plan_.optimizer;
  json hyper = o.choice == OptimizerChoice::kSgd ? json{{"momentum", o.sgd.momentum},
                                                        {"nesterov", o.sgd.nesterov},
                                                        {"weight_decay", o.sgd.weight_decay}}
                                                 : json{{"beta1", o.adamw.beta1},
                                                        {"beta2", o.adamw.beta2},
                                                        {"eps", o.adamw.eps},
                                                        {"weight_decay", o.adamw.weight_decay}};
  json scaler = nullptr;
  if (s_.scaler) {
    const optim::LossScalerState st = s_.scaler->state();
    scaler = {{"scale", st.scale},
              {"good_steps", st.good_steps},
              {"consecutive_overflows", st.consecutive_overflows},
              {"skipped_steps", st.skipped_steps}};
  }
  const data::BatchPosition position =
      data_position(*s_.sampler, completed, s_.micro_batches_per_step);
  const ScheduleSettings& sched = plan_.schedule;
  return {{"format", "zeroshard sharded checkpoint"},
          {"format_version", kCheckpointFormatVersion},
          {"completed_steps", completed},
          {"world_size", world_},
          {"stage", c_.stage},
          {"hybrid_group", c_.hybrid_group},
          {"alignment", plan_.sharding.alignment},
          {"model", model},
          {"layout", checkpoint::layout_json(*s_.model, world_, *s_.optimizer)},
          {"optimizer",
           {{"kind", c_.optimizer}, {"steps", s_.optimizer->steps()}, {"hyperparameters", hyper}}},
          {"schedule",
           {{"decay", optim::lr_decay_name(sched.decay)},
            {"peak_lr", sched.peak_lr},
            {"min_lr", sched.min_lr},
            {"warmup_steps", sched.warmup_steps},
            {"next_lr", s_.schedule->lr(completed)}}},
          {"loss_scaler", scaler},
          {"data",
           {{"global_batch", s_.sampler->order().global_batch()},
            {"micro_batches_per_step", s_.micro_batches_per_step},
            {"epoch", position.epoch},
            {"micro_batch", position.step}}},
          // Every random stream is keyed by (seed, stream, counter) with counters derived from
          // parameter indices and completed steps: the seed and completed_steps restore them all.
          {"rng", {{"seed", s_.seed}}},
          {"flags", flags_json(c_)},
          {"files", files}};
}

void ShardedCheckpointer::save(int64_t completed) {
  // One save at a time: the previous one is published (or its error thrown) first.
  publish(true);
  const auto start = std::chrono::steady_clock::now();
  const std::string& dir = c_.checkpoint_dir;
  // 1. Rank 0 makes the temporary directory; its name (rank 0's pid, exact in fp32 below
  // 2^24) reaches every rank through the agreement.
  std::exception_ptr error;
  float token = 0;
  if (lead_) {
    try {
      token = static_cast<float>(::getpid() & 0xffffff);
      checkpoint::make_temp_step_dir(dir, completed, static_cast<int64_t>(token), files());
    } catch (...) {
      error = std::current_exception();
      token = -1;
    }
  }
  token = agree({token}, "temporary directory")[0];
  if (error) std::rethrow_exception(error);
  ZS_CHECK_AS(IoError, token >= 0, "rank 0 could not create a temporary checkpoint directory in '",
              dir, "' (its error says why)");
  // 2. The snapshot: this rank's file into the writer's buffer (the writer thread writes it
  // meanwhile), rank 0's metadata. A failure here is told at publication, with the others'.
  PendingSave save;
  save.completed = completed;
  save.temp = checkpoint::temp_step_dir(dir, completed, static_cast<int64_t>(token));
  try {
    if (lead_) save.meta = metadata(completed);
    if (sources_[static_cast<size_t>(rank_)] != rank_) {
      // A hybrid replica: its source rank writes the file (rank 0 takes its checksum from it).
      save.written = checkpoint::RankFileWriter::Written{};
    } else {
      writer_.snapshot((fs::path(save.temp) / checkpoint::rank_file_name(rank_)).string(),
                       checkpoint::rank_file_bytes(*s_.model, rank_, *s_.optimizer),
                       [this](const checkpoint::TensorVisitor& visit) {
                         checkpoint::for_each_rank_file_tensor(*s_.model, rank_, *s_.optimizer,
                                                               false, visit);
                       });
    }
  } catch (...) {
    save.error = std::current_exception();
  }
  save.stall = seconds_since(start);
  pending_ = std::move(save);
  if (!c_.checkpoint_async) publish(true);
}

void ShardedCheckpointer::publish(bool wait) {
  if (!pending_) return;
  const auto start = std::chrono::steady_clock::now();
  PendingSave& pending = *pending_;
  if (!pending.error && !pending.written && (wait || writer_.finished())) {
    try {
      pending.written = writer_.wait();
    } catch (...) {
      pending.error = std::current_exception();
    }
  }
  // 3. Each rank's state: 0 still writing, 1 written (then its checksum and write seconds), 2
  // failed. Every rank knows a save is pending (they all saved at the same step), so every rank
  // is here.
  constexpr size_t kWidth = 6;
  std::vector<float> row(kWidth, 0.0f);
  row[0] = pending.error ? 2.0f : pending.written ? 1.0f : 0.0f;
  if (pending.written) {
    put_u64(row, 1, pending.written->checksum.value);
    row[5] = static_cast<float>(pending.written->seconds);
  }
  const std::vector<float> rows = agree(row, "rank files written");
  int failed = -1;
  bool all_written = true;
  double write_seconds = 0;
  for (int r = world_ - 1; r >= 0; --r) {
    const float state = rows[kWidth * static_cast<size_t>(r)];
    if (state == 2.0f) failed = r;
    all_written = all_written && state == 1.0f;
    write_seconds = std::max(write_seconds, double{rows[kWidth * static_cast<size_t>(r) + 5]});
  }
  if (failed < 0 && !all_written) {
    pending.stall += seconds_since(start);
    return;
  }
  const PendingSave save = std::move(pending);
  pending_.reset();
  const int64_t completed = save.completed;
  if (failed >= 0) {
    // Every rank learns the failed rank's reason (a collective: all are here), so that rank 0's
    // message — the one a launcher's log shows first — says why, not only who.
    const std::string why = error_text_of(failed, save.error);
    if (save.error) std::rethrow_exception(save.error);
    ZS_THROW(IoError, "checkpoint of step ", completed, ": rank ", failed, " could not write ",
             checkpoint::rank_file_name(failed), " in '", save.temp, "': ", why,
             " — the previous checkpoints are intact");
  }
  if (save.error) std::rethrow_exception(save.error);
  // 4. Rank 0 publishes: the metadata, the directory under its step name, `latest`, pruning.
  const std::string& dir = c_.checkpoint_dir;
  std::exception_ptr error;
  std::string published;
  if (lead_) {
    try {
      json meta = save.meta;
      for (int r = 0; r < world_; ++r) {
        // Every rank's writer checksums with the same algorithm; only the values travel. A hybrid
        // replica's entry carries its source's (the file it names).
        const auto source = static_cast<size_t>(sources_[static_cast<size_t>(r)]);
        meta.at("files").at(static_cast<size_t>(r))["checksum"] =
            checkpoint::Checksum{checkpoint::kSavedChecksum, get_u64(&rows[kWidth * source + 1])}
                .text();
      }
      detail::AtomicFileWriter file((fs::path(save.temp) / kMetaFile).string(), files());
      const std::string text = checkpoint::seal_checkpoint_meta(std::move(meta));
      file.write(text.data(), text.size());
      file.commit();
      published = checkpoint::commit_step_dir(save.temp, dir, completed, files());
      checkpoint::publish_latest(dir, completed, files());
      for (const std::string& old :
           checkpoint::prune_step_dirs(dir, c_.keep_checkpoints, files())) {
        ZS_LOG_INFO("deleted checkpoint {} (--keep-checkpoints {})", old, c_.keep_checkpoints);
      }
    } catch (...) {
      error = std::current_exception();
    }
  }
  const bool ok = agree({error ? 0.0f : 1.0f}, "checkpoint published")[0] == 1.0f;
  if (error) std::rethrow_exception(error);
  ZS_CHECK_AS(IoError, ok, "rank 0 could not publish the checkpoint of step ", completed, " in '",
              dir, "' (its error says why)");
  if (lead_) {
    const double stall = save.stall + seconds_since(start);
    ZS_LOG_INFO(
        "saved checkpoint {} ({} ranks x {} bytes): training stalled {:.3f} s, write {:.3f} s",
        published, world_, checkpoint::rank_file_bytes(*s_.model, rank_, *s_.optimizer), stall,
        write_seconds);
    if (s_.result) {
      const checkpoint::RankFileWriter::Written& w = *save.written;
      s_.result->saves.push_back({completed, stall, write_seconds, w.copy_seconds,
                                  w.checksum_seconds, w.write_seconds, w.commit_seconds});
    }
  }
}

bool ShardedCheckpointer::check_compatible(const json& meta, const std::string& dir) const {
  checkpoint::check_format_version(meta.at("format_version").get<int>(), dir);
  const int world = meta.at("world_size").get<int>();
  const int stage = meta.at("stage").get<int>();
  const int hybrid = meta.at("hybrid_group").get<int>();
  ZS_CHECK_AS(CorruptCheckpoint, meta.at("files").size() == static_cast<size_t>(world),
              "checkpoint '", dir, "' lists ", meta.at("files").size(), " rank files for ", world,
              " ranks");
  // The data position is a count of global micro-batches (data_position): it continues the
  // same sequence of samples only with the same global micro-batch and micro-batches per step.
  const json& data = meta.at("data");
  const int64_t saved_batch = data.contains("global_batch")
                                  ? data.at("global_batch").get<int64_t>()
                                  : meta.at("flags").at("micro_batch").get<int64_t>() * world;
  const int64_t saved_accum = data.at("micro_batches_per_step").get<int64_t>();
  const int64_t batch = s_.sampler->order().global_batch();
  ZS_CHECK(saved_batch == batch && saved_accum == s_.micro_batches_per_step, "checkpoint '", dir,
           "' was saved with a global micro-batch of ", saved_batch, " sequences (", world,
           " ranks) and ", saved_accum, " micro-batches per step; this run has ", batch, " (",
           world_, " ranks) and ", s_.micro_batches_per_step,
           ". The data order continues exactly only with the same global batch: set "
           "--micro-batch so that micro-batch x ranks = ",
           saved_batch, " and --grad-accum ", saved_accum);
  const bool same_plan = world == world_ && stage == c_.stage && hybrid == c_.hybrid_group &&
                         meta.at("alignment").get<int64_t>() == plan_.sharding.alignment;
  if (same_plan) {
    checkpoint::check_layout(meta.at("layout"), *s_.model, *s_.optimizer, dir);
  } else {
    checkpoint::check_tensors(meta.at("layout"), *s_.model, *s_.optimizer, dir);
  }
  return same_plan;
}

std::function<void()> ShardedCheckpointer::open_files(const std::string& dir, const json& meta,
                                                      bool same_plan, int rank) const {
  if (same_plan && checkpoint::file_holds_masters(*s_.model, rank)) {
    const std::string file = checkpoint::rank_file_path(dir, meta, rank);
    const json& entry = meta.at("files").at(static_cast<size_t>(rank));
    auto reader = std::make_shared<checkpoint::RankFileReader>(
        file, checkpoint::rank_file_bytes(*s_.model, rank, *s_.optimizer),
        checkpoint::Checksum::parse(entry.at("checksum").get<std::string>()), files());
    return [this, reader] {
      reader->apply([this](const checkpoint::TensorVisitor& visit) {
        checkpoint::for_each_rank_file_tensor(*s_.model, rank_, *s_.optimizer, true, visit);
      });
    };
  }
  auto reader = std::make_shared<checkpoint::ReshardReader>(dir, meta, *s_.model, rank,
                                                            *s_.optimizer, same_plan);
  return [this, reader] { reader->apply(*s_.optimizer); };
}

std::string ShardedCheckpointer::peer_failure(const std::string& dir, const json& meta,
                                              int rank) const {
  try {
    open_files(dir, meta, check_compatible(meta, dir), rank);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "the rank files it reads of checkpoint '" + dir +
         "' could not be verified there (its error says why)";
}

int64_t ShardedCheckpointer::load(const std::string& dir, bool skip_corrupt) {
  // Status per rank: 0 verified, 1 corrupt or torn, 2 incompatible with this run.
  float status = 0;
  std::exception_ptr error;
  std::string why;
  json meta;
  bool same_plan = true;
  std::function<void()> apply;
  try {
    ZS_CHECK_AS(IoError, fs::is_directory(dir), "checkpoint directory '", dir,
                "' does not exist; name a step directory (DIR/step-000120) or use --resume auto");
    const std::string meta_path = (fs::path(dir) / kMetaFile).string();
    std::ifstream in(meta_path);
    ZS_CHECK_AS(CorruptCheckpoint, in.good(), "checkpoint '", dir, "' has no readable ", kMetaFile,
                " (a torn save?)");
    try {
      meta =
          parse_json_bounded<CorruptCheckpoint>(std::string(std::istreambuf_iterator<char>(in), {}),
                                                "checkpoint metadata '" + meta_path + "'");
      same_plan = check_compatible(meta, dir);
      checkpoint::check_checkpoint_meta_seal(meta, meta_path);
      const json& completed = meta.at("completed_steps");
      ZS_CHECK_AS(CorruptCheckpoint,
                  completed.is_number_integer() && completed.get<int64_t>() >= 0 &&
                      completed.get<int64_t>() <= kMaxSteps,
                  "checkpoint metadata '", meta_path, "': completed_steps is ",
                  json_excerpt(completed), ", not a step count in [0, ", kMaxSteps, "]");
    } catch (const json::exception& e) {
      ZS_THROW(CorruptCheckpoint, "checkpoint metadata '", meta_path,
               "' is not what this "
               "zeroshard wrote: ",
               e.what());
    }
    apply = open_files(dir, meta, same_plan, rank_);
  } catch (const InvalidArgument&) {
    status = 2;
    error = std::current_exception();
  } catch (const std::exception& e) {
    status = 1;
    why = e.what();
    error = std::current_exception();
  }
  const std::vector<float> statuses = agree({status}, "checkpoint verified");
  int worst_rank = -1;
  for (int r = 0; r < world_; ++r) {
    if (statuses[static_cast<size_t>(r)] > 0 &&
        (worst_rank < 0 ||
         statuses[static_cast<size_t>(r)] > statuses[static_cast<size_t>(worst_rank)])) {
      worst_rank = r;
    }
  }
  if (worst_rank >= 0) {
    const bool incompatible = statuses[static_cast<size_t>(worst_rank)] == 2;
    if (skip_corrupt && !incompatible) {
      if (error) ZS_LOG_WARN("--resume auto: skipping checkpoint '{}': {}", dir, why);
      if (lead_ && !error) {
        ZS_LOG_WARN("--resume auto: skipping checkpoint '{}': rank {}: {}", dir, worst_rank,
                    peer_failure(dir, meta, worst_rank));
      }
      return -1;
    }
    if (error) std::rethrow_exception(error);
    if (incompatible) {
      ZS_THROW(InvalidArgument, "checkpoint '", dir, "' does not fit this run (rank ", worst_rank,
               "'s error says why)");
    }
    ZS_THROW(CorruptCheckpoint, "rank ", worst_rank, ": ", peer_failure(dir, meta, worst_rank));
  }
  s_.model->finish_host_copies();  // uploads still reading the host masters apply() rewrites
  apply();
  s_.optimizer->set_steps(meta.at("optimizer").at("steps").get<int64_t>());
  const json& scaler = meta.at("loss_scaler");
  if (s_.scaler && !scaler.is_null()) {
    optim::LossScalerState st;
    st.scale = scaler.at("scale").get<float>();
    st.good_steps = scaler.at("good_steps").get<int64_t>();
    st.consecutive_overflows = scaler.at("consecutive_overflows").get<int>();
    st.skipped_steps = scaler.at("skipped_steps").get<int64_t>();
    s_.scaler->load_state(st);
  }
  s_.model->refresh_from_masters();
  const int64_t completed = meta.at("completed_steps").get<int64_t>();
  if (lead_) {
    const data::BatchPosition position =
        data_position(*s_.sampler, completed, s_.micro_batches_per_step);
    ZS_LOG_INFO("resumed from checkpoint {} after {} steps (data at epoch {}, micro-batch {}){}",
                dir, completed, position.epoch, position.step,
                same_plan
                    ? std::string()
                    : fmt::format(", resharded from {} ranks at stage {}",
                                  meta.at("world_size").get<int>(), meta.at("stage").get<int>()));
    if (s_.config && !s_.config->init_from.empty()) {
      ZS_LOG_INFO(
          "--init-from {} is not used: the run continues from the checkpoint's weights (with "
          "--resume auto, --init-from starts the run only when no checkpoint is found)",
          s_.config->init_from);
    }
  }
  return completed;
}

int64_t ShardedCheckpointer::restore() {
  if (c_.resume.empty()) return 0;
  if (c_.resume != "auto") return load(c_.resume, false);
  const std::string& dir = c_.checkpoint_dir;
  std::string note;
  const std::vector<std::string> candidates = checkpoint::resume_candidates(dir, &note, files());
  if (!note.empty() && lead_) ZS_LOG_WARN("--resume auto: {}", note);
  if (candidates.empty()) {
    if (lead_) ZS_LOG_INFO("--resume auto: no checkpoint in '{}' yet; starting from scratch", dir);
    return 0;
  }
  for (const std::string& path : candidates) {
    const int64_t completed = load(path, true);
    if (completed < 0) continue;
    // `latest` names what the run continues from again (it named an older or a missing one).
    if (lead_ && checkpoint::read_latest(dir, files()) != fs::path(path).filename().string()) {
      checkpoint::publish_latest(dir, completed, files());
    }
    return completed;
  }
  ZS_THROW(CorruptCheckpoint, "--resume auto: none of the ", candidates.size(), " checkpoints in '",
           dir, "' verifies (the warnings above say why); restore one, or start without --resume");
}

}  // namespace

std::unique_ptr<Checkpointer> make_checkpointer(const TrainConfig& config,
                                                const TrainState& state) {
  if (config.checkpoint_dir.empty() && config.resume.empty()) {
    return std::make_unique<NoCheckpoints>();
  }
  ZS_CHECK(state.model && state.optimizer && state.schedule && state.sampler && state.comm &&
               state.compute,
           "make_checkpointer: the train state is incomplete");
  ZS_CHECK(config.file_system,
           "make_checkpointer: TrainConfig::file_system is null; leave it at "
           "the POSIX file layer or pass a file layer that outlives the run");
  return std::make_unique<ShardedCheckpointer>(config, state);
}

data::BatchPosition data_position(const data::BatchSampler& sampler, int64_t completed_steps,
                                  int64_t micro_batches_per_step) {
  data::BatchPosition position;
  for (int64_t i = 0; i < completed_steps * micro_batches_per_step; ++i) {
    position = sampler.next(position);
  }
  return position;
}

}  // namespace zs::train
