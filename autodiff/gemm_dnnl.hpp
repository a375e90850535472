#pragma once
// bfloat16 matrix products through oneDNN's matmul (bfloat16 inputs, float32
// accumulation, one rounding of a 16-bit product), the host's path where the
// CPU multiplies bfloat16 natively (AVX512-BF16, AMX): twice sgemm's rate
// there. Elsewhere the host widens to float for sgemm (gemm.cpp), which is as
// fast as anything a CPU without native bfloat16 offers. fp16 products always
// widen: Debian's oneDNN 2.6 has no native half-precision kernels for a CPU.
// A build without oneDNN (REMAT_HAVE_DNNL unset: the CUDA build) always widens.
#include <cstdint>

#include "autodiff/bfloat16.hpp"

namespace remat::gemm {

enum class Op;

// Which host path a bfloat16 product takes.
enum class Bf16Path {
  automatic,  // oneDNN where the CPU has native bfloat16, else widen (the default)
  onednn,     // oneDNN, or an error where the CPU lacks native bfloat16 (oneDNN 2.6 has no kernel there)
  widen,      // float copies and sgemm always
};

// Whether bfloat16 products go to oneDNN now (the path, this build and this CPU).
bool bf16_by_onednn();
// Whether this CPU multiplies bfloat16 natively, as oneDNN sees it (false without oneDNN).
bool native_bf16_cpu();
// The CPU's instruction set as oneDNN sees it ("avx2", "avx512_core_bf16", ...;
// "none" without oneDNN).
const char* onednn_isa();

// Chooses the path while alive (tests; a process's products otherwise take
// the automatic one).
class Bf16PathScope {
 public:
  explicit Bf16PathScope(Bf16Path path);
  ~Bf16PathScope();
  Bf16PathScope(const Bf16PathScope&) = delete;
  Bf16PathScope& operator=(const Bf16PathScope&) = delete;

 private:
  Bf16Path previous_;
};

namespace detail {

// The tracker's pool for a 16-bit product's workspaces (widened copies,
// oneDNN's scratchpad): nothing in it outlives the call.
inline constexpr const char* kWorkspacePool = "gemm workspace";

// Whether a product of this layout goes to oneDNN (where bf16_by_onednn()):
// not an empty sum (k 0), not one C for the whole batch, not both inputs
// shared by the batch (no batch for oneDNN to broadcast them to), and beta 0
// or 1 (the sum post-op's documented scales); the widening path takes the rest.
bool onednn_takes(std::int64_t k, std::int64_t stride_a, std::int64_t stride_b, std::int64_t stride_c,
                  std::int64_t count, float beta);

// C[i] = alpha op(A[i]) op(B[i]) + beta C[i] for i < count, row-major, each
// operand `stride` elements after the last (0: the same one for every i);
// C of bf16 or float. Only where bf16_by_onednn().
template <class C>
void onednn_gemm(Op op_a, Op op_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const bf16* a,
                 std::int64_t lda, std::int64_t stride_a, const bf16* b, std::int64_t ldb, std::int64_t stride_b,
                 float beta, C* c, std::int64_t ldc, std::int64_t stride_c, std::int64_t count);

}  // namespace detail

}  // namespace remat::gemm
