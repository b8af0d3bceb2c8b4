// What the two studies share: the classifier run's TrainConfig, the synthetic data set on disk
// and loaded, and small figure helpers. Internal to study/.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "study/sync_study.h"
#include "train/config.h"
#include "train/tasks.h"

namespace zs::study {

// zs-train's configuration of a classifier run on `tsv` (the "classify" task), `ranks` rank
// threads of `batch` examples each: the setup's shape, seed, lr and threads; no logging, no
// progress line.
train::TrainConfig classifier_config(const ClassifierSetup& setup, const std::string& tsv,
                                     int ranks, int64_t batch);

// The synthetic entailment TSV written into the setup's work directory (or a temporary one,
// removed with this object) and loaded as the classify task's data, with the last
// `eval_fraction` held out. One per study; its rank threads share task_data() read-only.
class StudyData {
 public:
  StudyData(const ClassifierSetup& setup, double eval_fraction);
  ~StudyData();
  StudyData(const StudyData&) = delete;
  StudyData& operator=(const StudyData&) = delete;
  const std::string& tsv() const { return tsv_; }
  const train::TaskData& task_data() const { return *data_; }

 private:
  std::string temp_dir_;  // "" when the setup named the directory
  std::string tsv_;
  std::unique_ptr<train::TaskData> data_;
};

// Compute threads per rank: `threads` when > 0, else the cores shared by `ranks` ranks.
int rank_threads(int threads, int ranks);
// The mean of values[1 .. count) (the first is warm-up); values[0] when that range is empty.
double mean_after_first(const std::vector<double>& values, int64_t count);

}  // namespace zs::study
