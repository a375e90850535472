#pragma once
// Expert parallelism for a mixture of experts (mixtral), as DeepSpeed-MoE
// and Megatron run it: the group's N ranks split the batch's sequences (rank
// r runs sequences [r B/N, (r+1) B/N) through the layers every rank holds
// whole: embeddings, attention, norms, router, head) and the experts (rank
// q holds E / N of them, expert e on rank e / (E / N)). In each block a rank
// routes its own tokens, sends each dispatched row to the rank holding its
// expert and receives its experts' rows from every rank (an all-to-all),
// runs its experts, and returns the results (the reverse all-to-all):
// dropless, every row computed. The losses and the router's statistics are
// summed over the ranks, so the loss, its parts and the load-balancing term
// are the whole batch's on every rank. A layer every rank holds gets, on
// each rank, the gradient of that rank's sequences: the whole batch's is
// their sum (whole_store sums them in rank order).
#include <optional>
#include <string>
#include <vector>

#include "autodiff/random.hpp"

#include "autodiff/tensor.hpp"
#include "core/rank_group.hpp"
#include "zoo/model.hpp"
#include "zoo/sizes.hpp"

namespace remat::ep {

// Whether `model` is a mixture: it reads E (experts) from its sizes.
bool has_experts(const std::string& model);
// Refuses (UserError, one line) a layout `model` cannot run at these sizes:
// a dense model, N not dividing the experts or the batch, --tp beside it.
void validate(const std::string& model, const Sizes& z);
// --experts E and --top-k K (0: as they are) applied to a mixture's sizes;
// UserError for a model without experts.
void override_experts(const std::string& model, Sizes& z, int experts, int top_k);
// The experts this rank holds: [first_expert, first_expert + experts_here).
int experts_here(const Sizes& z);
int first_expert(const Sizes& z);
// The rank holding parameter `name` alone (an expert's), or -1 (every rank holds it).
int owner(const std::string& name, const Sizes& z);
// The whole model's parameter names, every expert's, in the order declared,
// where a rank holds only its experts; empty outside expert parallelism.
std::vector<std::string> whole_names(const ModelSetup& setup);
// This rank's sequences of a [B, S] int32 tensor (tokens, targets); the
// tensor itself outside expert parallelism.
Tensor my_sequences(const Tensor& batch_rows, const RankGroup& g);

// While it lives, under expert parallelism, this rank draws its own dropout
// masks (its own sequences); open it in each block, so that a strategy
// running the block again draws them again.
class OwnMasks {
 public:
  explicit OwnMasks(const RankGroup& g) {
    if (g.split()) scope_.emplace(std::uint64_t(g.rank));
  }

 private:
  std::optional<random_ops::PartScope> scope_;
};

}  // namespace remat::ep
