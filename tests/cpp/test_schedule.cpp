// The chunk-parallel kernels' work order, on the host: every (sequence, chunk) pair gets exactly
// one ticket, and a chunk's neighbour in its chain always gets an earlier one (the property that
// makes waiting on it deadlock-free).
#include <catch2/catch.hpp>

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

void check_schedule(const std::vector<int>& lens, int chunk) {
  const std::vector<int> cu = cumulative(lens);
  const int S = static_cast<int>(lens.size());
  long long total = 0;
  for (int i = 0; i < S; ++i) total += m3_seq_chunks(cu.data(), i, chunk);
  std::map<std::pair<int, int>, long long> ticket;  // (sequence, round) -> q
  int last_round = 0;
  for (long long q = 0; q < total; ++q) {
    int seq = -1, round = -1;
    REQUIRE(m3_schedule(cu.data(), S, chunk, q, seq, round));
    REQUIRE(seq >= 0);
    REQUIRE(seq < S);
    REQUIRE(round >= 0);
    REQUIRE(round < m3_seq_chunks(cu.data(), seq, chunk));
    REQUIRE(round >= last_round);  // rounds never go back
    last_round = round;
    REQUIRE(ticket.emplace(std::make_pair(seq, round), q).second);  // no pair twice
  }
  CHECK(static_cast<long long>(ticket.size()) == total);  // every pair once
  for (const auto& entry : ticket) {
    const int seq = entry.first.first, round = entry.first.second;
    if (round > 0) CHECK(ticket.at({seq, round - 1}) < entry.second);
  }
  int seq = -1, round = -1;
  CHECK_FALSE(m3_schedule(cu.data(), S, chunk, total, seq, round));
  CHECK_FALSE(m3_schedule(cu.data(), S, chunk, total + 1000, seq, round));
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
