#pragma once
// The strategies, one line per file: X(name) for a file strategies/<name>.cpp
// that defines `void register_<name>(StrategyRegistry&)` (it may register
// several entries). Adding a strategy is that file and one line here
// (docs/adding-a-strategy.md). The order is that of `remat strategies` and
// of `--strategies all`.
#define REMAT_STRATEGIES(X) \
  X(full)                   \
  X(checkpoint)             \
  X(selective)              \
  X(offload)                \
  X(reversible)             \
  X(budget)                 \
  /* end of the list */
