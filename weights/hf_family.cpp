#include "weights/hf_family.hpp"

#include <cmath>
#include <regex>

#include "core/error.hpp"

namespace remat::hf {
namespace {

using Json = nlohmann::json;

// Reading config.json: every key the math depends on, checked by name.
class ConfigReader {
 public:
  ConfigReader(const Json& config, std::string file, std::string family)
      : c_(config), file_(std::move(file)), family_(std::move(family)) {}

  [[noreturn]] void refuse(const std::string& key, const std::string& why) const {
    throw UserError(file_ + ": '" + key + "' " + why);
  }
  bool has(const std::string& key) const { return c_.contains(key) && !c_[key].is_null(); }

  int size(const std::string& key) const {
    if (!has(key)) refuse(key, "is missing (a " + family_ + " config.json names it)");
    const Json& v = c_[key];
    if (!v.is_number_integer() || v.get<std::int64_t>() < 1 || v.get<std::int64_t>() > (std::int64_t(1) << 30))
      refuse(key, "= " + v.dump() + " is not a positive size");
    return int(v.get<std::int64_t>());
  }
  int size_or(const std::string& key, int fallback) const { return has(key) ? size(key) : fallback; }

  double number_or(const std::string& key, double fallback) const {
    if (!has(key)) return fallback;
    if (!c_[key].is_number()) refuse(key, "= " + c_[key].dump() + " is not a number");
    return c_[key].get<double>();
  }
  // `key` must hold `want` (absent means the family's default `fallback`).
  void require_number(const std::string& key, double fallback, double want, const std::string& what) const {
    const double v = number_or(key, fallback);
    if (std::abs(v - want) > 1e-9 * std::abs(want))
      refuse(key, "= " + (has(key) ? c_[key].dump() : std::to_string(fallback) + " (the default)") + ": remat's " +
                      family_ + " implements " + what);
  }
  void require_bool(const std::string& key, bool fallback, bool want, const std::string& what) const {
    bool v = fallback;
    if (has(key)) {
      if (!c_[key].is_boolean()) refuse(key, "= " + c_[key].dump() + " is not true or false");
      v = c_[key].get<bool>();
    }
    if (v != want) refuse(key, "= " + std::string(v ? "true" : "false") + ": remat's " + family_ + " implements " + what);
  }
  void require_string(const std::string& key, const std::vector<std::string>& accepted, const std::string& what) const {
    if (has(key) && !c_[key].is_string()) refuse(key, "= " + c_[key].dump() + " is not a string");
    const std::string v = has(key) ? c_[key].get<std::string>() : "";
    for (const auto& a : accepted)
      if (v == a) return;
    refuse(key, "= " + (has(key) ? c_[key].dump() : std::string("(missing)")) + ": remat's " + family_ +
                    " implements " + what);
  }
  void require_null(const std::string& key, const std::string& what) const {
    if (has(key)) refuse(key, "= " + c_[key].dump() + ": remat's " + family_ + " implements " + what);
  }

 private:
  const Json& c_;
  std::string file_, family_;
};

// The sizes a model folder does not carry, for commands that run it.
void run_sizes(Sizes& z) {
  z.S = std::min(z.S_max, 256);
  z.B = 1;
}

class Gpt2Family final : public HfFamily {
 public:
  std::string model() const override { return "gpt2"; }
  std::string architecture() const override { return "GPT2LMHeadModel"; }
  std::string model_type() const override { return "gpt2"; }

  Sizes sizes(const Json& config, const std::string& file) const override {
    const ConfigReader c(config, file, "gpt2");
    Sizes z;
    z.D = c.size("n_embd");
    z.L = c.size("n_layer");
    z.H = z.Hkv = c.size("n_head");
    z.V = c.size("vocab_size");
    z.S_max = c.has("n_positions") ? c.size("n_positions") : c.size("n_ctx");
    z.F = 4 * z.D;
    if (c.has("n_inner") && c.size("n_inner") != z.F)
      c.refuse("n_inner", "= " + std::to_string(c.size("n_inner")) + ": remat's gpt2 has an MLP of 4 n_embd = " +
                              std::to_string(z.F));
    c.require_string("activation_function", {"gelu_new", "gelu_pytorch_tanh"}, "the tanh approximation of GELU (gelu_new)");
    c.require_number("layer_norm_epsilon", 1e-5, 1e-5, "LayerNorm with eps 1e-5");
    c.require_bool("tie_word_embeddings", true, true, "a head tied to the token embedding");
    c.require_bool("scale_attn_weights", true, true, "attention scaled by 1/sqrt(head width)");
    c.require_bool("scale_attn_by_inverse_layer_idx", false, false, "no per-layer attention scaling");
    c.require_bool("add_cross_attention", false, false, "no cross-attention");
    run_sizes(z);
    return z;
  }

  nlohmann::ordered_json config(const Sizes& z) const override {
    return {{"architectures", {architecture()}}, {"model_type", model_type()}, {"vocab_size", z.V},
            {"n_positions", z.S_max}, {"n_ctx", z.S_max}, {"n_embd", z.D}, {"n_layer", z.L}, {"n_head", z.H},
            {"n_inner", nullptr}, {"activation_function", "gelu_new"}, {"layer_norm_epsilon", 1e-5},
            {"resid_pdrop", 0.0}, {"embd_pdrop", 0.0}, {"attn_pdrop", 0.0}, {"scale_attn_weights", true},
            {"scale_attn_by_inverse_layer_idx", false}, {"reorder_and_upcast_attn", false},
            {"tie_word_embeddings", true}, {"torch_dtype", "float32"}};
  }

  HfTensor tensor(const std::string& param, bool prefixed) const override {
    static const std::regex conv1d(R"(^h\.\d+\.(attn\.c_attn|attn\.c_proj|mlp\.c_fc|mlp\.c_proj)\.weight$)");
    return {(prefixed ? "transformer." : "") + param, std::regex_match(param, conv1d)};
  }

  bool buffer(const std::string& name) const override {
    static const std::regex mask(R"(^(transformer\.)?h\.\d+\.attn\.(bias|masked_bias)$)");
    return std::regex_match(name, mask);
  }
  std::string tied_head() const override { return "lm_head.weight"; }
  std::string tied_to(bool prefixed) const override { return prefixed ? "transformer.wte.weight" : "wte.weight"; }
};

// Llama's names: remat's llama (docs/models.md) to LlamaForCausalLM's.
std::string llama_name(const std::string& param) {
  static const std::vector<std::pair<std::regex, std::string>> rules = {
      {std::regex(R"(^tok_embeddings\.weight$)"), "model.embed_tokens.weight"},
      {std::regex(R"(^layers\.(\d+)\.attention_norm\.weight$)"), "model.layers.$1.input_layernorm.weight"},
      {std::regex(R"(^layers\.(\d+)\.attention\.wq\.weight$)"), "model.layers.$1.self_attn.q_proj.weight"},
      {std::regex(R"(^layers\.(\d+)\.attention\.wk\.weight$)"), "model.layers.$1.self_attn.k_proj.weight"},
      {std::regex(R"(^layers\.(\d+)\.attention\.wv\.weight$)"), "model.layers.$1.self_attn.v_proj.weight"},
      {std::regex(R"(^layers\.(\d+)\.attention\.wo\.weight$)"), "model.layers.$1.self_attn.o_proj.weight"},
      {std::regex(R"(^layers\.(\d+)\.attention\.wq\.bias$)"), "model.layers.$1.self_attn.q_proj.bias"},  // Qwen2
      {std::regex(R"(^layers\.(\d+)\.attention\.wk\.bias$)"), "model.layers.$1.self_attn.k_proj.bias"},
      {std::regex(R"(^layers\.(\d+)\.attention\.wv\.bias$)"), "model.layers.$1.self_attn.v_proj.bias"},
      {std::regex(R"(^layers\.(\d+)\.ffn_norm\.weight$)"), "model.layers.$1.post_attention_layernorm.weight"},
      {std::regex(R"(^layers\.(\d+)\.feed_forward\.w1\.weight$)"), "model.layers.$1.mlp.gate_proj.weight"},
      {std::regex(R"(^layers\.(\d+)\.feed_forward\.w2\.weight$)"), "model.layers.$1.mlp.down_proj.weight"},
      {std::regex(R"(^layers\.(\d+)\.feed_forward\.w3\.weight$)"), "model.layers.$1.mlp.up_proj.weight"},
      {std::regex(R"(^layers\.(\d+)\.(block_sparse_moe\..*)$)"), "model.layers.$1.$2"},  // mixtral's own names
      {std::regex(R"(^norm\.weight$)"), "model.norm.weight"},
      {std::regex(R"(^output\.weight$)"), "lm_head.weight"},
  };
  for (const auto& [pattern, replacement] : rules)
    if (std::regex_match(param, pattern)) return std::regex_replace(param, pattern, replacement);
  throw std::logic_error("no Hugging Face name for llama parameter '" + param + "'");
}

class LlamaFamily : public HfFamily {
 public:
  std::string model() const override { return "llama"; }
  std::string architecture() const override { return "LlamaForCausalLM"; }
  std::string model_type() const override { return "llama"; }
  bool serves(const Sizes& z) const override { return !z.qkv_bias; }

  Sizes sizes(const Json& config, const std::string& file) const override {
    const ConfigReader c(config, file, model());
    Sizes z;
    z.D = c.size("hidden_size");
    z.L = c.size("num_hidden_layers");
    z.H = c.size("num_attention_heads");
    z.Hkv = c.size_or("num_key_value_heads", z.H);
    z.F = c.size("intermediate_size");
    z.V = c.size("vocab_size");
    z.S_max = c.size("max_position_embeddings");
    if (c.has("head_dim") && (z.D % z.H != 0 || c.size("head_dim") != z.D / z.H))
      c.refuse("head_dim", "= " + std::to_string(c.size("head_dim")) + ": remat's " + model() +
                               " has heads of hidden_size / num_attention_heads");
    z.theta = c.number_or("rope_theta", default_theta());
    if (!(z.theta > 0)) c.refuse("rope_theta", "is not a positive rotary base");
    z.eps = c.number_or("rms_norm_eps", default_eps());
    if (!(z.eps > 0 && z.eps < 0.1)) c.refuse("rms_norm_eps", "is not a norm epsilon in (0, 0.1)");
    c.require_string("hidden_act", {"silu"}, "SwiGLU with silu");
    c.require_bool("tie_word_embeddings", false, false, "an output head of its own (untied)");
    c.require_bool("attention_bias", false, false, "attention without biases");
    c.require_bool("mlp_bias", false, false, "a feed-forward without biases");
    rope_scaling_of(config, file, z);
    check_more(c, z);
    run_sizes(z);
    return z;
  }

  // "rope_scaling": none, or Llama 3.1's ({"rope_type": "llama3", "factor": 8, ...}).
  void rope_scaling_of(const Json& config, const std::string& file, Sizes& z) const {
    const ConfigReader c(config, file, model());
    if (!c.has("rope_scaling")) return;
    const Json& r = config["rope_scaling"];
    const auto text = [&](const char* key) { return r.contains(key) && r[key].is_string() ? r[key].get<std::string>() : ""; };
    if (!r.is_object() || (text("rope_type") != "llama3" && text("type") != "llama3"))
      c.refuse("rope_scaling", "= " + r.dump() + ": remat's " + model() +
                                   " implements plain rotary positions and Llama 3.1's scaling (rope_type llama3)");
    const ConfigReader s(r, file + " (rope_scaling)", model());
    const double nan = std::nan("");
    z.rope_factor = s.number_or("factor", nan);
    z.rope_low_freq = s.number_or("low_freq_factor", nan);
    z.rope_high_freq = s.number_or("high_freq_factor", nan);
    z.rope_original = s.number_or("original_max_position_embeddings", nan);
    for (double v : {z.rope_factor, z.rope_low_freq, z.rope_high_freq, z.rope_original})
      if (!std::isfinite(v))
        c.refuse("rope_scaling", "= " + r.dump() + " lacks factor, low_freq_factor, high_freq_factor or "
                                                    "original_max_position_embeddings");
  }

  nlohmann::ordered_json config(const Sizes& z) const override {
    nlohmann::ordered_json j = {{"architectures", {architecture()}}, {"model_type", model_type()},
                                {"vocab_size", z.V}, {"hidden_size", z.D}, {"intermediate_size", z.F},
                                {"num_hidden_layers", z.L}, {"num_attention_heads", z.H},
                                {"num_key_value_heads", z.Hkv}, {"head_dim", z.D / z.H}, {"hidden_act", "silu"},
                                {"max_position_embeddings", z.S_max}, {"rms_norm_eps", z.eps},
                                {"rope_theta", z.theta}, {"rope_scaling", nullptr}, {"attention_bias", false},
                                {"attention_dropout", 0.0}, {"tie_word_embeddings", false},
                                {"torch_dtype", "float32"}};
    if (z.rope_factor > 0)
      j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", z.rope_factor}, {"low_freq_factor", z.rope_low_freq},
                           {"high_freq_factor", z.rope_high_freq},
                           {"original_max_position_embeddings", z.rope_original}};
    add_config(j, z);
    return j;
  }

  HfTensor tensor(const std::string& param, bool) const override { return {llama_name(param), false}; }

  bool buffer(const std::string& name) const override {
    static const std::regex inv_freq(R"(^model\.layers\.\d+\.self_attn\.rotary_emb\.inv_freq$)");
    return std::regex_match(name, inv_freq);
  }

 protected:
  virtual double default_theta() const { return 10000.0; }
  virtual double default_eps() const { return 1e-6; }  // LlamaConfig's default
  virtual void check_more(const ConfigReader&, Sizes&) const {}
  virtual void add_config(nlohmann::ordered_json& j, const Sizes&) const { j["mlp_bias"] = false; }
};

// Qwen2: llama with biases on the query, key and value projections (the
// zoo's llama with its qkv_bias attribute).
class Qwen2Family final : public LlamaFamily {
 public:
  std::string architecture() const override { return "Qwen2ForCausalLM"; }
  std::string model_type() const override { return "qwen2"; }
  bool serves(const Sizes& z) const override { return z.qkv_bias; }

 protected:
  void check_more(const ConfigReader& c, Sizes& z) const override {
    z.qkv_bias = true;
    c.require_bool("use_sliding_window", false, false, "full causal attention (no sliding window)");
  }
  void add_config(nlohmann::ordered_json& j, const Sizes&) const override {
    j.erase("attention_bias");  // Qwen2's are fixed: q, k and v have them, o has none
    j["use_sliding_window"] = false;
    j["sliding_window"] = nullptr;
  }
};

class MixtralFamily final : public LlamaFamily {
 public:
  std::string model() const override { return "mixtral"; }
  std::string architecture() const override { return "MixtralForCausalLM"; }
  std::string model_type() const override { return "mixtral"; }

 protected:
  double default_theta() const override { return 1e6; }  // MixtralConfig's default
  double default_eps() const override { return 1e-5; }
  void check_more(const ConfigReader& c, Sizes& z) const override {
    z.E = c.size("num_local_experts");
    z.K = c.size("num_experts_per_tok");
    if (z.K > z.E) c.refuse("num_experts_per_tok", "exceeds num_local_experts");
    c.require_null("sliding_window", "full causal attention (no sliding window)");
    c.require_number("router_jitter_noise", 0.0, 0.0, "routing without jitter");
  }
  void add_config(nlohmann::ordered_json& j, const Sizes& z) const override {
    j["num_local_experts"] = z.E;
    j["num_experts_per_tok"] = z.K;
    j["router_aux_loss_coef"] = z.router_aux;
    j["router_jitter_noise"] = 0.0;
    j["sliding_window"] = nullptr;
  }
};

const std::vector<const HfFamily*>& families() {
  static const Gpt2Family gpt2{};
  static const LlamaFamily llama{};
  static const MixtralFamily mixtral{};
  static const Qwen2Family qwen2{};
  static const std::vector<const HfFamily*> all = {&gpt2, &llama, &mixtral, &qwen2};
  return all;
}

std::string known_families() {
  std::string s;
  for (const HfFamily* f : families()) s += (s.empty() ? "" : ", ") + f->architecture() + " (" + f->model_type() + ")";
  return s;
}

}  // namespace

std::string HfFamily::module(const std::string& weight) const {
  std::string name = tensor(weight).name;
  const std::string suffix = ".weight";
  if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
    name.resize(name.size() - suffix.size());
  return name;
}

const HfFamily& family_of_config(const Json& config, const std::string& file) {
  if (!config.is_object()) throw UserError(file + ": not a JSON object");
  if (!config.contains("model_type")) throw UserError(file + ": 'model_type' is missing; remat reads " + known_families());
  if (!config["model_type"].is_string())
    throw UserError(file + ": 'model_type' = " + config["model_type"].dump() + " is not a string; remat reads " +
                    known_families());
  const std::string type = config["model_type"].get<std::string>();
  for (const HfFamily* f : families()) {
    if (f->model_type() != type) continue;
    if (config.contains("architectures") && !config["architectures"].is_null()) {
      const Json& a = config["architectures"];
      if (!a.is_array() || a.size() != 1 || !a[0].is_string() || a[0].get<std::string>() != f->architecture())
        throw UserError(file + ": 'architectures' = " + a.dump() + ": remat reads " + f->model_type() + " as " +
                        f->architecture() + " only");
    }
    return *f;
  }
  throw UserError(file + ": 'model_type' = \"" + type + "\" is not one remat reads (" + known_families() + ")");
}

const HfFamily& family_of_model(const ModelSetup& setup) {
  const std::string& model = setup.model;
  for (const HfFamily* f : families())
    if (f->model() == model && f->serves(setup.sizes)) return *f;
  std::string zoo;
  for (const HfFamily* f : families()) zoo += (zoo.empty() ? "" : ", ") + f->model();
  throw UserError("model '" + model + "' has no Hugging Face layout in remat (" + zoo + " have)");
}

}  // namespace remat::hf
