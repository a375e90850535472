#include "train/run_schema.hpp"

namespace remat::run_file {

std::string short_name(const h5::Attr<std::string>& setting) {
  const auto dot = setting.name.find('.');
  return std::string(setting.name.substr(dot + 1));
}

#define REMAT_RUN_ATTR_DOC(id, name, T, unit, meaning) root::id.doc(),
#define REMAT_RUN_SETTING_DOC(id, name, meaning) setting::id.doc(),
#define REMAT_RUN_DATASET_DOC(id, name, T, shape, unit, meaning) data::id.doc(),

std::vector<h5::FieldDoc> root_docs() { return {REMAT_RUN_ROOT(REMAT_RUN_ATTR_DOC)}; }
std::vector<h5::FieldDoc> setting_docs() { return {REMAT_RUN_SETTINGS(REMAT_RUN_SETTING_DOC)}; }
std::vector<h5::FieldDoc> dataset_docs() { return {REMAT_RUN_DATASETS(REMAT_RUN_DATASET_DOC)}; }

}  // namespace remat::run_file
