// Every kernel specialisation the dispatcher can request. The warm-up tool and the tests walk
// this list; the dispatcher builds its sources through the same functions, so the two can never
// disagree.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "jit.h"

namespace mamba3_jit {

// The kernel variant a solver version selects. Parsed from "key=value,key=value".
struct OpConfig {
  std::string variant = "v248";  // the fastest variant verified on the GPU
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

// True for the chunk-parallel variants: their scan source holds m3_cp_angles, m3_cp_forward and
// m3_cp_backward instead of m3_chunk_scan.
bool is_chunk_parallel(const OpConfig& config);

// True for the variants whose kernels start from initial states (and then require them).
bool takes_initial_states(const OpConfig& config);

// Sequence-count bucket baked into the scan kernel: 1, 2, 4 or 8, else 0 (any count).
int seq_bucket(long long num_seqs);

// The dispatch-only variants (kDispatch in kernel_registry.cpp: v9 runs v7's kernels, v24 v23's,
// ...) run their fast kernels while every sequence is at most this long, and v8's (tile products
// about fp32-exact, 0.87x v7's speed) beyond: v7's dangles error grows like sqrt(L), from 2.3e-3
// at L ~ 1000 to 8.6e-3 at 32768 and 1.25e-2 at 65536 (run 16), and at 4096 it is still about
// 4e-3.
constexpr int64_t kExactProductsAboveLen = 4096;

// v137 (v139, v141, v143) runs the 32-token kernels (v103's) where the chunk-64 forward's jobs would fill fewer than
// this many waves of the CTAs that fit on the device: a 64-token job takes longer than a 32-token
// one, and with one or two waves its latency is the forward's. Run 96 (H100): at 1.2 waves (c00)
// the 64-token forward took 47.6 us against the 32-token one's 39.5, at 2.4 waves (c06) 70.7
// against 73.1, at 3.5 and more 4 to 12% less.
constexpr double kForward64MinWaves = 2.0;
// v234's threshold. Run 148 (H100, v231's and v232's kernels on mixes between c00 and c06): the
// wide kernels as fast or faster from about 1.7 waves by the bound (the forward 2.4 to 5.1 us faster
// at 1.70, 1.82 and 1.94 waves, a tie at 1.70 on another mix), the 32-token set 0.4 us faster at
// 1.21 (c00) and level at 1.09.
constexpr double kForward64MinWavesV234 = 1.5;

// The configuration whose kernels run a problem whose longest sequence has `longest_sequence`
// tokens (an upper bound will do): itself, except for the dispatch-only variants. Those that pick
// by the chunk-64 forward's waves (picks_by_forward64_waves) need `forward64_waves`: its grid
// over the CTAs of it that fit on the device at once.
OpConfig resolve_kernels(const OpConfig& config, int64_t longest_sequence,
                         double forward64_waves = std::numeric_limits<double>::infinity());
bool picks_by_forward64_waves(const OpConfig& config);
// `jobs` over `resident` (the chunk-64 forward's CTAs that fit at once; none: infinitely many
// waves), logged at debug level with the kernel set `config` then picks. The torch binding counts
// both; the log lives here because its translation units may not include spdlog beside torch's fmt.
double forward64_waves_of(const OpConfig& config, int64_t jobs, unsigned resident);

KernelSource scan_source(const OpConfig& config, int bucket, const std::string& arch = "");
// The module m3_cp_backward is loaded from: scan_source's, except for the variants whose ptxas
// options are the backward's alone (v207, v208) and those whose M3_SINCOS_WIDE is the forward's
// alone (v213, v214).
KernelSource backward_source(const OpConfig& config, int bucket, const std::string& arch = "");
// The reduce kernels of a configuration with kernels of its own; with wide reductions
// (M3_REDUCE_WIDE) m3_reduce_heads takes T * N / 4 threads and m3_reduce_partials an (H, 9) grid.
KernelSource reduce_source(const OpConfig& config, const std::string& arch = "");
bool uses_wide_reductions(const OpConfig& config);
// True for the variants (v39 on) whose chunk-parallel kernels after the first, and the reduce
// kernels, are launched with programmatic stream serialization (M3_PDL in their sources).
bool uses_programmatic_launch(const OpConfig& config);
// True for the variants whose chunk-parallel forward (v45, v97, v99) or backward (v45, v97) CTAs
// run job after job: those grids hold only the CTAs that fit on the device at once.
bool uses_persistent_forward(const OpConfig& config);
bool uses_persistent_backward(const OpConfig& config);
// True for the variants (v49 on) whose backward sums dq and dk over the heads itself:
// m3_reduce_heads is not launched for them.
bool uses_fused_head_sums(const OpConfig& config);
// True for the variant (v69) whose forward stores each chunk's C x C mixing matrix per head in
// the workspace (ws_mixing) for the backward to load.
bool stores_mixing(const OpConfig& config);
// True for the variants (v87 on) whose head sums and partials' sums run as one kernel,
// m3_reduce_all: a grid of H * ceil((2N + 1) / 32) partials blocks, then T * N / 4 head-sum threads.
bool uses_one_reduce_launch(const OpConfig& config);
// True for the variant (v101) whose m3_reduce_all is launched programmatically beside the
// backward's last wave: a grid of chunk_capacity * C * N / 4 / threads head-sum blocks in ticket
// order, each waiting for its chunk's heads, then the H * ceil((2N + 1) / 32) partials blocks.
bool overlaps_reduce(const OpConfig& config);
// True for the variant (v109) whose backward is launched programmatically beside the forward's
// last jobs (its forward lets it launch; each backward job waits for its state's forward flag).
bool overlaps_backward(const OpConfig& config);
// True for the variant (v119) whose forward is m3_cp_forward64: a CTA per job of two chunks
// (2 * chunk tokens) and head, (T / (2 chunk) + S) * H CTAs, forward_smem_bytes of dynamic shared
// memory; its chain hands the states on through ws_dstates, which the workspace then has in
// forward-only calls too, and its job table follows the chunk table in ws_schedule.
bool uses_forward64(const OpConfig& config);
// True for the variant (v121) that launches m3_cp_backward64q between the forward and the
// backward: the chunk-64 forward's grid, kM3Backward64qSmemBytes of dynamic shared memory; it
// writes ws_dqh and the dq half of ws_partial, which that variant's backward then leaves alone.
bool uses_backward64q(const OpConfig& config);
// True for the variant (v123) that also launches m3_cp_backward64kv after m3_cp_backward64q: the
// chunk-64 forward's grid again (its CTAs draw tickets from the forward's counter after the
// forward's), kM3Backward64kvSmemBytes of dynamic shared memory; it writes ws_dkh, the dk half of
// ws_partial and dv, which that variant's backward then leaves alone.
bool uses_backward64kv(const OpConfig& config);
// True for the variant (v125) whose backward is m3_cp_backward64, the whole chunk-64 backward in
// one kernel: the chunk-64 forward's grid (tickets after the forward's), backward_smem_bytes of
// dynamic shared memory (one CTA per SM); neither side's test-bed kernel is launched.
bool uses_backward64(const OpConfig& config);
// The cluster size of the backward launch for H heads: 1, or for the variants whose backward sums
// dq and dk over clusters of heads (v53: 4, v55: 8) the largest power of two up to that which
// divides H. ws_dqh and ws_dkh then hold H / size rows per token.
unsigned head_cluster_size(const OpConfig& config, int64_t heads);
// The cluster size of the angle kernel's launch (its grid is then size * H by S): 1, or for the
// variants whose angle kernel splits a (sequence, head) over a cluster (v81) enough CTAs for a
// warp per chunk of a sequence of `longest_sequence` tokens (an upper bound will do), at most 8.
unsigned angle_cluster_size(const OpConfig& config, int64_t longest_sequence);
std::size_t scan_smem_bytes(const OpConfig& config);
// Dynamic shared memory of the chunk-parallel forward and backward kernels.
std::size_t forward_smem_bytes(const OpConfig& config);
std::size_t backward_smem_bytes(const OpConfig& config);

// All specialisations for `arch` (empty = default_arch()).
std::vector<KernelSource> all_specializations(const std::string& arch = "");
// The specialisations calls with `configs` can request, each once: their scan kernels for every
// sequence-count bucket and their reduce kernels; for a dispatch-only variant those of both
// kernel sets it dispatches to. Throws std::invalid_argument for an unknown configuration.
std::vector<KernelSource> specializations_for(const std::vector<OpConfig>& configs, const std::string& arch = "");

}  // namespace mamba3_jit
