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

}  // namespace remat::test::ref
