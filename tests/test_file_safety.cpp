// No user file is ever lost or replaced by a broken one: atomic replacement
// under a full disk, exclusive temporaries, the output guard, the lock.
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>

#include "catch.hpp"
#include "weights/weights_file.hpp"
#include "core/error.hpp"
#include "fixtures.hpp"
#include "h5/atomic_file.hpp"
#include "h5/atomic_folder.hpp"
#include "core/files.hpp"
#include "core/text.hpp"
#include "h5/h5.hpp"
#include "harness/io/file_lock.hpp"
#include "harness/io/output_guard.hpp"

using namespace remat;
namespace fs = std::filesystem;

namespace {

std::string contents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_weights_of(const std::string& path, int layers) {
  ModelSetup setup{"gpt2", "tiny", preset_sizes("tiny")};
  setup.sizes.L = layers;
  const auto model = models().find("gpt2").make(setup.sizes);
  ParamStore params(model->params(), DType::f32);
  initialize(params, 1, layers);
  write_weights(path, setup, params, nullptr);
}

// The process may write at most `bytes` into any file while it lives: a
// disk that fills up mid-write, for this process alone.
struct FileSizeLimit {
  rlimit previous{};
  explicit FileSizeLimit(rlim_t bytes) {
    getrlimit(RLIMIT_FSIZE, &previous);
    rlimit small{bytes, previous.rlim_max};
    setrlimit(RLIMIT_FSIZE, &small);
  }
  ~FileSizeLimit() { setrlimit(RLIMIT_FSIZE, &previous); }
};

}  // namespace

TEST_CASE("a write that fails for lack of space keeps the previous file byte for byte", "[io][safety]") {
  test::TempDir dir("remat-safety");
  const std::string path = dir.file("w.h5");
  write_weights_of(path, 2);
  const std::string before = contents(path);
  {
    FileSizeLimit limit(before.size() + 1000);  // room for the old size, not for 8 blocks
    CHECK_THROWS_WITH(write_weights_of(path, 8), test::Contains("w.h5: cannot write") &&
                                                     test::Contains("the file keeps what it held before this write"));
  }
  CHECK(contents(path) == before);
  CHECK(dir.entries() == 1);  // no temporary left beside it
  CHECK_NOTHROW(load_weights(path));
}

TEST_CASE("temporaries are created exclusively: a planted symlink is never written through", "[io][safety]") {
  test::TempDir dir("remat-safety");
  const std::string path = dir.file("out.h5"), victim = dir.file("victim");
  std::ofstream(victim) << "precious";
  fs::create_symlink(victim, path + ".partial");
  for (int pid : {1, ::getpid()})  // whatever name a writer might pick
    for (int k = 0; k < 3; ++k) fs::create_symlink(victim, path + ".partial." + std::to_string(pid) + "." + std::to_string(k));
  write_file_atomically(path, std::string("new content"));
  CHECK(contents(victim) == "precious");
  CHECK(fs::is_regular_file(fs::symlink_status(path)));
  CHECK(contents(path) == "new content");
}

TEST_CASE("temporaries of writers that died are cleaned up, a live writer's are not", "[io][safety]") {
  test::TempDir dir("remat-safety");
  const std::string path = dir.file("r.h5");
  // pid 1 is alive (init); a pid beyond pid_max is not.
  const std::string live = path + ".partial.1.7", dead = path + ".partial.2147483646.7";
  std::ofstream(live) << "x";
  std::ofstream(dead) << "x";
  remove_stale_temporaries(path);
  CHECK(fs::exists(live));
  CHECK_FALSE(fs::exists(dead));
  // Every atomic write of the file cleans up too (a run file saved after a
  // killed save, a weights file, a report): no temporary outlives it.
  std::ofstream(dead) << "x";
  write_file_atomically(path, std::string("content"));
  CHECK(fs::exists(live));
  CHECK_FALSE(fs::exists(dead));
  fs::remove(live);
}

TEST_CASE("an output never replaces an input or a file of another kind without --force", "[io][safety]") {
  test::TempDir dir("remat-safety");
  const std::string weights = dir.file("w.h5"), text = dir.file("notes.txt");
  write_weights_of(weights, 2);
  std::ofstream(text) << "notes";
  CHECK(file_kind(weights) == FileKind::weights);
  CHECK(file_kind(text) == FileKind::not_hdf5);
  CHECK(file_kind(dir.file("absent.h5")) == FileKind::absent);

  CHECK_THROWS_WITH(check_output(weights, FileKind::gradients, {weights}, true), test::Contains("is also an input"));
  fs::create_symlink(weights, dir.file("alias.h5"));
  CHECK_THROWS_WITH(check_output(dir.file("alias.h5"), FileKind::weights, {weights}, true),
                    test::Contains("is also an input"));
  CHECK_THROWS_WITH(check_output(weights, FileKind::gradients, {}, false),
                    test::Contains("is a weights file, not a gradients file") && test::Contains("--force"));
  CHECK_THROWS_WITH(check_output(text, FileKind::weights, {}, false), test::Contains("not HDF5"));
  CHECK_NOTHROW(check_output(weights, FileKind::gradients, {}, true));
  CHECK_NOTHROW(check_output(weights, FileKind::weights, {}, false));  // re-export: same kind
  CHECK_THROWS_WITH(check_output(dir.file("no/dir/x.h5"), FileKind::weights, {}, false), test::Contains("no such directory"));
  fs::permissions(weights, fs::perms::owner_read);
  CHECK_THROWS_WITH(check_output(weights, FileKind::weights, {}, true), test::Contains("read-only"));
}

TEST_CASE("a temporary has no name while it is written: a killed writer leaves nothing", "[io][safety]") {
  test::TempDir dir("remat-safety");
  const std::string path = dir.file("out.h5");
  {
    AtomicFile file(path);
    file.write("abc", 3);
    CHECK(dir.entries() == 0);  // nothing in the folder to leave behind
    // A library writes it by path, as import's HDF5 writer does.
    std::ofstream(file.path(), std::ios::app) << "def";
    CHECK(dir.entries() == 0);
    file.commit();
  }
  CHECK(contents(path) == "abcdef");
  CHECK(dir.entries() == 1);
  {
    AtomicFile abandoned(path);
    abandoned.write("xyz", 3);
  }  // destroyed uncommitted: the target stays, nothing else appears
  CHECK(contents(path) == "abcdef");
  CHECK(dir.entries() == 1);
}

TEST_CASE("a folder is replaced as one unit, keeping what the caller keeps", "[io][safety]") {
  test::TempDir dir("remat-safety");
  const std::string target = dir.file("ckpt");
  fs::create_directory(target);
  std::ofstream(target + "/model-1.bin") << "old weights";
  std::ofstream(target + "/tokenizer.json") << "tokens";
  const auto keep = [](const std::string& name) { return name == "tokenizer.json"; };
  {
    AtomicFolder folder(target + "/");  // "dir/" names the folder
    std::ofstream(folder.path() + "/model-2.bin") << "new weights";
    CHECK(contents(target + "/model-1.bin") == "old weights");  // untouched until commit
  }  // abandoned: the old folder as it was, no staging folder left
  CHECK(contents(target + "/model-1.bin") == "old weights");
  CHECK_FALSE(fs::exists(target + "/model-2.bin"));
  CHECK(dir.entries() == 1);
  {
    AtomicFolder folder(target);
    std::ofstream(folder.path() + "/model-2.bin") << "new weights";
    folder.commit(keep);
  }
  CHECK(contents(target + "/model-2.bin") == "new weights");
  CHECK(contents(target + "/tokenizer.json") == "tokens");
  CHECK_FALSE(fs::exists(target + "/model-1.bin"));
  CHECK(dir.entries() == 1);
  // A staging folder a killed writer left goes with the next write.
  const std::string dead = target + ".partial.2147483646.5";
  fs::create_directory(dead);
  std::ofstream(dead + "/half") << "x";
  { AtomicFolder folder(dir.file("new")); }
  { AtomicFolder folder(target); }
  CHECK_FALSE(fs::exists(dead));
  for (const std::string bad : {"", ".", "/"}) CHECK_THROWS_AS(AtomicFolder(bad), UserError);
  std::ofstream(dir.file("plain")) << "x";
  CHECK_THROWS_WITH(AtomicFolder(dir.file("plain")), test::Contains("is not a folder"));
}

TEST_CASE("inputs that are not regular files are refused before anything waits on them", "[io][safety]") {
  test::TempDir dir("remat-safety");
  const std::string fifo = dir.file("fifo");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_THROWS_WITH(read_regular_file(fifo, 1 << 20, "a config"), test::Contains("not a regular file"));
  CHECK_THROWS_WITH(read_regular_file("/dev/zero", 1 << 20, "a config"), test::Contains("not a regular file"));
  std::ofstream(dir.file("big")) << std::string(2000, 'x');
  CHECK_THROWS_WITH(read_regular_file(dir.file("big"), 1000, "a config"), test::Contains("more than a config can be"));
  CHECK(read_regular_file(dir.file("big"), 2000, "a config").size() == 2000);
  // And an output is never one: a device or a FIFO is not replaced.
  CHECK_THROWS_WITH(write_file_atomically(fifo, std::string("x")), test::Contains("not a regular file"));
  CHECK_THROWS_WITH(check_output_path("/dev/null"), test::Contains("not a regular file"));
  CHECK_THROWS_WITH(check_output_path(""), test::Contains("empty path"));
}

TEST_CASE("lists refuse empty items by position, and sizes too large say so", "[io][safety]") {
  CHECK(split_list("1,2,3", "--seq") == std::vector<std::string>{"1", "2", "3"});
  CHECK_THROWS_WITH(split_list("1,,2", "--seq"), test::Contains("--seq: item 2 of '1,,2' is empty"));
  CHECK_THROWS_WITH(split_list("1,", "--seq"), test::Contains("item 2"));
  CHECK_THROWS_WITH(split_list("", "--seq"), test::Contains("item 1"));
  CHECK(parse_byte_size("1.5G") == 3 * (std::int64_t(1) << 29));
  CHECK(parse_byte_size("1e3") == 1000);
  CHECK_THROWS_WITH(parse_byte_size("1e30"), test::Contains("too large"));
  CHECK_THROWS_WITH(parse_byte_size("inf"), test::Contains("not a positive size"));
  CHECK_THROWS_WITH(parse_byte_size("-5M"), test::Contains("not a positive size"));
}

TEST_CASE("the file lock serialises writers and leaves no lock file", "[io][safety]") {
  test::TempDir dir("remat-safety");
  const std::string path = dir.file("r.h5");
  std::vector<int> order;
  auto first = std::make_unique<FileLock>(path);
  bool waited = false;
  std::thread second([&] {
    FileLock lock(path, [&] { waited = true; });
    order.push_back(2);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  order.push_back(1);  // the second writer is still waiting
  first.reset();
  second.join();
  CHECK(waited);
  CHECK(order == std::vector<int>{1, 2});
  CHECK(dir.entries() == 0);
}
