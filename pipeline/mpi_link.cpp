// The pipeline's edges over MPI: a message per tensor, to the rank of the
// virtual stage on the other side, its shape and type ahead of its bytes.
#include <cstring>

#include "autodiff/backend.hpp"
#include "comm/comm.hpp"
#include "core/error.hpp"
#include "core/text.hpp"
#include "pipeline/stage_runner.hpp"

namespace remat::pipeline {
namespace {

// Tags of their own (comm's other point-to-point messages use small ones),
// one per edge of the step; they wrap long before MPI's bound, and a tag
// comes round again only long after its message was received.
constexpr int kFirstTag = 4096, kTags = 24576;
constexpr std::int64_t kLargestMessage = std::int64_t(1) << 30;  // comm::post's bound

// A message: the type and the rank of the shape (4 bytes each), the shape, the bytes.
constexpr std::int64_t header_bytes(std::size_t dims) { return 8 + 8 * std::int64_t(dims); }

class MpiLink final : public StageLink {
 public:
  MpiLink(const Layout& layout, int micro_batches)
      : layout_(layout), micro_batches_(micro_batches), first_(comm::rank() - comm::rank(comm::Group::tensor)) {}

  void send(const Edge& e, const Tensor& t) override {
    const std::int32_t dtype = std::int32_t(t.dtype()), rank = std::int32_t(t.shape().size());
    std::vector<char> bytes(std::size_t(header_bytes(t.shape().size())) + t.nbytes());
    std::memcpy(bytes.data(), &dtype, 4);
    std::memcpy(bytes.data() + 4, &rank, 4);
    std::memcpy(bytes.data() + 8, t.shape().data(), 8 * t.shape().size());
    backend::download(t, bytes.data() + 8 + 8 * t.shape().size(), t.nbytes());
    const int to = first_ + layout_.rank_of(e.gradient ? e.boundary : e.boundary + 1);
    comm::post(to, tag(e), std::move(bytes));
  }

  Tensor receive(const Edge& e) override {
    const int from = first_ + layout_.rank_of(e.gradient ? e.boundary + 1 : e.boundary);
    comm::receive_from(from, tag(e), buffer_);
    std::int32_t dtype = 0, rank = 0;
    std::memcpy(&dtype, buffer_.data(), 4);
    std::memcpy(&rank, buffer_.data() + 4, 4);
    Shape shape(std::size_t(rank), 0);
    std::memcpy(shape.data(), buffer_.data() + 8, 8 * shape.size());
    Tensor t = Tensor::empty(shape, DType(dtype), e.gradient ? "stage_output_grad" : "stage_input");
    backend::upload(t, buffer_.data() + 8 + 8 * shape.size(), t.nbytes());
    return t;
  }

  void finish() override { comm::settle_posted(); }

 private:
  int tag(const Edge& e) const {
    const int edge = (e.boundary * 2 + (e.gradient ? 1 : 0)) * micro_batches_ + e.micro_batch;
    return kFirstTag + edge % kTags;
  }
  Layout layout_;
  int micro_batches_;
  int first_;  // the world rank of this pipeline's first stage
  std::vector<char> buffer_;
};

}  // namespace

std::int64_t edge_bytes(const Layout& layout, int rank, int micro_batches, const Sizes& sizes, Precision precision) {
  const std::int64_t message = header_bytes(3) + std::int64_t(dtype_size(compute_dtype(precision, DType::f32))) *
                                                     std::int64_t(sizes.B) * sizes.S * sizes.D;
  std::int64_t edges = 0;  // each sent once and received once: an activation forward and a gradient back
  for (int v = rank; v < layout.count(); v += layout.stages) edges += (v > 0 ? 1 : 0) + (v < layout.count() - 1 ? 1 : 0);
  return 2 * edges * std::int64_t(micro_batches) * message;
}

void require_sendable_edges(const Sizes& sizes, Precision precision) {
  const std::int64_t bytes =
      std::int64_t(dtype_size(compute_dtype(precision, DType::f32))) * std::int64_t(sizes.B) * sizes.S * sizes.D;
  if (header_bytes(3) + bytes > kLargestMessage)
    throw UserError("--pp: the activations between stages, [B, S, D] = [" + std::to_string(sizes.B) + ", " +
                    std::to_string(sizes.S) + ", " + std::to_string(sizes.D) + "], are " + human_bytes(double(bytes)) +
                    ", more than one MPI message carries (1 GiB): give a smaller --batch or --seq");
}

std::unique_ptr<StageLink> mpi_link(const Layout& layout, int micro_batches) {
  return std::make_unique<MpiLink>(layout, micro_batches);
}

}  // namespace remat::pipeline
