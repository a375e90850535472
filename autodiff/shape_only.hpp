#pragma once
// Shape-only execution, like PyTorch's meta device: while a ShapeOnlyScope
// is open, tensors carry shape, element type and their bytes in the memory
// tracker but no storage, and no kernel runs (the loops, the GEMM front door,
// the copies and every op's own launches return at once). Everything else
// runs as it does on data: the model code, the tape, the saved-tensor hooks,
// checkpoint regions and their recomputation, selective drops, offload and
// planned schedules. So the tracker counts, allocation for allocation, the
// bytes a step would hold, and the GEMM counter its FLOPs, at sizes that
// could never run here (`remat estimate`).
//
// What cannot be known without data is fixed: values read back to the host
// are zeros (a loss of 0), and mixtral routes round robin (each token's K
// experts distinct, every expert the same load), which moves no byte: its
// expert buffers hold T K rows however they are spread.
namespace remat {

bool shape_only();

class ShapeOnlyScope {
 public:
  ShapeOnlyScope();
  ~ShapeOnlyScope();
  ShapeOnlyScope(const ShapeOnlyScope&) = delete;
  ShapeOnlyScope& operator=(const ShapeOnlyScope&) = delete;

 private:
  bool previous_;
};

}  // namespace remat
