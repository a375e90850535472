#include "estimate/device_model.hpp"

#include <algorithm>

#include "autodiff/shape_only.hpp"
#include "autodiff/stats.hpp"
#include "core/error.hpp"
#include "estimate/shape_only_step.hpp"
#include "step/probe.hpp"

namespace remat {

double DeviceModel::seconds_since(const stats::Work& origin) const {
  const stats::Work& w = stats::work();
  const double peak = precision != Precision::fp32 ? device.half_flops : device.fp32_flops;
  return (w.flops - origin.flops) / (peak * gemm_efficiency) +
         (w.bytes - origin.bytes) * bytes_touched_per_byte_made / (device.memory_bandwidth * memory_efficiency) +
         comm_seconds_since(origin);
}

double DeviceModel::comm_seconds_since(const stats::Work& origin) const {
  const double bytes = stats::work().comm_bytes - origin.comm_bytes;
  return bytes > 0 ? bytes / (device.peer_link * link_efficiency) : 0.0;
}

double DeviceModel::offload_seconds_per_byte() const { return 2.0 / device.host_link; }

ModelledCopies::ModelledCopies(const DeviceModel& device)
    : device_(device), origin_(stats::work()), previous_(transfer::exchange_copy_listener(this)) {}

ModelledCopies::~ModelledCopies() { transfer::exchange_copy_listener(previous_); }

double ModelledCopies::enqueue(std::int64_t bytes) {
  stream_free_ = std::max(stream_free_, now()) + double(bytes) / device_.device.host_link;
  return stream_free_;
}

void ModelledCopies::copy_out(const void* group, std::int64_t bytes) { pending_[group] = {enqueue(bytes), true}; }

void ModelledCopies::copy_in(const void* group, std::int64_t bytes) {
  // A group whose copy out was not waited for still has its tensors on the
  // device (storage.cpp keeps them while the copy reads them): nothing comes
  // back, and waiting for it is waiting for that copy out.
  const auto it = pending_.find(group);
  if (it != pending_.end() && it->second.out) return;
  pending_[group] = {enqueue(bytes), false};
}

void ModelledCopies::wait(const void* group) {
  const auto it = pending_.find(group);
  if (it == pending_.end()) return;
  const double late = it->second.done - now();
  if (late > 0) waited_ += late;
  pending_.erase(it);
}

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
  const stats::Work origin = stats::work();
  const CostClock clock{[&device, origin] { return device.seconds_since(origin); }, device.offload_seconds_per_byte()};
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
