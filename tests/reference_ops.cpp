#include "reference_ops.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "autodiff/rng.hpp"

namespace remat::test::ref {

Vec embedding(const Vec& w, std::int64_t D, const Ids& ids) {
  Vec y;
  for (auto id : ids)
    for (std::int64_t d = 0; d < D; ++d) y.push_back(w[id * D + d]);
  return y;
}

Vec add(const Vec& a, const Vec& b) {
  Vec y(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) y[i] = a[i] + b[i % b.size()];
  return y;
}

Vec linear(const Vec& x, std::int64_t in, const Vec& w, std::int64_t out, const Vec& bias) {
  const std::int64_t M = std::int64_t(x.size()) / in;
  Vec y(std::size_t(M * out));
  for (std::int64_t m = 0; m < M; ++m)
    for (std::int64_t o = 0; o < out; ++o) {
      double s = bias.empty() ? 0 : bias[o];
      for (std::int64_t i = 0; i < in; ++i) s += x[m * in + i] * w[o * in + i];
      y[m * out + o] = s;
    }
  return y;
}

Vec layer_norm(const Vec& x, std::int64_t D, const Vec& w, const Vec& b, double eps) {
  Vec y(x.size());
  for (std::size_t r = 0; r < x.size() / D; ++r) {
    double mean = 0, var = 0;
    for (std::int64_t j = 0; j < D; ++j) mean += x[r * D + j] / D;
    for (std::int64_t j = 0; j < D; ++j) var += (x[r * D + j] - mean) * (x[r * D + j] - mean) / D;
    for (std::int64_t j = 0; j < D; ++j) y[r * D + j] = (x[r * D + j] - mean) / std::sqrt(var + eps) * w[j] + b[j];
  }
  return y;
}

Vec gelu_tanh(const Vec& x) {
  Vec y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i)
    y[i] = 0.5 * x[i] * (1 + std::tanh(std::sqrt(2 / M_PI) * (x[i] + 0.044715 * std::pow(x[i], 3))));
  return y;
}

Vec attention(const Vec& qkv, std::int64_t B, std::int64_t S, std::int64_t D, std::int64_t H, bool causal) {
  const std::int64_t hd = D / H;
  Vec y(std::size_t(B * S * D));
  auto at = [&](std::int64_t b, std::int64_t s, std::int64_t part, std::int64_t h, std::int64_t e) {
    return qkv[(b * S + s) * 3 * D + part * D + h * hd + e];
  };
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t i = 0; i < S; ++i) {
        Vec p(std::size_t(S), 0.0);
        double mx = -INFINITY;
        for (std::int64_t j = 0; j < S; ++j) {
          if (causal && j > i) continue;
          double s = 0;
          for (std::int64_t e = 0; e < hd; ++e) s += at(b, i, 0, h, e) * at(b, j, 1, h, e);
          p[j] = s / std::sqrt(double(hd));
          mx = std::max(mx, p[j]);
        }
        double sum = 0;
        for (std::int64_t j = 0; j < S; ++j) {
          p[j] = (causal && j > i) ? 0 : std::exp(p[j] - mx);
          sum += p[j];
        }
        for (std::int64_t e = 0; e < hd; ++e) {
          double acc = 0;
          for (std::int64_t j = 0; j < S; ++j) acc += p[j] / sum * at(b, j, 2, h, e);
          y[(b * S + i) * D + h * hd + e] = acc;
        }
      }
  return y;
}

double cross_entropy(const Vec& logits, std::int64_t V, const Ids& targets) {
  double total = 0;
  for (std::size_t r = 0; r < targets.size(); ++r) {
    double mx = -INFINITY, sum = 0;
    for (std::int64_t j = 0; j < V; ++j) mx = std::max(mx, logits[r * V + j]);
    for (std::int64_t j = 0; j < V; ++j) sum += std::exp(logits[r * V + j] - mx);
    total += mx + std::log(sum) - logits[r * V + targets[r]];
  }
  return total / double(targets.size());
}

Vec rms_norm(const Vec& x, std::int64_t D, const Vec& w, double eps) {
  Vec y(x.size());
  for (std::size_t r = 0; r < x.size() / D; ++r) {
    double ms = 0;
    for (std::int64_t j = 0; j < D; ++j) ms += x[r * D + j] * x[r * D + j] / D;
    for (std::int64_t j = 0; j < D; ++j) y[r * D + j] = x[r * D + j] / std::sqrt(ms + eps) * w[j];
  }
  return y;
}

Vec rotary(const Vec& x, std::int64_t S, std::int64_t W, std::int64_t hd, double theta) {
  Vec y(x.size());
  for (std::size_t r = 0; r < x.size() / W; ++r)
    for (std::int64_t h = 0; h < W / hd; ++h)
      for (std::int64_t j = 0; j < hd / 2; ++j) {
        const double angle = double(r % S) * std::pow(theta, -2.0 * j / hd);
        const std::size_t a = r * W + h * hd + j, b = a + hd / 2;
        y[a] = x[a] * std::cos(angle) - x[b] * std::sin(angle);
        y[b] = x[b] * std::cos(angle) + x[a] * std::sin(angle);
      }
  return y;
}

Vec gelu_erf(const Vec& x) {
  Vec y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) y[i] = 0.5 * x[i] * (1 + std::erf(x[i] / std::sqrt(2.0)));
  return y;
}

Vec silu(const Vec& x) {
  Vec y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) y[i] = x[i] / (1 + std::exp(-x[i]));
  return y;
}

Vec swiglu(const Vec& gate, const Vec& up) {
  Vec y = silu(gate);
  for (std::size_t i = 0; i < y.size(); ++i) y[i] *= up[i];
  return y;
}

Vec attention_gqa(const Vec& q, const Vec& k, const Vec& v, std::int64_t B, std::int64_t S, std::int64_t H,
                  std::int64_t Hkv, std::int64_t hd, bool causal) {
  // Pack into one qkv per (query head) and reuse the multi-head reference.
  Vec qkv(std::size_t(B * S * 3 * H * hd));
  const std::int64_t D = H * hd;
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t s = 0; s < S; ++s)
      for (std::int64_t h = 0; h < H; ++h)
        for (std::int64_t e = 0; e < hd; ++e) {
          const std::int64_t kvh = h / (H / Hkv), row = b * S + s;
          qkv[row * 3 * D + h * hd + e] = q[row * D + h * hd + e];
          qkv[row * 3 * D + D + h * hd + e] = k[row * Hkv * hd + kvh * hd + e];
          qkv[row * 3 * D + 2 * D + h * hd + e] = v[row * Hkv * hd + kvh * hd + e];
        }
  return attention(qkv, B, S, D, H, causal);
}

Vec scale(const Vec& x, double s) {
  Vec y(x);
  for (double& v : y) v *= s;
  return y;
}

Vec dropout(const Vec& x, double p, std::uint64_t seed, std::uint64_t stream) {
  Vec y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i)
    y[i] = rng::uniform(seed, stream, std::uint64_t(i)) > p ? x[i] / (1 - p) : 0.0;
  return y;
}

Vec softmax(const Vec& x, std::int64_t cols) {
  Vec y(x.size());
  for (std::size_t r = 0; r < x.size() / std::size_t(cols); ++r) {
    const double* row = x.data() + r * cols;
    const double m = *std::max_element(row, row + cols);
    double sum = 0;
    for (std::int64_t j = 0; j < cols; ++j) sum += std::exp(row[j] - m);
    for (std::int64_t j = 0; j < cols; ++j) y[r * cols + j] = std::exp(row[j] - m) / sum;
  }
  return y;
}

Routing route_top_k(const Vec& probs, std::int64_t E, int k) {
  const std::int64_t T = std::int64_t(probs.size()) / E;
  Routing r;
  r.counts.assign(std::size_t(E), 0);
  for (std::int64_t t = 0; t < T; ++t) {
    std::vector<std::int32_t> order(static_cast<std::size_t>(E));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](std::int32_t a, std::int32_t b) { return probs[t * E + a] > probs[t * E + b]; });
    for (int j = 0; j < k; ++j) r.selected.push_back(order[std::size_t(j)]), ++r.counts[std::size_t(order[j])];
  }
  std::vector<std::int64_t> next(std::size_t(E), 0);  // the next free row of each expert
  for (std::int64_t e = 1; e < E; ++e) next[std::size_t(e)] = next[std::size_t(e - 1)] + r.counts[std::size_t(e - 1)];
  for (std::int32_t e : r.selected) r.slots.push_back(std::int32_t(next[std::size_t(e)]++));
  return r;
}

Vec routing_weights(const Vec& probs, std::int64_t E, const Routing& r, int k) {
  Vec w(r.selected.size());
  for (std::size_t t = 0; t < r.selected.size() / std::size_t(k); ++t) {
    double sum = 0;
    for (int j = 0; j < k; ++j) sum += probs[t * E + r.selected[t * k + j]];
    for (int j = 0; j < k; ++j) w[t * k + j] = probs[t * E + r.selected[t * k + j]] / sum;
  }
  return w;
}

Vec dispatch(const Vec& x, std::int64_t D, const Routing& r, int k) {
  Vec y(r.slots.size() * std::size_t(D));
  for (std::size_t i = 0; i < r.slots.size(); ++i)
    for (std::int64_t d = 0; d < D; ++d) y[r.slots[i] * D + d] = x[(i / std::size_t(k)) * D + d];
  return y;
}

Vec grouped_linear(const Vec& rows, std::int64_t in, const std::vector<Vec>& weights, std::int64_t out,
                   const Routing& r, int k) {
  (void)k;
  Vec y(r.slots.size() * std::size_t(out));
  for (std::size_t i = 0; i < r.slots.size(); ++i) {
    const std::int64_t slot = r.slots[i];
    const Vec& w = weights[std::size_t(r.selected[i])];
    for (std::int64_t o = 0; o < out; ++o) {
      double s = 0;
      for (std::int64_t j = 0; j < in; ++j) s += rows[slot * in + j] * w[o * in + j];
      y[slot * out + o] = s;
    }
  }
  return y;
}

Vec combine(const Vec& rows, std::int64_t D, const Vec& weights, const Routing& r, int k) {
  const std::size_t T = r.slots.size() / std::size_t(k);
  Vec y(T * std::size_t(D), 0.0);
  for (std::size_t t = 0; t < T; ++t)
    for (int j = 0; j < k; ++j)
      for (std::int64_t d = 0; d < D; ++d) y[t * D + d] += weights[t * k + j] * rows[r.slots[t * k + j] * D + d];
  return y;
}

Vec sum_rows(const Vec& x, std::int64_t cols) {
  Vec y(std::size_t(cols), 0.0);
  for (std::size_t i = 0; i < x.size(); ++i) y[i % std::size_t(cols)] += x[i];
  return y;
}

Vec expert_load(const Vec& load, std::int64_t E, int layer, const Routing& r) {
  Vec y(load);
  for (std::int64_t e = 0; e < E; ++e) y[std::size_t(layer * E + e)] += double(r.counts[std::size_t(e)]);
  return y;
}

double load_balancing_loss(const Vec& prob_sums, const Vec& load, std::int64_t rows) {
  const std::size_t E = prob_sums.size();
  double acc = 0;
  for (std::size_t e = 0; e < E; ++e) {
    double count = 0;
    for (std::size_t l = 0; l < load.size() / E; ++l) count += load[l * E + e];
    acc += count / double(rows) * prob_sums[e] / double(rows);
  }
  return double(E) * acc;
}

}  // namespace remat::test::ref
