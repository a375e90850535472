// zoo/gpt2: docs/models.md's names, shapes and initialisation, and gradients of
// the whole model against finite differences in float64.
#include <cmath>

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

TEST_CASE("gpt2 parameters have docs/models.md's names and shapes", "[zoo][gpt2]") {
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

TEST_CASE("gpt2 initialisation follows docs/models.md and depends only on the seed", "[zoo][gpt2]") {
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

TEST_CASE("models and presets are looked up by name with helpful errors", "[zoo][errors]") {
  CHECK_THROWS_WITH(models().find("gpt5"), test::Contains("unknown model 'gpt5'") && test::Contains("gpt2"));
  CHECK_THROWS_WITH(preset_sizes("huge"), test::Contains("unknown preset 'huge'") && test::Contains("tiny"));
  Sizes z = preset_sizes("tiny");
  z.H = 5;
  CHECK_THROWS_WITH(validate(z), test::Contains("H = 5 does not divide D = 32"));
}
