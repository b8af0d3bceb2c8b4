// zs-study's flags and outputs (study/cli.h).
#include "study/cli.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "comm/launch.h"
#include "runtime/error.h"
#include "runtime/logging.h"
#include "study/scaling_study.h"
#include "study/sync_study.h"
#include "train/config.h"

namespace zs::study {
namespace {

// Writes `text` to `path` through a temporary file, so a failed write leaves any earlier file.
void write_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  std::ofstream out(tmp, std::ios::trunc);
  out << text;
  out.close();
  ZS_CHECK_AS(IoError, out.good() && std::rename(tmp.c_str(), path.c_str()) == 0,
              "zs-study: cannot write ", path, "; give --out a writable place");
}

std::string command_line(int argc, const char* const* argv) {
  std::string line = "zs-study";
  for (int i = 1; i < argc; ++i) line += std::string(" ") + argv[i];
  return line;
}

// The classifier flags both studies take.
struct ShapeFlags {
  int64_t layers = -1, width = -1, heads = -1, seq = -1;
  bool bert_base = false;
  void add(CLI::App& app, ClassifierSetup& setup) {
    app.add_flag("--bert-base", bert_base,
                 "BERT-base's encoder: 12 layers, width 768, 12 heads, sequence 128 (byte "
                 "vocabulary); the flags below override it");
    app.add_option("--layers", layers, "encoder layers (default 2)");
    app.add_option("--width", width, "hidden width (default 64)");
    app.add_option("--heads", heads, "attention heads (default 4)");
    app.add_option("--seq", seq, "sequence length in bytes (default 128)");
    app.add_option("--examples", setup.examples, "synthetic labelled pairs to generate");
    app.add_option("--lr", setup.lr, "AdamW learning rate");
    app.add_option("--seed", setup.seed, "seed of the data, the initialization and the order");
    app.add_option("--threads", setup.threads, "compute threads per rank (default: cores / ranks)");
    app.add_option("--work-dir", setup.work_dir,
                   "where the synthetic TSV is written (default: a temporary directory)");
  }
  void apply(ClassifierSetup& setup) const {
    setup.shape = bert_base ? bert_base_shape() : small_classifier_shape();
    if (layers >= 0) setup.shape.n_layer = layers;
    if (width > 0) setup.shape.width = width;
    if (heads > 0) setup.shape.n_head = heads;
    if (seq > 0) setup.shape.context = seq;
  }
};

int run_sync(const SyncStudyOptions& options, const std::string& out, const std::string& command) {
  const SyncStudy study = run_sync_study(options);
  const std::string md = sync_markdown(study, command);
  write_file(out + ".md", md);
  write_file(out + "-time.svg", sync_time_svg(study));
  write_file(out + "-traffic.svg", sync_traffic_svg(study));
  std::printf("%s\nwrote %s.md, %s-time.svg, %s-traffic.svg\n", md.c_str(), out.c_str(),
              out.c_str(), out.c_str());
  if (!study.identical()) {
    std::fprintf(stderr, "zs-study sync: error: the syncs gave different losses (see %s.md)\n",
                 out.c_str());
    return 3;
  }
  return 0;
}

int run_scaling(const ScalingStudyOptions& options, const std::string& out, bool append,
                const std::string& command) {
  std::vector<ScalingRow> rows = run_scaling_study(options);
  if (comm::detect_launch().rank != 0) return 0;  // rank 0 writes the table
  const std::string tsv = out + ".tsv";
  if (append) {
    std::ifstream in(tsv);
    if (in.good()) {
      std::stringstream text;
      text << in.rdbuf();
      rows = merge_scaling_rows(read_scaling_rows(text.str(), tsv), rows);
    }
  } else {
    rows = merge_scaling_rows({}, rows);
  }
  const models::GptConfig& g = options.setup.shape;
  std::ostringstream setup;
  setup << "BERT-style classifier, " << g.n_layer << " layers, width " << g.width << ", "
        << g.n_head << " heads, sequence length " << g.context << ", byte vocabulary; "
        << options.setup.examples << " synthetic entailment pairs, " << 100 * options.eval_fraction
        << "% held out; DDP (ZeRO stage 0, bucketed all-reduce), AdamW lr " << options.setup.lr
        << ", " << options.steps << " steps per run; backend " << options.backend << ", device "
        << options.device << ".";
  const std::string md = scaling_markdown(rows, setup.str(), command);
  write_file(tsv, scaling_rows_tsv(rows));
  write_file(out + ".md", md);
  write_file(out + "-throughput.svg", scaling_throughput_svg(rows));
  write_file(out + "-speedup.svg", scaling_speedup_svg(rows));
  write_file(out + "-step-time.svg", scaling_step_time_svg(rows));
  write_file(out + "-eval.svg", scaling_eval_svg(rows));
  std::printf("%s\nwrote %s.tsv, %s.md and %s-{throughput,speedup,step-time,eval}.svg\n",
              md.c_str(), out.c_str(), out.c_str(), out.c_str());
  return 0;
}

}  // namespace

int study_main(int argc, const char* const* argv) {
  CLI::App app{
      "zs-study: the field's standard data-parallel experiments, as tables and SVG charts.",
      "zs-study"};
  app.require_subcommand(1);
  std::string log_level = "warn";
  app.add_option("--log-level", log_level, "the runs' log level (default warn)");

  SyncStudyOptions sync;
  ShapeFlags sync_shape;
  std::string sync_out = "zs-study-sync";
  std::vector<std::string> sync_names;
  CLI::App* sync_cmd = app.add_subcommand(
      "sync",
      "gradient sync methods (gather-scatter, per-tensor, bucketed) at stage 0: identical losses, "
      "ms per iteration, traffic of every collective vs the formula");
  sync_cmd->add_option("--ranks", sync.ranks, "rank threads (default 2)");
  sync_cmd->add_option("--batch-sizes", sync.batch_sizes, "per-rank batch sizes (default 64,32,16)")
      ->delimiter(',');
  sync_cmd
      ->add_option("--syncs", sync_names,
                   "which syncs (default gather-scatter,per-tensor,bucketed)")
      ->delimiter(',');
  sync_cmd->add_option("--iterations", sync.iterations,
                       "timed iterations per run, the first dropped (default 40); a run is "
                       "lengthened to cover one epoch for the traffic sum");
  sync_cmd->add_option("--out", sync_out,
                       "output prefix: PREFIX.md, PREFIX-time.svg, PREFIX-traffic.svg");
  sync_shape.add(*sync_cmd, sync.setup);

  ScalingStudyOptions scaling;
  scaling.setup.examples = 1024;
  ShapeFlags scaling_shape;
  std::string scaling_out = "zs-study-scaling";
  std::vector<std::string> precisions;
  bool append = false;
  CLI::App* scaling_cmd = app.add_subcommand(
      "scaling",
      "throughput per rank, speedup vs ideal, step time, evaluation time (predict / metric / "
      "broadcast) and accuracy over ranks, precisions and batch sizes");
  scaling_cmd
      ->add_option("--ranks", scaling.ranks,
                   "rank counts to run as threads (default 1,2,4); under mpirun/srun the "
                   "job's world is run instead")
      ->delimiter(',');
  scaling_cmd->add_option("--precisions", precisions, "fp32, bf16, fp16 (default fp32,bf16)")
      ->delimiter(',');
  scaling_cmd
      ->add_option("--batch-sizes", scaling.batch_sizes, "per-rank batch sizes (default 16,32)")
      ->delimiter(',');
  scaling_cmd
      ->add_option("--eval-batch-sizes", scaling.eval_batch_sizes,
                   "rows per evaluation forward, the held-out pairs scored once per size after "
                   "training (default: the training batch), e.g. 128,256,512,1024,2048,4096")
      ->delimiter(',');
  scaling_cmd->add_option("--steps", scaling.steps, "training steps per run (default 30)");
  scaling_cmd->add_option("--eval-fraction", scaling.eval_fraction,
                          "share of the pairs held out for evaluation (default 0.25)");
  scaling_cmd->add_option("--backend", scaling.backend,
                          "local (rank threads), mpi (under mpirun/srun), auto, nccl");
  scaling_cmd->add_option("--device", scaling.device, "cpu, or cuda (one GPU per rank, nccl)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  scaling_cmd->add_option("--out", scaling_out,
                          "output prefix: PREFIX.tsv (the rows), PREFIX.md, PREFIX-*.svg");
  scaling_cmd->add_flag("--append", append,
                        "merge this run's rows into PREFIX.tsv's (jobs of different rank counts "
                        "fill one table)");
  scaling_shape.add(*scaling_cmd, scaling.setup);

  try {
    try {
      app.parse(argc, argv);
    } catch (const CLI::CallForHelp&) {
      std::printf("%s", app.help().c_str());
      return 0;
    } catch (const CLI::ParseError& e) {
      if (e.get_exit_code() == 0) {
        std::printf("%s", app.help().c_str());
        return 0;
      }
      ZS_THROW(InvalidArgument, e.what(), "; see zs-study --help, zs-study sync --help");
    }
    logger().set_level(spdlog::level::from_str(log_level));
    const std::string command = command_line(argc, argv);
    if (*sync_cmd) {
      sync_shape.apply(sync.setup);
      if (!sync_names.empty()) {
        sync.syncs.clear();
        for (const std::string& name : sync_names)
          sync.syncs.push_back(train::parse_ddp_sync(name));
      }
      return run_sync(sync, sync_out, command);
    }
    scaling_shape.apply(scaling.setup);
    if (!precisions.empty()) {
      scaling.precisions.clear();
      for (const std::string& p : precisions)
        scaling.precisions.push_back(train::parse_precision(p));
    }
    if (scaling.device == "cuda" && scaling_cmd->count("--backend") == 0) scaling.backend = "auto";
    return run_scaling(scaling, scaling_out, append, command);
  } catch (const InvalidArgument& e) {
    std::fprintf(stderr, "zs-study: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zs-study: error: %s\n", e.what());
    return 1;
  }
}

}  // namespace zs::study
