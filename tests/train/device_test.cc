// zs-train's --device flag without a GPU (label unit: runs everywhere). On a machine without a
// CUDA device (or a build without CUDA), --device cuda must stop before training — before any
// data is read — with InvalidArgument naming CUDA's reason, and zs-train must exit with 2. The
// device/backend combinations are usage errors by name. (Where a GPU is present, the first test
// is skipped: tests/cuda/sharding_parity_test.cc runs the engine's pieces there.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "comm/factory.h"
#include "runtime/error.h"
#include "tests/support/scratch.h"
#include "train/cli.h"
#include "train/config.h"
#include "train/device.h"
#include "train/engine.h"

namespace zs::train {
namespace {

using zs::testing::error_message;

TrainConfig cuda_run() {
  TrainConfig c;
  c.device = "cuda";
  c.backend = "auto";
  // Data that does not exist: the device check must come first.
  c.text = {"/nonexistent/zs-train-device-test.txt"};
  c.model = "tiny";
  c.n_layer = 1;
  c.width = 32;
  c.n_head = 2;
  c.context = 16;
  c.steps = 1;
  c.progress = false;
  return c;
}

TEST(TrainDevice, CudaWithoutAGpuFailsBeforeTrainingNamingTheReason) {
  std::string why;
  if (cuda_devices(&why) > 0) GTEST_SKIP() << "a CUDA device is present";
  ASSERT_FALSE(why.empty());
  const std::string message = error_message<InvalidArgument>([&] { run_training(cuda_run()); });
  EXPECT_NE(message.find("--device cuda"), std::string::npos) << message;
  EXPECT_NE(message.find("no CUDA device"), std::string::npos) << message;
  EXPECT_NE(message.find(why), std::string::npos) << message << "\nreason: " << why;
  EXPECT_EQ(message.find("nonexistent"), std::string::npos)
      << "the data was read first: " << message;

  // The program: usage error, exit code 2, the reason on stderr.
  const char* argv[] = {
      "zs-train", "--device", "cuda",         "--text", "/nonexistent/zs-train-device-test.txt",
      "--steps",  "1",        "--no-progress"};
  ::testing::internal::CaptureStderr();
  const int code = train_main(8, argv);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(code, 2) << err;
  EXPECT_NE(err.find(why), std::string::npos) << err;
}

TEST(TrainDevice, RanksWithALauncherBackendMustMatchTheLaunch) {
  // --ranks 4 with --device cuda (nccl) and no launcher would train on one GPU: refused before
  // the device is opened or data is read, naming mpirun. (The nccl world is refused first when
  // there is no GPU, so use mpi where it is built.)
  TrainConfig c = cuda_run();
  c.device = "cpu";
  c.backend = "mpi";
  c.ranks = 4;
  const std::vector<std::string> built = comm::built_backends();
  if (std::find(built.begin(), built.end(), "mpi") == built.end()) {
    GTEST_SKIP() << "this build has no mpi backend";
  }
  const std::string message = error_message<InvalidArgument>([&] { run_training(c); });
  EXPECT_NE(message.find("--ranks 4"), std::string::npos) << message;
  EXPECT_NE(message.find("mpirun -np 4"), std::string::npos) << message;
  EXPECT_EQ(message.find("nonexistent"), std::string::npos) << message;
}

TEST(TrainDevice, DeviceAndBackendCombinations) {
  TrainConfig c;
  // cuda with a CPU backend: a usage error naming both.
  c.device = "cuda";
  c.backend = "local";
  std::string message = error_message<InvalidArgument>([&] { validate_device(c); });
  EXPECT_NE(message.find("nccl"), std::string::npos) << message;
  EXPECT_NE(message.find("'local'"), std::string::npos) << message;
  c.backend = "mpi";
  EXPECT_NE(error_message<InvalidArgument>([&] { validate_device(c); }).find("'mpi'"),
            std::string::npos);
  // auto becomes nccl with cuda, stays auto with cpu.
  c.backend = "auto";
  validate_device(c);
  EXPECT_EQ(resolved_backend_name(c), "nccl");
  c.device = "cpu";
  EXPECT_EQ(resolved_backend_name(c), "auto");
  // nccl needs cuda.
  c.backend = "nccl";
  EXPECT_NE(error_message<InvalidArgument>([&] { validate_device(c); }).find("--device cuda"),
            std::string::npos);
  c.device = "gpu";
  c.backend = "local";
  EXPECT_NE(error_message<InvalidArgument>([&] { validate_device(c); }).find("'gpu'"),
            std::string::npos);
}

TEST(TrainDevice, CliFlag) {
  TrainConfig c;
  const char* plain[] = {"zs-train", "--text", "x.txt"};
  ASSERT_FALSE(parse_train_args(3, plain, c, nullptr, nullptr));
  EXPECT_EQ(c.device, "cpu");  // the default
  EXPECT_EQ(c.backend, "local");
  TrainConfig g;
  const char* cuda[] = {"zs-train", "--text", "x.txt", "--device", "cuda"};
  ASSERT_FALSE(parse_train_args(5, cuda, g, nullptr, nullptr));
  EXPECT_EQ(g.device, "cuda");
  EXPECT_EQ(g.backend, "auto");  // → nccl
  EXPECT_EQ(resolved_backend_name(g), "nccl");
  TrainConfig l;
  const char* cuda_local[] = {"zs-train", "--text",    "x.txt", "--device",
                              "cuda",     "--backend", "local"};
  ASSERT_FALSE(parse_train_args(7, cuda_local, l, nullptr, nullptr));
  EXPECT_NE(error_message<InvalidArgument>([&] { validate(l, 1); }).find("nccl"),
            std::string::npos);
  TrainConfig bad;
  const char* wrong[] = {"zs-train", "--text", "x.txt", "--device", "tpu"};
  EXPECT_NE(error_message<InvalidArgument>([&] {
              parse_train_args(5, wrong, bad, nullptr, nullptr);
            }).find("tpu"),
            std::string::npos);
  // zs-train with a local backend and cuda: exit code 2 before anything runs.
  const char* argv[] = {"zs-train",
                        "--device",
                        "cuda",
                        "--backend",
                        "local",
                        "--text",
                        "/nonexistent/zs-train-device-test.txt",
                        "--no-progress"};
  ::testing::internal::CaptureStderr();
  const int code = train_main(8, argv);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(code, 2) << err;
  EXPECT_NE(err.find("nccl"), std::string::npos) << err;
}

}  // namespace
}  // namespace zs::train
