// Logging through spdlog, every line prefixed with the rank that wrote it.
//
// The rank is a thread-local mode set by RankScope: ranks that are threads of one process (the
// local backend) each see their own number, and so do errors built by ZS_CHECK. Outside any
// scope the prefix reads "rank -". The logger itself is spdlog's thread-safe default logger,
// configured once by the first call to logger().
#pragma once

#include <spdlog/spdlog.h>

namespace zs {

// The rank of the calling thread for log lines and error messages, or -1 outside a rank.
int current_log_rank();

// Sets the calling thread's rank for its lifetime; scopes nest.
class RankScope {
 public:
  explicit RankScope(int rank);
  ~RankScope();
  RankScope(const RankScope&) = delete;
  RankScope& operator=(const RankScope&) = delete;

 private:
  int previous_;
};

// zeroshard's logger ("[12:00:01.123] [rank 0] [info] ..."). Level from ZS_LOG_LEVEL
// (trace, debug, info, warn, error, off; default info).
spdlog::logger& logger();

}  // namespace zs

#define ZS_LOG_INFO(...) ::zs::logger().info(__VA_ARGS__)
#define ZS_LOG_WARN(...) ::zs::logger().warn(__VA_ARGS__)
#define ZS_LOG_ERROR(...) ::zs::logger().error(__VA_ARGS__)
#define ZS_LOG_DEBUG(...) ::zs::logger().debug(__VA_ARGS__)
