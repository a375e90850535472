#include "datasets/batch_source.hpp"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "autodiff/error.hpp"
#include "autodiff/rng.hpp"
#include "datasets/token_file.hpp"

namespace remat {
namespace {

class RandomSource final : public BatchSource {
 public:
  RandomSource(std::int64_t B, std::int64_t S, std::int64_t V, std::uint64_t seed) : B_(B), S_(S), V_(V), seed_(seed) {}
  Batch next() override { return random_batch(B_, S_, V_, seed_ + step_++); }
  std::string describe() const override { return "random (seed " + std::to_string(seed_) + ")"; }

 private:
  std::int64_t B_, S_, V_;
  std::uint64_t seed_, step_ = 0;
};

// Sequences whose second half repeats the first, copied or reversed; the
// target of each position is the token after it.
class TaskSource final : public BatchSource {
 public:
  TaskSource(bool reverse, std::int64_t B, std::int64_t S, std::int64_t V, std::uint64_t seed)
      : reverse_(reverse), B_(B), S_(S), V_(V), seed_(seed) {}
  Batch next() override {
    std::vector<std::int32_t> tokens(std::size_t(B_ * S_)), targets(tokens.size());
    const std::int64_t half = (S_ + 1) / 2;
    for (std::int64_t b = 0; b < B_; ++b) {
      std::vector<std::int32_t> seq(std::size_t(S_ + 1));
      for (std::int64_t i = 0; i < half; ++i)
        seq[i] = std::int32_t(rng::bits(seed_, step_, std::uint64_t(b * S_ + i)) % std::uint64_t(V_));
      for (std::int64_t i = half; i <= S_; ++i) {
        const std::int64_t j = i - half;
        seq[i] = seq[reverse_ ? (half - 1 - j % half) : j % half];
      }
      for (std::int64_t i = 0; i < S_; ++i) {
        tokens[b * S_ + i] = seq[i];
        targets[b * S_ + i] = seq[i + 1];
      }
    }
    ++step_;
    return {Tensor::from_host(tokens, {B_, S_}, "tokens"), Tensor::from_host(targets, {B_, S_}, "targets")};
  }
  std::string describe() const override { return reverse_ ? "reverse task" : "copy task"; }

 private:
  bool reverse_;
  std::int64_t B_, S_, V_;
  std::uint64_t seed_, step_ = 0;
};

// Consecutive windows of a token stream: tokens = stream[k .. k+BS),
// targets = stream[k+1 .. k+BS+1); wraps around at the end.
class StreamSource final : public BatchSource {
 public:
  StreamSource(std::vector<std::int32_t> stream, std::string what, std::int64_t B, std::int64_t S)
      : stream_(std::move(stream)), what_(std::move(what)), B_(B), S_(S) {
    if (std::int64_t(stream_.size()) < B * S + 1)
      throw UserError(what_ + " holds " + std::to_string(stream_.size()) + " tokens; one batch of [" +
                      std::to_string(B) + ", " + std::to_string(S) + "] needs " + std::to_string(B * S + 1));
  }
  Batch next() override {
    const std::int64_t n = B_ * S_;
    if (offset_ + n + 1 > std::int64_t(stream_.size())) offset_ = 0;
    std::vector<std::int32_t> tokens(stream_.begin() + offset_, stream_.begin() + offset_ + n);
    std::vector<std::int32_t> targets(stream_.begin() + offset_ + 1, stream_.begin() + offset_ + n + 1);
    offset_ += n;
    return {Tensor::from_host(tokens, {B_, S_}, "tokens"), Tensor::from_host(targets, {B_, S_}, "targets")};
  }
  std::string describe() const override { return what_; }

 private:
  std::vector<std::int32_t> stream_;
  std::string what_;
  std::int64_t B_, S_, offset_ = 0;
};

std::vector<std::int32_t> read_bytes(const std::string& path, std::int64_t V) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw UserError("text:" + path + ": no such file");
  if (!std::filesystem::is_regular_file(path, ec)) throw UserError("text:" + path + ": not a regular file");
  if (V < 256) throw UserError("text:" + path + ": byte-level text needs a vocabulary of 256, the model has V = " + std::to_string(V));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError("text:" + path + ": cannot read the file");
  std::vector<std::int32_t> out;
  try {
    for (std::istreambuf_iterator<char> it(in), end; it != end; ++it)
      out.push_back(std::int32_t(static_cast<unsigned char>(*it)));
  } catch (const std::exception&) {
    throw UserError("text:" + path + ": cannot read the file");
  }
  if (in.bad()) throw UserError("text:" + path + ": cannot read the file");
  return out;
}

}  // namespace

namespace {

// "h5:PATH[:DATASET]" -> {PATH, DATASET}.
std::pair<std::string, std::string> token_file_spec(const std::string& spec) {
  std::string rest = spec.substr(3), dataset = "tokens";
  if (const auto colon = rest.rfind(':'); colon != std::string::npos && colon > 0) {
    dataset = rest.substr(colon + 1);
    rest = rest.substr(0, colon);
  }
  return {rest, dataset};
}

}  // namespace

std::string batch_source_file(const std::string& spec) {
  if (spec.rfind("text:", 0) == 0) return spec.substr(5);
  if (spec.rfind("h5:", 0) == 0) return token_file_spec(spec).first;
  return "";
}

std::unique_ptr<BatchSource> make_batch_source(const std::string& spec, std::int64_t B, std::int64_t S,
                                               std::int64_t V, std::uint64_t seed) {
  if (spec == "random") return std::make_unique<RandomSource>(B, S, V, seed);
  if (spec == "copy" || spec == "reverse") return std::make_unique<TaskSource>(spec == "reverse", B, S, V, seed);
  if (spec.rfind("text:", 0) == 0) {
    const std::string path = spec.substr(5);
    if (path.empty()) throw UserError("data source 'text:' names no file (text:PATH)");
    return std::make_unique<StreamSource>(read_bytes(path, V), "text " + path, B, S);
  }
  if (spec.rfind("h5:", 0) == 0) {
    const auto [rest, dataset] = token_file_spec(spec);
    if (rest.empty() || dataset.empty()) throw UserError("data source '" + spec + "': expected h5:PATH[:DATASET]");
    return std::make_unique<StreamSource>(read_token_file(rest, dataset, V), "tokens " + rest + ":" + dataset, B, S);
  }
  throw UserError("unknown data source '" + spec + "' (random, copy, reverse, text:PATH, h5:PATH[:DATASET])");
}

}  // namespace remat
