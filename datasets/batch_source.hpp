#pragma once
// Where batches come from, behind one interface used by `matrix`, `check`
// and `grads` (--data SPEC):
//   random            seeded uniform tokens and targets
//   copy, reverse     algorithmic tasks: a random first half, then the same
//                     half copied or reversed; targets are the next token
//   text:PATH         byte-level tokens of any file, consecutive windows
//   h5:PATH[:DATASET] an integer token array in an HDF5 file (default
//                     dataset "tokens"), consecutive windows
#include <cstdint>
#include <memory>
#include <string>

#include "datasets/batch.hpp"

namespace remat {

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // The next batch of tokens[B, S] and targets[B, S] (deterministic: the
  // same sequence of batches for the same spec and seed).
  virtual Batch next() = 0;
  virtual std::string describe() const = 0;
  // Where the source is: the batches taken so far. seek(n) makes the next
  // batch the n-th, so a resumed training run reads what it would have.
  virtual std::uint64_t position() const = 0;
  virtual void seek(std::uint64_t batches) = 0;
  // Batches in one pass over a finite source (text, token files), after
  // which it wraps round; 0 for a generated source, which never repeats.
  virtual std::uint64_t epoch_batches() const { return 0; }
};

// Which part of the data a source reads: training uses all but a held-out
// tail (the last tenth of a file's tokens; for generated data, another seed),
// from which validation batches come.
enum class DataSplit { all, train, validation };

// Throws UserError for a bad spec, a missing or short file, or tokens >= V.
std::unique_ptr<BatchSource> make_batch_source(const std::string& spec, std::int64_t B, std::int64_t S,
                                               std::int64_t V, std::uint64_t seed, DataSplit split = DataSplit::all);

// The file a spec reads ("" for random, copy, reverse): an input no output
// may overwrite.
std::string batch_source_file(const std::string& spec);

}  // namespace remat
