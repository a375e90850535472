#pragma once
// The results file of `remat matrix` (docs/results-schema.md): one group per
// run under /runs, append-only. Each append writes a copy of the file and
// renames it over the original, so the file on disk is always a complete,
// closed HDF5 file: a crash, kill -9 or Ctrl-C at any moment loses at most
// the run in progress.
#include <set>
#include <string>
#include <vector>

#include "harness/check.hpp"
#include "h5/h5.hpp"
#include "zoo/sizes.hpp"

namespace remat {

struct RunRecord {
  std::string model, preset, strategy, data;
  Sizes sizes;
  std::vector<double> step_times, losses;
  CheckRow check;                       // memory, equivalence, timeline of the measured step
  std::vector<std::string> param_names;
};

class ResultsFile {
 public:
  static constexpr std::int64_t kSchemaVersion = 1;
  // Opens `path` for appending, creating it if absent. A file that is not a
  // remat results file is refused (UserError) and left untouched.
  explicit ResultsFile(const std::string& path);
  static std::string run_id(const std::string& model, const std::string& strategy, const Sizes& s);
  bool has(const std::string& id) const { return runs_.count(id) > 0; }
  void append(const RunRecord& r);
  const std::string& path() const { return path_; }

 private:
  void write_run(const h5::File& f, const RunRecord& r) const;
  std::string path_;
  std::set<std::string> runs_;  // ids already recorded
};

}  // namespace remat
