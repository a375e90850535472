#include "harness/long_run.hpp"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "autodiff/gemm.hpp"
#include "autodiff/stats.hpp"
#include "autodiff/tensor.hpp"
#include "core/text.hpp"
#include "zoo/params.hpp"

namespace remat {
namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// FLOP/s of this machine on a product of the size the models run: a few
// milliseconds, enough to tell a laptop core from a GPU.
double measured_rate() {
  const std::int64_t n = 512;
  Tensor a = Tensor::zeros({n, n}, DType::f32, "long_run_probe"), b = a, c = a;
  auto product = [&] {
    gemm::gemm(ExecSpace(), gemm::Op::N, gemm::Op::N, 1.0f, gemm::matrix<MemSpace>(a.data<float>(), n, n, n),
               gemm::matrix<MemSpace>(b.data<float>(), n, n, n), 0.0f, gemm::matrix<MemSpace>(c.data<float>(), n, n, n));
  };
  product();  // warm-up
  ExecSpace().fence();
  const double t0 = now();
  const int reps = 4;
  for (int i = 0; i < reps; ++i) product();
  ExecSpace().fence();
  return reps * 2.0 * double(n) * n * n / std::max(now() - t0, 1e-9);
}

double threshold_seconds() {
  if (const char* v = std::getenv("REMAT_LONG_RUN_SECONDS")) return std::atof(v);
  return 10;
}

}  // namespace

// Where the step is, on stderr at most a few times a second: rewritten in
// place on a terminal, a line every few seconds otherwise.
class LongRunNotice::Progress final : public BlockHooks {
 public:
  // Silent for the first `quiet_for` seconds.
  explicit Progress(int blocks, double quiet_for = 0)
      : blocks_(blocks), tty_(isatty(fileno(stderr))), previous_(block_hooks()), start_(now()), quiet_for_(quiet_for) {}
  // What the work is doing between steps, and the step it is in.
  // `at_once`: said now (past the quiet time), not after the last line's pause.
  void stage(const std::string& what, bool at_once) {
    stage_ = what;
    if (at_once) last_ = 0;
    say("");
  }
  ~Progress() override {
    if (tty_ && said_) std::fprintf(stderr, "\r\033[K");
  }
  void body_done(const std::string& block) override {
    say(std::string(stats::recomputing() ? "recomputing " : "forward: ") + block);
    if (previous_) previous_->body_done(block);
  }
  void backward_enter(const std::string& block) override {
    say("backward: " + block);
    if (previous_) previous_->backward_enter(block);
  }
  void backward_leave(const std::string& block) override {
    if (previous_) previous_->backward_leave(block);
  }
  void backward_end() override {
    ++steps_;
    if (previous_) previous_->backward_end();
  }
  void weight_gradients_done() override {
    if (previous_) previous_->weight_gradients_done();
  }

 private:
  void say(const std::string& where) {
    const double t = now();
    if (t - last_ < (tty_ ? 0.2 : 5.0) || t - start_ < quiet_for_) return;
    last_ = t;
    said_ = true;
    std::string line = "  ";
    if (!stage_.empty()) line += "[" + std::to_string(int(t - start_)) + " s] " + stage_ + (where.empty() ? "" : ", ");
    if (!where.empty())
      line += "step " + std::to_string(steps_ + 1) + ", " + where + " (of " + std::to_string(blocks_) + " blocks)";
    if (tty_) std::fprintf(stderr, "\r\033[K%s", line.c_str());
    else std::fprintf(stderr, "%s\n", line.c_str());
  }
  int blocks_;
  bool tty_;
  BlockHooks* previous_;
  double start_, quiet_for_;
  std::string stage_;
  double last_ = 0;
  bool said_ = false;
  int steps_ = 0;
};

LongRunNotice::LongRunNotice(const ModelSetup& setup, std::int64_t steps,
                             const std::function<std::int64_t()>& memory_bytes, bool speaks) {
  const Sizes& z = setup.sizes;
  const double params = double(count_params(models().find(setup.model).make(z)->params()));
  const double tokens = double(z.B) * z.S;
  flops_ = 6.0 * params * tokens + 6.0 * z.L * z.B * double(z.S) * z.S * z.D;
  const double total = flops_ * double(steps);
  // A cheap bound first: below a gigaFLOP nothing here takes ten seconds.
  if (total < 1e9 && threshold_seconds() >= 1) return;
  const double rate = measured_rate();
  seconds_ = total / rate;
  if (seconds_ < threshold_seconds()) return;
  if (speaks)
    std::printf("this will take about %.0f s: %d step(s) of %.3g TFLOP at the %.0f GFLOP/s measured here; memory about "
                "%s; progress within each step on stderr\n",
                seconds_, int(steps), flops_ / 1e12, rate / 1e9, human_bytes(double(memory_bytes())).c_str());
  std::fflush(stdout);
  if (!speaks) return;
  progress_ = std::make_unique<Progress>(z.L);
  scope_ = std::make_unique<BlockHooksScope>(progress_.get());
}

LongRunNotice::~LongRunNotice() {
  scope_.reset();  // before the hooks it installed go
  progress_.reset();
}

ProgressAfterAWhile::ProgressAfterAWhile(int blocks)
    : progress_(std::make_unique<LongRunNotice::Progress>(blocks, threshold_seconds())),
      scope_(std::make_unique<BlockHooksScope>(progress_.get())) {}

ProgressAfterAWhile::~ProgressAfterAWhile() {
  scope_.reset();
  progress_.reset();
}

void ProgressAfterAWhile::stage(const std::string& what) { progress_->stage(what, true); }

void ProgressAfterAWhile::item(const std::string& what) { progress_->stage(what, false); }

}  // namespace remat
