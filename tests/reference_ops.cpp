#include "reference_ops.hpp"

#include <algorithm>
#include <cmath>

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

}  // namespace remat::test::ref
