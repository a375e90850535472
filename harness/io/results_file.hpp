#pragma once
// The results file of `remat matrix` (docs/results-schema.md): one group per
// run under /runs, append-only, flushed after every run so that a crash or
// an interrupt never loses a finished one.
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
  bool has(const std::string& id) const;
  void append(const RunRecord& r);  // then flushes
  const std::string& path() const { return file_.path(); }

 private:
  static h5::File open_or_create(const std::string& path);
  h5::File file_;
};

}  // namespace remat
