#include "autodiff/gemm_dnnl.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <type_traits>

#include <Kokkos_Core.hpp>

#include "autodiff/gemm.hpp"
#include "autodiff/memory_tracker.hpp"

#ifdef REMAT_HAVE_DNNL
#include <cmath>
#include <cstdio>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace remat::gemm {
namespace {

Bf16Path& current_path() {
  static Bf16Path path = Bf16Path::automatic;
  return path;
}

}  // namespace

Bf16PathScope::Bf16PathScope(Bf16Path path) : previous_(current_path()) { current_path() = path; }
Bf16PathScope::~Bf16PathScope() { current_path() = previous_; }

#ifdef REMAT_HAVE_DNNL

namespace {

using dnnl::memory;

// One matmul primitive per shape, layout and scaling, made once: making one
// costs far more than a small product. Keyed by everything its descriptors
// hold; alpha and beta are few (1 and 0, an attention's scale).
using Key = std::tuple<int, int, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                       std::int64_t, std::int64_t, std::int64_t, std::int64_t, float, float, bool>;

constexpr std::size_t kMostPrimitives = 512;
constexpr const char* kScratchpadLabel = "gemm_onednn_scratchpad";

struct Primitive {
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul matmul;
};

struct Engine {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  std::mutex mutex;
  std::map<Key, Primitive> primitives;
};

Engine& engine() {
  static Engine e;
  return e;
}

// A batch of row-major matrices: `count` (1 where the stride is 0: oneDNN
// broadcasts it over the batch) of rows x cols, `ld` apart, transposed by
// strides where op is T (the matrix stored is cols x rows).
memory::desc batch_desc(Op op, std::int64_t count, std::int64_t stride, std::int64_t rows, std::int64_t cols,
                        std::int64_t ld, memory::data_type type) {
  const std::int64_t n = stride == 0 ? 1 : count;
  const memory::dims strides = op == Op::N ? memory::dims{stride == 0 ? rows * ld : stride, ld, 1}
                                           : memory::dims{stride == 0 ? cols * ld : stride, 1, ld};
  return memory::desc({n, rows, cols}, type, strides);
}

Primitive make_matmul(const Key& key) {
  const auto [ia, ib, m, n, k, count, lda, sa, ldb, sb, ldc, sc, alpha, beta, wide] = key;
  const auto half = memory::data_type::bf16, c_type = wide ? memory::data_type::f32 : half;
  dnnl::primitive_attr attr;
  // Each call brings its scratchpad: a primitive's own would be shared by
  // threads running it at once (oneDNN forbids that), and held for ever.
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  if (beta != 0.0f) {
    dnnl::post_ops ops;
    ops.append_sum(beta);
    attr.set_post_ops(ops);
  }
  const dnnl::matmul::desc desc(batch_desc(Op(ia), count, sa, m, k, lda, half),
                                batch_desc(Op(ib), count, sb, k, n, ldb, half),
                                memory::desc({count, m, n}, c_type, memory::dims{sc == 0 ? m * ldc : sc, ldc, 1}));
  dnnl::matmul::primitive_desc pd(desc, attr, engine().engine);
  return {pd, dnnl::matmul(pd)};
}

// Whether oneDNN's products agree with exact ones on a few small cases
// (each transpose, a batch with a shared operand, alpha and beta, both
// product types): checked once before the automatic path trusts it, so a
// CPU where oneDNN's kernels (or this file's layouts) disagree widens
// instead, and says so, rather than giving other gradients.
bool onednn_agrees() {
  const std::int64_t m = 3, n = 4, k = 5, count = 2;
  for (int ops = 0; ops < 4; ++ops) {
    const Op oa = ops & 1 ? Op::T : Op::N, ob = ops & 2 ? Op::T : Op::N;
    std::vector<bf16> a(std::size_t(count * m * k)), b(std::size_t(k * n));
    for (std::size_t i = 0; i < a.size(); ++i) a[i] = bf16(float(int(i * 7 % 11) - 5) / 8);
    for (std::size_t i = 0; i < b.size(); ++i) b[i] = bf16(float(int(i * 5 % 13) - 6) / 4);
    std::vector<float> c(std::size_t(count * m * n), 1.0f);
    std::vector<bf16> h(c.size(), bf16(1.0f));
    const std::int64_t lda = oa == Op::N ? k : m, ldb = ob == Op::N ? n : k;
    detail::onednn_gemm<float>(oa, ob, m, n, k, 0.5f, a.data(), lda, m * k, b.data(), ldb, 0, 1.0f, c.data(), n, m * n,
                               count);
    detail::onednn_gemm<bf16>(oa, ob, m, n, k, 0.5f, a.data(), lda, m * k, b.data(), ldb, 0, 1.0f, h.data(), n, m * n,
                              count);
    for (std::int64_t i = 0; i < count; ++i)
      for (std::int64_t r = 0; r < m; ++r)
        for (std::int64_t col = 0; col < n; ++col) {
          double want = 1.0;  // beta 1 times the 1 C held
          for (std::int64_t p = 0; p < k; ++p)
            want += 0.5 * double(float(a[std::size_t(i * m * k + (oa == Op::N ? r * k + p : p * m + r))])) *
                    double(float(b[std::size_t(ob == Op::N ? p * n + col : col * k + p)]));
          const std::size_t at = std::size_t(i * m * n + r * n + col);
          if (std::abs(double(c[at]) - want) > 1e-6 || std::abs(double(float(h[at])) - want) > std::abs(want) / 128)
            return false;
        }
  }
  return true;
}

}  // namespace

bool native_bf16_cpu() {
  static const bool native = [] {
    const auto isa = dnnl::get_effective_cpu_isa();
    return isa == dnnl::cpu_isa::avx512_core_bf16 || isa == dnnl::cpu_isa::avx512_core_amx;
  }();
  return native;
}

bool bf16_by_onednn() {
  switch (current_path()) {
    case Bf16Path::onednn:
      if (!native_bf16_cpu())
        throw std::runtime_error(std::string("gemm: oneDNN 2.6 multiplies bfloat16 only on a CPU with native bf16 "
                                             "(AVX512-BF16 or AMX); this one is ") + onednn_isa());
      return true;
    case Bf16Path::widen: return false;
    case Bf16Path::automatic: break;
  }
  static const bool trusted = [] {
    if (!native_bf16_cpu()) return false;
    try {
      if (onednn_agrees()) return true;
    } catch (const dnnl::error&) {  // as a disagreement: widen
    }
    std::fprintf(stderr, "remat: oneDNN's bfloat16 products disagree with exact ones on this CPU (%s); "
                         "widening to sgemm instead\n", onednn_isa());
    return false;
  }();
  return trusted;
}

const char* onednn_isa() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::sse41: return "sse41";
    case dnnl::cpu_isa::avx: return "avx";
    case dnnl::cpu_isa::avx2: return "avx2";
    case dnnl::cpu_isa::avx2_vnni: return "avx2_vnni";
    case dnnl::cpu_isa::avx512_core: return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    default: return "other";
  }
}

namespace detail {

bool onednn_takes(std::int64_t k, std::int64_t stride_a, std::int64_t stride_b, std::int64_t stride_c,
                  std::int64_t count, float beta) {
  const bool batch = count > 1;
  return k > 0 && !(batch && stride_c == 0) && !(batch && stride_a == 0 && stride_b == 0) &&
         (beta == 0.0f || beta == 1.0f);
}

template <class C>
void onednn_gemm(Op op_a, Op op_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const bf16* a,
                 std::int64_t lda, std::int64_t stride_a, const bf16* b, std::int64_t ldb, std::int64_t stride_b,
                 float beta, C* c, std::int64_t ldc, std::int64_t stride_c, std::int64_t count) {
  constexpr bool wide = std::is_same_v<C, float>;
  const Key key{int(op_a), int(op_b), m, n, k, count, lda, stride_a, ldb, stride_b, ldc, stride_c, alpha, beta, wide};
  Engine& e = engine();
  Primitive p;
  {
    const std::lock_guard<std::mutex> lock(e.mutex);
    auto it = e.primitives.find(key);
    if (it == e.primitives.end()) {
      if (e.primitives.size() >= kMostPrimitives) e.primitives.clear();  // shapes that vary (MoE's rows)
      it = e.primitives.emplace(key, make_matmul(key)).first;
    }
    p = it->second;
  }
  // The operands' own storage, no copies (a const input is only read); the
  // scratchpad for this call, in the tracker's GEMM workspace pool. Before
  // Kokkos starts (`remat --version` asks which path runs, which probes it)
  // the scratchpad is plain memory: a View made then would be freed as if
  // after Kokkos::finalize, which aborts.
  const memory::desc sd = p.pd.scratchpad_desc();
  const std::size_t pad_bytes = std::max<std::size_t>(1, sd.get_size());
  Kokkos::View<std::uint8_t*, Kokkos::HostSpace> pad;
  std::vector<std::uint8_t> early;
  if (Kokkos::is_initialized()) {
    MemoryTracker::instance().pool_for_label(kScratchpadLabel, detail::kWorkspacePool);
    pad = Kokkos::View<std::uint8_t*, Kokkos::HostSpace>(
        Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string(kScratchpadLabel)), pad_bytes);
  } else {
    early.resize(pad_bytes);
  }
  memory ma(p.pd.src_desc(), e.engine, const_cast<bf16*>(a)), mb(p.pd.weights_desc(), e.engine, const_cast<bf16*>(b)),
      mc(p.pd.dst_desc(), e.engine, c), ms(sd, e.engine, pad.data() ? static_cast<void*>(pad.data()) : early.data());
  dnnl::stream s(e.engine);
  p.matmul.execute(s, {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}, {DNNL_ARG_SCRATCHPAD, ms}});
  s.wait();
}

}  // namespace detail

#else  // no oneDNN in this build: bfloat16 always widens

namespace detail {
bool onednn_takes(std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t, float) { return false; }
}  // namespace detail

bool native_bf16_cpu() { return false; }
bool bf16_by_onednn() {
  if (current_path() == Bf16Path::onednn) throw std::runtime_error("gemm: this build has no oneDNN");
  return false;
}
const char* onednn_isa() { return "none"; }

namespace detail {
template <class C>
void onednn_gemm(Op, Op, std::int64_t, std::int64_t, std::int64_t, float, const bf16*, std::int64_t, std::int64_t,
                 const bf16*, std::int64_t, std::int64_t, float, C*, std::int64_t, std::int64_t, std::int64_t) {
  throw std::logic_error("gemm: this build has no oneDNN");
}
}  // namespace detail

#endif

namespace detail {
template void onednn_gemm<bf16>(Op, Op, std::int64_t, std::int64_t, std::int64_t, float, const bf16*, std::int64_t,
                                std::int64_t, const bf16*, std::int64_t, std::int64_t, float, bf16*, std::int64_t,
                                std::int64_t, std::int64_t);
template void onednn_gemm<float>(Op, Op, std::int64_t, std::int64_t, std::int64_t, float, const bf16*, std::int64_t,
                                 std::int64_t, const bf16*, std::int64_t, std::int64_t, float, float*, std::int64_t,
                                 std::int64_t, std::int64_t);
}  // namespace detail

}  // namespace remat::gemm
