#include "harness/io/results_schema.hpp"

namespace remat::results {

#define REMAT_ATTR_DOC(id, name, T, unit, meaning) id.doc(),
#define REMAT_DATASET_DOC(id, name, T, shape, unit, meaning) id.doc(),

std::vector<h5::FieldDoc> root_docs() {
  using namespace root;
  return {REMAT_RESULTS_ROOT(REMAT_ATTR_DOC)};
}
std::vector<h5::FieldDoc> run_attribute_docs() { return {REMAT_RESULTS_RUN_ATTRIBUTES(REMAT_ATTR_DOC)}; }
std::vector<h5::FieldDoc> run_dataset_docs() { return {REMAT_RESULTS_RUN_DATASETS(REMAT_DATASET_DOC)}; }

}  // namespace remat::results
