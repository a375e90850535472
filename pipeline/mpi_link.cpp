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
constexpr int kMostEdgeTensors = 4;  // a block hands on at most this many tensors (Model::stage_edges)
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
    const int edge = ((e.boundary * 2 + (e.gradient ? 1 : 0)) * micro_batches_ + e.micro_batch) * kMostEdgeTensors + e.index;
    return kFirstTag + edge % kTags;
  }
  Layout layout_;
  int micro_batches_;
  int first_;  // the world rank of this pipeline's first stage
  std::vector<char> buffer_;
};

}  // namespace

namespace {
std::int64_t tensor_bytes(const Model::StageEdge& e, Precision precision) {
  const DType dt = e.compute_type ? compute_dtype(precision, DType::f32) : DType::f32;
  return std::int64_t(dtype_size(dt)) * numel(e.shape);
}

// The bytes of one micro-batch crossing into block `layer`: the activations
// forward, their gradients back, each message with its shape ahead.
std::int64_t crossing_bytes(const Model& model, int layer, Precision precision) {
  const std::vector<Model::StageEdge> tensors = model.stage_edges(layer);
  if (int(tensors.size()) > kMostEdgeTensors) throw std::logic_error("Model::stage_edges: more tensors than the tags allow");
  std::int64_t bytes = 0;
  for (const Model::StageEdge& e : tensors)
    bytes += (e.gradient ? 2 : 1) * (header_bytes(e.shape.size()) + tensor_bytes(e, precision));
  return bytes;
}
}  // namespace

std::int64_t edge_bytes(const Layout& layout, int rank, int micro_batches, const Model& model, Precision precision) {
  // Each sent once and received once, at the edges of this rank's virtual stages.
  std::int64_t bytes = 0;
  for (int v = rank; v < layout.count(); v += layout.stages) {
    if (v > 0) bytes += crossing_bytes(model, layout.begin(v), precision);                  // from v - 1
    if (v < layout.count() - 1) bytes += crossing_bytes(model, layout.end(v), precision);   // to v + 1
  }
  return bytes * std::int64_t(micro_batches);
}

void require_sendable_edges(const Model& model, Precision precision) {
  for (int layer = 1; layer < model.sizes().L; ++layer)
    for (const Model::StageEdge& e : model.stage_edges(layer)) {
      const std::int64_t bytes = tensor_bytes(e, precision);
      if (header_bytes(e.shape.size()) + bytes > kLargestMessage)
        throw UserError("--pp: a tensor between stages, " + to_string(e.shape) + ", is " + human_bytes(double(bytes)) +
                        ", more than one MPI message carries (1 GiB): give a smaller --batch or --seq");
    }
}

std::unique_ptr<StageLink> mpi_link(const Layout& layout, int micro_batches) {
  return std::make_unique<MpiLink>(layout, micro_batches);
}

}  // namespace remat::pipeline
