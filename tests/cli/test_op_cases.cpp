// The CLI cases register themselves (cli/cases/*.cpp): every op a user can call has one, found
// through the object library the CLI and the tests link, in name order.
#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "ejk/op.h"
#include "op_case.h"

TEST_CASE("every op a user can call has a registered CLI case, sorted by op", "[cli]") {
  std::vector<std::string> cases;
  for (const ejk::cli::OpCase* c : ejk::cli::op_cases()) cases.push_back(c->op());
  CHECK(std::is_sorted(cases.begin(), cases.end()));
  CHECK(std::adjacent_find(cases.begin(), cases.end()) == cases.end());
  CHECK(cases == ejk::op_names());
}
