#pragma once
// The results file of `remat matrix` (docs/results-schema.md): one group per
// run under /runs, append-only. Each append reads the file into memory, adds
// the run and replaces the file atomically, under a lock that serialises
// concurrent writers: the file on disk is always complete, so a crash,
// kill -9, Ctrl-C or a full disk at any moment loses at most the run in
// progress.
#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "h5/h5.hpp"
#include "harness/check.hpp"
#include "step/step.hpp"
#include "zoo/sizes.hpp"

namespace remat {

// Everything that changes what a run measures. --resume skips a run only if
// a recorded run has the same key: another seed, data source, attention
// kernel, precision, dropout or memory limit is another run.
struct RunKey {
  std::string model, preset, strategy, data = "random";
  RunSettings run;  // seed, attention kernel, precision (in the key and the name only when not fp32: files from before it read the same)
  Sizes sizes;
  std::int64_t mem_limit = 0;  // bytes; 0: none
  std::string finetune;        // FineTuning::key(): "" for none
  std::string finetune_label;  // FineTuning::label(), for names and tables
  std::string weights;         // the weights it ran on ("": initialised from the seed)
  // Canonical text, stored as the run's `key` attribute.
  std::string text() const;
  // The group name: readable, "<model> <strategy> L<L> S<S> B<B>".
  std::string name() const;
  // The split over ranks it ran under, as in `text`: "tp=2;sp=1", "ep=2",
  // "cp=2"; "" for one rank's whole model.
  std::string layout() const;
};

struct RunRecord {
  RunKey key;
  std::vector<double> step_times, losses;
  // Its step time over full's in the same round (a matrix times a shape's
  // strategies interleaved, harness/matrix_timing.hpp): the per-round
  // ratios' median and spread; median 0 where full was not timed beside it.
  Spread time_vs_full;
  bool timing_capped = false;  // the rounds stopped at --max-steps, before --spread was reached
  CheckRow check;                       // memory, equivalence, timeline of the measured step
  std::vector<std::string> param_names;
  std::vector<std::string> frozen;  // the parameters that had no gradient (fine-tuning)
};

class ResultsFile {
 public:
  static constexpr std::int64_t kSchemaVersion = 2;
  // Reads the runs recorded in `path`, if it exists. A file that is not a
  // remat results file, or one of a schema this build cannot append to, is
  // refused (UserError) and left untouched. Creates nothing: the file is
  // made by the first append.
  explicit ResultsFile(std::string path);
  bool has(const RunKey& key) const { return has_key(key.text()); }
  bool has_key(const std::string& key_text) const { return keys_.count(key_text) > 0; }
  // Appends the run; false (and nothing written) if another process
  // recorded the same key since.
  bool append(const RunRecord& r);
  // Appends the runs of `sources` (results files, or run images) whose keys
  // are not here yet; returns how many. All in one atomic replacement.
  std::size_t append_runs(const std::vector<h5::File>& sources);
  // A results file in memory holding `r` alone: how a run travels between
  // processes (an MPI rank to the rank that writes).
  static std::vector<char> run_image(const RunRecord& r);
  const std::string& path() const { return path_; }

 private:
  struct Entry {
    std::string key, name;
    std::function<void(const h5::File&, const std::string& group)> write;
  };
  std::size_t add(const std::vector<Entry>& entries);
  void read_keys(const h5::File& f);
  std::string path_;
  std::set<std::string> keys_;
};

// The schema versions `remat report` reads, and the one check for them.
void check_results_schema(const h5::File& f, bool for_append);

}  // namespace remat
