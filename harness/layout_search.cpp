#include "harness/layout_search.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "core/text.hpp"
#include "estimate/device_model.hpp"
#include "estimate/pipeline_stages.hpp"
#include "harness/estimate_grid.hpp"
#include "pipeline/schedule.hpp"
#include "pipeline/stage_runner.hpp"
#include "zoo/context_parallel.hpp"
#include "zoo/tensor_parallel.hpp"

namespace remat {

std::string TrainingLayout::flags() const {
  std::string s = "--batch 1 --tp " + std::to_string(tp) + (sp ? " --sp" : "") + " --cp " + std::to_string(cp) + " --ranks " +
                  std::to_string(dp) + (shard ? " --shard-params" : "");
  if (pp > 1) {
    s += " --pp " + std::to_string(pp) + " --micro-batches " + std::to_string(micro_batches);
    s += " --schedule " + schedule + (stage_layers.empty() ? "" : " --stage-layers " + stage_list());
  }
  return s;
}

std::string TrainingLayout::stage_list() const {
  std::string s;
  for (std::size_t i = 0; i < stage_layers.size(); ++i) s += (i ? "," : "") + std::to_string(stage_layers[i]);
  return s;
}

double LayoutVerdict::tokens_per_second() const { return step_seconds > 0 ? double(global_tokens) / step_seconds : 0; }

std::vector<int> balanced_stage_layers(int L, int stages) {
  const int base = L / stages, extra = L % stages, first = (stages - extra) / 2;
  std::vector<int> layers(std::size_t(stages), base);
  for (int s = first; s < first + extra; ++s) ++layers[std::size_t(s)];
  return layers;
}

namespace {

// The seconds a ring all-reduce of `bytes` over `ranks` takes on the peer
// link: each rank sends and receives 2 (N - 1) / N of them.
double exchange_seconds(const Device& d, std::int64_t bytes, int ranks) {
  if (ranks < 2 || d.peer_link <= 0) return 0;
  return 2.0 * double(ranks - 1) / double(ranks) * double(bytes) / (d.peer_link * DeviceModel{}.link_efficiency);
}

// Why a layout cannot be ("" if it can): the model's own refusals, as
// `estimate` would give them.
std::string refusal(const ModelSetup& setup, int pp) {
  try {
    tp::validate(setup.model, setup.sizes);
    cp::validate(setup.model, setup.sizes);
    if (pp > 1) pipeline::require_stages(setup.model, setup.sizes);
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

// Whether ZeRO-3 over the replicas is searched beside plain data
// parallelism for this layout: where remat estimates it (no reversible
// blocks; under pp each stage's state sharded over the replicas) and the
// device model prices it (no context group's own sum).
bool zero3_searched(const std::string& model, int cp, int dp) {
  return cp == 1 && dp > 1 && !models().find(model).reversible;
}

// A layout's name in the list of those not costed.
std::string name_of(int tp, bool sp, int cp, int pp, int dp) {
  return "tp " + std::to_string(tp) + (sp ? " sp" : "") + ", cp " + std::to_string(cp) + ", pp " + std::to_string(pp) +
         ", dp " + std::to_string(dp);
}

// The per-strategy estimates of a layout's stages (one stage without pp)
// for `micro_batches` micro-batches of one sequence under its schedule.
std::vector<PipelineEstimate> stage_estimates(const LayoutRequest& r, const ModelSetup& setup, const TrainingLayout& layout,
                                              int micro_batches) {
  EstimateRequest p = r.point;
  p.pipe.stages = layout.pp;
  p.pipe.micro_batches = micro_batches;
  p.pipe.schedule = layout.schedule;
  p.pipe.stage_layers = layout.stage_list();
  p.ranks = layout.dp;
  p.shard_params = layout.shard;
  return remat::stage_estimates(p, setup);  // (the request's fine-tuning and sharding too)
}

// Without stages: `estimate`'s point (a rank's step and state, as
// training's steps measure them) for the layout's strategies; `sharded`:
// with the replicas' state sharded (--shard-params).
EstimatePoint flat_point(const LayoutRequest& r, const ModelSetup& setup, const TrainingLayout& layout, bool sharded) {
  EstimateRequest e = r.point;
  e.base = setup;
  e.ranks = layout.dp;
  e.shard_params = sharded;
  return estimate_point(e, setup, {});
}

// Whether a verdict's hungriest rank fits the device and its offload pool
// the host; why not where it does not.
void judge(LayoutVerdict& v, std::int64_t offload, const Device& device) {
  const std::int64_t over = v.largest_total - device.usable();
  const std::int64_t host_over = device.host_memory_bytes > 0 ? offload - device.host_memory_bytes : 0;
  v.fits = over <= 0 && host_over <= 0;
  if (over > 0)
    v.why_not = "stage " + std::to_string(v.hungriest_stage) + " over by " + human_bytes(double(over));
  else if (host_over > 0)
    v.why_not = "offload pool over the host's memory by " + human_bytes(double(host_over));
}

// One strategy's verdict from its stages' estimates at M1 and M2
// micro-batches (cost_layout), extended to the layout's M: the hungriest
// stage, the pipeline's step and its bubble (no exchange yet).
LayoutVerdict pipeline_verdict(const TrainingLayout& layout, const PipelineEstimate& first,
                               const PipelineEstimate& second, int M1, int M2, std::int64_t& gradients,
                               std::int64_t& offload) {
  const int M = layout.micro_batches;
  LayoutVerdict v;
  v.layout = layout;
  gradients = offload = 0;
  for (const StageEstimate& s : first.stages) {
    if (s.total() > v.largest_total) v.largest_total = s.total(), v.hungriest_stage = s.rank;
    gradients = std::max(gradients, s.gradient_bytes);
    offload = std::max(offload, s.offload_peak);
  }
  const double per_micro_batch = M > M1 ? (second.modelled_step_seconds - first.modelled_step_seconds) / double(M2 - M1) : 0;
  const double pipeline_step = first.modelled_step_seconds + double(M - M1) * per_micro_batch;
  double busy = 0;
  for (std::size_t s = 0; s < first.stages.size(); ++s) {
    const double b1 = first.stages[s].modelled_busy_seconds, b2 = second.stages[s].modelled_busy_seconds;
    busy += b1 + (M > M1 ? double(M - M1) * (b2 - b1) / double(M2 - M1) : 0);
  }
  v.step_seconds = pipeline_step;
  v.bubble = layout.pp > 1 && pipeline_step > 0 ? 1 - busy / (double(layout.pp) * pipeline_step) : 0;
  return v;
}

// Every strategy of one layout. Each stage's memory comes from its own
// passes (without stages, `estimate`'s point): 1F1B holds at most pp micro-batches at once, so a step of
// M1 = min(M, pp) of them gives every stage's peak (zb-h1 too: its W passes
// run at most pp - 1 behind; interleaved:2, whose
// warm-up runs up to 3 pp - 1 chunks, M1 = min(M, 2 pp), a multiple of pp
// as it requires). The step is priced at M1 and at M1 + 2 micro-batches
// (interleaved: M1 + pp; both replayed under the schedule), and
// extended to M by the difference per micro-batch: once the pipeline is
// full each one adds the same (what a step does once, such as the 16-bit
// weight copy, is not multiplied). Then the data-parallel exchange: the
// gradients' all-reduce, or sharded (ZeRO-3, as FSDP by default) each
// micro-batch's gathers and reduce-scatters, which a sharded stage's passes
// (or `estimate`'s sharded point, M times) price beside its compute.
void cost_layout(const LayoutRequest& r, const ModelSetup& setup, TrainingLayout layout, std::vector<LayoutVerdict>& out) {
  const Device& device = r.point.device;
  const bool interleaved = pipeline::parse_schedule(layout.schedule).virtual_stages > 1;
  const int M = layout.micro_batches, M1 = std::min(M, interleaved ? 2 * layout.pp : layout.pp),
            M2 = M1 + (interleaved ? layout.pp : 2);
  const auto first = stage_estimates(r, setup, layout, M1);
  const auto second = M > M1 ? stage_estimates(r, setup, layout, M2) : first;
  const EstimatePoint flat = layout.pp == 1 ? flat_point(r, setup, layout, false) : EstimatePoint{};
  const bool shardable = zero3_searched(setup.model, layout.cp, layout.dp);
  const EstimatePoint sharded = shardable && layout.pp == 1 ? flat_point(r, setup, layout, true) : EstimatePoint{};
  TrainingLayout zero3 = layout;
  zero3.shard = true;
  const bool sharded_stages = shardable && layout.pp > 1;
  const auto first_sharded = sharded_stages ? stage_estimates(r, setup, zero3, M1) : std::vector<PipelineEstimate>{};
  const auto second_sharded = sharded_stages && M > M1 ? stage_estimates(r, setup, zero3, M2) : first_sharded;
  for (std::size_t i = 0; i < first.size(); ++i) {
    layout.strategy = zero3.strategy = r.point.strategies[i];
    std::int64_t gradients = 0, offload = 0;
    LayoutVerdict v = pipeline_verdict(layout, first[i], second[i], M1, M2, gradients, offload);
    const double pipeline_step = v.step_seconds;
    // Each gradient all-reduced over the replicas and the context-parallel
    // ranks (whose rows' gradients add up), as Megatron does over dp x cp.
    v.exchange_seconds = exchange_seconds(device, gradients, layout.dp * layout.cp);
    v.step_seconds += v.exchange_seconds;
    if (layout.pp == 1) {  // what `estimate` says of one rank's step, as training measures it
      v.largest_total = flat.rows[i].total;
      offload = flat.rows[i].offload;
    }
    judge(v, offload, device);
    out.push_back(v);
    if (!shardable) continue;
    LayoutVerdict z = v;
    if (sharded_stages) {  // the stages' passes, sharded, price their own gathers and reduce-scatters
      std::int64_t unused = 0;
      z = pipeline_verdict(zero3, first_sharded[i], second_sharded[i], M1, M2, unused, offload);
      z.exchange_seconds = z.step_seconds - pipeline_step;
    } else {  // what the sharded point's step costs beyond the unsharded one's, M times
      z.layout.shard = true;
      z.exchange_seconds = double(M) * (sharded.rows[i].modelled_seconds - flat.rows[i].modelled_seconds);
      z.step_seconds = pipeline_step + z.exchange_seconds;
      z.largest_total = sharded.rows[i].total;
      offload = sharded.rows[i].offload;
    }
    z.why_not.clear();
    judge(z, offload, device);
    out.push_back(z);
  }
}

// What the biggest stage's blocks alone keep (their weights, gradients,
// optimizer state and 16-bit copy; not the embedding or the head): a bound
// below its state, cheap to know, so a layout whose blocks alone overflow
// the device is dropped without a shape-only run.
std::int64_t block_state_bytes(const LayoutRequest& r, const ModelSetup& setup, int blocks) {
  const auto model = models().find(setup.model).make(setup.sizes);
  const std::string first = model->staged() ? model->layer_name(0) + "." : std::string();
  if (first.empty()) return 0;
  std::int64_t count = 0;
  for (const ParamSpec& spec : model->params())
    if (spec.name.rfind(first, 0) == 0) count += numel(spec.shape);
  const std::int64_t per = 4 + 4 + (r.point.optimizer == "adamw" ? 8 : 0) + (r.point.precision == Precision::fp32 ? 0 : 2);
  return count * per * blocks;
}

// Whether L blocks and M micro-batches take interleaved:2 over pp stages.
bool interleaves(int L, int pp, int M) {
  try {
    pipeline::validate(pipeline::parse_schedule("interleaved:2"), L, pp, M, "");
  } catch (const UserError&) {
    return false;
  }
  return true;
}

std::vector<int> powers_of_two(int upto) {
  std::vector<int> p;
  for (int n = 1; n <= upto; n *= 2) p.push_back(n);
  return p;
}

}  // namespace

void check_request(const LayoutRequest& r) {
  if (r.gpus < 1) throw UserError("--gpus must be at least 1");
  if (r.point.device.fp32_flops <= 0)
    throw UserError("a layout is ranked by its step time: name a --device with rates (h100-80gb, a100-80gb, ...)");
  if (r.global_batch_tokens < r.point.base.sizes.S)
    throw UserError("--global-batch " + std::to_string(r.global_batch_tokens) + " tokens is less than one sequence of " +
                    std::to_string(r.point.base.sizes.S));
}

LayoutSearch search_layouts(const LayoutRequest& r, const std::function<void(const std::string&)>& progress) {
  check_request(r);
  const Sizes& z = r.point.base.sizes;
  const Device& device = r.point.device;
  const std::int64_t sequences = r.global_batch_tokens / z.S;
  const bool sequence_split = models().find(r.point.base.model).no_sequence_split.empty();
  LayoutSearch search;
  for (int tp : powers_of_two(std::min(r.gpus_per_node, r.gpus)))
    for (int cp : powers_of_two(r.gpus / tp))
      for (int pp = 1; pp <= std::min(z.L, r.gpus / (tp * cp)); ++pp) {
        if (r.gpus % (tp * cp * pp) != 0) continue;
        const int dp = r.gpus / (tp * cp * pp);
        const bool sp = tp > 1 && sequence_split;
        const std::string name = name_of(tp, sp, cp, pp, dp);
        if (sequences % dp != 0) {
          search.skipped.push_back(name + ": the global batch's " + std::to_string(sequences) +
                                   " sequences do not split over " + std::to_string(dp) + " replicas");
          continue;
        }
        ModelSetup setup = r.point.base;
        setup.sizes.B = 1;
        setup.sizes.tp = RankGroup::tensor(tp, 0, sp);
        setup.sizes.cp = RankGroup::context(cp);
        if (const std::string why = refusal(setup, pp); !why.empty()) {
          search.skipped.push_back(name + ": " + why);
          continue;
        }
        TrainingLayout layout{tp, cp, pp, dp, sp, false, int(sequences / dp), {}, "1f1b", ""};
        if (pp > 1) layout.stage_layers = balanced_stage_layers(z.L, pp);
        const int blocks = pp > 1 ? *std::max_element(layout.stage_layers.begin(), layout.stage_layers.end()) : z.L;
        const int shards = zero3_searched(setup.model, cp, dp) ? dp : 1;  // (cost_layout's zero-3)
        if (const std::int64_t held = block_state_bytes(r, setup, blocks) / shards; held > device.usable()) {
          search.skipped.push_back(name + ": the state of a stage's " + std::to_string(blocks) + " blocks alone, " +
                                   human_bytes(double(held)) + (shards > 1 ? " sharded" : "") + ", is over " +
                                   human_bytes(double(device.usable())));
          continue;
        }
        if (progress) progress(name);
        cost_layout(r, setup, layout, search.verdicts);
        if (pp > 1) {  // the zero-bubble schedule on the same stages: less bubble, the W inputs held
          layout.schedule = "zb-h1";
          cost_layout(r, setup, layout, search.verdicts);
        }
        if (pp > 1 && interleaves(z.L, pp, layout.micro_batches)) {  // two model chunks a rank, an even split
          layout.schedule = "interleaved:2";
          layout.stage_layers.clear();
          cost_layout(r, setup, layout, search.verdicts);
        }
      }
  for (LayoutVerdict& v : search.verdicts) v.global_tokens = std::int64_t(v.layout.dp) * v.layout.micro_batches * z.S;
  std::stable_sort(search.verdicts.begin(), search.verdicts.end(), [](const LayoutVerdict& a, const LayoutVerdict& b) {
    if (a.fits != b.fits) return a.fits;
    return a.fits ? a.step_seconds < b.step_seconds : a.largest_total < b.largest_total;
  });
  return search;
}

}  // namespace remat
