#pragma once
// Naive host implementations of every op's forward, written from the math
// alone (plain loops, double precision): the reference the kernels must match.
#include <cstdint>
#include <vector>

namespace remat::test::ref {

using Vec = std::vector<double>;
using Ids = std::vector<std::int32_t>;

Vec embedding(const Vec& w, std::int64_t D, const Ids& ids);
Vec add(const Vec& a, const Vec& b);  // b repeats over a
Vec linear(const Vec& x, std::int64_t in, const Vec& w, std::int64_t out, const Vec& bias);
Vec layer_norm(const Vec& x, std::int64_t D, const Vec& w, const Vec& b, double eps);
Vec gelu_tanh(const Vec& x);
Vec attention(const Vec& qkv, std::int64_t B, std::int64_t S, std::int64_t D, std::int64_t H, bool causal);
double cross_entropy(const Vec& logits, std::int64_t V, const Ids& targets);
Vec rms_norm(const Vec& x, std::int64_t D, const Vec& w, double eps);
Vec rotary(const Vec& x, std::int64_t S, std::int64_t W, std::int64_t head_dim, double theta);
Vec gelu_erf(const Vec& x);
Vec silu(const Vec& x);
Vec swiglu(const Vec& gate, const Vec& up);
// Separate q[B,S,H hd], k and v [B,S,Hkv hd]; query head h uses kv head h / (H / Hkv).
Vec attention_gqa(const Vec& q, const Vec& k, const Vec& v, std::int64_t B, std::int64_t S, std::int64_t H,
                  std::int64_t Hkv, std::int64_t hd, bool causal);

}  // namespace remat::test::ref
