// The modules' arrows point one way (docs/design.md): every #include of a
// project header in a module's folder, at any depth, names a module that
// module may use. And the backend has one seam (autodiff/backend.hpp): no
// module but autodiff/ copies between memories or asks where memory is. No
// op saves inside a temporary (autodiff/saved_tensor.hpp).
// Every checker is shown able to fail: a scratch copy of the tree with one
// bad line planted deep in a folder must be caught.
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "catch.hpp"
#include "fixtures.hpp"

namespace fs = std::filesystem;

namespace {

// What each module may include besides itself (the design's arrows, down).
const std::map<std::string, std::set<std::string>>& allowed() {
  static const std::map<std::string, std::set<std::string>> rules = {
      {"core", {}},
      {"autodiff", {"core", "comm"}},
      {"h5", {"core"}},
      {"comm", {"core"}},
      {"datasets", {"core", "autodiff", "h5"}},
      {"optim", {"core", "autodiff"}},
      {"zoo", {"core", "autodiff", "datasets"}},
      {"strategies", {"core", "autodiff"}},
      {"weights", {"core", "autodiff", "h5", "datasets", "zoo"}},
      {"step", {"core", "autodiff", "comm", "datasets", "zoo", "strategies"}},
      {"finetune", {"core", "autodiff", "h5", "datasets", "zoo", "weights"}},
      {"pipeline", {"core", "autodiff", "comm", "datasets", "zoo", "strategies", "step"}},
      {"train", {"core", "autodiff", "h5", "comm", "datasets", "optim", "zoo", "strategies", "weights", "step",
                 "finetune", "pipeline"}},
      {"estimate", {"core", "autodiff", "datasets", "optim", "zoo", "strategies", "step", "pipeline"}},
      {"harness", {"core", "autodiff", "h5", "comm", "datasets", "optim", "zoo", "strategies", "weights", "step",
                   "finetune", "pipeline", "train", "estimate"}},
  };
  return rules;
}

// Calls `visit(module, "file:line", line)` for every line of every source
// file under the modules' folders in `root`.
void for_each_source_line(
    const fs::path& root,
    const std::function<void(const std::string&, const std::string&, const std::string&)>& visit) {
  for (const auto& [module, may] : allowed()) {
    const fs::path dir = root / module;
    if (!fs::exists(dir)) continue;
    for (const auto& entry : fs::recursive_directory_iterator(dir)) {
      const std::string ext = entry.path().extension().string();
      if (!entry.is_regular_file() || (ext != ".cpp" && ext != ".hpp")) continue;
      std::ifstream in(entry.path());
      std::string line;
      for (int n = 1; std::getline(in, line); ++n)
        visit(module, fs::relative(entry.path(), root).string() + ":" + std::to_string(n), line);
    }
  }
}

// "file:line: <module> includes <header>" for every include against the rules.
std::vector<std::string> layering_violations(const fs::path& root) {
  std::vector<std::string> out;
  for_each_source_line(root, [&](const std::string& module, const std::string& at, const std::string& line) {
    if (line.rfind("#include \"", 0) != 0) return;
    const std::string header = line.substr(10, line.find('"', 10) - 10);
    const auto slash = header.find('/');
    if (slash == std::string::npos) return;  // a file beside it
    const std::string target = header.substr(0, slash);
    if (target == module || !allowed().count(target) || allowed().at(module).count(target)) return;
    out.push_back(at + ": " + module + " includes " + header);
  });
  return out;
}

// What only autodiff/ may write: Kokkos copies and mirrors, questions
// about which memory a space reaches or which backend is built, and kernel
// launches (elsewhere they go through backend::for_each, so that a
// shape-only run, autodiff/shape_only.hpp, launches none).
const std::vector<std::string>& backend_words() {
  static const std::vector<std::string> words = {"deep_copy", "create_mirror", "SpaceAccessibility", "HostSpace",
                                                 "kHostMemory", "KOKKOS_ENABLE_CUDA", "CudaSpace", "Kokkos::parallel_"};
  return words;
}

// "file:line: <word>" for every use of a backend word outside autodiff/.
std::vector<std::string> backend_violations(const fs::path& root) {
  std::vector<std::string> out;
  for_each_source_line(root, [&](const std::string& module, const std::string& at, const std::string& line) {
    if (module == "autodiff") return;
    for (const auto& word : backend_words())
      if (line.find(word) != std::string::npos) out.push_back(at + ": " + word);
  });
  return out;
}

// "file:line" for every save() made in a lambda's init-capture (a temporary:
// autodiff/saved_tensor.hpp says why an op must save into named locals).
std::vector<std::string> save_in_capture_violations(const fs::path& root) {
  static const std::regex save_in_capture(R"(\[[^\]]*=\s*save\()");
  std::vector<std::string> out;
  for_each_source_line(root, [&](const std::string&, const std::string& at, const std::string& line) {
    if (std::regex_search(line, save_in_capture)) out.push_back(at);
  });
  return out;
}

// The module folders copied into a scratch tree.
void copy_modules(const fs::path& to) {
  for (const auto& [module, may] : allowed()) {
    const fs::path from = fs::path(REMAT_SOURCE_DIR) / module;
    if (fs::exists(from)) fs::copy(from, to / module, fs::copy_options::recursive);
  }
}

using Check = std::function<std::vector<std::string>(const fs::path&)>;

// What `check` finds in a scratch copy of the modules (clean before) with
// `line` appended to `file`: the checker shown able to fail.
std::vector<std::string> planted(const Check& check, const std::string& file, const std::string& line) {
  remat::test::TempDir scratch("remat-planted");
  copy_modules(scratch.path);
  REQUIRE(check(scratch.path).empty());
  const fs::path victim = scratch.path / file;
  REQUIRE(fs::exists(victim));
  { std::ofstream(victim, std::ios::app) << "\n" << line << "\n"; }
  return check(scratch.path);
}

}  // namespace

TEST_CASE("every module includes only the modules below it, at any depth of its folder", "[design][layering]") {
  const auto violations = layering_violations(REMAT_SOURCE_DIR);
  for (const auto& v : violations) INFO(v);
  CHECK(violations.empty());
  // Every module folder of the tree has its rules (a new module must say what it may use).
  for (const auto& entry : fs::directory_iterator(REMAT_SOURCE_DIR)) {
    if (!entry.is_directory() || !fs::exists(entry.path() / "CMakeLists.txt")) continue;
    const std::string name = entry.path().filename().string();
    if (name == "tests" || name == "bench" || name.rfind("build", 0) == 0) continue;
    INFO(name);
    CHECK(allowed().count(name) == 1);
  }
}

TEST_CASE("the layering check fails on a bad include planted deep in a module", "[design][layering]") {
  // strategies/planner/ is a folder inside strategies/: a strategy knowing the zoo.
  const auto violations = planted(layering_violations, "strategies/planner/solver.cpp", "#include \"zoo/model.hpp\"");
  REQUIRE(violations.size() == 1);
  CHECK(violations[0].find("strategies/planner/solver.cpp") != std::string::npos);
  CHECK(violations[0].find("strategies includes zoo/model.hpp") != std::string::npos);
}

TEST_CASE("only autodiff/ copies between memories or branches on host versus device", "[design][backend]") {
  const auto violations = backend_violations(REMAT_SOURCE_DIR);
  for (const auto& v : violations) INFO(v);
  CHECK(violations.empty());
}

TEST_CASE("the backend-seam check fails on a copy planted deep in a module", "[design][backend]") {
  const auto violations = planted(backend_violations, "strategies/planner/solver.cpp", "// Kokkos::deep_copy(a, b);");
  REQUIRE(violations.size() == 1);
  CHECK(violations[0].find("strategies/planner/solver.cpp") != std::string::npos);
  CHECK(violations[0].find("deep_copy") != std::string::npos);
}

TEST_CASE("no op saves a tensor inside a temporary (nvcc leaks a half-built one when a recomputation stops)",
          "[design][backend]") {
  const auto violations = save_in_capture_violations(REMAT_SOURCE_DIR);
  for (const auto& v : violations) INFO(v);
  CHECK(violations.empty());
  const auto found = planted(save_in_capture_violations, "autodiff/ops/softmax.cpp",
                             "  rec.finish({&out}, [sy = save(out), M](BackwardContext&) {});");
  REQUIRE(found.size() == 1);
  CHECK(found[0].find("autodiff/ops/softmax.cpp") != std::string::npos);
}
