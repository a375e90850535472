#include "datasets/batch_source.hpp"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "autodiff/rng.hpp"
#include "core/error.hpp"
#include "datasets/token_file.hpp"

namespace remat {
namespace {

class RandomSource final : public BatchSource {
 public:
  RandomSource(std::int64_t B, std::int64_t S, std::int64_t V, std::uint64_t seed) : B_(B), S_(S), V_(V), seed_(seed) {}
  Batch next() override { return random_batch(B_, S_, V_, seed_ + step_++); }
  std::string describe() const override { return "random (seed " + std::to_string(seed_) + ")"; }
  std::uint64_t position() const override { return step_; }
  void seek(std::uint64_t n) override { step_ = n; }

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
  std::uint64_t position() const override { return step_; }
  void seek(std::uint64_t n) override { step_ = n; }

 private:
  bool reverse_;
  std::int64_t B_, S_, V_;
  std::uint64_t seed_, step_ = 0;
};

// Consecutive windows of a token stream: tokens = stream[k .. k+BS),
// targets = stream[k+1 .. k+BS+1). After the last whole batch an epoch
// ends and the next starts further on (e times a prime stride, wrapping
// round the stream's end into its start), so that no epoch repeats the
// windows of the one before.
class StreamSource final : public BatchSource {
 public:
  StreamSource(std::vector<std::int32_t> stream, std::string what, std::int64_t B, std::int64_t S)
      : stream_(std::move(stream)), what_(std::move(what)), B_(B), S_(S) {
    if (std::int64_t(stream_.size()) < B * S + 1)
      throw UserError(what_ + " holds " + std::to_string(stream_.size()) + " tokens; one batch of [" +
                      std::to_string(B) + ", " + std::to_string(S) + "] needs " + std::to_string(B * S + 1));
  }
  Batch next() override {
    const std::int64_t n = B_ * S_, size = std::int64_t(stream_.size());
    const std::uint64_t epoch = batch_ / batches();
    const std::int64_t start = std::int64_t((epoch * 7919) % std::uint64_t(size)) +
                               std::int64_t(batch_ % batches()) * n;
    ++batch_;
    std::vector<std::int32_t> tokens(static_cast<std::size_t>(n)), targets(static_cast<std::size_t>(n));
    for (std::int64_t j = 0; j < n; ++j) {
      tokens[std::size_t(j)] = stream_[std::size_t((start + j) % size)];
      targets[std::size_t(j)] = stream_[std::size_t((start + j + 1) % size)];
    }
    return {Tensor::from_host(tokens, {B_, S_}, "tokens"), Tensor::from_host(targets, {B_, S_}, "targets")};
  }
  std::string describe() const override { return what_; }
  std::uint64_t epoch_batches() const override { return batches(); }
  std::uint64_t position() const override { return batch_; }
  void seek(std::uint64_t n) override { batch_ = n; }

 private:
  // Whole batches in the stream; after the last, the first again.
  std::uint64_t batches() const { return std::uint64_t((std::int64_t(stream_.size()) - 1) / (B_ * S_)); }
  std::vector<std::int32_t> stream_;
  std::string what_;
  std::int64_t B_, S_;
  std::uint64_t batch_ = 0;
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

namespace {

// The part of a token stream a split reads: validation the last tenth,
// training the rest.
std::vector<std::int32_t> split_stream(std::vector<std::int32_t> tokens, DataSplit split) {
  if (split == DataSplit::all) return tokens;
  const std::size_t cut = tokens.size() - tokens.size() / 10;
  if (split == DataSplit::train) return std::vector<std::int32_t>(tokens.begin(), tokens.begin() + std::ptrdiff_t(cut));
  return std::vector<std::int32_t>(tokens.begin() + std::ptrdiff_t(cut), tokens.end());
}

const char* split_name(DataSplit split) {
  return split == DataSplit::train ? " (training part)" : split == DataSplit::validation ? " (held-out tenth)" : "";
}

}  // namespace

std::unique_ptr<BatchSource> make_batch_source(const std::string& spec, std::int64_t B, std::int64_t S,
                                               std::int64_t V, std::uint64_t seed, DataSplit split) {
  // Generated data is held out by drawing from another seed.
  const std::uint64_t generated_seed = split == DataSplit::validation ? seed ^ 0x9E3779B97F4A7C15ull : seed;
  if (spec == "random") return std::make_unique<RandomSource>(B, S, V, generated_seed);
  if (spec == "copy" || spec == "reverse")
    return std::make_unique<TaskSource>(spec == "reverse", B, S, V, generated_seed);
  if (spec.rfind("text:", 0) == 0) {
    const std::string path = spec.substr(5);
    if (path.empty()) throw UserError("data source 'text:' names no file (text:PATH)");
    return std::make_unique<StreamSource>(split_stream(read_bytes(path, V), split),
                                          "text " + path + split_name(split), B, S);
  }
  if (spec.rfind("h5:", 0) == 0) {
    const auto [rest, dataset] = token_file_spec(spec);
    if (rest.empty() || dataset.empty()) throw UserError("data source '" + spec + "': expected h5:PATH[:DATASET]");
    return std::make_unique<StreamSource>(split_stream(read_token_file(rest, dataset, V), split),
                                          "tokens " + rest + ":" + dataset + split_name(split), B, S);
  }
  throw UserError("unknown data source '" + spec + "' (random, copy, reverse, text:PATH, h5:PATH[:DATASET])");
}

}  // namespace remat
