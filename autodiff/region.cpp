#include "autodiff/region.hpp"

#include <string>
#include <utility>

#include "autodiff/memory_tracker.hpp"
#include "autodiff/ops/ops.hpp"

namespace remat {
namespace {

std::vector<BlockRunner*>& runner_stack() {
  thread_local std::vector<BlockRunner*> stack;
  return stack;
}

std::string& block_name() {
  thread_local std::string name;
  return name;
}

// Labels the memory phase, and the nodes recorded, with the block's name.
class BlockScope {
 public:
  explicit BlockScope(const std::string& name) : previous_(block_name()), phase_("forward " + name) {
    block_name() = name;
  }
  ~BlockScope() { block_name() = previous_; }

 private:
  std::string previous_;
  MemoryPhase phase_;
};

Tensors couple(const Tensor& x1, const Tensor& x2, const ReversibleBody& body) {
  Tensor y1 = ops::add(x1, body.f(x2));
  Tensor y2 = ops::add(x2, body.g(y1));
  return {y1, y2};
}

// The thread's hooks, installed only by a BlockHooksScope.
BlockHooks*& hooks_pointer() {
  thread_local BlockHooks* hooks = nullptr;
  return hooks;
}

// The body as the hooks see it: named for the nodes it records (also when a
// strategy runs it again in backward) and reported when it ends, also when
// it ends early (a recomputation stops at the last tensor it needs, by an
// exception). body_done may fail (under --shard-params it communicates), so
// it runs in a handler, never in a destructor: its error then replaces the
// body's rather than ending the process.
BlockBody hooked(const std::string& name, const BlockBody& body) {
  return [name, body](const Tensors& in) {
    std::string previous = name;
    std::swap(block_name(), previous);  // swaps cannot throw
    const auto done = [&] {
      std::swap(block_name(), previous);
      if (BlockHooks* h = hooks_pointer()) h->body_done(name);
    };
    Tensors out;
    try {
      out = body(in);
    } catch (...) {
      done();
      throw;
    }
    done();
    return out;
  };
}

}  // namespace

BlockHooksScope::BlockHooksScope(BlockHooks* hooks) : previous_(hooks_pointer()) { hooks_pointer() = hooks; }
BlockHooksScope::~BlockHooksScope() { hooks_pointer() = previous_; }
BlockHooks* block_hooks() { return hooks_pointer(); }

const std::string& current_block() { return block_name(); }

Tensors BlockRunner::run_reversible(const BlockInfo& info, const Tensor& x1, const Tensor& x2,
                                    const ReversibleBody& body) {
  return run(info, {x1, x2}, [body](const Tensors& in) { return couple(in[0], in[1], body); });
}

Tensors run_block(const BlockInfo& info, const Tensors& inputs, const BlockBody& body) {
  BlockScope scope(info.name);
  auto& stack = runner_stack();
  if (hooks_pointer()) {
    const BlockBody run = hooked(info.name, body);
    return stack.empty() ? run(inputs) : stack.back()->run(info, inputs, run);
  }
  return stack.empty() ? body(inputs) : stack.back()->run(info, inputs, body);
}

Tensor run_block(const BlockInfo& info, const Tensor& input, const std::function<Tensor(const Tensor&)>& body) {
  // By value: a strategy may keep the body to run it again in backward.
  return run_block(info, Tensors{input}, [body](const Tensors& in) { return Tensors{body(in[0])}; }).at(0);
}

Tensors run_reversible_block(const BlockInfo& info, const Tensor& x1, const Tensor& x2, const ReversibleBody& body) {
  BlockScope scope(info.name);
  auto& stack = runner_stack();
  if (stack.empty()) return couple(x1, x2, body);
  return stack.back()->run_reversible(info, x1, x2, body);
}

BlockRunnerScope::BlockRunnerScope(BlockRunner& r) { runner_stack().push_back(&r); }
BlockRunnerScope::~BlockRunnerScope() { runner_stack().pop_back(); }

}  // namespace remat
