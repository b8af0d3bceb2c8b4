// zs-mem's flags, validation and tables.
#include "train/mem_cli.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "models/gpt_presets.h"
#include "runtime/error.h"
#include "train/config.h"
#include "train/memory_model.h"

namespace zs::train {
namespace {

// A problem with the command line: printed as is, exit code 2.
class UsageError : public std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct MemArgs {
  std::string model;
  std::string params;
  int units = 1;
  int ranks = 1;
  int stage = -1;
  bool all_stages = false;
  std::string precision = "fp32";
  std::string reduce_dtype;
  int hybrid_group = 0;
  std::string optimizer = "adamw";
  float momentum = 0;
  int grad_accum = 1;
  std::string grad_sync = "per-micro-batch";
  std::string offload = "none";
  int nvme_buffer_count = 4;
  std::string offload_param = "none";
  int param_buffer_count = 4;
  std::string device = "cpu";
  std::string budget;
  bool no_prefetch = false;
  std::string max_live;
  std::string prefetch_bytes;
  std::string keep_below;
  int max_reductions_in_flight = 2;  // as zs-train's flag and ShardingConfig's default
  int64_t alignment = 16;
  // Overrides of the preset's shape (0: the preset's), as zs-train's flags of the same names.
  int64_t layers = 0, width = 0, heads = 0, vocab_size = 0, context = 0;
  // Activations of one micro-batch (a GPT preset only): B > 0 prints them; T = 0: the context.
  int64_t micro_batch = 0, seq_len = 0;
  int checkpoint_every = 1;  // for the "with checkpointing" figure
};

// What the flags resolve to.
struct MemRun {
  std::string label;  // "gpt2 (12 layers, width 768, ...)" or "1.5B parameters"
  std::vector<MemoryUnit> units;
  MemoryModelConfig config;  // stage set per row
  std::vector<int> stages;
  std::optional<uint64_t> budget;
  std::vector<std::string> notes;
  std::optional<models::GptConfig> gpt;  // when the model is a (possibly overridden) preset
};

std::string with_commas(int64_t value) {
  std::string digits = std::to_string(value < 0 ? -value : value);
  for (int i = static_cast<int>(digits.size()) - 3; i > 0; i -= 3) {
    digits.insert(static_cast<size_t>(i), ",");
  }
  return value < 0 ? "-" + digits : digits;
}

std::string bytes(uint64_t value) { return format_bytes(static_cast<size_t>(value)); }

// What the NVMe tier holds under `config` ("optimizer state", "parameter shards", both, or ""
// when it is not used).
std::string nvme_holds(const MemoryModelConfig& config) {
  std::string holds =
      config.offload == OffloadKind::kOptimizerNvme ? "optimizer state, master weights" : "";
  if (config.offload_params == sharding::ParamOffload::kNvme) {
    holds += (holds.empty() ? "" : ", ") + std::string("parameter shards");
  }
  return holds;
}

// Runs a parser of train/ and turns its InvalidArgument into a usage message for `flag`.
template <typename T, typename Parse>
T parse_flag(const std::string& flag, const std::string& value, const std::string& expected,
             Parse parse) {
  try {
    return parse(value);
  } catch (const InvalidArgument&) {
    throw UsageError(flag + " '" + value + "' is not valid: expected " + expected);
  }
}

MemRun resolve(const MemArgs& a) {
  MemRun run;
  if (!a.params.empty()) {
    const int64_t count =
        parse_flag<int64_t>("--params", a.params, "a parameter count such as 124M, 1.5B or 7e9",
                            [](const std::string& s) { return parse_count(s); });
    if (a.units < 1) throw UsageError("--units must be >= 1, got " + std::to_string(a.units));
    run.units = uniform_memory_units(count, a.units);
    run.label = a.params + " parameters (" + with_commas(count) + ") in " +
                (a.units == 1 ? std::string("one unit") : std::to_string(a.units) + " equal units");
  } else {
    std::string name = a.model.empty() ? "gpt2" : a.model;
    models::GptConfig gpt;
    try {
      gpt = models::gpt_preset(name);
    } catch (const InvalidArgument&) {
      std::string known;
      for (const std::string& n : models::gpt_preset_aliases())
        known += (known.empty() ? "" : ", ") + n;
      throw UsageError("--model '" + name + "' is not a preset; known presets: " + known);
    }
    if (a.units != 1) throw UsageError("--units applies to --params only (a preset has its units)");
    const bool custom = a.layers || a.width || a.heads || a.vocab_size || a.context;
    if (a.layers) gpt.n_layer = a.layers;
    if (a.width) gpt.width = a.width;
    if (a.heads) gpt.n_head = a.heads;
    if (a.vocab_size) gpt.vocab_size = a.vocab_size;
    if (a.context) gpt.context = a.context;
    if (gpt.width % gpt.n_head != 0) {
      throw UsageError("--width " + std::to_string(gpt.width) + " is not divisible by --heads " +
                       std::to_string(gpt.n_head) + "; pick a head count that divides the width");
    }
    if (custom) name += " with overrides";
    run.gpt = gpt;
    run.units = gpt_memory_units(gpt);
    run.label = name + " (" + std::to_string(gpt.n_layer) + " layers, width " +
                std::to_string(gpt.width) + ", " + std::to_string(gpt.n_head) + " heads, vocab " +
                std::to_string(gpt.vocab_size) + ", context " + std::to_string(gpt.context) +
                "): " + with_commas(models::gpt_parameter_count(gpt)) + " parameters in " +
                std::to_string(run.units.size()) + " units (one per block, plus the root)";
  }

  // The flags become a TrainConfig and take zs-train's one translation (train/config.h), so
  // zs-mem and the engine cannot disagree on what a setting means.
  TrainConfig train;
  if (a.device != "cpu" && a.device != "cuda") {
    throw UsageError("--device '" + a.device + "' is not valid: expected cpu or cuda");
  }
  train.device = a.device;
  train.precision = parse_flag<DType>("--precision", a.precision, "fp32, fp16 or bf16",
                                      [](const std::string& s) { return parse_precision(s); });
  if (!a.reduce_dtype.empty()) {
    train.reduce_dtype = parse_flag<DType>("--reduce-dtype", a.reduce_dtype, "fp32, fp16 or bf16",
                                           [](const std::string& s) { return parse_precision(s); });
    train.reduce_dtype_set = true;
  }
  OptimizerKind optimizer =
      parse_flag<OptimizerKind>("--optimizer", a.optimizer, "adamw, sgd or sgd-momentum",
                                [](const std::string& s) { return parse_optimizer_kind(s); });
  if (a.momentum != 0) {
    if (optimizer == OptimizerKind::kAdamW) {
      throw UsageError("--momentum applies to --optimizer sgd, not adamw");
    }
    optimizer = a.momentum > 0 ? OptimizerKind::kSgdMomentum : OptimizerKind::kSgd;
  }
  train.optimizer = optimizer == OptimizerKind::kAdamW ? "adamw" : "sgd";
  // Only whether SGD keeps a momentum buffer matters to the estimate.
  train.momentum =
      optimizer == OptimizerKind::kSgdMomentum ? (a.momentum > 0 ? a.momentum : 0.9f) : 0.0f;
  if (a.grad_accum < 1) {
    throw UsageError("--grad-accum must be >= 1, got " + std::to_string(a.grad_accum));
  }
  train.grad_accum = a.grad_accum;
  train.grad_sync =
      parse_flag<sharding::GradSync>("--grad-sync", a.grad_sync, "per-micro-batch or per-step",
                                     [](const std::string& s) { return parse_grad_sync(s); });
  train.prefetch = !a.no_prefetch;
  train.max_reductions_in_flight = a.max_reductions_in_flight;
  train.hybrid_group = std::max(0, a.hybrid_group);
  auto size_flag = [](const std::string& flag, const std::string& value) {
    return parse_flag<uint64_t>(flag, value, "a size such as 512MiB, 16GiB or 80GB",
                                [](const std::string& s) { return uint64_t{parse_bytes(s)}; });
  };
  if (!a.prefetch_bytes.empty()) {
    train.prefetch_bytes = size_flag("--prefetch-bytes", a.prefetch_bytes);
  }
  if (!a.max_live.empty()) {
    train.max_live_gathered_bytes = size_flag("--max-live-gathered", a.max_live);
  }
  if (!a.keep_below.empty()) {
    train.keep_gathered_below_bytes = size_flag("--keep-gathered-below", a.keep_below);
  }
  MemoryModelConfig& c = run.config;
  c = memory_model_config(train, a.ranks, /*stage: set per row*/ 3);
  c.offload = parse_flag<OffloadKind>("--offload", a.offload, "none, optimizer or optimizer-nvme",
                                      [](const std::string& s) { return parse_offload_kind(s); });
  c.nvme_buffer_count = a.nvme_buffer_count;
  c.offload_params = param_offload(
      parse_flag<OffloadTarget>("--offload-param", a.offload_param, "none, host or nvme",
                                [](const std::string& s) { return parse_offload_target(s); }));
  c.param_buffer_count = a.param_buffer_count;
  if (c.offload_params != sharding::ParamOffload::kNone) {
    if (a.stage != 3 || a.hybrid_group > 0) {
      throw UsageError(
          "--offload-param moves the parameter shards of stage 3 (not hybrid): add "
          "--zero-stage 3");
    }
    if (c.offload == OffloadKind::kNone) {
      throw UsageError(
          "--offload-param needs an optimizer offload too (the shards are cast from the masters "
          "on the host): add --offload optimizer or optimizer-nvme");
    }
  }
  c.alignment = a.alignment;
  if (!a.budget.empty()) {
    run.budget = size_flag("--budget", a.budget);
    if (*run.budget == 0) throw UsageError("--budget must be more than 0 bytes");
  }

  if (a.hybrid_group > 0) {
    if (a.all_stages) {
      throw UsageError("--hybrid-group shards with stage 3 only; drop --all-stages");
    }
    if (a.stage >= 0 && a.stage != 3) {
      throw UsageError("--hybrid-group needs --zero-stage 3, got --zero-stage " +
                       std::to_string(a.stage));
    }
    if (a.ranks % a.hybrid_group != 0) {
      throw UsageError("--ranks " + std::to_string(a.ranks) +
                       " is not a multiple of --hybrid-group " + std::to_string(a.hybrid_group) +
                       "; use a group size that divides it (e.g. the ranks per node)");
    }
    run.stages = {3};
  } else if (a.stage >= 0) {
    run.stages = {a.stage};
  } else {
    run.stages = {0, 1, 2, 3};
  }
  if (!a.params.empty() && a.units == 1 &&
      std::find(run.stages.begin(), run.stages.end(), 3) != run.stages.end()) {
    run.notes.push_back(
        "--params without --units is one unit: stage 3 gathers the whole model at once "
        "(--units K splits it into K equal units, as a stack of blocks)");
  }
  if (c.offload == OffloadKind::kOptimizer) {
    run.notes.push_back(
        "optimizer offload (zs-train --offload-optimizer host): the host tier column is what "
        "each rank's host tier holds — the fp32 masters, the optimizer state and the host copy "
        "of the gradient shard (plus, in fp16/bf16, one staging buffer); the optimizer step runs "
        "on the CPU");
  } else if (c.offload == OffloadKind::kOptimizerNvme) {
    run.notes.push_back(
        "optimizer offload to NVMe (zs-train --offload-optimizer nvme): the host tier column "
        "holds " +
        std::to_string(c.nvme_buffer_count) +
        " buffers of one unit's optimizer state and as many of its fp32 master "
        "(--nvme-buffer-count)" +
        (c.device_is_host ? std::string()
                          : std::string(" and the host copy of the gradient shard")) +
        "; the NVMe figure is the optimizer state and the masters in each rank's swap files" +
        (c.device_is_host ? std::string(" (--device cpu: the step reads the gradient shard "
                                        "where it was reduced, no host copy)")
                          : std::string()));
  }
  return run;
}

// Left-aligned first column, right-aligned others, " | " between columns.
std::string table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    widths.resize(std::max(widths.size(), row.size()));
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  std::ostringstream out;
  for (size_t r = 0; r < rows.size(); ++r) {
    for (size_t i = 0; i < rows[r].size(); ++i) {
      const std::string& cell = rows[r][i];
      const std::string pad(widths[i] - cell.size(), ' ');
      out << (i == 0 ? "" : " | ") << (i == 0 ? cell + pad : pad + cell);
    }
    out << "\n";
    if (r == 0) {
      for (size_t i = 0; i < widths.size(); ++i) {
        out << (i == 0 ? "" : "-+-") << std::string(widths[i], '-');
      }
      out << "\n";
    }
  }
  return out.str();
}

const MemoryCategory kShown[] = {MemoryCategory::kParameters, MemoryCategory::kGradients,
                                 MemoryCategory::kMasterWeights, MemoryCategory::kOptimizerState,
                                 MemoryCategory::kCommBuffers};

std::string paper_cell(const MemoryEstimate& e) {
  const int stage = e.config.stage;
  return zero_formula_text(stage, e.config.param_dtype, e.config.optimizer) + " = " +
         bytes(static_cast<uint64_t>(zero_formula_bytes(e.numel, stage, e.shard_ranks,
                                                        e.config.param_dtype, e.config.optimizer)));
}

void print_stage_rows(const MemRun& run, std::ostream& out) {
  const bool offload = run.config.offload != OffloadKind::kNone;
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> header{"stage"};
  for (MemoryCategory category : kShown) header.emplace_back(category_name(category));
  header.insert(header.end(), {"peak total", "between steps", "ZeRO paper"});
  const bool nvme = !nvme_holds(run.config).empty();
  if (offload) header.emplace_back("host tier");
  if (nvme) header.emplace_back("NVMe");
  rows.push_back(header);
  for (int stage : run.stages) {
    MemoryModelConfig config = run.config;
    config.stage = stage;
    const MemoryEstimate e = estimate_memory(run.units, config);
    std::vector<std::string> row{std::to_string(stage) +
                                 (config.hybrid_group > 0 ? " hybrid" : "")};
    for (MemoryCategory category : kShown) row.push_back(bytes(e.peak[category]));
    row.push_back(bytes(e.peak.total()));
    row.push_back(bytes(e.steady.total()));
    row.push_back(paper_cell(e));
    if (offload) row.push_back(bytes(e.host.total()));
    if (nvme) row.push_back(bytes(e.nvme));
    rows.push_back(row);
  }
  out << table(rows);
}

void print_one_stage(const MemRun& run, std::ostream& out) {
  MemoryModelConfig config = run.config;
  config.stage = run.stages.front();
  const MemoryEstimate e = estimate_memory(run.units, config);
  const bool offload = config.offload != OffloadKind::kNone;
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> header{"category", "between steps", "peak in step"};
  if (offload) header.emplace_back("host tier");
  rows.push_back(header);
  for (MemoryCategory category : kShown) {
    std::vector<std::string> row{category_name(category), bytes(e.steady[category]),
                                 bytes(e.peak[category])};
    if (offload) row.push_back(bytes(e.host[category]));
    rows.push_back(row);
  }
  std::vector<std::string> total{"total", bytes(e.steady.total()), bytes(e.peak.total())};
  if (offload) total.push_back(bytes(e.host.total()));
  rows.push_back(total);
  out << table(rows);
  if (const std::string holds = nvme_holds(config); !holds.empty()) {
    out << "NVMe tier per rank (" << holds << "): " << bytes(e.nvme) << "\n";
  }
  out << "ZeRO paper, stage " << config.stage << ": " << paper_cell(e)
      << " (Ψ = " << with_commas(e.numel) << ", N = " << e.shard_ranks << ")\n";
  if (config.stage == 3) {
    out << "stage-3 gathered window (full parameters alive at once): "
        << bytes(e.gathered_window_bytes) << "\n";
  }
  if (e.peak_low.total() != e.peak_high.total()) {
    if (config.max_reductions_in_flight > 0 && config.stage >= 2) {
      out << "peak is the bound of at most " << config.max_reductions_in_flight
          << " gradient reduction(s) in flight (--max-reductions-in-flight), reached when the "
             "communicator falls behind; measurable range "
          << bytes(e.peak_low.total()) << " … " << bytes(e.peak_high.total()) << "\n";
    } else {
      out << "peak assumes " << config.reductions_in_flight
          << " gradient reduction in flight; measurable range " << bytes(e.peak_low.total())
          << " … " << bytes(e.peak_high.total()) << "\n";
    }
  }
}

// Activations per layer and the step's peak, without and with activation checkpointing.
void print_activations(const MemArgs& a, const MemRun& run, std::ostream& out) {
  if (!run.gpt) {
    throw UsageError(
        "--micro-batch estimates a GPT's activations: give a preset (--model), not "
        "--params");
  }
  const models::GptConfig& gpt = *run.gpt;
  const int64_t seq = a.seq_len > 0 ? a.seq_len : gpt.context;
  if (seq > gpt.context) {
    throw UsageError("--seq-len " + std::to_string(seq) + " exceeds the model's context " +
                     std::to_string(gpt.context));
  }
  const DType dtype = run.config.param_dtype;
  const ActivationEstimate plain = estimate_gpt_activations(gpt, a.micro_batch, seq, dtype, 0);
  const ActivationEstimate ckpt =
      estimate_gpt_activations(gpt, a.micro_batch, seq, dtype, a.checkpoint_every);
  out << "\nActivations of one micro-batch of " << a.micro_batch << " x " << seq << " tokens ("
      << dtype_name(dtype) << ", per rank, the CPU engine's buffers):\n"
      << "  per layer: " << bytes(plain.per_layer) << " recorded, "
      << bytes(plain.per_layer_checkpointed) << " checkpointed (its input only)\n"
      << "  head (final layernorm, one chunk of logits and their gradient): " << bytes(plain.head)
      << "\n"
      << "  peak: " << bytes(plain.peak) << " without activation checkpointing, "
      << bytes(ckpt.peak) << " with " << ckpt.checkpointed_layers << " of " << gpt.n_layer
      << " layers checkpointed (--checkpoint-every " << a.checkpoint_every << ")\n";
}

void print_budget(const MemRun& run, std::ostream& out) {
  out << "\nLargest GPT preset whose peak fits " << bytes(*run.budget) << " per rank ("
      << run.config.world << " ranks; activations need room besides):\n";
  std::vector<std::vector<std::string>> rows{{"stage", "preset", "parameters", "peak per rank"}};
  for (int stage : run.stages) {
    MemoryModelConfig config = run.config;
    config.stage = stage;
    const std::optional<PresetFit> fit = largest_fitting_preset(config, *run.budget);
    if (fit) {
      rows.push_back({std::to_string(stage), fit->preset, with_commas(fit->parameters),
                      bytes(fit->estimate.peak.total())});
    } else {
      rows.push_back({std::to_string(stage), "none fits", "-", "-"});
    }
  }
  out << table(rows);

  // The same question per offload mode, at the highest stage shown: how much larger a model the
  // device budget holds when the optimizer (ZeRO-Offload) and the parameter shards
  // (ZeRO-Infinity) leave it, and what the host tier and NVMe must then hold per rank.
  struct Mode {
    const char* name;
    OffloadKind optimizer;
    sharding::ParamOffload params;
  };
  const int stage = *std::max_element(run.stages.begin(), run.stages.end());
  const bool shards_params = stage == 3 && run.config.hybrid_group == 0;
  std::vector<Mode> modes = {
      {"none", OffloadKind::kNone, sharding::ParamOffload::kNone},
      {"--offload-optimizer host", OffloadKind::kOptimizer, sharding::ParamOffload::kNone},
      {"--offload-optimizer nvme", OffloadKind::kOptimizerNvme, sharding::ParamOffload::kNone}};
  if (shards_params) {
    modes.push_back(
        {"+ --offload-param host", OffloadKind::kOptimizer, sharding::ParamOffload::kHost});
    modes.push_back(
        {"+ --offload-param nvme", OffloadKind::kOptimizerNvme, sharding::ParamOffload::kNvme});
  }
  if (stage == 0) modes.resize(1);  // optimizer offload needs a ZeRO stage
  out << "\nBy offload mode at stage " << stage << " (zs-train's flags; the host tier and NVMe "
      << "per rank hold what leaves the device):\n";
  std::vector<std::vector<std::string>> by_mode{
      {"offload", "preset", "parameters", "x none", "device peak", "host tier", "NVMe"}};
  int64_t baseline = 0;  // the parameters that fit without offload (0: none fits)
  const std::vector<std::string> presets = models::gpt_preset_names();
  for (const Mode& mode : modes) {
    MemoryModelConfig config = run.config;
    config.stage = stage;
    config.offload = mode.optimizer;
    config.offload_params = mode.params;
    const std::optional<PresetFit> fit = largest_fitting_preset(config, *run.budget);
    if (!fit) {
      by_mode.push_back({mode.name, "none fits", "-", "-", "-", "-", "-"});
      continue;
    }
    if (mode.optimizer == OffloadKind::kNone) baseline = fit->parameters;
    char ratio[32] = "-";
    if (baseline > 0) {
      std::snprintf(ratio, sizeof(ratio), "%.1fx",
                    static_cast<double>(fit->parameters) / static_cast<double>(baseline));
    }
    by_mode.push_back({mode.name, fit->preset + (fit->preset == presets.back() ? " (largest)" : ""),
                       with_commas(fit->parameters), ratio, bytes(fit->estimate.peak.total()),
                       bytes(fit->estimate.host.total()), bytes(fit->estimate.nvme)});
  }
  out << table(by_mode);
  if (!shards_params) {
    out << "(parameter offload: stage 3 without hybrid groups)\n";
  }
}

}  // namespace

int mem_main(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  CLI::App app{
      "zs-mem: per-rank memory of ZeRO stages 0-3 (DDP = stage 0) for a GPT preset or a "
      "parameter count, by category, next to the ZeRO paper's formulas.",
      "zs-mem"};
  app.get_formatter()->column_width(34);
  MemArgs a;
  std::string presets;
  for (const std::string& n : models::gpt_preset_aliases())
    presets += (presets.empty() ? "" : ", ") + n;
  auto* model = app.add_option("--model", a.model, "GPT preset (default gpt2): " + presets);
  auto* params = app.add_option("--params", a.params, "a bare parameter count: 124M, 1.5B, 7e9");
  model->excludes(params);
  for (auto [flag, value, what] :
       {std::tuple{"--layers", &a.layers, "override the preset's layers"},
        std::tuple{"--width", &a.width, "override the preset's width"},
        std::tuple{"--heads", &a.heads, "override the preset's attention heads"},
        std::tuple{"--vocab-size", &a.vocab_size, "override the preset's vocabulary"},
        std::tuple{"--context", &a.context, "override the preset's context length"}}) {
    app.add_option(flag, *value, what)
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 40))
        ->excludes(params);
  }
  app.add_option("--units", a.units, "with --params: split into K equal units (default 1)");
  app.add_option("--ranks", a.ranks, "data-parallel ranks (default 1)")
      ->check(CLI::Range(1, 1 << 24));
  auto* stage = app.add_option("--zero-stage", a.stage, "0 (DDP), 1, 2 or 3 (default: all)")
                    ->check(CLI::Range(0, 3));
  app.add_flag("--all-stages", a.all_stages, "one row per stage (the default)")->excludes(stage);
  app.add_option("--precision", a.precision, "fp32 (default), fp16 or bf16");
  app.add_option("--reduce-dtype", a.reduce_dtype,
                 "dtype gradients travel in (default: precision)");
  app.add_option("--hybrid-group", a.hybrid_group, "stage 3 inside groups of G ranks")
      ->check(CLI::Range(1, 1 << 24));
  app.add_option("--optimizer", a.optimizer, "adamw (default), sgd or sgd-momentum");
  app.add_option("--momentum", a.momentum, "with --optimizer sgd: > 0 keeps a momentum buffer");
  app.add_option("--grad-accum", a.grad_accum, "micro-batches per optimizer step (default 1)");
  app.add_option("--grad-sync", a.grad_sync,
                 "stages 0/1 with --grad-accum > 1: per-micro-batch (default) or per-step (a "
                 "local fp32 sum reduced once per step: stage 1 holds 4 bytes per parameter "
                 "more; rows of stages 2/3 reduce per micro-batch regardless)");
  app.add_option("--offload", a.offload,
                 "none (default), optimizer (masters + state on host) or optimizer-nvme "
                 "(masters + state on NVMe)");
  app.add_option("--device", a.device,
                 "cpu (default) or cuda: where zs-train computes (with --offload optimizer-nvme "
                 "a GPU's host tier keeps a copy of the gradient shard, the CPU's does not)");
  app.add_option("--nvme-buffer-count", a.nvme_buffer_count,
                 "with --offload optimizer-nvme: host buffers of one unit's state, and as many "
                 "of its master (default 4)")
      ->check(CLI::Range(1, 64));
  app.add_option("--offload-param", a.offload_param,
                 "none (default), host or nvme: stage 3's parameter shards off the device "
                 "(zs-train --offload-param; needs --zero-stage 3 and --offload)");
  app.add_option("--nvme-param-buffer-count", a.param_buffer_count,
                 "with --offload-param nvme: host buffers of one unit's shard (default 4)")
      ->check(CLI::Range(1, 64));
  app.add_option("--budget", a.budget, "per-rank bytes, e.g. 16GiB: largest preset that fits");
  app.add_flag("--no-prefetch", a.no_prefetch, "stage 3: gather on demand only");
  app.add_option("--max-live-gathered", a.max_live, "stage 3: limit on gathered bytes");
  app.add_option("--prefetch-bytes", a.prefetch_bytes,
                 "stage 3: prefetch units ahead while their bytes fit, e.g. 64MiB (zs-train's "
                 "flag; default one unit ahead)");
  app.add_option("--keep-gathered-below", a.keep_below, "stage 3: smaller units stay gathered");
  app.add_option("--max-reductions-in-flight", a.max_reductions_in_flight,
                 "stages 2/3: reductions left running in backward (default 2; 0 = no limit)")
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--alignment", a.alignment, "shard alignment in elements (default 16)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--micro-batch", a.micro_batch,
                 "also estimate the activations of B sequences per rank (a preset only)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30))
      ->excludes(params);
  app.add_option("--seq-len", a.seq_len,
                 "with --micro-batch: tokens per sequence (default: context)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  app.add_option("--checkpoint-every", a.checkpoint_every,
                 "with --micro-batch: the activation checkpointing to compare with (default 1: "
                 "every layer)")
      ->check(CLI::Range(1, 1 << 20));
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    out << app.help();
    return 0;
  } catch (const CLI::ParseError& e) {
    err << "zs-mem: " << e.what() << "\nRun 'zs-mem --help' for the flags.\n";
    return 2;
  }
  try {
    const MemRun run = resolve(a);
    const MemoryModelConfig& c = run.config;
    out << "zs-mem: " << run.label << "\n"
        << c.world << " rank" << (c.world == 1 ? "" : "s")
        << (c.hybrid_group > 0 ? " (shards in groups of " + std::to_string(c.hybrid_group) + ")"
                               : "")
        << ", " << dtype_name(c.param_dtype) << " parameters, " << dtype_name(c.reduce_dtype)
        << " gradient reduction, " << optimizer_kind_name(c.optimizer)
        << (c.gradient_accumulation ? ", gradient accumulation" : "")
        << (c.gradient_accumulation && c.grad_sync == sharding::GradSync::kPerStep
                ? " reduced once per step (stages 0/1)"
                : "")
        << ", offload " << offload_kind_name(c.offload)
        << (c.offload_params != sharding::ParamOffload::kNone
                ? std::string(", parameter shards on ") + param_offload_name(c.offload_params)
                : std::string())
        << "\n"
        << "Per-rank device bytes by category: model states, the stage-3 gathered window and "
           "gradient staging (activations depend on the batch: --micro-batch estimates them "
           "below; workspace is not included).\n\n";
    if (run.stages.size() == 1) {
      print_one_stage(run, out);
    } else {
      print_stage_rows(run, out);
    }
    // A shard group of one rank shards nothing: every stage runs as stage 0 (StagePolicy).
    const bool shards = (c.hybrid_group > 0 ? c.hybrid_group : c.world) > 1;
    if (!shards) {
      out << "One rank per shard group shards nothing: every stage runs as stage 0 (no gathers, "
             "no collectives), so every row is stage 0's.\n";
    }
    if (c.param_dtype != DType::kF32) {
      out << "Besides the paper's 2 + 2 + 12 bytes, the engine keeps an fp32 gradient accumulator "
             "(4 bytes per element a rank owns)"
          << (shards
                  ? std::string(" and, in stages 1-3, a ") + dtype_name(c.param_dtype) +
                        " copy of its shard for the all-gathers"
                  : std::string(" and stage 0's full ") + dtype_name(c.param_dtype) + " gradients")
          << ".\n";
    }
    for (const std::string& note : run.notes) out << "note: " << note << "\n";
    if (a.micro_batch > 0) print_activations(a, run, out);
    if (run.budget) print_budget(run, out);
    return 0;
  } catch (const UsageError& e) {
    err << "zs-mem: " << e.what() << "\n";
    return 2;
  } catch (const InvalidArgument& e) {
    err << "zs-mem: " << e.what() << "\n";
    return 2;
  }
}

}  // namespace zs::train
