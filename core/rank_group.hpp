#pragma once
// A group of ranks that split one piece of work, and this process's place in
// it: tensor parallelism's group splits every split layer of a model into
// `size` parts, of which this rank holds part `rank`; with `sequence`
// (sequence parallelism) what runs between the split layers (norms, dropout,
// residual adds) holds this rank's part of the sequence. Context and expert
// parallelism's groups split the sequence and the experts; `axis` says which
// of the job's rank groups (comm/) a group's collectives run over, so that a
// tensor split and a context or expert split compose.
namespace remat {

enum class Axis { tensor, context, expert };

struct RankGroup {
  int size = 1;
  int rank = 0;
  bool sequence = false;
  Axis axis = Axis::tensor;
  bool split() const { return size > 1; }

  static RankGroup tensor(int size = 1, int rank = 0, bool sequence = false) {
    return {size, rank, sequence, Axis::tensor};
  }
  static RankGroup context(int size = 1, int rank = 0) { return {size, rank, false, Axis::context}; }
  static RankGroup expert(int size = 1, int rank = 0) { return {size, rank, false, Axis::expert}; }
};

// Context parallelism's split of the sequence (zig-zag, as Megatron's CP):
// 2 size chunks, rank r holding chunks r and 2 size - 1 - r one after the
// other, so that every rank has as much causal attention work. The whole
// sequence's position of row t of this rank's `local` rows; with one rank, t.
inline long long zigzag_position(const RankGroup& g, long long t, long long local) {
  const long long chunk = local / 2, first = t < chunk;
  return (first ? g.rank : 2LL * g.size - 1 - g.rank) * chunk + (first ? t : t - chunk);
}

}  // namespace remat
