#include "strategies/storage.hpp"

#include <Kokkos_Core.hpp>
#include <cstdlib>
#include <map>
#include <vector>

#include "autodiff/memory_tracker.hpp"
#include "autodiff/tape.hpp"

namespace remat {
namespace {

std::string describe_save(const char* action, const Tensor& t) {
  return std::string(current_op()) + ": " + action + " " + t.tag() + " " + to_string(t.shape()) + " " +
         human_bytes(double(t.nbytes()));
}

// Host memory outside Kokkos' pools, reported to the tracker as "offload".
class HostBuffer {
 public:
  explicit HostBuffer(std::size_t bytes) : bytes_(bytes) {
    ptr_ = static_cast<unsigned char*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64 + 64));
    if (!ptr_) throw std::bad_alloc();
    MemoryTracker::instance().on_allocate(OffloadStorage::kPool, ptr_, bytes_, "offloaded");
  }
  ~HostBuffer() {
    MemoryTracker::instance().on_deallocate(OffloadStorage::kPool, ptr_, bytes_);
    std::free(ptr_);
  }
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  using View = Kokkos::View<unsigned char*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>;
  View view() const { return View(ptr_, bytes_); }

 private:
  unsigned char* ptr_;
  std::size_t bytes_;
};

bool& copies_setting() {
  static bool copy = !Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible;
  return copy;
}

}  // namespace

bool OffloadStorage::copies() { return copies_setting(); }
void OffloadStorage::set_copies(bool copy) { copies_setting() = copy; }

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
    std::unique_ptr<HostBuffer> host;  // the copy, where offloading copies
    int handles = 0, taken = 0;
  };
  std::string name;
  std::vector<Entry> entries;
  std::map<const void*, int> index;  // one copy per storage, however often saved
  std::weak_ptr<Group> previous;     // the group whose backward comes next
  bool resident = true;
  bool fetched = false;              // brought back for its backward (once)

  ~Group() {  // moved bytes go back to the device pool, where they are freed
    if (!resident)
      for (auto& e : entries)
        if (!e.host) move_pool(e.device, OffloadStorage::kPool, MemoryTracker::default_pool());
  }

  static void move_pool(const Tensor& t, const std::string& from, const std::string& to) {
    MemoryTracker::instance().transfer(from, to, t.bytes().extent(0));
  }

  void offload() {
    resident = false;
    if (!OffloadStorage::copies()) {
      for (auto& e : entries) move_pool(e.device, MemoryTracker::default_pool(), OffloadStorage::kPool);
      return;
    }
    for (auto& e : entries) {
      e.host = std::make_unique<HostBuffer>(e.device.nbytes());
      Kokkos::deep_copy(ExecSpace(), e.host->view(), e.device.bytes());
    }
    ExecSpace().fence();
    for (auto& e : entries) e.device = Tensor();
  }

  void copy_in() {
    if (resident) return;
    if (!entries.empty() && !entries.front().host) {  // moved, not copied: all or none come back
      std::int64_t bytes = 0;
      for (auto& e : entries) bytes += std::int64_t(e.device.bytes().extent(0));
      MemoryTracker::instance().check_allocation(bytes);
      for (auto& e : entries) move_pool(e.device, OffloadStorage::kPool, MemoryTracker::default_pool());
    } else {
      for (auto& e : entries) {
        e.device = Tensor::empty(e.shape, e.dtype, "offload_fetch");
        Kokkos::deep_copy(ExecSpace(), e.device.bytes(), e.host->view());
      }
    }
    resident = true;
  }

  // Brings this group back, and the previous one with it (whose backward
  // comes next), then waits for both copies: on the host backend nothing is
  // copied, and where copies happen they do not yet overlap this group's
  // backward (that needs the copies on their own execution-space instance).
  void fetch() {
    if (fetched) return;
    fetched = true;
    MemoryPhase phase("offload fetch " + name);
    copy_in();
    if (auto p = previous.lock()) p->copy_in();
    ExecSpace().fence();
    for (auto& e : entries) e.host.reset();
  }

  Tensor take(int i) {
    Entry& e = entries[std::size_t(i)];
    Tensor t = e.device;
    if (++e.taken == e.handles) e.device = Tensor();  // the last handle owns it now
    return t;
  }
};

namespace {

class OffloadedPacked final : public Packed {
 public:
  OffloadedPacked(std::shared_ptr<OffloadStorage::Group> g, int i, Shape shape)
      : group_(std::move(g)), index_(i), shape_(std::move(shape)) {}
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

OffloadStorage::OffloadStorage() = default;
OffloadStorage::~OffloadStorage() = default;

void OffloadStorage::begin_group(const std::string& name, RegionTrace* trace) {
  current_ = std::make_shared<Group>();
  current_->name = name;
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
    current_->offload();
  }
  last_ = current_;
  current_.reset();
  trace_ = nullptr;
}

void OffloadStorage::reset() {
  current_.reset();
  last_.reset();
}

std::shared_ptr<Packed> OffloadStorage::pack(const Tensor& t) {
  if (!current_) return keep_.pack(t);
  auto [it, fresh] = current_->index.emplace(t.raw(), int(current_->entries.size()));
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
