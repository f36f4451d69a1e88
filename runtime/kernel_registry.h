// Every kernel specialisation the dispatcher can request. The warm-up tool and the tests walk
// this list; the dispatcher builds its sources through the same functions, so the two can never
// disagree.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "jit.h"

namespace mamba3_jit {

// The kernel variant a solver version selects. Parsed from "key=value,key=value".
struct OpConfig {
  std::string variant = "v7";  // the fastest variant verified on the GPU
  int chunk = 32;
  int threads = 256;
};

// Throws std::invalid_argument naming the bad key or value.
OpConfig parse_op_config(const std::string& text);
std::string to_string(const OpConfig& config);

// Head dims the kernels are specialised for (SPEC's frozen family).
struct HeadDims {
  int n = 128;
  int p = 64;
  int a = 32;
};
constexpr HeadDims kSupportedDims{};

// True for the variants whose kernels start from initial states (and then require them).
bool takes_initial_states(const OpConfig& config);

// Sequence-count bucket baked into the scan kernel: 1, 2, 4 or 8, else 0 (any count).
int seq_bucket(long long num_seqs);

KernelSource scan_source(const OpConfig& config, int bucket, const std::string& arch = "");
KernelSource reduce_source(const OpConfig& config, const std::string& arch = "");
std::size_t scan_smem_bytes(const OpConfig& config);

// All specialisations for `arch` (empty = default_arch()).
std::vector<KernelSource> all_specializations(const std::string& arch = "");

}  // namespace mamba3_jit
