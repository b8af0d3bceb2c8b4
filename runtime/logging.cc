// Rank-prefixed logging: a custom spdlog flag (%R) reads the calling thread's rank.
#include "runtime/logging.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "runtime/dtype.h"
#include "runtime/error.h"

namespace zs {
namespace {

thread_local int t_log_rank = -1;

class RankFlag : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg&, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    std::string text = t_log_rank < 0 ? "rank -" : "rank " + std::to_string(t_log_rank);
    dest.append(text.data(), text.data() + text.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<RankFlag>();
  }
};

std::shared_ptr<spdlog::logger> make_logger() {
  auto sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  auto log = std::make_shared<spdlog::logger>("zeroshard", sink);
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  formatter->add_flag<RankFlag>('R').set_pattern("[%H:%M:%S.%e] [%R] [%^%l%$] %v");
  log->set_formatter(std::move(formatter));
  const char* level = std::getenv("ZS_LOG_LEVEL");
  log->set_level(level ? spdlog::level::from_str(level) : spdlog::level::info);
  return log;
}

}  // namespace

int current_log_rank() { return t_log_rank; }

RankScope::RankScope(int rank) : previous_(t_log_rank) { t_log_rank = rank; }
RankScope::~RankScope() { t_log_rank = previous_; }

spdlog::logger& logger() {
  static std::shared_ptr<spdlog::logger> instance = make_logger();
  return *instance;
}

namespace detail {

std::string error_prefix(const char* file, int line) {
  std::string path(file);
  // Keep the path from the repository root: ".../zeroshard/ops/cpu/x.cc" -> "ops/cpu/x.cc".
  for (const char* top :
       {"/runtime/", "/ops/", "/comm/", "/models/", "/sharding/", "/optim/", "/offload/", "/data/",
        "/checkpoint/", "/train/", "/apps/", "/tests/", "/bench/", "/examples/"}) {
    auto at = path.rfind(top);
    if (at != std::string::npos) {
      path = path.substr(at + 1);
      break;
    }
  }
  std::string rank = t_log_rank < 0 ? "-" : std::to_string(t_log_rank);
  return "[rank " + rank + "] " + path + ":" + std::to_string(line) + ": ";
}

}  // namespace detail

DType parse_dtype(const std::string& name) {
  if (name == "fp32" || name == "float32" || name == "float") return DType::kF32;
  if (name == "fp16" || name == "float16" || name == "half") return DType::kF16;
  if (name == "bf16" || name == "bfloat16") return DType::kBF16;
  if (name == "int32" || name == "i32") return DType::kI32;
  ZS_THROW(InvalidArgument, "unknown dtype '", name, "'; expected one of fp32, fp16, bf16, int32");
}

}  // namespace zs
