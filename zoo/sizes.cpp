#include "zoo/sizes.hpp"

#include "core/error.hpp"

namespace remat {

const std::vector<Preset>& presets() {
  // L, D, H, Hkv, F, S, S_max, V, B, E, K  (docs/models.md; deep and long
  // are the midpoints of their sweeps: --layers and --seq move them)
  static const std::vector<Preset> table = {
      {"tiny", {2, 32, 4, 2, 96, 16, 16, 64, 2, 4, 2}, "unit tests, finite differences"},
      {"small", {12, 256, 8, 2, 688, 256, 256, 256, 8, 8, 2}, "CPU strategy matrix and peer comparison"},
      {"deep", {16, 128, 4, 2, 344, 128, 128, 256, 4, 8, 2}, "memory growth with depth (L 4..64)"},
      {"long", {6, 256, 8, 2, 688, 512, 512, 256, 1, 8, 2}, "memory growth with sequence length (S 128..2048)"},
      {"gpu-medium", {24, 1024, 16, 4, 2816, 1024, 1024, 32768, 8, 8, 2}, "GPU strategy matrix"},
  };
  return table;
}

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const auto& p : presets()) names.push_back(p.name);
  return names;
}

Sizes preset_sizes(const std::string& name) {
  for (const auto& p : presets())
    if (p.name == name) return p.sizes;
  std::string known;
  for (const auto& n : preset_names()) known += (known.empty() ? "" : ", ") + n;
  throw UserError("unknown preset '" + name + "' (presets: " + known + ")");
}

void validate(const Sizes& s) {
  auto need = [](bool ok, const std::string& what) {
    if (!ok) throw UserError("invalid sizes: " + what);
  };
  need(s.L >= 1 && s.D >= 1 && s.H >= 1 && s.S >= 1 && s.V >= 1 && s.B >= 1, "L, D, H, S, V and B must be positive");
  // Far beyond any model this tool can run, and small enough that products
  // of sizes never overflow: a damaged file's L = 10^9 is refused here.
  auto at_most = [&](int v, int max, const char* name) {
    need(v <= max, std::string(name) + " = " + std::to_string(v) + " is beyond the largest supported, " + std::to_string(max));
  };
  at_most(s.L, 1 << 16, "L");
  at_most(s.D, 1 << 16, "D");
  at_most(s.H, 1 << 12, "H");
  at_most(s.F, 1 << 18, "F");
  at_most(s.S_max, 1 << 20, "S_max");
  at_most(s.V, 1 << 22, "V");
  at_most(s.B, 1 << 16, "B");
  need(s.D % s.H == 0, "H = " + std::to_string(s.H) + " does not divide D = " + std::to_string(s.D));
  need(s.Hkv >= 1 && s.H % s.Hkv == 0, "Hkv = " + std::to_string(s.Hkv) + " does not divide H = " + std::to_string(s.H));
  need(s.S_max >= s.S, "S = " + std::to_string(s.S) + " exceeds S_max = " + std::to_string(s.S_max));
  need(s.F >= 1, "F must be positive");
  need(s.dropout >= 0 && s.dropout < 1, "dropout must be in [0, 1)");
  at_most(s.E, 1 << 12, "E");
  need(s.E >= 0 && s.K >= 0 && s.K <= s.E, "K = " + std::to_string(s.K) + " experts per token must be in [0, E = " +
                                               std::to_string(s.E) + "]");
  need(s.theta > 0 && s.theta < 1e12, "the rotary base theta must be positive and finite");
  need(s.eps > 0 && s.eps < 0.1, "the norm epsilon eps must be in (0, 0.1)");
  need(s.rope_factor == 0 || (s.rope_factor >= 1 && s.rope_factor < 1e6 && s.rope_low_freq > 0 &&
                              s.rope_high_freq > s.rope_low_freq && s.rope_original >= 1 && s.rope_original < 1e9),
       "the rotary scaling needs factor >= 1, 0 < low_freq_factor < high_freq_factor and original positions >= 1");
  need(s.router_aux >= 0 && s.router_aux < 1e6, "the router's auxiliary loss weight must be >= 0");
}

const char* split_flag(int experts, int context) { return experts > 1 ? "--ep" : context > 1 ? "--cp" : "--tp"; }

}  // namespace remat
