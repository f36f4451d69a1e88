// The torch operator: torch.ops.mamba3_jit.fwd_vjp runs the forward and the full VJP in one call
// on the current CUDA stream; torch.ops.mamba3_jit.validate runs only the argument checks.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/EmptyTensor.h>
#include <c10/cuda/CUDAGraphsC10Utils.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <limits>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>

#include "../kernel_src/m3_params.cuh"
#include "host_stages.h"
#include "jit.h"
#include "kernel_registry.h"
#include "torch_validate.h"

namespace mamba3_jit {
namespace {

template <class T>
T* ptr(const at::Tensor& t) {
  return t.defined() ? reinterpret_cast<T*>(t.data_ptr()) : nullptr;
}

at::Tensor or_undefined(const c10::optional<at::Tensor>& t) { return t.has_value() ? *t : at::Tensor(); }

// A new CUDA tensor from the caching allocator without a trip through the dispatcher: the call
// makes up to twenty of them, several before its first launch, where each microsecond of host
// time is a microsecond of idle GPU. Every result is written in full by the kernels.
at::Tensor fresh(at::IntArrayRef sizes, at::ScalarType dtype, const at::Device& device) {
  return at::Tensor(at::detail::empty_cuda(sizes, dtype, device, c10::nullopt));
}
at::Tensor fresh_like(const at::Tensor& t) { return fresh(t.sizes(), t.scalar_type(), t.device()); }

// Fetches a kernel, refusing JIT work while the stream is being captured into a CUDA graph:
// compiling or loading a module there would break the capture.
const LoadedKernel& kernel_for(const KernelSource& src, const char* fn, unsigned smem, bool capturing) {
  if (capturing && !kernel_is_ready(src, fn)) {
    throw std::runtime_error("mamba3_jit: kernel " + src.name +
                             " is not loaded yet and the current stream is capturing a CUDA graph; "
                             "call the operator once with the same shapes before capture");
  }
  return load_kernel(src, fn, smem);
}

// The three kernels of one call. Building their sources (a dozen option strings each) and
// looking them up costs microseconds that every call would pay again, so the set is remembered
// per (configuration, sequence bucket, device); LoadedKernel references live as long as the
// process.
struct CallKernels {
  const LoadedKernel* scan;  // walkers
  const LoadedKernel* cp_angles;  // chunk-parallel variants, instead of scan
  const LoadedKernel* cp_forward;
  const LoadedKernel* cp_backward;
  const LoadedKernel* reduce_heads;
  const LoadedKernel* reduce_partials;
  const LoadedKernel* reduce_all;  // both reductions in one grid (uses_one_reduce_launch), else null
  unsigned scan_smem;
  unsigned forward_smem;   // m3_cp_forward's; equal to scan_smem except with a lean forward layout
  unsigned backward_smem;  // m3_cp_backward's; equal to scan_smem except with the states in global memory
  // Persistent variants: the CTAs of the forward and backward that fit on the device at once
  // (their grids), else 0.
  unsigned forward_ctas = 0, backward_ctas = 0;
  // Variants whose angle kernel runs in clusters (their size depends on the call).
  bool angle_clusters = false;
  // The chunk-64 forward (v119): a CTA per job of two chunks; how many of its CTAs fit at once.
  bool forward64 = false;
  unsigned forward64_resident = 0;
  // The q side of the chunk-64 backward (v121), launched between the forward and the backward.
  const LoadedKernel* cp_backward64q = nullptr;
  // Its k/v side (v123), launched after it.
  const LoadedKernel* cp_backward64kv = nullptr;
  // The whole chunk-64 backward (v125) is the backward kernel, on the forward's grid.
  bool backward64 = false;
};

CallKernels kernels_for(const OpConfig& config, int bucket, int device, bool capturing) {
  static std::mutex mu;
  static std::map<std::tuple<std::string, int, int>, CallKernels> memo;
  const auto key = std::make_tuple(to_string(config), bucket, device);
  {
    std::lock_guard<std::mutex> lock(mu);
    const auto it = memo.find(key);
    if (it != memo.end()) return it->second;
  }
  CallKernels k{};
  k.scan_smem = static_cast<unsigned>(scan_smem_bytes(config));
  const KernelSource scan_src = scan_source(config, bucket);
  if (is_chunk_parallel(config)) {
    k.cp_angles = &kernel_for(scan_src, "m3_cp_angles", 0, capturing);
    k.angle_clusters = angle_cluster_size(config, std::numeric_limits<int64_t>::max()) > 1;
    k.forward_smem = static_cast<unsigned>(forward_smem_bytes(config));
    k.forward64 = uses_forward64(config);
    k.cp_forward = &kernel_for(scan_src, k.forward64 ? "m3_cp_forward64" : "m3_cp_forward", k.forward_smem, capturing);
    k.backward_smem = static_cast<unsigned>(backward_smem_bytes(config));
    k.backward64 = uses_backward64(config);
    const KernelSource backward_src = backward_source(config, bucket);
    k.cp_backward = &kernel_for(backward_src, k.backward64 ? "m3_cp_backward64" : "m3_cp_backward", k.backward_smem, capturing);
    if (uses_backward64q(config) && !k.backward64) {
      k.cp_backward64q = &kernel_for(scan_src, "m3_cp_backward64q", kM3Backward64qSmemBytes, capturing);
      k.cp_backward64q->log_occupancy(static_cast<unsigned>(config.threads), kM3Backward64qSmemBytes);
    }
    if (uses_backward64kv(config) && !k.backward64) {
      k.cp_backward64kv = &kernel_for(scan_src, "m3_cp_backward64kv", kM3Backward64kvSmemBytes, capturing);
      k.cp_backward64kv->log_occupancy(static_cast<unsigned>(config.threads), kM3Backward64kvSmemBytes);
    }
    const unsigned threads = static_cast<unsigned>(config.threads);
    k.cp_forward->log_occupancy(threads, k.forward_smem);
    k.cp_backward->log_occupancy(threads, k.backward_smem);
    if (uses_persistent_forward(config)) k.forward_ctas = k.cp_forward->resident_ctas(threads, k.forward_smem);
    if (k.forward64) k.forward64_resident = k.cp_forward->resident_ctas(threads, k.forward_smem);
    if (uses_persistent_backward(config)) k.backward_ctas = k.cp_backward->resident_ctas(threads, k.backward_smem);
  } else {
    k.scan = &kernel_for(scan_src, "m3_chunk_scan", k.scan_smem, capturing);
    k.scan->log_occupancy(static_cast<unsigned>(config.threads), k.scan_smem);
  }
  const KernelSource reduce_src = reduce_source(config);
  k.reduce_heads = &kernel_for(reduce_src, "m3_reduce_heads", 0, capturing);
  k.reduce_partials = &kernel_for(reduce_src, "m3_reduce_partials", 0, capturing);
  if (uses_one_reduce_launch(config)) k.reduce_all = &kernel_for(reduce_src, "m3_reduce_all", 0, capturing);
  std::lock_guard<std::mutex> lock(mu);
  memo.emplace(key, k);
  return k;
}

// The longest sequence; inside capture cu_seqlens was not read, and T bounds every sequence.
int64_t longest_sequence(const Problem& pb, int64_t T) {
  if (pb.cu_seqlens.empty()) return T;
  int64_t longest = 0;
  for (size_t i = 0; i + 1 < pb.cu_seqlens.size(); ++i) {
    longest = std::max<int64_t>(longest, pb.cu_seqlens[i + 1] - pb.cu_seqlens[i]);
  }
  return longest;
}

// The chunk-64 forward's grid, sum ceil(L_i / (2 chunk)) <= T / (2 chunk) + S jobs per head.
int64_t forward64_jobs(const OpConfig& config, const Problem& pb) {
  return (pb.T / (2 * config.chunk) + pb.S) * pb.H;
}

// For the variants that pick their kernels by it (v137 and the later waves pickers), how many waves of the CTAs that fit on
// the device the chunk-64 forward's jobs would make; infinity for the others.
double forward64_waves(const OpConfig& config, const Problem& pb, int device, bool capturing) {
  if (!picks_by_forward64_waves(config)) return std::numeric_limits<double>::infinity();
  const OpConfig wide = resolve_kernels(config, 0);
  const CallKernels k = kernels_for(wide, seq_bucket(pb.S), device, capturing);
  TORCH_CHECK(k.forward64 && k.forward64_resident > 0, "mamba3_jit: ", to_string(config),
              " picks by the chunk-64 forward's waves, but ", to_string(wide), " has no chunk-64 forward");
  return forward64_waves_of(config, forward64_jobs(wide, pb), k.forward64_resident);
}

// Parsing the config string on every call would cost more than the lookup it feeds.
OpConfig config_for(c10::string_view text) {
  static std::mutex mu;
  static std::map<std::string, OpConfig> memo;
  const std::string key(text);
  std::lock_guard<std::mutex> lock(mu);
  const auto it = memo.find(key);
  if (it != memo.end()) return it->second;
  OpConfig config;
  try {
    config = parse_op_config(key);
  } catch (const std::invalid_argument& e) {
    TORCH_CHECK_VALUE(false, e.what());
  }
  memo.emplace(key, config);
  return config;
}

// The pieces of the one workspace allocation (floats; each piece starts 256-byte aligned). Each
// allocator call costs microseconds of host time, and the call is short enough for them to show.
struct WorkspaceLayout {
  int64_t total_chunks = 0, partial_rows = 0;
  int64_t n_states = 0, n_phi = 0, n_dh = 0, n_partial = 0, n_dstates = 0, n_tail = 0, n_sync = 0,
          n_schedule = 0, n_mixing = 0;
  static int64_t align(int64_t n) { return (n + 63) / 64 * 64; }
  int64_t total() const {
    return align(n_states) + align(n_phi) + 2 * align(n_dh) + align(n_partial) + align(n_dstates) + align(n_tail) +
           align(n_sync) + align(n_schedule) + align(n_mixing);
  }
};

// sum ceil(L_i / chunk) <= T / chunk + S, so the workspace is sized from shapes alone.
WorkspaceLayout workspace_layout(const OpConfig& run_config, const Problem& pb, bool forward_only) {
  const int64_t T = pb.T, S = pb.S, H = pb.H, N = pb.N, P = pb.P, A = pb.A;
  const bool chunk_parallel = is_chunk_parallel(run_config);
  WorkspaceLayout w;
  w.total_chunks = std::max<int64_t>(T / run_config.chunk + S, 1);
  const int64_t rows = forward_only ? 0 : std::max<int64_t>(T, 1);  // dq/dk partials: backward only
  w.n_states = w.total_chunks * H * P * N;
  w.n_phi = w.total_chunks * H * A;
  w.n_dh = rows * H * N;
  // The chunk-parallel variants keep one partials row per chunk (the walkers one per sequence), the
  // state gradients and tail carries chunks hand on, and their tickets and flags.
  w.partial_rows = chunk_parallel ? w.total_chunks : S;
  w.n_partial = w.partial_rows * H * (2 * N + 1);
  // One slot more than the states: the fragment-order variants (M3_CP_FRAG_STATES and
  // M3_CP_FRAG_DSTATES, v27 on) reorder each final state's gradient into the slot after its
  // sequence's last chunk, which is past the chunks for the last sequence. The other
  // chunk-parallel variants leave the slot unused.
  // The chunk-64 forward (v119) hands its chain's states on through this piece, forward only too.
  const bool forward64 = chunk_parallel && uses_forward64(run_config);
  w.n_dstates = chunk_parallel && (!forward_only || forward64) ? w.n_states + H * P * N : 0;
  w.n_tail = chunk_parallel ? w.total_chunks * H * m3_tail_words(A) : 0;
  // Tickets, flags and (M3_CP_FUSED_HEADS) a heads-done count per chunk: ints, carved as floats.
  w.n_sync = chunk_parallel ? 2 + 3 * w.total_chunks * H + w.total_chunks : 0;
  // Ints, rewritten every call: 8 per chunk, the entry of M3_CP_RICH_SCHEDULE (v63; the variants
  // before it use 2).
  // The chunk-64 forward's job table (v119) follows, as long.
  w.n_schedule = chunk_parallel ? (forward64 ? 16 : 8) * w.total_chunks : 0;
  // The forward's mixing matrices, C x C per chunk and head, for the backward (v69 on).
  const bool hands_mixing = chunk_parallel && !forward_only && stores_mixing(run_config);
  w.n_mixing = hands_mixing ? w.total_chunks * H * run_config.chunk * run_config.chunk : 0;
  return w;
}

// Runs the chunk scan and the reductions. With `states` (the four initial states) the variant
// must take them, and the four gradients of the states follow the sixteen results. Undefined
// cotangents are zeros the kernels never read. `forward_only` returns the five forward results
// alone and runs only the forward walk: no gradient is computed and no reduction launched.
std::vector<at::Tensor> run_fwd_vjp(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>* states,
                                    c10::string_view config_text, bool forward_only = false) {
  HostStages stages;
  const OpConfig config = config_for(config_text);
  TORCH_CHECK_VALUE(takes_initial_states(config) == (states != nullptr), "mamba3_jit: kernel configuration '",
                    to_string(config), "' ", states ? "does not take initial states; use variant=v6"
                                                    : "needs initial states; call fwd_vjp_states");
  const at::Tensor &q = a[0], &k = a[1], &v = a[2], &adt = a[3], &dt = a[4], &trap = a[5], &q_bias = a[6],
                   &k_bias = a[7], &angles = a[8], &d = a[9], &z = a[10], &cu_seqlens = a[11], &dout = a[12],
                   &dfinal_angle = a[13], &dfinal_ssm = a[14], &dfinal_k = a[15], &dfinal_v = a[16];
  // Inside graph capture the values of cu_seqlens cannot be read back; the plan below needs only
  // shapes, and the kernels trap on inconsistent boundaries.
  const bool capturing = q.is_cuda() && c10::cuda::currentStreamCaptureStatusMayInitCtx() != c10::cuda::CaptureStatus::None;
  // The cu_seqlens values travel to the host while the other arguments are checked and the
  // forward's results allocated, so that the wait after them finds the copy arrived (run 116: the
  // wait is then the synchronize call's own 2 us). A copy into the operator's own buffer touches
  // no argument; if a check below throws, the read-back waits for it as it goes.
  c10::optional<CuSeqlensReadback> readback;
  const bool early = !capturing && CuSeqlensReadback::can_start(cu_seqlens, q.device());
  if (early) readback.emplace(cu_seqlens, cu_seqlens.size(0) - 1);
  stages.mark("copy call");
  Problem pb = validate_shapes(a, /*require_cuda=*/true);
  if (states) validate_initial_states(*states, pb, q.device());
  stages.set_shape(pb.T, pb.S);
  stages.mark("checks");
  // validate_shapes passed, so can_start holds unless the stream is capturing.
  TORCH_CHECK(capturing || early, "mamba3_jit: internal error: cu_seqlens passed the checks but its read-back did not start");
  const c10::cuda::CUDAGuard guard(q.device());
  const at::Device dev = q.device();
  const int64_t T = pb.T, S = pb.S, H = pb.H, N = pb.N, P = pb.P, A = pb.A;

  // The workspace too is allocated while cu_seqlens travels. Which kernels run depends on the
  // longest sequence, but the workspace of either candidate (short sequences, or one of T tokens)
  // is sized from shapes: the larger is taken.
  // v137 (and its successors) picks its kernels by how many waves the chunk-64 forward's jobs would make: that count
  // comes from shapes and the device alone, so it is known before cu_seqlens arrives.
  const double waves = forward64_waves(config, pb, q.device().index(), capturing);
  const OpConfig short_config = resolve_kernels(config, 0, waves);
  const WorkspaceLayout short_ws = workspace_layout(short_config, pb, forward_only);
  const WorkspaceLayout long_ws = workspace_layout(resolve_kernels(config, T), pb, forward_only);
  stages.mark("plan before the wait");
  at::Tensor ws = fresh({std::max(short_ws.total(), long_ws.total())}, at::kFloat, dev);
  stages.mark("workspace allocation");
  at::Tensor output = fresh({1, T, H, P}, at::kBFloat16, dev);
  stages.mark("output allocation");
  at::Tensor final_angle = fresh({S, H, A}, at::kBFloat16, dev);
  at::Tensor final_ssm = fresh({S, H, P, N}, at::kFloat, dev);
  at::Tensor final_k = fresh({S, H, N}, at::kFloat, dev);
  at::Tensor final_v = fresh({S, H, P}, at::kBFloat16, dev);
  at::Tensor dq, dk, dv, dadt, ddt, dtrap, dq_bias, dk_bias, dangles, dd, dz;
  if (!forward_only) dz = fresh_like(z);  // written by the forward kernel
  stages.mark("final states and dz allocations");
  // Bad boundaries throw here: the results above go back to the allocator, nothing was launched.
  if (readback) readback->finish(pb);
  stages.mark("read-back wait");

  // The kernels the longest sequence picks, and their carving of the workspace.
  const int64_t longest = longest_sequence(pb, T);
  const OpConfig run_config = resolve_kernels(config, longest, waves);
  const bool chunk_parallel = is_chunk_parallel(run_config);
  const WorkspaceLayout wl = run_config.variant == short_config.variant ? short_ws : long_ws;
  float* ws_next = ws.data_ptr<float>();
  const auto carve = [&](int64_t n) {
    float* piece = ws_next;
    ws_next += WorkspaceLayout::align(n);
    return piece;
  };

  M3Params p{};
  p.q = ptr<const m3_bf16>(q);
  p.k = ptr<const m3_bf16>(k);
  p.v = ptr<const m3_bf16>(v);
  p.adt = ptr<const float>(adt);
  p.dt = ptr<const float>(dt);
  p.trap = ptr<const m3_bf16>(trap);
  p.q_bias = ptr<const float>(q_bias);
  p.k_bias = ptr<const float>(k_bias);
  p.angles = ptr<const m3_bf16>(angles);
  p.d = ptr<const float>(d);
  p.z = ptr<const m3_bf16>(z);
  p.cu_seqlens = ptr<const int>(cu_seqlens);
  p.dout = ptr<const m3_bf16>(dout);
  p.dfinal_angle = ptr<const m3_bf16>(dfinal_angle);
  p.dfinal_ssm = ptr<const float>(dfinal_ssm);
  p.dfinal_k = ptr<const float>(dfinal_k);
  p.dfinal_v = ptr<const m3_bf16>(dfinal_v);
  p.output = ptr<m3_bf16>(output);
  p.final_angle = ptr<m3_bf16>(final_angle);
  p.final_ssm = ptr<float>(final_ssm);
  p.final_k = ptr<float>(final_k);
  p.final_v = ptr<m3_bf16>(final_v);
  p.dz = ptr<m3_bf16>(dz);
  // The other gradients are allocated when the first kernels are already running (the
  // chunk-parallel path launches its angle and forward kernels before, neither reads a gradient
  // pointer): each allocation costs microseconds of host time that would otherwise keep the GPU
  // idle.
  const auto allocate_gradients = [&] {
    if (forward_only || dq.defined()) return;
    dq = fresh_like(q), dk = fresh_like(k), dv = fresh_like(v);
    dadt = fresh_like(adt), ddt = fresh_like(dt), dtrap = fresh_like(trap);
    dq_bias = fresh_like(q_bias), dk_bias = fresh_like(k_bias);
    dangles = fresh_like(angles), dd = fresh_like(d);
    p.dq = ptr<m3_bf16>(dq);
    p.dk = ptr<m3_bf16>(dk);
    p.dv = ptr<m3_bf16>(dv);
    p.dadt = ptr<float>(dadt);
    p.ddt = ptr<float>(ddt);
    p.dtrap = ptr<m3_bf16>(dtrap);
    p.dq_bias = ptr<float>(dq_bias);
    p.dk_bias = ptr<float>(dk_bias);
    p.dangles = ptr<m3_bf16>(dangles);
    p.dd = ptr<float>(dd);
  };
  p.ws_states = carve(wl.n_states);
  p.ws_phi = carve(wl.n_phi);
  p.ws_dqh = carve(wl.n_dh);
  p.ws_dkh = carve(wl.n_dh);
  p.ws_partial = carve(wl.n_partial);
  p.ws_dstates = carve(wl.n_dstates);
  p.ws_tail = carve(wl.n_tail);
  p.ws_sync = reinterpret_cast<int*>(carve(wl.n_sync));
  p.ws_schedule = reinterpret_cast<int*>(carve(wl.n_schedule));
  p.ws_mixing = wl.n_mixing ? carve(wl.n_mixing) : nullptr;
  p.chunk_capacity = static_cast<int>(wl.total_chunks);
  p.partial_rows = static_cast<int>(wl.partial_rows);
  std::vector<at::Tensor> state_grads;
  if (states) {
    const std::vector<at::Tensor>& st = *states;
    p.init_angle = ptr<const m3_bf16>(st[0]);
    p.init_ssm = ptr<const float>(st[1]);
    p.init_k = ptr<const float>(st[2]);
    p.init_v = ptr<const m3_bf16>(st[3]);
    if (!forward_only) {
      for (const auto& t : st) state_grads.push_back(fresh_like(t));
      p.d_init_angle = ptr<m3_bf16>(state_grads[0]);
      p.d_init_ssm = ptr<float>(state_grads[1]);
      p.d_init_k = ptr<float>(state_grads[2]);
      p.d_init_v = ptr<m3_bf16>(state_grads[3]);
    }
  }
  // The sixteen results, then the gradients of the initial states.
  p.T = static_cast<int>(T);
  p.S = static_cast<int>(S);
  p.H = static_cast<int>(H);
  p.forward_only = forward_only ? 1 : 0;
  // The backward of the head-cluster variants sums dq and dk over each cluster's heads itself.
  const unsigned head_cluster = chunk_parallel ? head_cluster_size(run_config, H) : 1;
  p.head_parts = static_cast<int>(H / head_cluster);

  const unsigned threads = static_cast<unsigned>(config.threads);
  const CallKernels kernels = kernels_for(run_config, seq_bucket(S), q.device().index(), capturing);
  const unsigned scan_smem = kernels.scan_smem;
  const LoadedKernel& reduce_heads = *kernels.reduce_heads;
  const LoadedKernel& reduce_partials = *kernels.reduce_partials;

  void* args[] = {&p};
  LaunchConfig lc;
  lc.stream = at::cuda::getCurrentCUDAStream(q.device().index()).stream();
  lc.block[0] = threads;
  if (chunk_parallel) {
    // The angle kernel also zeroes the tickets and flags (sync_words) the next two start from.
    const unsigned angle_ranks = kernels.angle_clusters ? angle_cluster_size(run_config, longest) : 1;
    lc.grid[0] = static_cast<unsigned>(H) * angle_ranks;
    lc.grid[1] = static_cast<unsigned>(S);
    lc.cluster[0] = angle_ranks;
    stages.mark("plan");
    kernels.cp_angles->launch(lc, args);
    stages.mark("angle launch");
    lc.cluster[0] = 1;
    // The kernels after the first wait for their predecessor themselves where the variant says so.
    lc.programmatic = uses_programmatic_launch(run_config);
    // One CTA per possible (chunk, head), those past the last chunk leave at once; persistent
    // variants launch the CTAs that fit at once, each running jobs until the tickets run out.
    const auto cp_grid = [&](unsigned resident) {
      const int64_t jobs = wl.total_chunks * H;
      return static_cast<unsigned>(resident > 0 ? std::min<int64_t>(jobs, resident) : jobs);
    };
    const unsigned grid64 = static_cast<unsigned>(forward64_jobs(run_config, pb));
    lc.grid[0] = kernels.forward64 ? grid64 : cp_grid(kernels.forward_ctas);
    lc.grid[1] = 1;
    lc.dynamic_smem = kernels.forward_smem;
    kernels.cp_forward->launch(lc, args);
    stages.mark("forward launch");
    if (forward_only) return {output, final_angle, final_ssm, final_k, final_v};
    allocate_gradients();
    stages.mark("gradient allocations");
    if (kernels.cp_backward64q != nullptr) {
      // One CTA per entry of the same job table; no tickets, the jobs are independent.
      lc.grid[0] = grid64;
      lc.dynamic_smem = kM3Backward64qSmemBytes;
      kernels.cp_backward64q->launch(lc, args);
      stages.mark("backward64q launch");
    }
    if (kernels.cp_backward64kv != nullptr) {
      // The same grid: its CTAs draw tickets after the forward's, which drew one each.
      lc.grid[0] = grid64;
      lc.dynamic_smem = kM3Backward64kvSmemBytes;
      kernels.cp_backward64kv->launch(lc, args);
      stages.mark("backward64kv launch");
    }
    lc.grid[0] = kernels.backward64 ? grid64 : cp_grid(kernels.backward_ctas);
    lc.dynamic_smem = kernels.backward_smem;
    lc.cluster[0] = head_cluster;  // divides H, and so the grid of total_chunks * H CTAs
    const bool programmatic = lc.programmatic;
    lc.programmatic = programmatic || overlaps_backward(run_config);
    kernels.cp_backward->launch(lc, args);
    stages.mark("backward launch");
    lc.programmatic = programmatic;
    lc.cluster[0] = 1;
  } else {
    allocate_gradients();
    lc.grid[0] = static_cast<unsigned>(H);
    lc.grid[1] = static_cast<unsigned>(S);
    lc.dynamic_smem = scan_smem;
    stages.mark("plan");
    kernels.scan->launch(lc, args);
    stages.mark("scan launch");
    if (forward_only) return {output, final_angle, final_ssm, final_k, final_v};
  }
  lc.dynamic_smem = 0;
  const bool wide = uses_wide_reductions(run_config);
  const unsigned partial_blocks_y = wide ? static_cast<unsigned>((2 * N + 1 + 31) / 32) : 1;
  const int64_t head_threads = wide ? T * N / 4 : T * N;
  const unsigned head_blocks = static_cast<unsigned>((head_threads + threads - 1) / threads);
  if (kernels.reduce_all != nullptr && overlaps_reduce(run_config)) {
    // Launched while the backward's last wave runs: the head sums of each chunk in ticket order,
    // waiting for its heads, then the partials' blocks, waiting for the whole backward.
    const int64_t chunk_blocks = wl.total_chunks * run_config.chunk * (N / 4) / threads;
    lc.grid[0] = static_cast<unsigned>(chunk_blocks) + static_cast<unsigned>(H) * partial_blocks_y;
    lc.grid[1] = 1;
    lc.programmatic = true;
    kernels.reduce_all->launch(lc, args);
  } else if (kernels.reduce_all != nullptr) {
    // One grid: the partials' blocks first, then the head sums' (the variants with it are wide).
    lc.grid[0] = static_cast<unsigned>(H) * partial_blocks_y + head_blocks;
    lc.grid[1] = 1;
    kernels.reduce_all->launch(lc, args);
  } else {
    // The fused variants' backward has summed dq and dk over the heads already.
    if (T > 0 && !uses_fused_head_sums(run_config)) {
      lc.grid[0] = head_blocks;
      lc.grid[1] = 1;
      reduce_heads.launch(lc, args);
    }
    lc.grid[0] = static_cast<unsigned>(H);
    lc.grid[1] = partial_blocks_y;
    reduce_partials.launch(lc, args);
  }
  std::vector<at::Tensor> results = {output, final_angle, final_ssm, final_k, final_v, dq, dk, dv, dadt, ddt, dtrap,
                                     dq_bias, dk_bias, dangles, dd, dz};
  results.insert(results.end(), state_grads.begin(), state_grads.end());
  stages.mark("reduce launch");
  return results;
}

std::vector<at::Tensor> fwd_vjp(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& adt,
                                const at::Tensor& dt, const at::Tensor& trap, const at::Tensor& q_bias,
                                const at::Tensor& k_bias, const at::Tensor& angles, const at::Tensor& d,
                                const at::Tensor& z, const at::Tensor& cu_seqlens,
                                const c10::optional<at::Tensor>& dout, const c10::optional<at::Tensor>& dfinal_angle,
                                const c10::optional<at::Tensor>& dfinal_ssm, const c10::optional<at::Tensor>& dfinal_k,
                                const c10::optional<at::Tensor>& dfinal_v, c10::string_view config) {
  return run_fwd_vjp({q, k, v, adt, dt, trap, q_bias, k_bias, angles, d, z, cu_seqlens, or_undefined(dout),
                      or_undefined(dfinal_angle), or_undefined(dfinal_ssm), or_undefined(dfinal_k),
                      or_undefined(dfinal_v)},
                     nullptr, config);
}

std::vector<at::Tensor> forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& adt,
                                const at::Tensor& dt, const at::Tensor& trap, const at::Tensor& q_bias,
                                const at::Tensor& k_bias, const at::Tensor& angles, const at::Tensor& d,
                                const at::Tensor& z, const at::Tensor& cu_seqlens, c10::string_view config) {
  const at::Tensor none;
  return run_fwd_vjp({q, k, v, adt, dt, trap, q_bias, k_bias, angles, d, z, cu_seqlens, none, none, none, none, none},
                     nullptr, config, /*forward_only=*/true);
}

std::vector<at::Tensor> fwd_vjp_states(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                       const at::Tensor& adt, const at::Tensor& dt, const at::Tensor& trap,
                                       const at::Tensor& q_bias, const at::Tensor& k_bias, const at::Tensor& angles,
                                       const at::Tensor& d, const at::Tensor& z, const at::Tensor& cu_seqlens,
                                       const c10::optional<at::Tensor>& dout,
                                       const c10::optional<at::Tensor>& dfinal_angle,
                                       const c10::optional<at::Tensor>& dfinal_ssm,
                                       const c10::optional<at::Tensor>& dfinal_k,
                                       const c10::optional<at::Tensor>& dfinal_v, const at::Tensor& initial_angle,
                                       const at::Tensor& initial_ssm, const at::Tensor& initial_k,
                                       const at::Tensor& initial_v, c10::string_view config) {
  const std::vector<at::Tensor> states = {initial_angle, initial_ssm, initial_k, initial_v};
  return run_fwd_vjp({q, k, v, adt, dt, trap, q_bias, k_bias, angles, d, z, cu_seqlens, or_undefined(dout),
                      or_undefined(dfinal_angle), or_undefined(dfinal_ssm), or_undefined(dfinal_k),
                      or_undefined(dfinal_v)},
                     &states, config.empty() ? c10::string_view("variant=v6") : config);
}

std::vector<at::Tensor> forward_states(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                       const at::Tensor& adt, const at::Tensor& dt, const at::Tensor& trap,
                                       const at::Tensor& q_bias, const at::Tensor& k_bias, const at::Tensor& angles,
                                       const at::Tensor& d, const at::Tensor& z, const at::Tensor& cu_seqlens,
                                       const at::Tensor& initial_angle, const at::Tensor& initial_ssm,
                                       const at::Tensor& initial_k, const at::Tensor& initial_v,
                                       c10::string_view config) {
  const std::vector<at::Tensor> states = {initial_angle, initial_ssm, initial_k, initial_v};
  const at::Tensor none;
  return run_fwd_vjp({q, k, v, adt, dt, trap, q_bias, k_bias, angles, d, z, cu_seqlens, none, none, none, none, none},
                     &states, config.empty() ? c10::string_view("variant=v6") : config, /*forward_only=*/true);
}

void validate(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& adt,
              const at::Tensor& dt, const at::Tensor& trap, const at::Tensor& q_bias, const at::Tensor& k_bias,
              const at::Tensor& angles, const at::Tensor& d, const at::Tensor& z, const at::Tensor& cu_seqlens,
              const at::Tensor& dout, const at::Tensor& dfinal_angle, const at::Tensor& dfinal_ssm,
              const at::Tensor& dfinal_k, const at::Tensor& dfinal_v, bool require_cuda) {
  validate_arguments({q, k, v, adt, dt, trap, q_bias, k_bias, angles, d, z, cu_seqlens, dout, dfinal_angle,
                      dfinal_ssm, dfinal_k, dfinal_v},
                     require_cuda);
}

std::vector<std::string> specializations(c10::string_view arch) {
  std::vector<std::string> names;
  for (const auto& s : all_specializations(std::string(arch))) names.push_back(s.name);
  return names;
}

}  // namespace

TORCH_LIBRARY(mamba3_jit, m) {
  m.def(
      "fwd_vjp(Tensor q, Tensor k, Tensor v, Tensor adt, Tensor dt, Tensor trap, Tensor q_bias, Tensor k_bias, "
      "Tensor angles, Tensor d, Tensor z, Tensor cu_seqlens, Tensor? dout, Tensor? dfinal_angle, "
      "Tensor? dfinal_ssm, Tensor? dfinal_k, Tensor? dfinal_v, str config=\"\") -> Tensor[]",
      &fwd_vjp);
  m.def(
      "forward(Tensor q, Tensor k, Tensor v, Tensor adt, Tensor dt, Tensor trap, Tensor q_bias, Tensor k_bias, "
      "Tensor angles, Tensor d, Tensor z, Tensor cu_seqlens, str config=\"\") -> Tensor[]",
      &forward);
  m.def(
      "validate(Tensor q, Tensor k, Tensor v, Tensor adt, Tensor dt, Tensor trap, Tensor q_bias, Tensor k_bias, "
      "Tensor angles, Tensor d, Tensor z, Tensor cu_seqlens, Tensor dout, Tensor dfinal_angle, Tensor dfinal_ssm, "
      "Tensor dfinal_k, Tensor dfinal_v, bool require_cuda=True) -> ()",
      &validate);
  m.def(
      "fwd_vjp_states(Tensor q, Tensor k, Tensor v, Tensor adt, Tensor dt, Tensor trap, Tensor q_bias, "
      "Tensor k_bias, Tensor angles, Tensor d, Tensor z, Tensor cu_seqlens, Tensor? dout, Tensor? dfinal_angle, "
      "Tensor? dfinal_ssm, Tensor? dfinal_k, Tensor? dfinal_v, Tensor initial_angle, Tensor initial_ssm, "
      "Tensor initial_k, Tensor initial_v, str config=\"\") -> Tensor[]",
      &fwd_vjp_states);
  m.def(
      "forward_states(Tensor q, Tensor k, Tensor v, Tensor adt, Tensor dt, Tensor trap, Tensor q_bias, "
      "Tensor k_bias, Tensor angles, Tensor d, Tensor z, Tensor cu_seqlens, Tensor initial_angle, "
      "Tensor initial_ssm, Tensor initial_k, Tensor initial_v, str config=\"\") -> Tensor[]",
      &forward_states);
  m.def("specializations(str arch=\"\") -> str[]", &specializations);
}

}  // namespace mamba3_jit
