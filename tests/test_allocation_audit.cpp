// The allocation audit: every byte a step allocates, for every model and
// strategy and both attention kernels, is an op's output (an activation), a
// gradient, or a workspace with a name, and nothing but the gradients
// outlives the step. Allocations are counted by label through the memory
// tracker's census and ledger (Kokkos Tools sees every View).
#include <set>

#include "autodiff/memory_tracker.hpp"
#include "catch.hpp"
#include "helpers.hpp"
#include "step/step.hpp"
#include "strategies/registry.hpp"
#include "zoo/model.hpp"

using namespace remat;

namespace {

// Op outputs: the activations (and per-row statistics) ops produce.
const std::set<std::string> kActivations = {
    "add",          "attention",         "attention_lse", "attention_probs", "cross_entropy_lse",
    "dropout",      "embedding",         "gelu_erf",      "gelu_tanh",       "silu",
    "layer_norm",   "layer_norm_mean",   "layer_norm_rstd", "linear",        "loss",
    "positions",    "rms_norm",          "rms_norm_rstd", "rotary",          "scale",
    "swiglu",       "softmax",           "routing",       "routing_weights", "dispatch",
    "grouped_linear", "combine",         "sum_rows",      "expert_load",     "router_sums",
    "offloaded"};  // saved activations moved to the offload pool
// Scratch an op or a strategy needs while it runs, freed when it returns;
// the second line a device's (chunked column sums, the token-sorted
// embedding gradient).
const std::set<std::string> kWorkspaces = {"attention_fused_workspace", "attention_dprobs", "attention_dropped",
                                           "rotary_table", "offload_fetch",
                                           "column_sums_partial", "layer_norm_backward_b_partial",
                                           "layer_norm_backward_w_partial", "rms_norm_backward_w_partial",
                                           "embedding_backward_keys", "embedding_backward_start"};

bool is_gradient(const std::string& label) {
  return label == "grad" || label == "grad_loss" || label.rfind("grad.", 0) == 0;  // grad.<parameter>: once
}

// Kokkos' own: its sort's bins and a device's reduction scratch (made once).
bool is_kokkos(const std::string& label) { return label.rfind("Kokkos::", 0) == 0; }

}  // namespace

TEST_CASE("a step allocates only activations, gradients and named workspaces, and leaves none but gradients",
          "[memory][audit]") {
  auto& tracker = MemoryTracker::instance();
  for (const auto kernel : {ops::AttentionKernel::fused, ops::AttentionKernel::plain}) {
    for (const auto& m : models().all()) {
      Sizes z = preset_sizes("tiny");
      z.dropout = 0.1;
      const auto model = m.make(z);
      ParamStore params(model->params(), DType::f32);
      initialize(params, 1, z.L);
      const Batch batch = random_batch(z.B, z.S, z.V, 1);
      for (const auto& spec : all_strategies(ModelTraits{m.reversible})) {
        auto strategy = make_strategy(spec);
        tracker.start_census();
        tracker.start_ledger();
        forward_backward(*model, params, batch, {strategy.get(), 1, 0, false, kernel});
        tracker.stop_census();
        // (On a GPU, nvcc's leak of half-built temporaries kept bert's
        // recomputed LayerNorm inputs: autodiff/saved_tensor.hpp.)
        for (const auto& a : tracker.ledger()) {
          INFO(m.name << " " << spec << ": left behind in " << a.pool << ": '" << a.label << "', " << a.bytes
                      << " bytes, made in " << a.phase);
          CHECK(is_gradient(a.label));
        }
        tracker.stop_ledger();
        for (const auto& [label, l] : tracker.census()) {
          INFO(m.name << " " << spec << ": " << l.allocations << " allocations labelled '" << label << "', "
                      << l.bytes << " bytes");
          CHECK((kActivations.count(label) || kWorkspaces.count(label) || is_gradient(label) || is_kokkos(label)));
        }
      }
    }
  }
}
