#include "estimate/device_model.hpp"

#include "autodiff/shape_only.hpp"
#include "autodiff/stats.hpp"
#include "core/error.hpp"
#include "estimate/shape_only_step.hpp"
#include "step/probe.hpp"

namespace remat {

double DeviceModel::seconds_now() const {
  const stats::Work& w = stats::work();
  const double peak = precision != Precision::fp32 ? device.half_flops : device.fp32_flops;
  return w.flops / (peak * gemm_efficiency) +
         w.bytes * bytes_touched_per_byte_made / (device.memory_bandwidth * memory_efficiency) + comm_seconds_now();
}

double DeviceModel::comm_seconds_now() const {
  const double bytes = stats::work().comm_bytes;
  return bytes > 0 ? bytes / (device.peer_link * link_efficiency) : 0.0;
}

double DeviceModel::offload_seconds_per_byte() const { return 2.0 / device.host_link; }

void require_rates(const Device& device) {
  if (device.fp32_flops <= 0)
    throw UserError("--device " + device.name + ": a device given by its memory alone has no rates to cost a plan "
                    "with; name one (docs/estimates.md lists them)");
}

SaveProfile modelled_costs(const Model& model, const ParamStore& params, const Batch& batch,
                           ops::AttentionKernel kernel, const DeviceModel& device) {
  require_rates(device.device);
  ShapeOnlyScope shape_only;
  PrecisionScope precision(params, device.precision);
  // One repeat: a shape-only run does the same work every time.
  const CostClock clock{[&device] { return device.seconds_now(); }, device.offload_seconds_per_byte()};
  SaveProfile p = measure_costs(model, params, batch, kernel, 1, 1, &clock);
  p.copies_in_flight = true;  // a GPU's offload copies overlap its compute
  return p;
}

SaveProfile modelled_costs(const ModelSetup& setup, ops::AttentionKernel kernel, const DeviceModel& device) {
  require_rates(device.device);
  ShapeOnlyScope shape_only;
  const auto model = models().find(setup.model).make(setup.sizes);
  const ParamStore params(model->params(), DType::f32);
  return modelled_costs(*model, params, shape_only_batch(setup.sizes), kernel, device);
}

}  // namespace remat
