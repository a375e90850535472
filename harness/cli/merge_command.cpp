// remat merge: joins results files made apart (the shards of a job array,
// `remat matrix --shard i/n`) into one, each run once.
#include <cstdio>
#include <map>
#include <memory>

#include "core/error.hpp"
#include "harness/cli/commands.hpp"
#include "harness/io/output_guard.hpp"
#include "harness/io/results_file.hpp"
#include "harness/io/results_schema.hpp"

namespace remat::cli {
namespace {

struct MergeOptions {
  std::vector<std::string> inputs;
  std::string out;
  bool force = false;
};

// Every input a results file of this schema, each run in one of them only:
// checked whole before anything is written.
std::vector<h5::File> open_parts(const MergeOptions& o) {
  std::vector<h5::File> files;
  std::map<std::string, std::string> owner;  // run key -> the file holding it
  std::int64_t version = -1;
  std::string first;
  for (const auto& path : o.inputs) {
    if (file_kind(path) != FileKind::results)
      throw UserError(path + ": is " + file_kind_name(file_kind(path)) + ", not a remat results file");
    h5::File f = h5::File::open(path);
    check_results_schema(f, false);
    const std::int64_t v = *results::root::version.read(f, "/");
    if (version >= 0 && v != version)
      throw UserError(path + ": results schema version " + std::to_string(v) + ", but " + first + " has version " +
                      std::to_string(version) + "; merge files of one version");
    if (v != ResultsFile::kSchemaVersion)
      throw UserError(path + ": results schema version " + std::to_string(v) + ", this remat merges version " +
                      std::to_string(ResultsFile::kSchemaVersion) + " (make the runs again with this remat)");
    version = v;
    if (first.empty()) first = path;
    for (const auto& name : h5::list(f, results::kRunsGroup)) {
      const std::string key = results::key.read(f, results::run_group(name)).value_or("");
      if (key.empty()) throw UserError(path + ": run '" + name + "' has no key");
      const auto [it, fresh] = owner.emplace(key, path);
      if (!fresh) throw UserError(path + " and " + it->second + " both hold run '" + name + "'; merge each run once");
    }
    files.push_back(std::move(f));
  }
  ResultsFile out(o.out);
  for (const auto& [key, path] : owner)
    if (out.has_key(key)) throw UserError(o.out + " already holds a run of " + path + "; merge each run once");
  return files;
}

void run_merge(const MergeOptions& o) {
  check_output(o.out, FileKind::results, o.inputs, o.force);
  const std::vector<h5::File> parts = open_parts(o);
  ResultsFile out(o.out);
  const std::size_t added = out.append_runs(parts);
  std::printf("merged %zu runs from %zu files into %s\n", added, parts.size(), o.out.c_str());
}

}  // namespace

void setup_merge(CLI::App& app) {
  auto o = std::make_shared<MergeOptions>();
  auto* cmd = app.add_subcommand("merge", "Join results files (the shards of `remat matrix --shard i/n`) into one");
  cmd->add_option("inputs", o->inputs, "Results files to join")->required()->expected(1, -1);
  cmd->add_option("--out", o->out, "The joined results file (appended to, if it exists)")->required();
  cmd->add_flag("--force", o->force, "Replace --out even if it holds another kind of file");
  cmd->callback([o] { run_merge(*o); });
}

namespace {
const RegisterCommand register_merge(120, setup_merge);
}  // namespace

}  // namespace remat::cli
