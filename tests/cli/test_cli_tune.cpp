// The tuning store end to end through the ejk binary: `ejk tune` records the fastest candidate,
// a later process runs it (and says so), EJK_TUNING=0 ignores it, a record of another problem or
// a damaged one is never used, and export/import carry records between stores.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "cli_shell.h"

namespace fs = std::filesystem;
using Catch::Matchers::ContainsSubstring;

namespace {

const std::string kProblem = "flash_attention --b 1 --sq 64 --sk 48 --hq 2 --hkv 1 --d 64";

struct Store {
  fs::path dir = fs::temp_directory_path() / ("ejk-tune-" + std::to_string(getpid()));
  Store() { fs::remove_all(dir); }
  ~Store() { fs::remove_all(dir); }
  ejk::test::Proc ejk(const std::string& args, const std::string& env = "") const {
    return ejk::test::shell("env EJK_CACHE_DIR=" + dir.string() + " " + env + " timeout 120 " + EJK_CLI_PATH + " " +
                            args);
  }
  fs::path record() const {
    for (const auto& e : fs::directory_iterator(dir / "tune-v1")) return e.path();
    return {};
  }
};

std::string json_field(const std::string& json, const std::string& name) {
  std::smatch m;
  const std::regex re("\"" + name + "\":(\"[^\"]*\"|true|false)");
  return std::regex_search(json, m, re) ? m[1].str() : "";
}

void replace_line(const fs::path& file, const std::string& field, const std::string& value) {
  std::ifstream in(file);
  std::string text, line;
  while (std::getline(in, line)) text += (line.starts_with(field + " ") ? field + " " + value : line) + "\n";
  in.close();
  std::ofstream(file, std::ios::trunc) << text;
}

}  // namespace

TEST_CASE("tune: the recorded winner is what the next process runs, unless EJK_TUNING=0", "[cli][tune]") {
  const Store s;
  const auto tuned = s.ejk("tune " + kProblem + " --iters 1 --json");
  INFO(tuned.out);
  REQUIRE(tuned.status == 0);
  const std::string best = json_field(tuned.out, "best"), heuristic = json_field(tuned.out, "heuristic");
  REQUIRE(!best.empty());
  // The spec's CPU configs were measured (those built in at least: a build without the CPU JIT
  // skips the others, saying so).
  CHECK_THAT(tuned.out, ContainsSubstring("bq64.bk64"));
  CHECK_THAT(tuned.out, ContainsSubstring("bq128.bk64"));

  const auto run = s.ejk("run " + kProblem + " --iters 1 --check --json");
  INFO(run.out);
  CHECK(run.status == 0);
  CHECK(json_field(run.out, "key") == best);
  CHECK(json_field(run.out, "tuned") == "true");

  const auto off = s.ejk("run " + kProblem + " --iters 1 --json", "EJK_TUNING=0");
  CHECK(json_field(off.out, "key") == heuristic);
  CHECK(json_field(off.out, "tuned") == "false");
  // A caller's block sizes win over the store.
  const auto given = s.ejk("run " + kProblem + " --iters 1 --block-q 128 --block-k 64 --json");
  CHECK(json_field(given.out, "tuned") == "false");
  CHECK_THAT(given.out, ContainsSubstring("bq128.bk64"));

  const auto ls = s.ejk("tune ls");
  CHECK_THAT(ls.out, ContainsSubstring("(1 records)"));
  CHECK_THAT(ls.out, ContainsSubstring("seqlen_q=64"));
}

TEST_CASE("tune: a record of another problem, or a damaged one, is never used", "[cli][tune]") {
  const Store s;
  REQUIRE(s.ejk("tune " + kProblem + " --iters 1").status == 0);
  const fs::path record = s.record();
  std::string other = json_field(s.ejk("run " + kProblem + " --iters 1 --json").out, "key");
  other = std::regex_replace(other, std::regex("\\.d64\\."), ".d128.");
  replace_line(record, "key", other.substr(1, other.size() - 2));  // a valid key, of head_dim 128
  auto run = s.ejk("run " + kProblem + " --iters 1 --json");
  INFO(run.out);
  CHECK(run.status == 0);
  CHECK(json_field(run.out, "tuned") == "false");

  std::ofstream(record, std::ios::trunc) << "ejk-tune 1\nop flash_fwd\ngarbage\n";
  run = s.ejk("run " + kProblem + " --iters 1 --json");
  CHECK(run.status == 0);
  CHECK(json_field(run.out, "tuned") == "false");
  CHECK_THAT(s.ejk("tune ls").out, ContainsSubstring("not used: malformed record"));
}

TEST_CASE("tune: export and import carry records; a bad import stores nothing", "[cli][tune]") {
  const Store s;
  REQUIRE(s.ejk("tune " + kProblem + " --iters 1").status == 0);
  const std::string file = (s.dir / "records.txt").string();
  REQUIRE(s.ejk("tune export " + file).status == 0);
  CHECK_THAT(s.ejk("tune clear").out, ContainsSubstring("removed 1 tuning records"));
  CHECK(json_field(s.ejk("run " + kProblem + " --iters 1 --json").out, "tuned") == "false");
  CHECK_THAT(s.ejk("tune import " + file).out, ContainsSubstring("imported 1 tuning records"));
  CHECK(json_field(s.ejk("run " + kProblem + " --iters 1 --json").out, "tuned") == "true");

  std::ofstream(file, std::ios::app) << "ejk-tune 1\nop no_such_op\nfingerprint x\nclass y\nkey z\nms 1\nheuristic_ms 1\n";
  s.ejk("tune clear");
  const auto bad = s.ejk("tune import " + file);
  CHECK(bad.status == 2);
  CHECK_THAT(bad.out, ContainsSubstring("no_such_op"));
  CHECK_THAT(s.ejk("tune ls").out, ContainsSubstring("(0 records)"));
}

TEST_CASE("tune: bad requests are refused naming what is wrong", "[cli][tune]") {
  const Store s;
  auto p = s.ejk("tune " + kProblem + " --block-q 64");
  CHECK(p.status == 2);
  CHECK_THAT(p.out, ContainsSubstring("--block-q is what tuning chooses"));
  p = s.ejk("run " + kProblem + " --iters 1", "EJK_TUNING=maybe");
  CHECK(p.status == 2);
  CHECK_THAT(p.out, ContainsSubstring("EJK_TUNING"));
}

// Eight processes storing one class's record at once, then writers killed with SIGKILL at random
// points: the store still holds exactly one usable record, which the next run uses.
TEST_CASE("tune: concurrent writers and writers killed mid-write leave one usable record", "[cli][tune]") {
  const Store s;
  REQUIRE(s.ejk("tune " + kProblem + " --iters 1").status == 0);
  const std::string file = (s.dir / "records.txt").string();
  REQUIRE(s.ejk("tune export " + file).status == 0);
  const std::string import = "env EJK_CACHE_DIR=" + s.dir.string() + " " + EJK_CLI_PATH + " tune import " + file;
  const auto racing = ejk::test::shell("for w in 1 2 3 4 5 6 7 8; do (for i in 1 2 3 4 5 6; do " + import +
                                       " >/dev/null || echo FAILED; done) & done; wait");
  INFO(racing.out);
  CHECK_THAT(racing.out, !ContainsSubstring("FAILED"));
  for (int round = 0; round < 6; ++round)
    ejk::test::shell("(while :; do " + import + " >/dev/null 2>&1; done) & loop=$!; sleep 0.0" +
                     std::to_string(3 + round * 7 % 9) + "; pkill -KILL -P $loop; kill -KILL $loop; wait 2>/dev/null");
  const auto ls = s.ejk("tune ls");
  INFO(ls.out);
  CHECK_THAT(ls.out, ContainsSubstring("(1 records)"));
  CHECK_THAT(ls.out, !ContainsSubstring("not used"));
  CHECK(json_field(s.ejk("run " + kProblem + " --iters 1 --json").out, "tuned") == "true");
  // clear also takes the temp files of the killed writers.
  CHECK_THAT(s.ejk("tune clear").out, ContainsSubstring("removed 1 tuning records"));
  CHECK(fs::is_empty(s.dir / "tune-v1"));
}

TEST_CASE("autotune: EJK_AUTOTUNE=1 measures a class on its first call, records it, and the result checks", "[cli][tune]") {
  const Store s;
  s.ejk("run " + kProblem + " --iters 1");  // off by default
  CHECK_THAT(s.ejk("tune ls").out, ContainsSubstring("(0 records)"));
  const auto first = s.ejk("run " + kProblem + " --iters 2 --check --json", "EJK_AUTOTUNE=1");
  INFO(first.out);
  REQUIRE(first.status == 0);
  CHECK(json_field(first.out, "check") == "\"pass\"");
  const auto ls = s.ejk("tune ls");
  INFO(ls.out);
  CHECK_THAT(ls.out, ContainsSubstring("(1 records)"));
  // A later process without autotuning runs the recorded winner, which the first call ran too.
  const auto later = s.ejk("run " + kProblem + " --iters 1 --json");
  CHECK(json_field(later.out, "key") == json_field(first.out, "key"));
  CHECK(json_field(later.out, "tuned") == "true");
  const auto bad = s.ejk("run " + kProblem + " --iters 1", "EJK_AUTOTUNE=sometimes");
  CHECK(bad.status == 2);
  CHECK_THAT(bad.out, ContainsSubstring("EJK_AUTOTUNE"));
}
