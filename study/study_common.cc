// The studies' shared set-up (study/study_common.h).
#include "study/study_common.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "runtime/error.h"
#include "study/synthetic_data.h"

namespace zs::study {

train::TrainConfig classifier_config(const ClassifierSetup& setup, const std::string& tsv,
                                     int ranks, int64_t batch) {
  train::TrainConfig c;
  c.task = "classify";
  c.data = tsv;
  c.n_layer = setup.shape.n_layer;
  c.width = setup.shape.width;
  c.n_head = setup.shape.n_head;
  c.vocab_size = setup.shape.vocab_size;
  c.context = setup.shape.context;
  c.micro_batch = batch;
  c.ranks = ranks;
  c.threads = rank_threads(setup.threads, ranks);
  c.lr = setup.lr;
  c.seed = setup.seed;
  c.log_interval = 1 << 30;
  c.progress = false;
  return c;
}

StudyData::StudyData(const ClassifierSetup& setup, double eval_fraction) {
  std::string dir = setup.work_dir;
  if (dir.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    temp_dir_ = std::string(tmp && *tmp ? tmp : "/tmp") + "/zs-study-XXXXXX";
    ZS_CHECK_AS(IoError, mkdtemp(temp_dir_.data()) != nullptr, "zs-study: cannot create ",
                temp_dir_, "; set TMPDIR or give --work-dir");
    dir = temp_dir_;
  } else {
    std::filesystem::create_directories(dir);
  }
  tsv_ = dir + "/entailment.tsv";
  write_entailment_tsv(tsv_, setup.examples, setup.seed);
  train::TrainConfig config = classifier_config(setup, tsv_, 1, 1);
  config.eval_fraction = eval_fraction;
  data_ = train::load_task_data(config, setup.shape, setup.shape.context);
}

StudyData::~StudyData() {
  if (temp_dir_.empty()) return;
  std::error_code ignored;
  std::filesystem::remove_all(temp_dir_, ignored);
}

int rank_threads(int threads, int ranks) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return threads > 0 ? threads : std::max(1, cores / std::max(1, ranks));
}

double mean_after_first(const std::vector<double>& values, int64_t count) {
  const size_t end = std::min(values.size(), static_cast<size_t>(std::max<int64_t>(count, 0)));
  if (end <= 1) return values.empty() ? 0 : values.front();
  double sum = 0;
  for (size_t i = 1; i < end; ++i) sum += values[i];
  return sum / static_cast<double>(end - 1);
}

}  // namespace zs::study
