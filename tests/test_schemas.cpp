// The file schemas: what a writer puts in a record is what the schema
// declares, and the docs' tables are the schema's own (made from it). With
// REMAT_UPDATE_DOCS=1 in the environment, a table that differs is rewritten
// in the docs instead of failing: how a new field's row gets there.
#include <hdf5.h>

#include <cstdlib>
#include <regex>
#include <fstream>
#include <set>
#include <sstream>

#include "catch.hpp"
#include "fixtures.hpp"
#include "estimate/devices.hpp"
#include "harness/estimate_table.hpp"
#include "harness/io/results_file.hpp"
#include "harness/io/results_schema.hpp"
#include "train/run_schema.hpp"
#include "train/trainer.hpp"
#include "weights/weights_file.hpp"
#include "weights/weights_schema.hpp"
#include "zoo/model.hpp"

using namespace remat;

namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The table between "<!-- schema: NAME -->" and "<!-- end schema -->" in a
// doc equals `table` (or is made to, under REMAT_UPDATE_DOCS).
void check_doc_table(const std::string& doc, const std::string& name, const std::string& table) {
  const std::string path = std::string(REMAT_SOURCE_DIR) + "/" + doc;
  std::string text = read_text(path);
  const std::string open = "<!-- schema: " + name + " -->\n", close = "<!-- end schema -->";
  const auto begin = text.find(open);
  INFO(doc + " has no '" + open.substr(0, open.size() - 1) + "' block");
  REQUIRE(begin != std::string::npos);
  const auto from = begin + open.size(), to = text.find(close, from);
  REQUIRE(to != std::string::npos);
  if (text.substr(from, to - from) == table) return;
  if (const char* update = std::getenv("REMAT_UPDATE_DOCS"); update && std::string(update) == "1") {
    text.replace(from, to - from, table);
    std::ofstream(path) << text;
    return;
  }
  INFO("the schema's table (REMAT_UPDATE_DOCS=1 writes it into " + doc + "):\n" + table);
  CHECK(text.substr(from, to - from) == table);
}

// Every attribute name on `object`.
std::set<std::string> attribute_names(const h5::File& f, const std::string& object) {
  h5::Handle o(H5Oopen(f.id(), object.c_str(), H5P_DEFAULT), H5Oclose);
  H5O_info_t info;
#if H5_VERSION_GE(1, 12, 0)
  H5Oget_info3(o.id(), &info, H5O_INFO_NUM_ATTRS);
#else
  H5Oget_info(o.id(), &info);
#endif
  std::set<std::string> names;
  for (hsize_t i = 0; i < info.num_attrs; ++i) {
    char name[256] = {};
    H5Aget_name_by_idx(o.id(), ".", H5_INDEX_NAME, H5_ITER_INC, i, name, sizeof name, H5P_DEFAULT);
    names.insert(name);
  }
  return names;
}

// Whether `name` is a declared field's name or a member of a declared family.
bool declared(const std::vector<h5::FieldDoc>& docs, const std::string& name) {
  for (const auto& d : docs) {
    const auto open = d.name.find('<');
    if (open == std::string::npos ? name == d.name : name.compare(0, open, d.name, 0, open) == 0) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("the docs' tables are the schemas'", "[schema]") {
  check_doc_table("docs/results-schema.md", "results.root", h5::markdown_table(results::root_docs()));
  check_doc_table("docs/results-schema.md", "results.run.attributes", h5::markdown_table(results::run_attribute_docs()));
  check_doc_table("docs/results-schema.md", "results.run.datasets", h5::markdown_table(results::run_dataset_docs()));
  check_doc_table("docs/training.md", "run.root", h5::markdown_table(run_file::root_docs()));
  check_doc_table("docs/training.md", "run.settings", h5::markdown_table(run_file::setting_docs()));
  check_doc_table("docs/training.md", "run.datasets", h5::markdown_table(run_file::dataset_docs()));
  check_doc_table("docs/models.md", "weights.root", h5::markdown_table(weights_file::root_docs()));
  check_doc_table("docs/models.md", "weights.datasets", h5::markdown_table(weights_file::dataset_docs()));
  check_doc_table("docs/models.md", "weights.param", h5::markdown_table(weights_file::param_attribute_docs()));
}

TEST_CASE("a golden file holds what the weight file's schema declares", "[schema]") {
  test::TempDir dir("remat-schema");
  const ModelSetup setup{"mixtral", "tiny", preset_sizes("tiny")};
  const auto model = models().find(setup.model).make(setup.sizes);
  ParamStore params(model->params(), DType::f32);
  initialize(params, 1, setup.sizes.L);
  const Batch batch = random_batch(setup.sizes.B, setup.sizes.S, setup.sizes.V, 1);
  write_golden(dir.file("g.h5"), setup, params, batch, 1.5);
  const h5::File f = h5::File::open(dir.file("g.h5"));
  for (const auto& name : attribute_names(f, "/")) {
    INFO("written but not declared: " << name);
    CHECK(declared(weights_file::root_docs(), name));
  }
  for (const auto& d : weights_file::dataset_docs()) {
    INFO("declared dataset not written: " << d.name);
    CHECK(h5::exists(f, "/" + h5::member(d.name, d.name.find('<') == std::string::npos ? "" : params.names()[0])));
  }
}

TEST_CASE("a results file's run holds what its schema declares, and every declared attribute", "[schema]") {
  RunRecord r;
  r.key.model = "mixtral";  // the model with every optional field: experts, rotary base, loss parts, statistics
  r.key.preset = "tiny";
  r.key.strategy = "full";
  r.key.sizes = preset_sizes("tiny");
  r.key.sizes.ep = RankGroup::expert(2);  // split over ranks: the layout
  r.key.finetune = "lora=8";
  r.key.finetune_label = "lora 8";
  r.key.weights = "w.h5";
  r.step_times = {0.5, 0.25};
  r.time_vs_full = {1, 0};  // timed beside full (itself)
  r.losses = {1, 2};
  r.param_names = {"a"};
  r.frozen = {"b"};
  r.check.vs_full.abs_by_param = {0};
  r.check.vs_full.rel_by_param = {0};
  r.check.step.loss_parts = {{"ce", 1.0}, {"aux", 0.5}};
  r.check.step.stats = {{"expert_load", Shape{1, 2}, {3, 4}}};
  r.check.step.timeline = {{0.1, 16, "forward h.0"}};
  const h5::File f = h5::File::from_image(ResultsFile::run_image(r), "run image");
  const std::string g = "/runs/" + r.key.name();
  const auto docs = results::run_attribute_docs();
  const auto written = attribute_names(f, g);
  for (const auto& name : written) {
    INFO("written but not declared: " << name);
    CHECK(declared(docs, name));
  }
  for (const auto& d : docs) {
    INFO("declared but not written: " << d.name);
    CHECK((d.name.find('<') != std::string::npos || written.count(d.name) == 1));
  }
  for (const auto& d : results::run_dataset_docs()) {
    if (d.name.find('<') != std::string::npos) continue;
    INFO("declared dataset not written: " << d.name);
    CHECK(h5::exists(f, g + "/" + d.name));
  }
  CHECK(h5::exists(f, g + "/" + results::stat.at("expert_load")));
  CHECK(written.count(results::loss_part.at("ce")) == 1);
  CHECK(attribute_names(f, "/") == std::set<std::string>{"remat_results"});  // `created` is the file's, made on append
}

TEST_CASE("a training run file holds what its schema declares", "[schema][train]") {
  test::TempDir dir("remat-schema");
  TrainConfig c;
  c.setup = {"mixtral", "tiny", preset_sizes("tiny")};  // loss parts and statistics too
  c.steps = 2;
  c.eval_every = 1;
  c.out = dir.file("run.h5");
  train(c);
  const h5::File f = h5::File::open(c.out);
  auto docs = run_file::root_docs();
  for (const auto& d : run_file::setting_docs()) docs.push_back(d);
  // The model's attributes are a weight file's (docs/models.md), declared there.
  const auto model_layout = weights_file::root_docs();
  const auto written = attribute_names(f, "/");
  for (const auto& name : written) {
    INFO("written but not declared: " << name);
    CHECK((declared(docs, name) || declared(model_layout, name)));
  }
  for (const auto& d : docs) {
    INFO("declared but not written: " << d.name);
    const bool optional = d.name.find('<') != std::string::npos || d.name == run_file::setting::init.name;
    CHECK((optional || written.count(d.name) == 1));
  }
  for (const auto& d : run_file::dataset_docs()) {
    if (d.name.find('<') != std::string::npos) continue;
    if (d.name == run_file::data::pipeline_passes.name) continue;  // under --pp only (tests/cli/pp_test.sh reads it)
    INFO("declared dataset not written: " << d.name);
    CHECK(h5::exists(f, "/" + d.name));
  }
  CHECK(h5::exists(f, "/" + run_file::data::loss_part.at("aux")));
  CHECK(h5::exists(f, "/" + run_file::data::stat.at("expert_load")));
  CHECK(h5::exists(f, "/" + run_file::data::optimizer_state.at("m")));
  CHECK(written.count(run_file::root::rank_memory.at("gathered_peak")) == 1);
}

namespace {

// The fields the table under `heading` in docs/results-schema.md lists: each
// row's first cell names them in backticks.
std::set<std::string> documented_fields(const std::string& heading) {
  const std::string text = read_text(std::string(REMAT_SOURCE_DIR) + "/docs/results-schema.md");
  const auto section = text.find(heading);
  REQUIRE(section != std::string::npos);
  const std::string rest = text.substr(section);
  std::set<std::string> documented;
  std::istringstream lines(rest.substr(rest.find("| field |")));
  for (std::string line; std::getline(lines, line) && line.rfind("|", 0) == 0;) {
    const std::string first = line.substr(1, line.find('|', 1) - 1);
    const std::regex name("`([a-z_]+)`");
    for (std::sregex_iterator it(first.begin(), first.end(), name), end; it != end; ++it) documented.insert((*it)[1]);
  }
  return documented;
}

}  // namespace

TEST_CASE("estimate --json's fields are those docs/results-schema.md lists", "[schema][estimate]") {
  // Every column a point's table can have: a named device (fits, its price of a step) and sharding.
  EstimateRequest r;
  r.base = {"gpt2", "tiny", preset_sizes("tiny")};
  r.device = find_device("h100-80gb");
  r.ranks = 2;
  r.shard_params = true;
  EstimatePoint p;
  p.setup = r.base;
  p.rows.push_back({"full"});
  std::set<std::string> keys;
  for (const auto& c : point_table(r, p, 30).columns) keys.insert(c.key);
  CHECK(keys == documented_fields("## `remat estimate --json`"));
  // Under --pp: a row per strategy and stage.
  std::set<std::string> stage_keys;
  for (const auto& c : stage_table(r, p.setup, {}, 30).columns) stage_keys.insert(c.key);
  CHECK(stage_keys == documented_fields("## `remat estimate --pp ... --json`"));
}
