#include "zoo/configs.hpp"

#include "core/error.hpp"

namespace remat {
namespace {

PublishedConfig row(const char* name, const char* model, int L, int D, int H, int Hkv, int F, int V, int S_max,
                    std::int64_t parameters, double theta = 10000, int E = 0, int K = 0) {
  Sizes z;
  z.L = L, z.D = D, z.H = H, z.Hkv = Hkv, z.F = F, z.V = V, z.S_max = S_max, z.S = S_max, z.B = 1;
  z.theta = theta, z.E = E, z.K = K;
  return {name, model, z, parameters};
}

// LLaMA-1's RMSNorm epsilon (its config.json: rms_norm_eps 1e-6).
PublishedConfig llama1(PublishedConfig c) {
  c.sizes.eps = 1e-6;
  return c;
}

}  // namespace

const std::vector<PublishedConfig>& published_configs() {
  // Tied head for gpt2 (its position table holds S_max rows), untied for
  // llama and mixtral; gpt2's F is 4D.
  static const std::vector<PublishedConfig> table = {
      row("gpt2-124m", "gpt2", 12, 768, 12, 12, 3072, 50257, 1024, 124439808),
      row("gpt2-355m", "gpt2", 24, 1024, 16, 16, 4096, 50257, 1024, 354823168),
      row("gpt2-774m", "gpt2", 36, 1280, 20, 20, 5120, 50257, 1024, 774030080),
      row("gpt2-1.5b", "gpt2", 48, 1600, 25, 25, 6400, 50257, 1024, 1557611200),
      row("llama-7b", "llama", 32, 4096, 32, 32, 11008, 32000, 4096, 6738415616),
      row("llama-13b", "llama", 40, 5120, 40, 40, 13824, 32000, 4096, 13015864320),
      row("llama-70b", "llama", 80, 8192, 64, 8, 28672, 32000, 4096, 68976648192),
      row("llama3-8b", "llama", 32, 4096, 32, 8, 14336, 128256, 8192, 8030261248, 500000),
      row("mixtral-8x7b", "mixtral", 32, 4096, 32, 8, 14336, 32000, 32768, 46702792704, 1e6, 8, 2),
      llama1(row("llama-33b", "llama", 60, 6656, 52, 52, 17920, 32000, 2048, 32528943616)),
      llama1(row("llama-65b", "llama", 80, 8192, 64, 64, 22016, 32000, 2048, 65285660672)),
      row("llama3-70b", "llama", 80, 8192, 64, 8, 28672, 128256, 8192, 70553706496, 500000),
      row("llama3-405b", "llama", 126, 16384, 128, 8, 53248, 128256, 8192, 405853388800, 500000),
      // Korthikanti et al. 2022's models: gpt2's architecture, its vocabulary padded to 51200 as Megatron pads it.
      row("megatron-22b", "gpt2", 48, 6144, 64, 64, 24576, 51200, 2048, 22074273792),
      row("gpt3-175b", "gpt2", 96, 12288, 96, 96, 49152, 51200, 2048, 174615846912),
      row("mt-nlg-530b", "gpt2", 105, 20480, 128, 128, 81920, 51200, 2048, 529600819200),
      row("megatron-1t", "gpt2", 128, 25600, 160, 160, 102400, 51200, 2048, 1008038758400),
  };
  return table;
}

std::vector<std::string> config_names() {
  std::vector<std::string> names;
  for (const auto& c : published_configs()) names.push_back(c.name);
  return names;
}

const PublishedConfig& published_config(const std::string& name) {
  for (const auto& c : published_configs())
    if (c.name == name) return c;
  std::string known;
  for (const auto& n : config_names()) known += (known.empty() ? "" : ", ") + n;
  throw UserError("unknown configuration '" + name + "' (known: " + known + ")");
}

}  // namespace remat
