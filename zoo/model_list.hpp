#pragma once
// The zoo, one line per model: X(name) for a file zoo/<name>.cpp that
// defines `void register_<name>(ModelRegistry&)`. Adding a model is that
// file and one line here (docs/adding-a-model.md).
#define REMAT_MODELS(X) \
  X(gpt2)               \
  X(llama)              \
  X(bert)               \
  X(revformer)          \
  X(parallel)           \
  X(mixtral)            \
  X(encdec)             \
  /* end of the list */
