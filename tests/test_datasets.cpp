// Batch sources: shapes, determinism, the algorithmic tasks' structure,
// text and HDF5 token windows, and their errors.
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "catch.hpp"
#include "core/error.hpp"
#include "datasets/batch_source.hpp"
#include "h5/h5.hpp"

using namespace remat;
namespace fs = std::filesystem;

namespace {

std::string temp(const std::string& name) {
  return (fs::temp_directory_path() / ("remat-data-" + std::to_string(::getpid()) + "-" + name)).string();
}

}  // namespace

TEST_CASE("random batches are seeded and in range", "[datasets]") {
  auto a = make_batch_source("random", 2, 8, 50, 3), b = make_batch_source("random", 2, 8, 50, 3);
  const Batch x = a->next(), y = b->next(), z = a->next();
  CHECK(x.tokens.shape() == Shape{2, 8});
  CHECK(x.tokens.to_host_i32() == y.tokens.to_host_i32());
  CHECK(x.tokens.to_host_i32() != z.tokens.to_host_i32());
  for (int t : x.targets.to_host_i32()) CHECK((t >= 0 && t < 50));
}

TEST_CASE("copy and reverse tasks repeat the first half, and targets are the next token", "[datasets]") {
  for (const char* task : {"copy", "reverse"}) {
    const Batch b = make_batch_source(task, 1, 8, 100, 1)->next();
    const auto t = b.tokens.to_host_i32(), y = b.targets.to_host_i32();
    for (int i = 0; i < 4; ++i) CHECK(t[4 + i] == (std::string(task) == "copy" ? t[i] : t[3 - i]));
    for (int i = 0; i + 1 < 8; ++i) CHECK(y[i] == t[i + 1]);
  }
}

TEST_CASE("text files give consecutive byte windows, and a short file is an error", "[datasets]") {
  const std::string path = temp("text.txt");
  std::ofstream(path) << "abcdefghijklmnopqrstuvwxyz";
  auto src = make_batch_source("text:" + path, 2, 4, 256, 1);
  const Batch first = src->next(), second = src->next();
  CHECK(first.tokens.to_host_i32() == std::vector<std::int32_t>{'a', 'b', 'c', 'd', 'e', 'f', 'g', 'h'});
  CHECK(first.targets.to_host_i32()[0] == 'b');
  CHECK(second.tokens.to_host_i32()[0] == 'i');
  CHECK_THROWS_WITH(make_batch_source("text:" + path, 4, 8, 256, 1), test::Contains("needs 33"));
  CHECK_THROWS_WITH(make_batch_source("text:" + path, 2, 4, 64, 1), test::Contains("vocabulary of 256"));
  CHECK_THROWS_WITH(make_batch_source("text:/no/such/file", 2, 4, 256, 1), test::Contains("no such file"));
  CHECK_THROWS_WITH(make_batch_source("text:" + fs::temp_directory_path().string(), 2, 4, 256, 1),
                    test::Contains("not a regular file"));
  fs::remove(path);
}

TEST_CASE("HDF5 token arrays give windows and refuse bad tokens", "[datasets]") {
  const std::string path = temp("tokens.h5");
  {
    h5::File f = h5::File::create(path);
    std::vector<std::int32_t> tokens(100);
    for (int i = 0; i < 100; ++i) tokens[i] = i % 17;
    h5::write(f, "/tokens", tokens, {10, 10});
    h5::write(f, "/floats", std::vector<float>(10), {10});
    h5::write(f, "/big", std::vector<std::int32_t>(20, 99), {20});
    f.save();
  }
  const Batch b = make_batch_source("h5:" + path, 2, 5, 17, 1)->next();
  CHECK(b.tokens.to_host_i32() == std::vector<std::int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  CHECK(b.targets.to_host_i32()[9] == 10);
  CHECK_THROWS_WITH(make_batch_source("h5:" + path + ":floats", 1, 2, 17, 1), test::Contains("expected int32"));
  CHECK_THROWS_WITH(make_batch_source("h5:" + path + ":big", 1, 2, 17, 1), test::Contains("outside the vocabulary"));
  CHECK_THROWS_WITH(make_batch_source("h5:" + path + ":nope", 1, 2, 17, 1), test::Contains("no dataset /nope"));
  CHECK_THROWS_WITH(make_batch_source("zip:x", 1, 2, 17, 1), test::Contains("unknown data source"));
  fs::remove(path);
}
