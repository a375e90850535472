#include "strategies/storage.hpp"

#include <Kokkos_Core.hpp>
#include <map>
#include <vector>

#include "autodiff/backend.hpp"
#include "autodiff/memory_tracker.hpp"
#include "autodiff/stats.hpp"
#include "autodiff/tape.hpp"
#include "autodiff/transfer.hpp"

namespace remat {
namespace {

std::string describe_save(const char* action, const Tensor& t) {
  return std::string(current_op()) + ": " + action + " " + t.tag() + " " + to_string(t.shape()) + " " +
         human_bytes(double(t.nbytes()));
}

}  // namespace

std::shared_ptr<Packed> KeepStorage::pack(const Tensor& t) {
  if (trace_) {
    trace_->saved += std::int64_t(t.nbytes());
    trace_->kept += std::int64_t(t.nbytes());
    trace_->saves.push_back(describe_save("keep", t));
  }
  return keep_.pack(t);
}

struct OffloadStorage::Group {
  struct Entry {
    // The data: while resident, and while offloaded where offloading moves
    // rather than copies (no `host`), when the pool owns this same memory.
    Tensor device;
    Shape shape;
    DType dtype;
    std::unique_ptr<backend::HostBuffer> host;  // the copy, where offloading copies
    // Handles made, and handles done with it (unpacked, or destroyed
    // without: a recipe's handle that backward never needed). When all are
    // done the group lets the data go.
    int handles = 0, taken = 0;
    bool done() const { return taken == handles; }
  };
  std::string name;
  std::vector<Entry> entries;
  std::map<const void*, int> index;  // one copy per storage, however often saved
  std::weak_ptr<Group> previous;     // the group whose backward comes next
  bool resident = true;
  bool fetched = false;              // brought back for its backward (once)
  bool copying = false;              // copies on the copy instance not yet waited for
  bool copies = false;               // offloading copies into host buffers (backend::offload_copies)
  std::unique_ptr<transfer::CopyBatch> batch;  // times those copies

  ~Group() {  // moved bytes go back to the device pool, where they are freed
    // A step that ran through settled every group in its backward; one with
    // copies still in flight here is a step that failed already. Its error
    // is the one to report: a second one from settling (the copy timer's
    // query) must not escape a destructor and end the process.
    try {
      settle();
    } catch (const std::exception&) {
    }
    if (!resident)
      for (auto& e : entries)
        if (!e.host) move_pool(e.device, OffloadStorage::kPool, MemoryTracker::default_pool());
  }

  std::int64_t bytes() const {
    std::int64_t n = 0;
    for (const auto& e : entries) n += std::int64_t(e.device.nbytes());
    return n;
  }

  static void move_pool(const Tensor& t, const std::string& from, const std::string& to) {
    MemoryTracker::instance().transfer(from, to, t.nbytes());
  }

  // Waits for this group's copies. After a copy out the device tensors go
  // (they were kept while the copy read them); after a copy in the host
  // buffers go.
  void settle() {
    if (auto* l = transfer::copy_listener()) l->wait(this);
    if (!copying) return;
    {
      transfer::WaitClock wait;
      backend::fence_copies();
    }
    batch->finished();
    batch.reset();
    copying = false;
    for (auto& e : entries) (resident ? e.host.reset() : (void)(e.device = Tensor()));
    release_done();
  }

  // Lets go of the data no handle will read again, once it is on the device
  // and no copy reads or writes it.
  void release_done() {
    if (!resident || copying) return;
    for (auto& e : entries)
      if (e.done()) e.device = Tensor();
  }

  // Starts the copy out at the end of the group's forward. The kernels that
  // wrote the tensors run on the default instance: wait for them, then copy
  // on the copy instance while the next block's forward runs.
  void offload() {
    resident = false;
    if (!copies) {
      for (auto& e : entries) move_pool(e.device, MemoryTracker::default_pool(), OffloadStorage::kPool);
      if (auto* l = transfer::copy_listener()) l->copy_out(this, bytes());
      return;
    }
    backend::fence_compute();
    {
      transfer::WaitClock wait;
      batch = std::make_unique<transfer::CopyBatch>();
      for (auto& e : entries) {
        e.host = std::make_unique<backend::HostBuffer>(e.device.nbytes(), OffloadStorage::kLabel);
        backend::start_copy(*e.host, e.device);
      }
      batch->issued();
    }
    if (auto* l = transfer::copy_listener()) l->copy_out(this, bytes());
    // The device tensors go when the next group starts its copies, or the
    // last block's forward ends (settle_in_flight), on every backend: a host
    // made to copy (the tests) keeps a device's timeline, so it measures a
    // device's peaks.
    copying = true;
  }

  // Starts bringing the group back (no wait).
  void copy_in() {
    if (resident) return;
    if (copying) {  // the copy out has not been waited for: the device tensors are still here
      resident = true;
      settle();  // as after a copy in: the host buffers go
      return;
    }
    if (!entries.empty() && !entries.front().host) {  // moved, not copied: all or none come back
      const std::int64_t bytes = this->bytes();
      MemoryTracker::instance().check_allocation(bytes);
      for (auto& e : entries) move_pool(e.device, OffloadStorage::kPool, MemoryTracker::default_pool());
      if (auto* l = transfer::copy_listener()) l->copy_in(this, bytes);
      resident = true;
      release_done();
      return;
    }
    transfer::WaitClock wait;
    batch = std::make_unique<transfer::CopyBatch>();
    std::int64_t bytes = 0;
    for (auto& e : entries) {
      if (e.done()) continue;  // no handle reads it again: not worth a copy
      e.device = Tensor::empty(e.shape, e.dtype, "offload_fetch");
      bytes += std::int64_t(e.device.nbytes());
      backend::start_copy(e.device, *e.host);
    }
    batch->issued();
    // The copy engine writes these, not a kernel: no compute traffic in a
    // device model's price (stats::work), but a copy on its link.
    stats::count_bytes(-double(bytes));
    if (auto* l = transfer::copy_listener()) l->copy_in(this, bytes);
    copying = true;
    resident = true;
  }

  // Brings this group back and waits for it, then starts bringing back the
  // group before it (whose backward comes next), which overlaps this
  // group's backward on a device.
  void fetch() {
    if (fetched) return;
    fetched = true;
    MemoryPhase phase("offload fetch " + name);
    copy_in();
    settle();
    if (auto p = previous.lock()) p->copy_in();
  }

  Tensor take(int i) {
    Entry& e = entries[std::size_t(i)];
    Tensor t = e.device;
    if (++e.taken == e.handles) e.device = Tensor();  // the last handle owns it now
    return t;
  }

  // A handle destroyed without being unpacked.
  void drop(int i) {
    ++entries[std::size_t(i)].taken;
    release_done();
  }
};

namespace {

class OffloadedPacked final : public Packed {
 public:
  OffloadedPacked(std::shared_ptr<OffloadStorage::Group> g, int i, Shape shape)
      : group_(std::move(g)), index_(i), shape_(std::move(shape)) {}
  ~OffloadedPacked() override {
    if (!value_.defined()) group_->drop(index_);
  }
  Tensor unpack() override {
    if (!value_.defined()) {
      group_->fetch();
      value_ = group_->take(index_);
      if (value_.shape() != shape_) value_ = value_.view_as(shape_);  // saved as another view of the storage
    }
    return value_;
  }

 private:
  std::shared_ptr<OffloadStorage::Group> group_;
  int index_;
  Shape shape_;
  Tensor value_;
};

}  // namespace

OffloadStorage::OffloadStorage() { MemoryTracker::instance().pool_for_label(kLabel, kPool); }
OffloadStorage::~OffloadStorage() = default;

void OffloadStorage::begin_group(const std::string& name, RegionTrace* trace) {
  current_ = std::make_shared<Group>();
  current_->name = name;
  current_->copies = backend::offload_copies();
  current_->previous = last_;
  trace_ = trace;
}

void OffloadStorage::end_group() {
  if (!current_) return;
  if (current_->entries.empty()) {  // nothing offloaded: no group, and no link in the prefetch chain
    current_.reset();
    trace_ = nullptr;
    return;
  }
  {
    MemoryPhase phase("offload " + current_->name);
    // One group's copies in flight at a time: the previous group's ended
    // during this group's forward, most likely.
    if (last_) last_->settle();
    current_->offload();
  }
  last_ = current_;
  current_.reset();
  trace_ = nullptr;
}

void OffloadStorage::settle_in_flight() {
  if (last_) last_->settle();
}

void OffloadStorage::reset() {
  current_.reset();
  last_.reset();
}

std::shared_ptr<Packed> OffloadStorage::pack(const Tensor& t) {
  if (!current_) return keep_.pack(t);
  auto [it, fresh] = current_->index.emplace(t.id(), int(current_->entries.size()));
  // The data alone: a tensor's recipe holds its producer's saved handles,
  // which may be in this group, and the group must not own itself.
  if (fresh) current_->entries.push_back({t.view_as(t.shape()), t.shape(), t.dtype(), nullptr, 0, 0});
  auto& e = current_->entries[std::size_t(it->second)];
  ++e.handles;
  if (trace_) {
    trace_->saved += std::int64_t(t.nbytes());
    if (fresh) trace_->offloaded += std::int64_t(t.nbytes());
    trace_->saves.push_back(describe_save(fresh ? "offload" : "offload (shared)", t));
  }
  return std::make_shared<OffloadedPacked>(current_, it->second, t.shape());
}

}  // namespace remat
