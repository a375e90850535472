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

Vec scale(const Vec& x, double s);
// Inverted dropout with the mask the RNG's stream draws: keep where
// uniform(seed, stream, i) > p.
Vec dropout(const Vec& x, double p, std::uint64_t seed, std::uint64_t stream);
// Softmax over rows of `cols`.
Vec softmax(const Vec& x, std::int64_t cols);

// Top-k routing of probs[T, E]: each token's experts, most probable first
// (ties to the lower index); the dispatched row of each (token, choice),
// rows grouped by expert and tokens in order within one; rows per expert.
struct Routing {
  Ids selected, slots;
  std::vector<std::int64_t> counts;
};
Routing route_top_k(const Vec& probs, std::int64_t E, int k);
Vec routing_weights(const Vec& probs, std::int64_t E, const Routing& r, int k);
Vec dispatch(const Vec& x, std::int64_t D, const Routing& r, int k);
// rows[T k, in] through expert weights[e][out, in], row i by the expert that owns slot i.
Vec grouped_linear(const Vec& rows, std::int64_t in, const std::vector<Vec>& weights, std::int64_t out,
                   const Routing& r, int k);
Vec combine(const Vec& rows, std::int64_t D, const Vec& weights, const Routing& r, int k);
Vec sum_rows(const Vec& x, std::int64_t cols);
Vec expert_load(const Vec& load, std::int64_t E, int layer, const Routing& r);
double load_balancing_loss(const Vec& prob_sums, const Vec& load, std::int64_t rows);

}  // namespace remat::test::ref
