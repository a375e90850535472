// zoo/gpt2: MODELS.md's names, shapes and initialisation, and gradients of
// the whole model against finite differences in float64.
#include <cmath>

#include "autodiff/tape.hpp"
#include "catch.hpp"
#include "helpers.hpp"
#include "zoo/model.hpp"

using namespace remat;

namespace {

std::unique_ptr<Model> gpt2(const Sizes& s) { return models().find("gpt2").make(s); }

double stddev(const std::vector<double>& v) {
  double s = 0, q = 0;
  for (double x : v) s += x, q += x * x;
  const double m = s / v.size();
  return std::sqrt(q / v.size() - m * m);
}

}  // namespace

TEST_CASE("gpt2 parameters have MODELS.md's names and shapes", "[zoo][gpt2]") {
  const Sizes z = preset_sizes("tiny");
  const auto specs = gpt2(z)->params();
  std::map<std::string, Shape> got;
  for (const auto& s : specs) got[s.name] = s.shape;
  const std::int64_t V = z.V, D = z.D, S = z.S_max;
  std::map<std::string, Shape> want = {{"wte.weight", {V, D}}, {"wpe.weight", {S, D}}, {"ln_f.weight", {D}},
                                       {"ln_f.bias", {D}}};
  for (int i = 0; i < z.L; ++i) {
    const std::string h = "h." + std::to_string(i) + ".";
    for (const char* ln : {"ln_1", "ln_2"}) want[h + ln + ".weight"] = want[h + ln + ".bias"] = {D};
    want[h + "attn.c_attn.weight"] = {3 * D, D};
    want[h + "attn.c_attn.bias"] = {3 * D};
    want[h + "attn.c_proj.weight"] = {D, D};
    want[h + "attn.c_proj.bias"] = {D};
    want[h + "mlp.c_fc.weight"] = {4 * D, D};
    want[h + "mlp.c_fc.bias"] = {4 * D};
    want[h + "mlp.c_proj.weight"] = {D, 4 * D};
    want[h + "mlp.c_proj.bias"] = {D};
  }
  CHECK(got == want);
  CHECK(specs.size() == want.size());
  CHECK(count_params(specs) == V * D + S * D + z.L * (12 * D * D + 13 * D) + 2 * D);
}

TEST_CASE("gpt2 initialisation follows MODELS.md and depends only on the seed", "[zoo][gpt2]") {
  const Sizes z = preset_sizes("small");
  const auto model = gpt2(z);
  ParamStore a(model->params(), DType::f32), b(model->params(), DType::f32), c(model->params(), DType::f32);
  initialize(a, 7, z.L);
  initialize(b, 7, z.L);
  initialize(c, 8, z.L);
  CHECK(stddev(a["wte.weight"].to_host_f64()) == test::Approx(0.02).epsilon(0.02));
  CHECK(stddev(a["h.3.mlp.c_fc.weight"].to_host_f64()) == test::Approx(0.02).epsilon(0.02));
  CHECK(stddev(a["h.3.mlp.c_proj.weight"].to_host_f64()) == test::Approx(0.02 / std::sqrt(24.0)).epsilon(0.02));
  CHECK(stddev(a["h.0.attn.c_proj.weight"].to_host_f64()) == test::Approx(0.02 / std::sqrt(24.0)).epsilon(0.02));
  for (double v : a["h.1.attn.c_attn.bias"].to_host_f64()) REQUIRE(v == 0);
  for (double v : a["h.1.ln_2.weight"].to_host_f64()) REQUIRE(v == 1);
  CHECK(a["h.2.attn.c_attn.weight"].to_host_f64() == b["h.2.attn.c_attn.weight"].to_host_f64());
  CHECK(a["h.2.attn.c_attn.weight"].to_host_f64() != c["h.2.attn.c_attn.weight"].to_host_f64());
  // Keyed by name, not by position: the same tensor at another depth differs.
  CHECK(a["h.2.attn.c_attn.weight"].to_host_f64() != a["h.3.attn.c_attn.weight"].to_host_f64());
}

TEST_CASE("gpt2 gradients match finite differences of the whole model in float64", "[zoo][gpt2][gradcheck]") {
  Sizes z = preset_sizes("tiny");
  z.L = 2;
  const auto model = gpt2(z);
  ParamStore p(model->params(), DType::f64);
  initialize(p, 3, z.L);
  // Larger weights than the 0.02 init, so every path carries signal.
  for (const auto& t : p.tensors()) test::upload(t, test::random_values(t.numel(), std::hash<std::string>{}(t.label()), -0.3, 0.3));
  const Batch batch = random_batch(z.B, z.S, z.V, 5);

  p.zero_grad();
  backward(model->loss(p, batch));
  NoGradScope no_grad;
  double worst = 0;
  std::string where;
  for (std::size_t i = 0; i < p.tensors().size(); ++i) {
    const Tensor& t = p.tensors()[i];
    const auto grad = t.grad().to_host_f64();
    auto values = t.to_host_f64();
    for (std::int64_t j : {std::int64_t(0), t.numel() / 2, t.numel() - 1}) {
      const double keep = values[j], eps = 1e-6;
      values[j] = keep + eps;
      test::upload(t, values);
      const double plus = model->loss(p, batch).item();
      values[j] = keep - eps;
      test::upload(t, values);
      const double minus = model->loss(p, batch).item();
      values[j] = keep;
      test::upload(t, values);
      const double numeric = (plus - minus) / (2 * eps);
      const double err = std::abs(grad[j] - numeric) / (1e-3 + std::abs(numeric));
      if (err > worst) worst = err, where = p.names()[i] + "[" + std::to_string(j) + "]";
    }
  }
  INFO("worst at " << where);
  CHECK(worst < 1e-5);
}

TEST_CASE("gpt2 in float32 agrees with float64 on the same weights", "[zoo][gpt2]") {
  const Sizes z = preset_sizes("tiny");
  const auto model = gpt2(z);
  ParamStore p32(model->params(), DType::f32), p64(model->params(), DType::f64);
  initialize(p32, 1, z.L);
  initialize(p64, 1, z.L);
  const Batch batch = random_batch(z.B, z.S, z.V, 1);
  NoGradScope no_grad;
  CHECK(model->loss(p32, batch).item() == test::Approx(model->loss(p64, batch).item()).epsilon(1e-6));
}

TEST_CASE("models and presets are looked up by name with helpful errors", "[zoo][errors]") {
  CHECK_THROWS_WITH(models().find("gpt5"), test::Contains("unknown model 'gpt5'") && test::Contains("gpt2"));
  CHECK_THROWS_WITH(preset_sizes("huge"), test::Contains("unknown preset 'huge'") && test::Contains("tiny"));
  Sizes z = preset_sizes("tiny");
  z.H = 5;
  CHECK_THROWS_WITH(validate(z), test::Contains("H = 5 does not divide D = 32"));
}
