// The tile classifier of attention_variant.h against brute force over every (query, key) pair:
// causal, windows (one-sided, both, zero-width, past the sequence) and Sq != Sk, for the forward
// view (a q block's keys) and the backward adapter (a key block's queries).
#include <catch2/catch_test_macros.hpp>

#include <random>
#include <vector>

#include "ejk/kernels/common/attention_variant.h"

namespace ejk {
namespace {

struct Case {
  MaskSpec mask;
  i64 len_q, len_k;
};

// Every mask shape the classifier must handle, on short sequences (brute force is exhaustive).
std::vector<Case> cases() {
  std::vector<Case> out;
  const i64 windows[] = {kUnbounded, 0, 1, 3, 17, 40};
  const i64 lens[][2] = {{37, 37}, {20, 45}, {45, 20}, {1, 9}, {64, 64}};
  for (bool causal : {false, true})
    for (i64 left : windows)
      for (i64 right : windows)
        for (const auto& len : lens) {
          MaskSpec m;
          m.causal = causal;
          m.window_left = left;
          m.window_right = right;
          out.push_back({m, len[0], len[1]});
        }
  return out;
}

// What the classifier should say, counted pair by pair with mask.h's position_visible.
TileClass brute_class(const MaskSpec& m, i64 q0, i64 q1, i64 k0, i64 k1, i64 len_k) {
  bool any = false, all = true;
  for (i64 q = q0; q <= q1; ++q)
    for (i64 k = k0; k <= k1; ++k) {
      const bool v = k < len_k && position_visible(q, k, m);
      any = any || v;
      all = all && v;
    }
  return !any ? TileClass::masked : all ? TileClass::visible : TileClass::partial;
}

TEST_CASE("tile classifier: a q block's visible keys match brute force") {
  for (const Case& c : cases())
    for (i64 bq : {1, 4, 16})
      for (i64 q0 = 0; q0 < c.len_q; q0 += bq) {
        const i64 q1 = std::min(q0 + bq, c.len_q) - 1;
        i64 first = -1, last = -2;
        for (i64 k = 0; k < c.len_k; ++k)
          for (i64 q = q0; q <= q1; ++q)
            if (position_visible(q, k, c.mask)) {
              if (first < 0) first = k;
              last = k;
            }
        const PositionSpan span = block_visible_keys(c.mask, q0, q1, c.len_k);
        INFO("causal " << c.mask.causal << " window " << c.mask.window_left << "," << c.mask.window_right
                       << " len " << c.len_q << "x" << c.len_k << " q " << q0 << ".." << q1);
        if (first < 0) {
          CHECK(span.empty());
        } else {
          CHECK(span.first == first);
          CHECK(span.last == last);
        }
        // The tiles of 8 keys cover exactly the tiles holding a visible key.
        const TileRange tiles = visible_key_tiles(c.mask, q0, q1, c.len_k, 8);
        for (int t = 0; t * 8 < c.len_k; ++t) {
          const bool holds = first >= 0 && t * 8 <= last && t * 8 + 7 >= first;
          CHECK(holds == (t >= tiles.begin && t < tiles.end));
        }
        // Unbounded variants skip the arithmetic and see every key.
        if (!c.mask.causal && c.mask.window_left == kUnbounded && c.mask.window_right == kUnbounded) {
          const PositionSpan all = block_visible_keys<false>(c.mask, q0, q1, c.len_k);
          CHECK(all.first == span.first);
          CHECK(all.last == span.last);
        }
      }
}

TEST_CASE("tile classifier: fully visible, fully masked and partial tiles match brute force") {
  std::mt19937 rng(42);
  for (const Case& c : cases())
    for (int trial = 0; trial < 40; ++trial) {
      std::uniform_int_distribution<i64> qd(0, c.len_q - 1), kd(0, c.len_k + 6), wd(1, 12);
      const i64 q0 = qd(rng), k0 = kd(rng);
      const i64 q1 = std::min(q0 + wd(rng) - 1, c.len_q - 1), k1 = k0 + wd(rng) - 1;
      INFO("causal " << c.mask.causal << " window " << c.mask.window_left << "," << c.mask.window_right
                     << " q " << q0 << ".." << q1 << " k " << k0 << ".." << k1 << " len_k " << c.len_k);
      const TileClass want = brute_class(c.mask, q0, q1, k0, k1, c.len_k);
      CHECK(classify_tile(c.mask, q0, q1, k0, k1, c.len_k) == want);
      // By position alone (no sequence end): what the kernels ask of tiles inside the sequence.
      const TileClass pos = brute_class(c.mask, q0, q1, k0, k1, kUnbounded);
      CHECK(tile_fully_visible(c.mask, q0, q1, k0, k1) == (pos == TileClass::visible));
      CHECK(tile_fully_masked(c.mask, q0, q1, k0, k1) == (pos == TileClass::masked));
    }
}

TEST_CASE("tile classifier, backward adapter: a key block's visible queries match brute force") {
  std::mt19937 rng(7);
  for (const Case& c : cases())
    for (i64 bk : {1, 5, 16}) {
      for (i64 k0 = 0; k0 < c.len_k; k0 += bk) {
        const i64 k1 = std::min(k0 + bk, c.len_k) - 1;
        i64 first = -1, last = -2;
        for (i64 q = 0; q < c.len_q; ++q)
          for (i64 k = k0; k <= k1; ++k)
            if (position_visible(q, k, c.mask)) {
              if (first < 0) first = q;
              last = q;
            }
        INFO("causal " << c.mask.causal << " window " << c.mask.window_left << "," << c.mask.window_right
                       << " len " << c.len_q << "x" << c.len_k << " k " << k0 << ".." << k1);
        const PositionSpan span = block_visible_queries(c.mask, k0, k1, c.len_q);
        if (first < 0) {
          CHECK(span.empty());
        } else {
          CHECK(span.first == first);
          CHECK(span.last == last);
        }
        const TileRange tiles = visible_query_tiles(c.mask, k0, k1, c.len_q, 8);
        for (int t = 0; t * 8 < c.len_q; ++t) {
          const bool holds = first >= 0 && t * 8 <= last && t * 8 + 7 >= first;
          CHECK(holds == (t >= tiles.begin && t < tiles.end));
        }
      }
      // Tiles seen from the key side: the same classes, the sequence end on the query side.
      std::uniform_int_distribution<i64> kd(0, c.len_k - 1), qd(0, c.len_q + 6), wd(1, 12);
      for (int trial = 0; trial < 20; ++trial) {
        const i64 k0 = kd(rng), q0 = qd(rng);
        const i64 k1 = std::min(k0 + wd(rng) - 1, c.len_k - 1), q1 = q0 + wd(rng) - 1;
        bool any = false, all = true;
        for (i64 q = q0; q <= q1; ++q)
          for (i64 k = k0; k <= k1; ++k) {
            const bool v = q < c.len_q && position_visible(q, k, c.mask);
            any = any || v;
            all = all && v;
          }
        const TileClass want = !any ? TileClass::masked : all ? TileClass::visible : TileClass::partial;
        CHECK(classify_tile_for_keys(c.mask, k0, k1, q0, q1, c.len_q) == want);
      }
    }
}

TEST_CASE("variant_mask keeps window bounds only for window variants") {
  MaskSpec given;
  given.causal = false;
  given.window_left = 5;
  given.window_right = 2;
  const MaskSpec plain = variant_mask<AttentionFlags{}>(given);
  CHECK_FALSE(plain.causal);
  CHECK(plain.window_left == kUnbounded);
  CHECK(plain.window_right == kUnbounded);
  const MaskSpec win = variant_mask<AttentionFlags{.causal = true, .window = true}>(given);
  CHECK(win.causal);
  CHECK(win.window_left == 5);
  CHECK(win.window_right == 2);
  const MaskSpec rt = variant_mask(true, false, given);
  CHECK(rt.causal);
  CHECK(rt.window_left == kUnbounded);
}

}  // namespace
}  // namespace ejk
