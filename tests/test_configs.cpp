// The published configurations: each row, built by its model, has exactly
// the published parameter count (counted from the parameters' shapes; no
// weight is allocated), valid sizes, and the attributes the row names.
#include "catch.hpp"
#include "core/error.hpp"
#include "zoo/configs.hpp"
#include "zoo/model.hpp"
#include "zoo/params.hpp"

using namespace remat;

TEST_CASE("every published configuration has exactly its published parameter count", "[zoo][configs]") {
  REQUIRE(published_configs().size() == 17);
  for (const auto& c : published_configs()) {
    INFO(c.name);
    CHECK_NOTHROW(validate(c.sizes));
    const auto model = models().find(c.model).make(c.sizes);
    CHECK(count_params(model->params()) == c.parameters);
  }
  CHECK(published_config("llama3-8b").sizes.theta == 500000);
  CHECK(published_config("mixtral-8x7b").sizes.theta == 1e6);
  CHECK(published_config("mixtral-8x7b").sizes.E == 8);
  CHECK(published_config("mixtral-8x7b").sizes.K == 2);
  CHECK(published_config("llama-70b").sizes.Hkv == 8);
  CHECK(published_config("llama3-405b").sizes.theta == 500000);
  CHECK(published_config("megatron-1t").sizes.V == 51200);
}

TEST_CASE("an unknown configuration is refused with the known ones", "[zoo][configs][errors]") {
  CHECK_THROWS_AS(published_config("llama-8b"), UserError);
  CHECK_THROWS_WITH(published_config("llama-8b"), Catch::Contains("llama-7b") && Catch::Contains("mixtral-8x7b"));
}
