// TrainConfig validation, byte-size parsing, the DeepSpeed JSON mapping, the model-config JSON
// and the translation into the configurations of the layers below.
#include "train/config.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "checkpoint/checkpoint_weights.h"
#include "checkpoint/gpt2_weights.h"
#include "models/gpt_presets.h"
#include "runtime/error.h"
#include "runtime/json_read.h"
#include "runtime/logging.h"

namespace zs::train {
namespace {

using nlohmann::json;

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// A flag value's spelling of a sharding name ("per_tensor" → "per-tensor"), and the form a
// value given on the command line is compared in (lower case, '_' as '-').
std::string dashed(std::string name) {
  std::replace(name.begin(), name.end(), '_', '-');
  return name;
}

// Walks a JSON object: each key is taken by a handler; what remains is reported together.
class KeyReader {
 public:
  KeyReader(const json& object, std::string path, std::vector<std::string>* unknown)
      : object_(object), path_(std::move(path)), unknown_(unknown) {
    ZS_CHECK(object.is_object(), "deepspeed config: '", path_, "' must be a JSON object, got ",
             json_excerpt(object));
  }
  ~KeyReader() {
    for (const auto& item : object_.items()) {
      if (!taken_.count(item.key())) unknown_->push_back(child(item.key()));
    }
  }
  std::string child(const std::string& key) const {
    return path_.empty() ? key : path_ + "." + key;
  }
  // Calls fn(value) when the key is present.
  void take(const std::string& key, const std::function<void(const json&)>& fn) {
    taken_[key] = true;
    auto it = object_.find(key);
    if (it != object_.end() && !it->is_null()) fn(*it);
  }
  // Accepted and explained: the key has no effect in zeroshard. `check` (if given) validates the
  // value first, so a malformed one is still an error.
  void note(const std::string& key, const std::string& why, std::vector<std::string>* notes,
            const std::function<void(const json&)>& check = nullptr) {
    take(key, [&](const json& value) {
      if (check) check(value);
      if (notes) notes->push_back(child(key) + " = " + json_excerpt(value) + ": " + why);
    });
  }
  template <typename T>
  T get(const json& value, const std::string& key) const {
    try {
      return value.get<T>();
    } catch (const json::exception&) {
      ZS_THROW(InvalidArgument, "deepspeed config: '", child(key),
               "' has the wrong type: ", json_excerpt(value));
    }
  }
  double number(const json& value, const std::string& key) const {
    ZS_CHECK(value.is_number(), "deepspeed config: '", child(key), "' must be a number, got ",
             json_excerpt(value));
    return value.get<double>();
  }
  int64_t integer(const json& value, const std::string& key) const {
    // DeepSpeed configs write sizes as floats (5e8): a whole float is taken where int64 holds
    // it; converting one it does not hold (1e47) would be undefined behaviour.
    constexpr double kTwoTo63 = 9223372036854775808.0;
    const double number = value.is_number_float() ? value.get<double>() : 0;
    const bool whole_float = value.is_number_float() && std::floor(number) == number &&
                             number >= -kTwoTo63 && number < kTwoTo63;
    ZS_CHECK(value.is_number_integer() || whole_float, "deepspeed config: '", child(key),
             "' must be an integer", value.is_number_float() ? " within ±2^63" : "", ", got ",
             json_excerpt(value));
    return whole_float ? static_cast<int64_t>(number) : value.get<int64_t>();
  }
  bool boolean(const json& value, const std::string& key) const {
    ZS_CHECK(value.is_boolean(), "deepspeed config: '", child(key), "' must be true or false, got ",
             json_excerpt(value));
    return value.get<bool>();
  }

 private:
  const json& object_;
  std::string path_;
  std::vector<std::string>* unknown_;
  std::map<std::string, bool> taken_;
};

// The keys offload_param and offload_optimizer share: device (cpu = the host tier, nvme = the
// NVMe tier; `what` says what it moves), pin_memory (noted), buffer_count and nvme_path.
void read_offload_keys(KeyReader& r, const char* what, OffloadTarget& target, int& buffer_count,
                       TrainConfig& config, std::vector<std::string>* notes) {
  r.take("device", [&](const json& v) {
    const std::string device = lower(r.get<std::string>(v, "device"));
    ZS_CHECK(device == "none" || device == "cpu" || device == "nvme", "deepspeed config: '",
             r.child("device"), "' = \"", device, "\": use \"cpu\" (", what,
             " in host memory), \"nvme\" (on NVMe) or \"none\"");
    target = device == "cpu"    ? OffloadTarget::kHost
             : device == "nvme" ? OffloadTarget::kNvme
                                : OffloadTarget::kNone;
  });
  r.note("pin_memory",
         "zeroshard pins the host tier whenever the rank computes on a GPU (the CPU device has "
         "nothing to pin)",
         notes, [&](const json& v) { (void)r.boolean(v, "pin_memory"); });
  r.take("buffer_count", [&](const json& v) {
    const int64_t count = r.integer(v, "buffer_count");
    ZS_CHECK(count >= 1 && count <= 64, "deepspeed config: '", r.child("buffer_count"),
             "' must be in [1, 64], got ", json_excerpt(v));
    buffer_count = static_cast<int>(count);
  });
  r.take("nvme_path",
         [&](const json& v) { config.nvme_paths = {r.get<std::string>(v, "nvme_path")}; });
}

// zero_optimization.offload_param: device cpu puts stage 3's parameter shards in the host tier,
// nvme on the NVMe tier (nvme_path, buffer_count); the keys that size DeepSpeed's own buffers
// are accepted with a note.
void read_offload_param(const json& value, KeyReader& parent, TrainConfig& config,
                        std::vector<std::string>* unknown, std::vector<std::string>* notes) {
  KeyReader r(value, parent.child("offload_param"), unknown);
  read_offload_keys(r, "the parameter shards", config.offload_param, config.param_buffer_count,
                    config, notes);
  r.note("buffer_size", "zeroshard sizes each parameter buffer for the largest unit's shard",
         notes);
  r.note("max_in_cpu", "zeroshard keeps no parameter cache in host memory beyond its buffers",
         notes);
}

// zero_optimization.offload_optimizer: device cpu is zeroshard's host tier (the masters and the
// optimizer state), nvme its NVMe tier for the optimizer state (nvme_path, buffer_count); the
// keys that tune DeepSpeed's own swapper are accepted with a note; ratio < 1 (Twin-Flow partial
// offload) is refused rather than ignored.
void read_offload_optimizer(const json& value, KeyReader& parent, TrainConfig& config,
                            std::vector<std::string>* unknown, std::vector<std::string>* notes) {
  KeyReader r(value, parent.child("offload_optimizer"), unknown);
  read_offload_keys(r, "the masters and optimizer state", config.offload_optimizer,
                    config.nvme_buffer_count, config, notes);
  for (const char* k : {"pipeline_read", "pipeline_write"}) {
    r.note(k, "zeroshard always overlaps the optimizer state's reads and writes with the update",
           notes);
  }
  r.note("fast_init", "the NVMe state starts as zeros without writing them", notes);
  r.take("ratio", [&](const json& v) {
    ZS_CHECK(r.number(v, "ratio") == 1.0, "deepspeed config: '", r.child("ratio"),
             "' = ", json_excerpt(v),
             ": partial optimizer offload (Twin-Flow) is not implemented in zeroshard; remove the "
             "key or set it to 1.0 (everything offloaded)");
  });
}

// DeepSpeed configures the checkpoints that the model's code asks for
// (deepspeed.checkpointing.checkpoint); zeroshard's models leave that to the sharding layer, so
// the section's presence is the request: every unit below the root is checkpointed (the flags'
// --checkpoint-every K chooses fewer). The keys tune DeepSpeed's own checkpoint storage.
void read_activation_checkpointing(const json& value, TrainConfig& config,
                                   std::vector<std::string>* unknown,
                                   std::vector<std::string>* notes) {
  KeyReader r(value, "activation_checkpointing", unknown);
  if (config.checkpoint_every == 0) config.checkpoint_every = 1;
  if (notes) {
    notes->push_back(
        "activation_checkpointing: every unit below the root (each Block) recomputes its forward "
        "in backward; --checkpoint-every K checkpoints every K-th instead");
  }
  const auto flag = [&](const char* key) {
    return [&r, key](const json& v) { r.boolean(v, key); };
  };
  r.note("partition_activations",
         "zeroshard has no model parallelism to partition a checkpoint over; each rank keeps "
         "the inputs of its own units",
         notes, flag("partition_activations"));
  r.take("cpu_checkpointing", [&](const json& v) {
    if (r.boolean(v, "cpu_checkpointing") && notes) {
      notes->push_back(r.child("cpu_checkpointing") +
                       " = true: not available in zeroshard; the checkpointed inputs stay in "
                       "the device's memory (category activations)");
    }
  });
  r.note("contiguous_memory_optimization",
         "the checkpointed inputs come from the caching allocator; there is no contiguous "
         "buffer to configure",
         notes, flag("contiguous_memory_optimization"));
  r.note("number_checkpoints",
         "sizes DeepSpeed's contiguous buffer; zeroshard checkpoints every unit (or every K-th "
         "with --checkpoint-every K)",
         notes, [&](const json& v) { r.integer(v, "number_checkpoints"); });
  r.note("synchronize_checkpoint_boundary",
         "zeroshard orders the recompute on the compute stream; no device-wide synchronization "
         "is added",
         notes, flag("synchronize_checkpoint_boundary"));
  r.note("profile", "zs-train's step time includes the recompute", notes, flag("profile"));
}

void read_zero(const json& value, TrainConfig& config, std::vector<std::string>* unknown,
               std::vector<std::string>* notes) {
  KeyReader r(value, "zero_optimization", unknown);
  r.take("stage", [&](const json& v) {
    const int64_t stage = r.integer(v, "stage");
    ZS_CHECK(stage >= 0 && stage <= 3,
             "deepspeed config: 'zero_optimization.stage' must be 0-3, "
             "got ",
             stage);
    config.stage = static_cast<int>(stage);
  });
  const size_t param_size = dtype_size(config.precision);
  r.take("stage3_max_live_parameters", [&](const json& v) {
    config.max_live_gathered_bytes =
        static_cast<size_t>(r.integer(v, "stage3_max_live_parameters")) * param_size;
  });
  r.take("stage3_param_persistence_threshold", [&](const json& v) {
    config.keep_gathered_below_bytes =
        static_cast<size_t>(r.integer(v, "stage3_param_persistence_threshold")) * param_size;
  });
  // Elements, as DeepSpeed counts them: 0 turns prefetch off, N bounds the bytes gathered ahead
  // (N × the compute dtype's size; sharding::ShardingConfig::prefetch_bytes).
  r.take("stage3_prefetch_bucket_size", [&](const json& v) {
    const int64_t elements = r.integer(v, "stage3_prefetch_bucket_size");
    ZS_CHECK(elements >= 0,
             "deepspeed config: 'zero_optimization.stage3_prefetch_bucket_size' must be >= 0 "
             "elements (0 = no prefetch), got ",
             elements);
    if (elements == 0) config.prefetch = false;
    config.prefetch_bytes = static_cast<size_t>(elements) * param_size;
  });
  r.take("offload_optimizer",
         [&](const json& v) { read_offload_optimizer(v, r, config, unknown, notes); });
  r.take("offload_param", [&](const json& v) { read_offload_param(v, r, config, unknown, notes); });
  const std::string buckets =
      "zeroshard reduces and gathers whole sharded units (one collective per unit), so there is "
      "no separate bucket size; size units with the wrap policy instead";
  for (const char* k : {"reduce_bucket_size", "allgather_bucket_size", "sub_group_size"}) {
    r.note(k, buckets, notes);
  }
  const std::string always =
      "always on in zeroshard (collectives run on the communicator's own thread, overlapped with "
      "compute; gradients live in one flat buffer per unit)";
  for (const char* k : {"overlap_comm", "contiguous_gradients", "reduce_scatter",
                        "allgather_partitions", "round_robin_gradients"}) {
    r.note(k, always, notes);
  }
  for (const char* k : {"stage3_max_reuse_distance", "ignore_unused_parameters",
                        "memory_efficient_linear", "cpu_offload"}) {
    r.note(k, "has no effect in zeroshard", notes);
  }
  // Keys about saving and loading: zeroshard's checkpoints already do what they ask for.
  const std::string consolidated =
      "zeroshard never gathers the model on one rank to save it: --save-weights FILE "
      "(.safetensors or .bin) and zs-ckpt export write the consolidated weights, streamed one "
      "tensor at a time";
  for (const char* k :
       {"stage3_gather_16bit_weights_on_model_save", "gather_16bit_weights_on_model_save"}) {
    r.note(k, consolidated, notes);
  }
  r.note("elastic_checkpoint",
         "every zeroshard checkpoint is elastic: --resume reshards it to any world size and stage",
         notes);
  r.note("load_from_fp32_weights",
         "--resume always restores the fp32 masters and derives the compute weights from them",
         notes);
}

// DeepSpeed's "checkpoint" section. DeepSpeed saves where and when the script calls
// save_checkpoint, so no key here names a directory or an interval (--checkpoint-dir and
// --checkpoint-interval do); the keys tune how it writes and loads, which zeroshard mostly does
// one way (writer.decoupled is --checkpoint-async).
void read_checkpoint(const json& value, TrainConfig& config, std::vector<std::string>* unknown,
                     std::vector<std::string>* notes) {
  KeyReader r(value, "checkpoint", unknown);
  r.note("tag_validation",
         "zeroshard names a checkpoint by its step, which every rank shares, and verifies each "
         "rank's file by checksum on load; there is no tag to check",
         notes, [&](const json& v) {
           const std::string mode = lower(r.get<std::string>(v, "tag_validation"));
           ZS_CHECK(mode == "ignore" || mode == "warn" || mode == "fail", "deepspeed config: '",
                    r.child("tag_validation"), "' = ", json_excerpt(v),
                    " must be Ignore, Warn or Fail");
         });
  r.note("load_universal",
         "every zeroshard checkpoint is universal — --resume reshards it to any world size and "
         "stage on load, with no conversion step",
         notes, [&](const json& v) { r.boolean(v, "load_universal"); });
  r.take("use_node_local_storage", [&](const json& v) {
    ZS_CHECK(!r.boolean(v, "use_node_local_storage"), "deepspeed config: '",
             r.child("use_node_local_storage"),
             "' = true: zeroshard writes one checkpoint directory that all ranks share, and "
             "--resume reads other ranks' files when it reshards, so --checkpoint-dir must be on "
             "storage every node sees (a shared file system); remove the key or set it to false");
  });
  r.take("parallel_write", [&](const json& v) {
    KeyReader w(v, r.child("parallel_write"), unknown);
    w.note("pipeline_stage",
           "every rank already writes its own shard file in parallel with the others; zeroshard "
           "has no pipeline stages",
           notes);
  });
  r.note("checkpoint_serialization",
         "zeroshard writes raw tensor bytes with a JSON index (meta.json), never serialized "
         "objects",
         notes);
  r.take("writer", [&](const json& v) {
    KeyReader w(v, r.child("writer"), unknown);
    // DeepSpeed's decoupled writer persists in the background while training goes on: zeroshard's
    // asynchronous save (--checkpoint-async).
    w.take("decoupled",
           [&](const json& d) { config.checkpoint_async = w.boolean(d, "decoupled"); });
    w.note("io_buffer_size",
           "DeepSpeed's I/O staging buffer has no counterpart; the host memory an asynchronous "
           "save holds is --checkpoint-buffer (a rank file larger than it streams through it)",
           notes);
    const std::string one_writer =
        "zeroshard has one checkpoint writer: every rank writes and fsyncs its own shard file in "
        "a temporary step directory that rank 0 renames into place; it has no writer types or "
        "I/O buffer settings";
    for (const char* k : {"type", "io_buffer_double", "show_statistics", "data_parallel"}) {
      w.note(k, one_writer, notes);
    }
  });
}

// DeepSpeed's "nebula" section (Azure's asynchronous checkpoint service). Its storage path,
// retention and load switches are zeroshard's --checkpoint-dir, --keep-checkpoints and --resume;
// all apply only with "enabled": true, as in DeepSpeed.
void read_nebula(const json& value, TrainConfig& config, std::vector<std::string>* unknown,
                 std::vector<std::string>* notes) {
  KeyReader r(value, "nebula", unknown);
  bool enabled = false;
  r.take("enabled", [&](const json& v) { enabled = r.boolean(v, "enabled"); });
  std::string storage;
  int64_t retention = 0;
  bool load = false;
  std::string load_path;
  r.take("persistent_storage_path",
         [&](const json& v) { storage = r.get<std::string>(v, "persistent_storage_path"); });
  r.take("num_of_version_in_retention",
         [&](const json& v) { retention = r.integer(v, "num_of_version_in_retention"); });
  r.take("enable_nebula_load", [&](const json& v) { load = r.boolean(v, "enable_nebula_load"); });
  r.take("load_path", [&](const json& v) { load_path = r.get<std::string>(v, "load_path"); });
  r.note("persistent_time_interval",
         "zeroshard saves by step, not by time: set --checkpoint-interval N (steps); without it "
         "only the end of the run is saved",
         notes);
  if (!enabled) return;
  if (!storage.empty()) config.checkpoint_dir = storage;
  if (retention != 0) {
    ZS_CHECK(retention >= 1 && retention <= 1 << 20, "deepspeed config: '",
             r.child("num_of_version_in_retention"), "' = ", retention, " must be at least 1");
    config.keep_checkpoints = static_cast<int>(retention);
  }
  if (load) config.resume = load_path.empty() ? "auto" : load_path;
}

// Returns whether fp16.enabled is true.
bool read_fp16(const json& value, TrainConfig& config, std::vector<std::string>* unknown) {
  KeyReader r(value, "fp16", unknown);
  bool enabled = false;
  r.take("enabled", [&](const json& v) {
    enabled = v.is_string() ? lower(v.get<std::string>()) == "true" : r.boolean(v, "enabled");
  });
  if (enabled) config.precision = DType::kF16;
  r.take("loss_scale", [&](const json& v) {
    config.static_loss_scale = static_cast<float>(r.number(v, "loss_scale"));
  });
  r.take("initial_scale_power", [&](const json& v) {
    config.loss_scaler.initial_scale =
        std::ldexp(1.0f, static_cast<int>(r.integer(v, "initial_scale_power")));
  });
  r.take("loss_scale_window", [&](const json& v) {
    config.loss_scaler.growth_interval = r.integer(v, "loss_scale_window");
  });
  r.take("hysteresis", [&](const json& v) {
    config.loss_scaler.hysteresis = static_cast<int>(r.integer(v, "hysteresis"));
  });
  r.take("min_loss_scale", [&](const json& v) {
    config.loss_scaler.min_scale = static_cast<float>(r.number(v, "min_loss_scale"));
  });
  r.take("consecutive_hysteresis", [](const json&) {});
  r.take("auto_cast", [](const json&) {});
  return enabled;
}

// Returns whether bf16.enabled is true.
bool read_bf16(const json& value, TrainConfig& config, std::vector<std::string>* unknown,
               const std::string& key) {
  KeyReader r(value, key, unknown);
  bool enabled = false;
  r.take("enabled", [&](const json& v) {
    enabled = v.is_string() ? lower(v.get<std::string>()) == "true" : r.boolean(v, "enabled");
    if (enabled) config.precision = DType::kBF16;
  });
  r.take("immediate_grad_update", [](const json&) {});
  return enabled;
}

void read_optimizer(const json& value, TrainConfig& config, std::vector<std::string>* unknown) {
  KeyReader r(value, "optimizer", unknown);
  std::string type = "adamw";
  r.take("type", [&](const json& v) { type = lower(r.get<std::string>(v, "type")); });
  if (type == "adam" || type == "adamw" || type == "fusedadam" || type == "cpuadam") {
    config.optimizer = "adamw";
  } else if (type == "sgd") {
    config.optimizer = "sgd";
  } else {
    ZS_THROW(InvalidArgument, "deepspeed config: optimizer.type \"", type,
             "\" is not supported; zeroshard has AdamW (\"Adam\", \"AdamW\") and \"SGD\"");
  }
  r.take("params", [&](const json& params) {
    KeyReader p(params, "optimizer.params", unknown);
    p.take("lr", [&](const json& v) { config.lr = static_cast<float>(p.number(v, "lr")); });
    p.take("betas", [&](const json& v) {
      ZS_CHECK(v.is_array() && v.size() == 2,
               "deepspeed config: 'optimizer.params.betas' must be "
               "[beta1, beta2], got ",
               json_excerpt(v));
      config.beta1 = static_cast<float>(p.number(v[0], "betas"));
      config.beta2 = static_cast<float>(p.number(v[1], "betas"));
    });
    p.take("eps", [&](const json& v) { config.eps = static_cast<float>(p.number(v, "eps")); });
    p.take("weight_decay", [&](const json& v) {
      config.weight_decay = static_cast<float>(p.number(v, "weight_decay"));
    });
    p.take("momentum",
           [&](const json& v) { config.momentum = static_cast<float>(p.number(v, "momentum")); });
    p.take("nesterov", [&](const json& v) { config.nesterov = p.boolean(v, "nesterov"); });
    p.take("adam_w_mode", [&](const json& v) {
      ZS_CHECK(p.boolean(v, "adam_w_mode"),
               "deepspeed config: 'optimizer.params.adam_w_mode' = "
               "false (L2-coupled Adam) is not supported; zeroshard's Adam is AdamW");
    });
    p.take("torch_adam", [](const json&) {});
    p.take("bias_correction", [&](const json& v) {
      ZS_CHECK(p.boolean(v, "bias_correction"),
               "deepspeed config: "
               "'optimizer.params.bias_correction' = false is not supported");
    });
  });
}

void read_scheduler(const json& value, TrainConfig& config, std::vector<std::string>* unknown) {
  KeyReader r(value, "scheduler", unknown);
  std::string type;
  r.take("type", [&](const json& v) { type = r.get<std::string>(v, "type"); });
  if (type == "WarmupLR") {
    config.decay = optim::LrDecay::kConstant;
  } else if (type == "WarmupDecayLR") {
    config.decay = optim::LrDecay::kLinear;
  } else if (type == "WarmupCosineLR") {
    config.decay = optim::LrDecay::kCosine;
  } else {
    ZS_THROW(InvalidArgument, "deepspeed config: scheduler.type \"", type,
             "\" is not supported; use WarmupLR, WarmupDecayLR or WarmupCosineLR");
  }
  r.take("params", [&](const json& params) {
    KeyReader p(params, "scheduler.params", unknown);
    p.take("warmup_min_lr", [&](const json& v) {
      config.min_lr = static_cast<float>(p.number(v, "warmup_min_lr"));
    });
    p.take("warmup_max_lr",
           [&](const json& v) { config.lr = static_cast<float>(p.number(v, "warmup_max_lr")); });
    p.take("warmup_num_steps",
           [&](const json& v) { config.warmup_steps = p.integer(v, "warmup_num_steps"); });
    p.take("total_num_steps",
           [&](const json& v) { config.steps = p.integer(v, "total_num_steps"); });
    p.take("cos_min_ratio", [&](const json& v) {
      config.min_lr = static_cast<float>(p.number(v, "cos_min_ratio")) * config.lr;
    });
    p.take("warmup_type", [&](const json& v) {
      const std::string kind = p.get<std::string>(v, "warmup_type");
      ZS_CHECK(kind == "linear", "deepspeed config: 'scheduler.params.warmup_type' \"", kind,
               "\" is not supported; zeroshard warms up linearly");
    });
    p.take("last_batch_iteration", [](const json&) {});
    p.take("warmup_min_ratio", [](const json&) {});
  });
}

}  // namespace

size_t parse_bytes(const std::string& text) {
  size_t pos = 0;
  double value = 0;
  try {
    value = std::stod(text, &pos);
  } catch (const std::exception&) {
    ZS_THROW(InvalidArgument, "'", text, "' is not a size; write e.g. 512MiB, 16GiB or 1000000");
  }
  std::string unit = lower(text.substr(pos));
  unit.erase(std::remove(unit.begin(), unit.end(), ' '), unit.end());
  static const std::map<std::string, double> kUnits = {{"", 1},
                                                       {"b", 1},
                                                       {"k", 1024},
                                                       {"kib", 1024},
                                                       {"kb", 1e3},
                                                       {"m", 1 << 20},
                                                       {"mib", 1 << 20},
                                                       {"mb", 1e6},
                                                       {"g", 1 << 30},
                                                       {"gib", 1 << 30},
                                                       {"gb", 1e9},
                                                       {"t", 1024.0 * (1 << 30)},
                                                       {"tib", 1024.0 * (1 << 30)},
                                                       {"tb", 1e12}};
  auto it = kUnits.find(unit);
  ZS_CHECK(it != kUnits.end() && value >= 0 && std::isfinite(value), "'", text,
           "' is not a size; write e.g. 512MiB, 16GiB, 2GB or 1000000 (bytes)");
  return static_cast<size_t>(std::llround(value * it->second));
}

DType parse_precision(const std::string& text) {
  const std::string t = lower(text);
  if (t == "fp32" || t == "float32" || t == "f32") return DType::kF32;
  if (t == "fp16" || t == "float16" || t == "f16" || t == "half") return DType::kF16;
  if (t == "bf16" || t == "bfloat16") return DType::kBF16;
  ZS_THROW(InvalidArgument, "precision '", text, "' is not one of fp32, fp16, bf16");
}

std::string ddp_sync_flag(sharding::DdpSync sync) { return dashed(sharding::ddp_sync_name(sync)); }

sharding::DdpSync parse_ddp_sync(const std::string& text) {
  const std::string t = dashed(lower(text));
  if (t == "bucketed") return sharding::DdpSync::kBucketed;
  if (t == "per-tensor") return sharding::DdpSync::kPerTensor;
  if (t == "gather-scatter") return sharding::DdpSync::kGatherScatter;
  ZS_THROW(InvalidArgument, "--ddp-sync '", text,
           "' is not one of bucketed, per-tensor, gather-scatter");
}

std::string grad_sync_flag(sharding::GradSync sync) {
  return dashed(sharding::grad_sync_name(sync));
}

sharding::GradSync parse_grad_sync(const std::string& text) {
  const std::string t = dashed(lower(text));
  if (t == "per-micro-batch") return sharding::GradSync::kPerMicroBatch;
  if (t == "per-step") return sharding::GradSync::kPerStep;
  ZS_THROW(InvalidArgument, "--grad-sync '", text, "' is not one of per-micro-batch, per-step");
}

void apply_deepspeed_json(const std::string& json_text, const std::string& source,
                          TrainConfig& config, std::vector<std::string>* notes) {
  json root;
  try {
    root = parse_json_bounded(json_text, "deepspeed config " + source);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number like 1E999
    ZS_THROW(InvalidArgument, "deepspeed config ", source, " is not valid JSON: ", e.what());
  }
  std::vector<std::string> unknown;
  {
    KeyReader r(root, "", &unknown);
    // Precision first: stage-3 limits given in parameters become bytes of the compute dtype.
    bool fp16 = false, bf16 = false;
    r.take("fp16", [&](const json& v) { fp16 = read_fp16(v, config, &unknown); });
    r.take("bf16", [&](const json& v) { bf16 = read_bf16(v, config, &unknown, "bf16") || bf16; });
    r.take("bfloat16",
           [&](const json& v) { bf16 = read_bf16(v, config, &unknown, "bfloat16") || bf16; });
    ZS_CHECK(!(fp16 && bf16), "deepspeed config ", source,
             ": fp16.enabled and bf16.enabled are both true (DeepSpeed refuses this too); "
             "enable one of them");
    r.take("zero_optimization", [&](const json& v) { read_zero(v, config, &unknown, notes); });
    r.take("train_micro_batch_size_per_gpu", [&](const json& v) {
      config.micro_batch = r.integer(v, "train_micro_batch_size_per_gpu");
    });
    r.take("gradient_accumulation_steps",
           [&](const json& v) { config.grad_accum = r.integer(v, "gradient_accumulation_steps"); });
    r.take("train_batch_size",
           [&](const json& v) { config.global_batch = r.integer(v, "train_batch_size"); });
    r.take("gradient_clipping", [&](const json& v) {
      config.clip = static_cast<float>(r.number(v, "gradient_clipping"));
    });
    r.take("optimizer", [&](const json& v) { read_optimizer(v, config, &unknown); });
    r.take("scheduler", [&](const json& v) { read_scheduler(v, config, &unknown); });
    r.take("steps_per_print",
           [&](const json& v) { config.log_interval = r.integer(v, "steps_per_print"); });
    r.take("seed", [&](const json& v) {
      const int64_t seed = r.integer(v, "seed");
      ZS_CHECK(seed >= 0, "deepspeed config ", source, ": 'seed' must be >= 0, got ", seed);
      config.seed = static_cast<uint64_t>(seed);
    });
    r.take("communication_data_type", [&](const json& v) {
      config.reduce_dtype = parse_precision(r.get<std::string>(v, "communication_data_type"));
      config.reduce_dtype_set = true;
    });
    r.note("wall_clock_breakdown", "zs-train always reports step time and traffic", notes);
    r.note("prescale_gradients", "gradients are averaged in the reduction itself", notes);
    r.note("gradient_predivide_factor", "gradients are averaged in the reduction itself", notes);
    r.note("zero_allow_untested_optimizer", "has no effect in zeroshard", notes);
    r.note("memory_breakdown", "zs-train always prints the memory table", notes);
    r.note("dump_state", "has no effect in zeroshard", notes);
    r.take("checkpoint", [&](const json& v) { read_checkpoint(v, config, &unknown, notes); });
    r.take("nebula", [&](const json& v) { read_nebula(v, config, &unknown, notes); });
    r.take("activation_checkpointing",
           [&](const json& v) { read_activation_checkpointing(v, config, &unknown, notes); });
  }
  if (!unknown.empty()) {
    std::ostringstream list;
    for (size_t i = 0; i < unknown.size(); ++i) list << (i ? ", " : "") << unknown[i];
    ZS_THROW(InvalidArgument, "deepspeed config ", source, ": unknown key",
             unknown.size() > 1 ? "s " : " ", list.str(),
             "; remove them or fix their spelling (zeroshard reads zero_optimization, fp16, bf16, "
             "optimizer, scheduler, gradient_clipping, train_micro_batch_size_per_gpu, "
             "gradient_accumulation_steps, train_batch_size, steps_per_print, "
             "communication_data_type, seed, checkpoint, nebula and activation_checkpointing)");
  }
}

OffloadTarget parse_offload_target(const std::string& text) {
  const std::string t = lower(text);
  if (t == "none") return OffloadTarget::kNone;
  if (t == "host" || t == "cpu") return OffloadTarget::kHost;
  if (t == "nvme") return OffloadTarget::kNvme;
  ZS_THROW(InvalidArgument,
           "an offload target (--offload-optimizer, --offload-param) must be none, host (or cpu) "
           "or nvme, got '",
           text, "'");
}

sharding::ParamOffload param_offload(OffloadTarget target) {
  switch (target) {
    case OffloadTarget::kHost:
      return sharding::ParamOffload::kHost;
    case OffloadTarget::kNvme:
      return sharding::ParamOffload::kNvme;
    case OffloadTarget::kNone:
      break;
  }
  return sharding::ParamOffload::kNone;
}

const char* offload_target_name(OffloadTarget target) {
  switch (target) {
    case OffloadTarget::kHost:
      return "host";
    case OffloadTarget::kNvme:
      return "nvme";
    case OffloadTarget::kNone:
      break;
  }
  return "none";
}

void validate_device(const TrainConfig& c) {
  ZS_CHECK(c.device == "cpu" || c.device == "cuda", "--device must be cpu or cuda, got '", c.device,
           "'");
  if (c.device == "cuda") {
    ZS_CHECK(c.backend == "auto" || c.backend == "nccl",
             "--device cuda needs the nccl backend "
             "(GPU tensors move over NCCL), but --backend is '",
             c.backend,
             "'; use --backend nccl or auto (one process per GPU: mpirun -np N zs-train "
             "--device cuda …), or --device cpu with the ",
             c.backend, " backend");
  } else {
    ZS_CHECK(c.backend != "nccl",
             "--backend nccl moves GPU tensors and needs --device cuda; "
             "the CPU backends are local and mpi");
  }
}

std::string resolved_backend_name(const TrainConfig& c) {
  return c.device == "cuda" && c.backend == "auto" ? "nccl" : c.backend;
}

namespace {

// Whether this process can create a file in the existing directory `dir` (a file of a unique
// name made and removed at once: permissions, a read-only mount, a full inode table all show),
// and if not, why.
bool can_create_in(const std::filesystem::path& dir, std::string* why) {
  std::string probe =
      ((dir.empty() ? std::filesystem::path(".") : dir) / ".zs-write-probe-XXXXXX").string();
  const int fd = ::mkstemp(probe.data());
  if (fd < 0) {
    *why = std::strerror(errno);
    return false;
  }
  ::close(fd);
  ::unlink(probe.c_str());
  return true;
}

}  // namespace

void check_output_file(const std::string& flag, const std::string& path, const std::string& what) {
  if (path.empty()) return;
  namespace fs = std::filesystem;
  std::error_code error;  // a path the system cannot look at is refused like a missing one
  const fs::path parent = fs::path(path).parent_path();
  ZS_CHECK(parent.empty() || fs::is_directory(parent, error), flag, " ", path, ": the directory '",
           parent.string(), "' does not exist; create it or write the ", what, " elsewhere");
  ZS_CHECK(!fs::is_directory(path, error), flag, " ", path,
           " is a directory; name a file in it (e.g. ", (fs::path(path) / "out").string(), ")");
  std::string why;
  ZS_CHECK(can_create_in(parent, &why), flag, " ", path, ": cannot create a file in '",
           parent.empty() ? std::string(".") : parent.string(), "' (", why,
           "); make it writable or write the ", what, " elsewhere");
}

void check_output_directory(const std::string& flag, const std::string& path) {
  if (path.empty()) return;
  namespace fs = std::filesystem;
  std::error_code error;
  ZS_CHECK(!fs::exists(path, error) || fs::is_directory(path, error), flag, " ", path,
           " exists and is not a directory; name a directory (it is created if missing)");
  // It is made when the first checkpoint is saved: the nearest folder that exists must take it.
  fs::path existing = fs::absolute(path, error);
  while (existing.has_relative_path() && !fs::exists(existing, error)) {
    existing = existing.parent_path();
  }
  ZS_CHECK(fs::is_directory(existing, error), flag, " ", path, ": '", existing.string(),
           "' is a file, so no directory can be made under it; save checkpoints elsewhere");
  std::string why;
  ZS_CHECK(can_create_in(existing, &why), flag, " ", path, ": cannot create files in '",
           existing.string(), "' (", why, "); make it writable or save checkpoints elsewhere");
}

void check_outputs(const TrainConfig& c, bool lead) {
  check_output_file("--trace", c.trace, "trace");
  check_output_file("--profile-memory", c.profile_memory, "memory profile");
  check_output_directory("--checkpoint-dir", c.checkpoint_dir);
  if (lead) check_output_file("--save-weights", c.save_weights, "weights");  // rank 0 writes it
}

namespace {

// The ranges of the numbers validate() has not checked on the way: model shape overrides,
// sequence length, threads, schedule, evaluation, sampling, injected faults, run length.
void validate_numbers(const TrainConfig& c, int world) {
  // -1: the preset's (or the weights', or --model-config's) value.
  const std::pair<int64_t, const char*> shape[] = {{c.n_layer, "--layers"},
                                                   {c.width, "--width"},
                                                   {c.n_head, "--heads"},
                                                   {c.vocab_size, "--vocab-size"},
                                                   {c.context, "--context"}};
  for (const auto& [value, flag] : shape) {
    ZS_CHECK(value == -1 || value >= 1, flag, " must be >= 1, got ", value,
             "; leave it out for the preset's");
  }
  ZS_CHECK(c.seq_len >= 0, "--seq-len must be >= 1, got ", c.seq_len,
           "; leave it out for the model's context");
  ZS_CHECK(c.threads >= 0, "--threads must be >= 1, got ", c.threads,
           "; leave it out for the cores divided among the ranks");
  ZS_CHECK(c.steps <= kMaxSteps, "--steps must be at most ", kMaxSteps, ", got ", c.steps,
           " (a number too large for a step count, or one that overflowed)");
  ZS_CHECK(c.epochs <= kMaxEpochs, "--epochs must be at most ", kMaxEpochs, ", got ", c.epochs);
  ZS_CHECK(c.exit_after_steps >= 0, "--exit-after-steps must be >= 1 (0 = off), got ",
           c.exit_after_steps);
  ZS_CHECK(std::isfinite(c.exit_after_minutes) && c.exit_after_minutes >= 0,
           "--exit-after-minutes must be a number > 0 (0 = off), got ", c.exit_after_minutes);
  ZS_CHECK((c.exit_after_steps == 0 && c.exit_after_minutes == 0) || !c.checkpoint_dir.empty(),
           "--exit-after-steps and --exit-after-minutes save a checkpoint for the next job to "
           "continue from; give --checkpoint-dir (and --resume auto, in every job of the chain)");
  // min_lr: -1 is "lr / 10" (the default); DeepSpeed's warmup_min_lr and cos_min_ratio set it.
  ZS_CHECK(c.min_lr == -1 || (c.min_lr >= 0 && std::isfinite(c.min_lr)),
           "--min-lr must be a number >= 0, got ", c.min_lr, "; leave it out for --lr / 10");
  ZS_CHECK(std::isfinite(c.beta1) && std::isfinite(c.beta2) && c.beta1 >= 0 && c.beta1 < 1 &&
               c.beta2 >= 0 && c.beta2 < 1,
           "AdamW's betas must be in [0, 1), got ", c.beta1, " and ", c.beta2);
  ZS_CHECK(std::isfinite(c.eps) && c.eps >= 0, "AdamW's eps must be >= 0, got ", c.eps);
  ZS_CHECK(std::isfinite(c.weight_decay) && c.weight_decay >= 0,
           "--weight-decay must be >= 0, got ", c.weight_decay);
  ZS_CHECK(std::isfinite(c.momentum) && c.momentum >= 0 && c.momentum < 1,
           "--momentum must be in [0, 1), got ", c.momentum);
  ZS_CHECK(std::isfinite(c.clip), "--clip must be a number >= 0 (0 = off), got ", c.clip);
  ZS_CHECK(c.eval_interval >= 0, "--eval-interval must be >= 0 (0 = at the end only), got ",
           c.eval_interval);
  ZS_CHECK(c.eval_batches >= 0, "--eval-batches must be >= 0 (0 = the whole held-out set), got ",
           c.eval_batches);
  ZS_CHECK(c.sample_tokens >= 0, "--sample must be >= 0 (tokens to generate; 0 = none), got ",
           c.sample_tokens);
  ZS_CHECK(std::isfinite(c.sample_temperature) && c.sample_temperature >= 0,
           "--temperature must be >= 0 (0 = greedy), got ", c.sample_temperature);
  for (const InjectedFault& fault : c.injected_faults) {
    ZS_CHECK(fault.rank >= 0, "--inject-fault names rank ", fault.rank, "; ranks count from 0");
    ZS_CHECK(fault.attempt >= 0, "--inject-fault's attempt must be >= 0, got ", fault.attempt);
    if (fault.rank < world) continue;
    // With rank threads the world is --ranks: a typo. Under a launcher an elastic relaunch
    // (scripts/zs-launch) runs the same command on fewer ranks, where the fault is left behind.
    ZS_CHECK(c.backend != "local", "--inject-fault names rank ", fault.rank,
             ", but the ranks are 0 to ", world - 1, "; it would never fire");
    ZS_LOG_WARN("--inject-fault names rank {}, but this run's ranks are 0 to {}: it will not fire",
                fault.rank, world - 1);
  }
}

}  // namespace

void validate(const TrainConfig& c, int world) {
  ZS_CHECK(c.stage >= 0 && c.stage <= 3, "--zero-stage must be 0, 1, 2 or 3, got ", c.stage);
  ZS_CHECK(world >= 1, "the world size must be >= 1, got ", world);
  ZS_CHECK(c.micro_batch >= 1, "--micro-batch must be >= 1, got ", c.micro_batch);
  ZS_CHECK(c.grad_accum >= 1, "--grad-accum must be >= 1, got ", c.grad_accum);
  const int64_t global = c.micro_batch * c.grad_accum * world;
  ZS_CHECK(c.global_batch <= 0 || c.global_batch == global, "the global batch ", c.global_batch,
           " (train_batch_size) does not equal micro batch ", c.micro_batch, " x grad accum ",
           c.grad_accum, " x world size ", world, " = ", global,
           "; change one of them (zeroshard does not rescale them for you)");
  ZS_CHECK(c.steps >= 1 || c.epochs >= 1, "--steps must be >= 1 (or --epochs >= 1), got ", c.steps);
  ZS_CHECK(c.epochs >= 0, "--epochs must be >= 0, got ", c.epochs);
  ZS_CHECK(c.lr > 0 && std::isfinite(c.lr), "--lr must be a positive number, got ", c.lr);
  ZS_CHECK(c.clip >= 0, "--clip must be >= 0 (0 = off), got ", c.clip);
  ZS_CHECK(c.eval_fraction >= 0 && c.eval_fraction < 1, "--eval-fraction must be in [0, 1), got ",
           c.eval_fraction);
  ZS_CHECK(c.log_interval >= 1, "--log-interval must be >= 1, got ", c.log_interval);
  for (const int64_t rows : c.eval_micro_batches) {
    ZS_CHECK(rows >= 1, "--eval-micro-batch must be >= 1, got ", rows);
  }
  ZS_CHECK(c.warmup_steps >= 0, "--warmup must be >= 0, got ", c.warmup_steps);
  ZS_CHECK(c.optimizer == "adamw" || c.optimizer == "sgd",
           "--optimizer must be adamw or sgd, got '", c.optimizer, "'");
  ZS_CHECK(c.backend == "local" || c.backend == "mpi" || c.backend == "auto" || c.backend == "nccl",
           "--backend must be local, mpi, auto or nccl, got '", c.backend, "'");
  validate_device(c);
  ZS_CHECK(c.ranks >= 1, "--ranks must be >= 1, got ", c.ranks);
  ZS_CHECK(c.hybrid_group >= 0, "--hybrid-group must be >= 0, got ", c.hybrid_group);
  ZS_CHECK(c.max_reductions_in_flight >= 0,
           "--max-reductions-in-flight must be >= 0 (0 = no limit), got ",
           c.max_reductions_in_flight);
  ZS_CHECK(c.checkpoint_every >= 0,
           "--checkpoint-every must be >= 1 (1 = every unit), or 0 for no activation "
           "checkpointing, got ",
           c.checkpoint_every);
  // The naive syncs replace stage 0's all-reduce; the other stages reduce-scatter instead.
  ZS_CHECK(c.ddp_sync == sharding::DdpSync::kBucketed || c.stage == 0, "--ddp-sync ",
           ddp_sync_flag(c.ddp_sync),
           " is a gradient synchronization of ZeRO stage 0 (DDP), but the stage is ", c.stage,
           ", which reduce-scatters gradients; add --zero-stage 0 (or --strategy ddp), or drop "
           "--ddp-sync");
  ZS_CHECK(c.ddp_sync != sharding::DdpSync::kGatherScatter || c.device == "cpu",
           "--ddp-sync gather-scatter averages the gradients on rank 0's host and runs on the "
           "CPU only; use --ddp-sync per-tensor or bucketed with --device cuda");
  // Only stages 0/1 keep the full gradients a local sum needs.
  ZS_CHECK(c.grad_sync == sharding::GradSync::kPerMicroBatch || c.stage <= 1,
           "--grad-sync per-step sums full gradients locally, which only stages 0 and 1 keep; "
           "stage ",
           c.stage,
           " frees each unit's full gradient once it is reduce-scattered (its memory saving) and "
           "reduces every micro-batch; drop --grad-sync per-step, or use --zero-stage 0 or 1");
  if (c.hybrid_group > 0) {
    ZS_CHECK(c.stage == 3,
             "--hybrid-group needs --zero-stage 3 (hybrid = ZeRO-3 inside a group), "
             "got stage ",
             c.stage);
    ZS_CHECK(world % c.hybrid_group == 0, "--hybrid-group ", c.hybrid_group,
             " does not divide the world size ", world, "; use the ranks per node");
  }
  // DeepSpeed's ZeRO-Offload runs the optimizer of the ZeRO stages on the rank's shard; stage 0
  // (DDP) has no such optimizer to move.
  ZS_CHECK(c.offload_optimizer == OffloadTarget::kNone || c.stage >= 1, "--offload-optimizer ",
           offload_target_name(c.offload_optimizer),
           " needs ZeRO stage 1, 2 or 3 (the offloaded optimizer updates the rank's shard of the "
           "masters), but the stage is 0; add --zero-stage 1 (or higher), or drop the offload");
  ZS_CHECK(c.offload_optimizer != OffloadTarget::kNvme || !c.nvme_paths.empty(),
           "--offload-optimizer nvme needs --nvme-path DIR: a directory on a fast local disk for "
           "the optimizer state's swap files (repeat it to stripe over several drives)");
  ZS_CHECK(c.nvme_paths.empty() || c.offload_optimizer == OffloadTarget::kNvme ||
               c.offload_param == OffloadTarget::kNvme,
           "--nvme-path is the swap directory of --offload-optimizer nvme or --offload-param nvme, "
           "and neither is set (they are ",
           offload_target_name(c.offload_optimizer), " and ", offload_target_name(c.offload_param),
           "); add one of them or drop --nvme-path");
  // ZeRO-Infinity's parameter offload moves stage 3's parameter shards; the shards are cast from
  // the masters, which must be on the host for that.
  ZS_CHECK(c.offload_param == OffloadTarget::kNone || c.stage == 3, "--offload-param ",
           offload_target_name(c.offload_param),
           " moves the parameter shards of ZeRO stage 3, but the stage is ", c.stage,
           " (full parameters stay on every rank); use --zero-stage 3, or drop --offload-param");
  ZS_CHECK(c.offload_param == OffloadTarget::kNone || c.offload_optimizer != OffloadTarget::kNone,
           "--offload-param ", offload_target_name(c.offload_param),
           " needs --offload-optimizer host (or nvme) too: the parameter shards are cast from the "
           "fp32 masters, which then live on the host");
  ZS_CHECK(c.offload_param != OffloadTarget::kNvme || !c.nvme_paths.empty(),
           "--offload-param nvme needs --nvme-path DIR: a directory on a fast local disk for the "
           "parameter shards' swap files (repeat it to stripe over several drives)");
  ZS_CHECK(c.param_buffer_count >= 1 && c.param_buffer_count <= 64,
           "--nvme-param-buffer-count must be in [1, 64] (host buffers of one unit's parameter "
           "shard each; 2 or more overlap the next unit's read), got ",
           c.param_buffer_count);
  ZS_CHECK(c.nvme_buffer_count >= 1 && c.nvme_buffer_count <= 64,
           "--nvme-buffer-count must be in [1, 64] (host buffers of one unit's optimizer state "
           "each; 3 or more overlap the disk with the update), got ",
           c.nvme_buffer_count);
  ZS_CHECK(c.data.empty() || c.text.empty(),
           "give either --data (token files) or --text (raw "
           "text), not both");
  ZS_CHECK(c.static_loss_scale >= 0, "the static loss scale must be >= 0, got ",
           c.static_loss_scale);
  ZS_CHECK(c.checkpoint_interval >= 0,
           "--checkpoint-interval must be >= 0 (0 = at the end only), got ", c.checkpoint_interval);
  ZS_CHECK(c.keep_checkpoints >= 1, "--keep-checkpoints must be >= 1, got ", c.keep_checkpoints);
  ZS_CHECK(!c.checkpoint_dir.empty() || c.checkpoint_interval == 0,
           "--checkpoint-interval needs --checkpoint-dir (where to save)");
  ZS_CHECK(c.resume != "auto" || !c.checkpoint_dir.empty(),
           "--resume auto looks in --checkpoint-dir; give it, or --resume with a step directory");
  validate_numbers(c, world);
  // A named checkpoint replaces every weight --init-from would load. (--resume auto may find no
  // checkpoint, and then --init-from starts the run: the first job of a requeued chain.)
  ZS_CHECK(c.init_from.empty() || c.resume.empty() || c.resume == "auto", "--init-from ",
           c.init_from, " and --resume ", c.resume,
           " both give the run's starting weights; a resume continues the checkpoint's run (its "
           "weights, optimizer state and data position), so drop --init-from, or drop --resume "
           "to start a new run from those weights");
}

std::string describe(const TrainConfig& c) {
  std::ostringstream out;
  out << "model " << c.model << ", data "
      << (!c.data.empty()  ? c.data
          : c.text.empty() ? "(none)"
                           : c.text.front())
      << ", stage " << c.stage
      << (c.hybrid_group > 0 ? " hybrid group " + std::to_string(c.hybrid_group) : "") << ", "
      << dtype_name(c.precision) << " compute / "
      << dtype_name(c.reduce_dtype_set ? c.reduce_dtype : c.precision) << " reduce, micro batch "
      << c.micro_batch << " x accum " << c.grad_accum << ", " << c.optimizer << " lr " << c.lr
      << " (" << optim::lr_decay_name(c.decay) << ", warmup " << c.warmup_steps << "), clip "
      << c.clip;
  if (c.ddp_sync != sharding::DdpSync::kBucketed) {
    out << ", ddp sync " << ddp_sync_flag(c.ddp_sync);
  }
  if (c.checkpoint_every > 0) {
    out << ", activation checkpointing"
        << (c.checkpoint_every > 1 ? " every " + std::to_string(c.checkpoint_every) + " units"
                                   : "");
  }
  if (c.grad_sync != sharding::GradSync::kPerMicroBatch) {
    out << ", grad sync " << grad_sync_flag(c.grad_sync);
  }
  if (c.device != "cpu") out << ", device " << c.device;
  if (c.offload_optimizer != OffloadTarget::kNone) {
    out << ", optimizer offloaded to the host"
        << (c.offload_optimizer == OffloadTarget::kNvme ? " (its state and the masters on NVMe)"
                                                        : "");
  }
  if (c.offload_param != OffloadTarget::kNone) {
    out << ", parameter shards offloaded to "
        << (c.offload_param == OffloadTarget::kNvme ? "NVMe" : "the host");
  }
  return out.str();
}

void apply_model_config_json(const std::string& json_text, const std::string& source,
                             models::GptConfig& g) {
  json j;
  try {
    j = parse_json_bounded(json_text, "--model-config '" + source + "'");
  } catch (const json::exception& e) {
    ZS_THROW(InvalidArgument, "--model-config '", source, "' is not valid JSON: ", e.what());
  }
  ZS_CHECK(j.is_object(), "--model-config '", source, "' must hold a JSON object");
  for (const auto& item : j.items()) {
    const std::string& key = item.key();
    int64_t* field = key == "n_layer"      ? &g.n_layer
                     : key == "width"      ? &g.width
                     : key == "n_head"     ? &g.n_head
                     : key == "vocab_size" ? &g.vocab_size
                     : key == "context"    ? &g.context
                                           : nullptr;
    ZS_CHECK(field != nullptr, "--model-config '", source, "': unknown key '", key,
             "'; the keys are n_layer, width, n_head, vocab_size, context");
    ZS_CHECK(item.value().is_number_integer(), "--model-config '", source, "': '", key,
             "' must be an integer, got ", json_excerpt(item.value()));
    *field = item.value().get<int64_t>();
    ZS_CHECK(*field >= 1, "--model-config '", source, "': '", key, "' must be >= 1, got ", *field);
  }
}

models::GptConfig resolve_model_config(const TrainConfig& c) {
  // Starting from weights: the file's shape (the flags below may only restate it; a mismatch
  // is reported when the weights are read).
  models::GptConfig g =
      c.init_from.empty() ? models::gpt_preset(c.model)
      : std::filesystem::is_directory(c.init_from)
          ? checkpoint::checkpoint_gpt_config(c.init_from)
          : checkpoint::infer_gpt2_config(c.init_from, std::max<int64_t>(c.n_head, 0));
  if (!c.model_config.empty()) {
    std::ifstream file(c.model_config);
    ZS_CHECK_AS(IoError, file.good(), "--model-config '", c.model_config,
                "' cannot be opened; give a JSON file like {\"n_layer\": 4, \"width\": 256, "
                "\"n_head\": 4, \"vocab_size\": 256, \"context\": 128}");
    std::stringstream text;
    text << file.rdbuf();
    apply_model_config_json(text.str(), c.model_config, g);
  }
  if (c.n_layer >= 0) g.n_layer = c.n_layer;
  if (c.width > 0) g.width = c.width;
  if (c.n_head > 0) g.n_head = c.n_head;
  if (c.vocab_size > 0) g.vocab_size = c.vocab_size;
  if (c.context > 0) g.context = c.context;
  return g;
}

optim::LrSchedule ScheduleSettings::make(int64_t steps) const {
  return optim::LrSchedule(decay, peak_lr, min_lr, warmup_steps, std::max(steps, warmup_steps));
}

TrainPlan translate(const TrainConfig& c, int rank, int world) {
  TrainPlan plan;
  sharding::ShardingConfig& s = plan.sharding;
  s.stage = c.stage;
  s.hybrid_group = c.hybrid_group;
  s.seed = c.seed;
  s.param_dtype = c.precision;
  s.reduce_dtype = c.reduce_dtype_set ? c.reduce_dtype : c.precision;
  s.prefetch = c.prefetch;
  s.max_live_gathered_bytes = c.max_live_gathered_bytes;
  s.prefetch_bytes = c.prefetch_bytes;
  s.keep_gathered_below_bytes = c.keep_gathered_below_bytes;
  s.max_reductions_in_flight = c.max_reductions_in_flight;
  s.ddp_sync = c.ddp_sync;
  s.checkpoint_every = c.checkpoint_every;
  s.offload_params = param_offload(c.offload_param);
  s.grad_sync = c.grad_sync;

  OptimizerSettings& o = plan.optimizer;
  if (c.optimizer == "sgd") {
    o.choice = OptimizerChoice::kSgd;
    o.sgd.momentum = c.momentum;
    o.sgd.nesterov = c.nesterov;
    o.sgd.weight_decay = c.weight_decay;
  } else {
    o.choice = OptimizerChoice::kAdamW;
    o.adamw.beta1 = c.beta1;
    o.adamw.beta2 = c.beta2;
    o.adamw.eps = c.eps;
    o.adamw.weight_decay = c.weight_decay;
  }

  plan.schedule.decay = c.decay;
  plan.schedule.peak_lr = c.lr;
  plan.schedule.min_lr = c.min_lr >= 0 ? c.min_lr : c.lr / 10;
  plan.schedule.warmup_steps = c.warmup_steps;

  plan.loss_scaling.dynamic = c.precision == DType::kF16 && c.static_loss_scale == 0;
  plan.loss_scaling.scaler = c.loss_scaler;
  plan.loss_scaling.static_scale = c.static_loss_scale > 0 ? c.static_loss_scale : 1;

  plan.sampler.global_batch = c.micro_batch * world;
  plan.sampler.rank = rank;
  plan.sampler.world_size = world;
  plan.sampler.seed = c.seed;
  plan.micro_batches_per_step = c.grad_accum;
  plan.offload_optimizer = c.offload_optimizer != OffloadTarget::kNone;
  plan.optimizer_state_on_nvme = c.offload_optimizer == OffloadTarget::kNvme;
  plan.params_on_nvme = c.offload_param == OffloadTarget::kNvme;
  return plan;
}

int64_t total_steps(const TrainConfig& c, int64_t micro_batches_per_epoch) {
  const int64_t per_epoch = micro_batches_per_epoch / c.grad_accum;
  ZS_CHECK(per_epoch >= 1 || c.epochs == 0, "one epoch of ", micro_batches_per_epoch,
           " micro-batches is less than one step of ", c.grad_accum,
           " micro-batches; lower --grad-accum or --micro-batch");
  return c.epochs > 0 ? c.epochs * per_epoch : c.steps;
}

MemoryModelConfig memory_model_config(const TrainConfig& c, int world, int stage) {
  const TrainPlan plan = translate(c, 0, world);
  const sharding::ShardingConfig& s = plan.sharding;
  MemoryModelConfig m;
  m.world = world;
  m.stage = stage;
  m.hybrid_group = stage == 3 ? s.hybrid_group : 0;
  m.param_dtype = s.param_dtype;
  m.reduce_dtype = s.reduce_dtype;
  m.alignment = s.alignment;
  m.optimizer = plan.optimizer.choice == OptimizerChoice::kAdamW ? OptimizerKind::kAdamW
                : plan.optimizer.sgd.momentum > 0                ? OptimizerKind::kSgdMomentum
                                                                 : OptimizerKind::kSgd;
  m.gradient_accumulation = plan.micro_batches_per_step > 1;
  m.grad_sync = s.grad_sync;
  m.prefetch = s.prefetch;
  m.max_live_gathered_bytes = s.max_live_gathered_bytes;
  m.prefetch_bytes = s.prefetch_bytes;
  m.keep_gathered_below_bytes = s.keep_gathered_below_bytes;
  m.max_reductions_in_flight = s.max_reductions_in_flight;
  m.offload = plan.optimizer_state_on_nvme ? OffloadKind::kOptimizerNvme
              : plan.offload_optimizer     ? OffloadKind::kOptimizer
                                           : OffloadKind::kNone;
  m.nvme_buffer_count = c.nvme_buffer_count;
  m.offload_params = s.offload_params;
  m.param_buffer_count = c.param_buffer_count;
  m.device_is_host = c.device == "cpu";
  return m;
}

}  // namespace zs::train
