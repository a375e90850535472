#include "weights/weights_schema.hpp"

namespace remat::weights_file {

#define REMAT_WEIGHTS_ATTR_DOC(id, name, T, unit, meaning) root::id.doc(),
#define REMAT_WEIGHTS_DATASET_DOC(id, name, T, shape, unit, meaning) data::id.doc(),

std::vector<h5::FieldDoc> root_docs() { return {REMAT_WEIGHTS_ROOT(REMAT_WEIGHTS_ATTR_DOC)}; }
#define REMAT_WEIGHTS_PARAM_ATTR_DOC(id, name, T, unit, meaning) param_attr::id.doc(),
std::vector<h5::FieldDoc> param_attribute_docs() { return {REMAT_WEIGHTS_PARAM_ATTRS(REMAT_WEIGHTS_PARAM_ATTR_DOC)}; }
std::vector<h5::FieldDoc> dataset_docs() { return {REMAT_WEIGHTS_DATASETS(REMAT_WEIGHTS_DATASET_DOC)}; }

}  // namespace remat::weights_file
