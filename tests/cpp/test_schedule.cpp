// The chunk-parallel kernels' work order, on the host: every (sequence, chunk) pair gets exactly
// one ticket, and a chunk's neighbour in its chain always gets an earlier one (the property that
// makes waiting on it deadlock-free).
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <random>
#include <utility>
#include <vector>

#include "../kernel_src/m3_schedule.cuh"

namespace {

std::vector<int> cumulative(const std::vector<int>& lens) {
  std::vector<int> cu{0};
  for (int l : lens) cu.push_back(cu.back() + l);
  return cu;
}

// `aligned`: m3_schedule_aligned's order, where rounds go up only within a chain and every
// chain's last round is the longest's.
void check_schedule(const std::vector<int>& lens, int chunk, bool aligned = false) {
  const std::vector<int> cu = cumulative(lens);
  const auto schedule = aligned ? m3_schedule_aligned : m3_schedule;
  const int S = static_cast<int>(lens.size());
  long long total = 0;
  for (int i = 0; i < S; ++i) total += m3_seq_chunks(cu.data(), i, chunk);
  std::map<std::pair<int, int>, long long> ticket;  // (sequence, round) -> q
  int most = 0;
  for (int i = 0; i < S; ++i) most = std::max(most, m3_seq_chunks(cu.data(), i, chunk));
  int last_round = 0;
  for (long long q = 0; q < total; ++q) {
    int seq = -1, round = -1;
    REQUIRE(schedule(cu.data(), S, chunk, q, seq, round));
    REQUIRE(seq >= 0);
    REQUIRE(seq < S);
    REQUIRE(round >= 0);
    REQUIRE(round < m3_seq_chunks(cu.data(), seq, chunk));
    // Rounds (aligned ones: counted so that every chain ends in the longest's last) never go back.
    const int key = aligned ? round + most - m3_seq_chunks(cu.data(), seq, chunk) : round;
    REQUIRE(key >= last_round);
    last_round = key;
    REQUIRE(ticket.emplace(std::make_pair(seq, round), q).second);  // no pair twice
  }
  CHECK(static_cast<long long>(ticket.size()) == total);  // every pair once
  for (const auto& entry : ticket) {
    const int seq = entry.first.first, round = entry.first.second;
    if (round > 0) CHECK(ticket.at({seq, round - 1}) < entry.second);
  }
  int seq = -1, round = -1;
  CHECK_FALSE(schedule(cu.data(), S, chunk, total, seq, round));
  CHECK_FALSE(schedule(cu.data(), S, chunk, total + 1000, seq, round));
}

}  // namespace

TEST_CASE("chunk tickets cover every chunk once, in rounds, each after its predecessor", "[schedule]") {
  check_schedule({959, 900, 897, 950, 931}, 32);
  check_schedule({129, 150, 191}, 32);
  check_schedule({0, 37, 0}, 32);
  check_schedule({1, 64, 2, 63, 65, 128}, 32);
  check_schedule({0}, 32);
  check_schedule({65536, 32767, 1, 0, 32769}, 32);
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<int> lens(1 + rng() % 70);
    for (int& l : lens) l = static_cast<int>(rng() % 3 == 0 ? rng() % 3 : rng() % 2000);
    check_schedule(lens, trial % 2 ? 32 : 64);
  }
}

TEST_CASE("aligned tickets cover every chunk once, the longest chains first, each after its predecessor",
          "[schedule]") {
  check_schedule({959, 900, 897, 950, 931}, 32, true);
  check_schedule({402, 535, 551, 926, 434}, 64, true);
  check_schedule({129, 150, 191}, 32, true);
  check_schedule({0, 37, 0}, 32, true);
  check_schedule({1, 64, 2, 63, 65, 128}, 32, true);
  check_schedule({0}, 32, true);
  check_schedule({65536, 32767, 1, 0, 32769}, 32, true);
  std::mt19937 rng(11);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<int> lens(1 + rng() % 70);
    for (int& l : lens) l = static_cast<int>(rng() % 3 == 0 ? rng() % 3 : rng() % 2000);
    check_schedule(lens, trial % 2 ? 32 : 64, true);
  }
  // The longest sequence's first chunk takes the first ticket, a shorter one's only once the
  // longest has as many rounds left as it has chunks.
  const std::vector<int> cu = cumulative({100, 300});  // 4 and 10 chunks of 32
  int seq = -1, round = -1;
  for (long long q = 0; q < 6; ++q) {
    REQUIRE(m3_schedule_aligned(cu.data(), 2, 32, q, seq, round));
    CHECK(seq == 1);
    CHECK(round == q);
  }
  REQUIRE(m3_schedule_aligned(cu.data(), 2, 32, 6, seq, round));
  CHECK(seq == 0);
  CHECK(round == 0);
}
