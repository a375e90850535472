#pragma once
// A group of ranks that split one piece of work, and this process's place in
// it: tensor parallelism's group splits every split layer of a model into
// `size` parts, of which this rank holds part `rank`; with `sequence`
// (sequence parallelism) what runs between the split layers (norms, dropout,
// residual adds) holds this rank's part of the sequence.
namespace remat {

struct RankGroup {
  int size = 1;
  int rank = 0;
  bool sequence = false;
  bool split() const { return size > 1; }
};

}  // namespace remat
