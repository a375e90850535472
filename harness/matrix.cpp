#include "harness/matrix.hpp"

#include <map>

#include "autodiff/error.hpp"
#include "datasets/batch_source.hpp"
#include "strategies/registry.hpp"

namespace remat {

std::vector<MatrixCell> matrix_cells(const MatrixOptions& o) {
  const Sizes base = preset_sizes(o.preset);
  auto or_base = [](const std::vector<int>& v, int b) { return v.empty() ? std::vector<int>{b} : v; };
  std::vector<MatrixCell> cells;
  for (const auto& model : o.models) {
    const auto specs = strategies_for(model, o.strategies);
    for (int L : or_base(o.layers, base.L))
      for (int S : or_base(o.seq, base.S))
        for (int B : or_base(o.batch, base.B)) {
          Sizes z = base;
          z.L = L;
          z.S = z.S_max = S;
          z.B = B;
          validate(z);
          for (const auto& s : specs) cells.push_back({model, z, s, ResultsFile::run_id(model, s, z)});
        }
  }
  return cells;
}

std::vector<RunRecord> run_matrix(const MatrixOptions& o, const MatrixProgress& progress) {
  const auto cells = matrix_cells(o);
  ResultsFile file(o.out);
  std::vector<const MatrixCell*> todo;
  for (const auto& c : cells) {
    if (!file.has(c.id))
      todo.push_back(&c);
    else if (!o.resume)
      throw UserError(o.out + " already holds run '" + c.id + "': pass --resume to skip recorded runs, or another --out");
  }
  std::vector<RunRecord> records;
  std::size_t done = 0;
  // Cells sharing a model and shape share weights, batch and the full reference.
  for (std::size_t i = 0; i < todo.size();) {
    const MatrixCell& first = *todo[i];
    std::vector<const MatrixCell*> group;
    while (i < todo.size() && todo[i]->model == first.model && todo[i]->sizes.L == first.sizes.L &&
           todo[i]->sizes.S == first.sizes.S && todo[i]->sizes.B == first.sizes.B)
      group.push_back(todo[i++]);
    const Sizes& z = first.sizes;
    const auto model = models().find(first.model).make(z);
    ParamStore params(model->params(), DType::f32);
    initialize(params, o.seed, z.L);
    const Batch batch = make_batch_source(o.data, z.B, z.S, z.V, o.seed)->next();
    std::vector<std::string> specs;
    for (const auto* c : group) specs.push_back(c->strategy);
    if (progress.update) progress.update(done, todo.size(), first, "checking against full");
    CheckOptions check{o.seed, false, true};
    check.mem_limit = o.mem_limit;
    const CheckReport report = run_check(*model, params, batch, specs, check);

    for (std::size_t k = 0; k < group.size(); ++k) {
      const MatrixCell& cell = *group[k];
      RunRecord r{cell.model, o.preset, cell.strategy, o.data, z, {}, {}, report.rows[k], params.names()};
      auto strategy = make_strategy(cell.strategy);
      for (int w = 0; w < o.warmup + o.steps && !r.check.oom; ++w) {
        if (progress.update)
          progress.update(done, todo.size(), cell, w < o.warmup ? "warm-up" : "step " + std::to_string(w - o.warmup + 1) + "/" + std::to_string(o.steps));
        StepResult s;
        if (!within_limit(o.mem_limit, [&] { s = run_step(*model, params, batch, {strategy.get(), o.seed, 0}); })) {
          r.check.oom = true;
          break;
        }
        if (w >= o.warmup) {
          r.step_times.push_back(s.seconds);
          r.losses.push_back(s.loss);
        }
      }
      file.append(r);
      ++done;
      if (progress.finished) progress.finished(r);
      records.push_back(std::move(r));
    }
  }
  return records;
}

}  // namespace remat
