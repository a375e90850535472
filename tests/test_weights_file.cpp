// HDF5 weight files: round trips, and a clear error for every malformed file.
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <unistd.h>

#include "catch.hpp"
#include "weights/weights_file.hpp"
#include "core/error.hpp"
#include "fixtures.hpp"
#include "h5/h5.hpp"
#include "step/step.hpp"

using namespace remat;
namespace fs = std::filesystem;

namespace {

// A valid tiny gpt2 file at `path`.
ModelSetup write_tiny(const std::string& path) {
  ModelSetup setup{"gpt2", "tiny", preset_sizes("tiny")};
  const auto model = models().find("gpt2").make(setup.sizes);
  ParamStore params(model->params(), DType::f32);
  initialize(params, 1, setup.sizes.L);
  const Batch batch = random_batch(setup.sizes.B, setup.sizes.S, setup.sizes.V, 1);
  write_weights(path, setup, params, &batch);
  return setup;
}

void require_load_error(const std::string& path, const std::string& fragment) {
  CHECK_THROWS_AS(load_weights(path), UserError);
  CHECK_THROWS_WITH(load_weights(path), test::Contains(fragment));
}

}  // namespace

TEST_CASE("weights and batch round-trip through HDF5", "[io]") {
  test::TempDir dir("remat-test");
  const std::string path = dir.file("w.h5");
  write_tiny(path);
  LoadedWeights w = load_weights(path);
  CHECK(w.setup.model == "gpt2");
  CHECK(w.setup.preset == "tiny");
  CHECK(w.setup.sizes.L == 2);
  CHECK(w.setup.sizes.V == 64);
  REQUIRE(w.batch);
  CHECK(w.batch->tokens.shape() == Shape{2, 16});
  CHECK(w.batch->tokens.to_host_i32() == random_batch(2, 16, 64, 1).tokens.to_host_i32());

  ParamStore fresh(w.model->params(), DType::f32);
  initialize(fresh, 1, 2);
  for (std::size_t i = 0; i < fresh.tensors().size(); ++i)
    REQUIRE(w.params->tensors()[i].to_host_f64() == fresh.tensors()[i].to_host_f64());
  CHECK_FALSE(fs::exists(path + ".partial"));
}

TEST_CASE("gradient files hold the loss and one gradient per parameter", "[io]") {
  test::TempDir dir("remat-test");
  write_tiny(dir.file("w.h5"));
  LoadedWeights w = load_weights(dir.file("w.h5"));
  const double loss = forward_backward(*w.model, *w.params, *w.batch);
  write_gradients(dir.file("r.h5"), w.setup, *w.params, loss);
  h5::File f = h5::File::open(dir.file("r.h5"));
  CHECK(h5::info(f, "/loss").shape.empty());
  CHECK(h5::list(f, "/grads") .size() == w.params->names().size());
  CHECK(h5::info(f, "/grads/h.1.mlp.c_fc.weight").shape == Shape{128, 32});
  const auto g = h5::read_f32(f, "/grads/wte.weight");
  const auto want = w.params->operator[]("wte.weight").grad().to_host_f64();
  for (std::size_t i = 0; i < g.size(); ++i) REQUIRE(g[i] == float(want[i]));
}

TEST_CASE("malformed weight files are refused with the offending name", "[io][errors]") {
  test::TempDir dir("remat-test");
  const std::string path = dir.file("w.h5");
  auto edit = [&](const std::function<void(const h5::File&)>& change) {
    write_tiny(path);
    h5::File f = h5::File::edit(path);
    change(f);
    f.save();
  };

  SECTION("missing parameter") {
    edit([](const h5::File& f) { H5Ldelete(f.id(), "/params/h.1.ln_2.bias", H5P_DEFAULT); });
    require_load_error(path, "missing parameter 'h.1.ln_2.bias' [32]");
  }
  SECTION("extra parameter") {
    edit([](const h5::File& f) { h5::write(f, "/params/h.2.ln_1.weight", std::vector<float>(32), {32}); });
    require_load_error(path, "unexpected parameter 'h.2.ln_1.weight' [32]");
  }
  SECTION("mis-shaped parameter") {
    edit([](const h5::File& f) {
      H5Ldelete(f.id(), "/params/wpe.weight", H5P_DEFAULT);
      h5::write(f, "/params/wpe.weight", std::vector<float>(8 * 32), {8, 32});
    });
    require_load_error(path, "parameter 'wpe.weight' has shape [8, 32], expected [16, 32]");
  }
  SECTION("wrong dtype") {
    edit([](const h5::File& f) {
      H5Ldelete(f.id(), "/params/ln_f.bias", H5P_DEFAULT);
      h5::write(f, "/params/ln_f.bias", std::vector<double>(32), {32});
    });
    require_load_error(path, "parameter 'ln_f.bias' holds float64, expected float32");
  }
  SECTION("unknown model") {
    edit([](const h5::File& f) { h5::write_attr(f, "model", std::string("gpt5")); });
    require_load_error(path, "unknown model 'gpt5'");
  }
  SECTION("missing size attribute") {
    edit([](const h5::File& f) { H5Adelete(f.id(), "D"); });
    require_load_error(path, "missing size attribute 'D'");
  }
  SECTION("batch of the wrong type") {
    edit([](const h5::File& f) {
      H5Ldelete(f.id(), "/batch/targets", H5P_DEFAULT);
      h5::write(f, "/batch/targets", std::vector<float>(32), {2, 16});
    });
    require_load_error(path, "/batch/targets holds float32, expected int32");
  }
  SECTION("not an HDF5 file") {
    std::ofstream(path) << "this is not HDF5\n";
    require_load_error(path, "not an HDF5 file");
  }
  SECTION("truncated file") {
    write_tiny(path);
    fs::resize_file(path, fs::file_size(path) / 2);
    CHECK_THROWS_AS(load_weights(path), UserError);
  }
  SECTION("no such file") { require_load_error(dir.file("absent.h5"), "no such file"); }
}

TEST_CASE("hostile weight files are refused before anything is allocated or computed", "[io][errors]") {
  test::TempDir dir("remat-test");
  const std::string path = dir.file("w.h5");
  auto edit = [&](const std::function<void(const h5::File&)>& change) {
    write_tiny(path);
    h5::File f = h5::File::edit(path);
    change(f);
    f.save();
  };
  SECTION("a size stored as an array") {
    edit([](const h5::File& f) {
      H5Adelete(f.id(), "L");
      hsize_t n = 64;
      h5::Handle space(H5Screate_simple(1, &n, nullptr), H5Sclose);
      h5::Handle a(H5Acreate2(f.id(), "L", H5T_STD_I64LE, space.id(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
      std::vector<std::int64_t> v(64, 2);
      H5Awrite(a.id(), H5T_NATIVE_INT64, v.data());
    });
    require_load_error(path, "attribute 'L' must be a single value");
  }
  SECTION("a model name stored as an array of strings") {
    edit([](const h5::File& f) {
      H5Adelete(f.id(), "model");
      hsize_t n = 500;
      h5::Handle space(H5Screate_simple(1, &n, nullptr), H5Sclose);
      h5::Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
      H5Tset_size(type.id(), 8);
      h5::Handle a(H5Acreate2(f.id(), "model", type.id(), space.id(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
      std::vector<char> v(500 * 8, 'x');
      H5Awrite(a.id(), type.id(), v.data());
    });
    require_load_error(path, "attribute 'model' must be a single value");
  }
  SECTION("an absurd depth") {
    edit([](const h5::File& f) { h5::write_attr(f, "L", std::int64_t(1000000000)); });
    require_load_error(path, "L = 1000000000 is beyond the largest supported");
  }
  SECTION("a missing Hkv does not quietly become H") {
    edit([](const h5::File& f) { H5Adelete(f.id(), "Hkv"); });
    require_load_error(path, "missing size attribute 'Hkv'");
  }
  SECTION("a NaN weight") {
    edit([](const h5::File& f) {
      H5Ldelete(f.id(), "/params/ln_f.bias", H5P_DEFAULT);
      std::vector<float> v(32, 0.0f);
      v[7] = std::numeric_limits<float>::quiet_NaN();
      h5::write(f, "/params/ln_f.bias", v, {32});
    });
    require_load_error(path, "parameter 'ln_f.bias' holds a non-finite value");
  }
  SECTION("a token id equal to V") {
    edit([](const h5::File& f) {
      H5Ldelete(f.id(), "/batch/tokens", H5P_DEFAULT);
      std::vector<std::int32_t> v(32, 1);
      v[5] = 64;
      h5::write(f, "/batch/tokens", v, {2, 16});
    });
    require_load_error(path, "/batch/tokens holds 64 at index 5, outside the vocabulary [0, 64)");
  }
  SECTION("S and B attributes that disagree with the batch") {
    edit([](const h5::File& f) { h5::write_attr(f, "S", std::int64_t(8)); });
    require_load_error(path, "/batch is [2, 16] but the file's attributes say B = 2, S = 8");
  }
  SECTION("a /batch that is not a group") {
    edit([](const h5::File& f) {
      H5Ldelete(f.id(), "/batch", H5P_DEFAULT);
      h5::write(f, "/batch", std::vector<std::int32_t>(4), {4});
    });
    require_load_error(path, "/batch is not a group");
  }
}

TEST_CASE("a golden file with a NaN gradient or loss is refused", "[io][errors]") {
  test::TempDir dir("remat-test");
  const std::string path = dir.file("g.h5");
  const ModelSetup setup{"gpt2", "tiny", preset_sizes("tiny")};
  const auto model = models().find("gpt2").make(setup.sizes);
  ParamStore params(model->params(), DType::f32);
  initialize(params, 1, setup.sizes.L);
  const Batch batch = random_batch(setup.sizes.B, setup.sizes.S, setup.sizes.V, 1);
  const double loss = forward_backward(*model, params, batch);
  write_golden(path, setup, params, batch, loss);
  CHECK_NOTHROW(load_golden(path));
  {
    h5::File f = h5::File::edit(path);
    H5Ldelete(f.id(), "/grads/h.0.ln_1.weight", H5P_DEFAULT);
    std::vector<float> v(32, 0.0f);
    v[3] = std::numeric_limits<float>::infinity();
    h5::write(f, "/grads/h.0.ln_1.weight", v, {32});
    f.save();
  }
  CHECK_THROWS_WITH(load_golden(path), test::Contains("gradient 'h.0.ln_1.weight' holds a non-finite value"));
}
