#include "torch_validate.h"

#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/PinnedMemoryAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>

#include <string>

#include "kernel_registry.h"

namespace mamba3_jit {

const std::array<const char*, kNumArgs> kArgNames = {
    "q",    "k", "v",          "adt",          "dt",          "trap",     "q_bias",  "k_bias",  "angles",
    "d",    "z", "cu_seqlens", "dout",         "dfinal_angle", "dfinal_ssm", "dfinal_k", "dfinal_v"};

namespace {

enum Arg { kQ, kK, kV, kAdt, kDt, kTrap, kQBias, kKBias, kAngles, kD, kZ, kCu, kDout, kDfa, kDfs, kDfk, kDfv };

// Messages format integers with std::to_string, never through iostreams: inside the torch
// extension, ostream's integer insertion crashed on the GPU machine (a libstdc++ mismatch between
// the compiler and the loaded runtime library), while string insertion is safe.
std::string num(int64_t x) { return std::to_string(x); }

std::string shape_str(at::IntArrayRef s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + num(s[i]);
  out += s.size() == 1 ? ",)" : ")";
  return out;
}

// Expected extents; -1 marks one not yet known, filled from the first argument that has it.
void check_shape(const at::Tensor& t, int arg, const std::vector<int64_t>& expected,
                 const char* layout) {
  bool ok = t.dim() == static_cast<int64_t>(expected.size());
  for (size_t i = 0; ok && i < expected.size(); ++i) ok = t.size(i) == expected[i];
  TORCH_CHECK_VALUE(ok, "mamba3_jit: argument '", kArgNames[arg], "' expected shape ", layout, " = ",
                    shape_str(expected), ", got ", shape_str(t.sizes()),
                    " (T and N are taken from 'q', H and P from 'v', A from 'angles', S from 'cu_seqlens')");
}

}  // namespace

Problem validate_shapes(const std::vector<at::Tensor>& args, bool require_cuda) {
  TORCH_CHECK_VALUE(args.size() == kNumArgs, "mamba3_jit: expected ", num(kNumArgs), " tensor arguments, got ",
                    num(static_cast<int64_t>(args.size())));
  static const at::ScalarType kDtypes[kNumArgs] = {
      at::kBFloat16, at::kBFloat16, at::kBFloat16, at::kFloat, at::kFloat,    at::kBFloat16,
      at::kFloat,    at::kFloat,    at::kBFloat16, at::kFloat, at::kBFloat16, at::kInt,
      at::kBFloat16, at::kBFloat16, at::kFloat,    at::kFloat, at::kBFloat16};
  for (int i = 0; i < kNumArgs; ++i) {
    const at::Tensor& t = args[i];
    if (!t.defined() && i >= kDout) continue;  // a missing cotangent is zero
    TORCH_CHECK_VALUE(t.defined(), "mamba3_jit: argument '", kArgNames[i], "' is an undefined tensor");
    TORCH_CHECK_TYPE(t.scalar_type() == kDtypes[i], "mamba3_jit: argument '", kArgNames[i], "' expected dtype ",
                     c10::toString(kDtypes[i]), ", got ", c10::toString(t.scalar_type()));
  }
  const at::Device device = args[kQ].device();
  for (int i = 0; i < kNumArgs; ++i) {
    const at::Tensor& t = args[i];
    if (!t.defined()) continue;
    if (require_cuda) {
      TORCH_CHECK_VALUE(t.is_cuda(), "mamba3_jit: argument '", kArgNames[i],
                        "' expected a CUDA tensor, got a tensor on ", t.device().str());
    }
    TORCH_CHECK_VALUE(t.device() == device, "mamba3_jit: argument '", kArgNames[i], "' expected device ",
                      device.str(), " (the device of 'q'), got ", t.device().str());
    TORCH_CHECK_VALUE(t.is_contiguous(), "mamba3_jit: argument '", kArgNames[i],
                      "' expected a contiguous tensor, got strides ", shape_str(t.strides()),
                      " for shape ", shape_str(t.sizes()), "; call .contiguous() first");
    // The kernels read rows with 16-byte vector loads.
    TORCH_CHECK_VALUE(reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0, "mamba3_jit: argument '", kArgNames[i],
                      "' expected a 16-byte aligned data pointer, got one at offset ",
                      num(static_cast<int64_t>(reinterpret_cast<uintptr_t>(t.data_ptr()) % 16)),
                      " (a view with a storage offset?); call .clone() first");
  }

  Problem pb;
  const at::Tensor& q = args[kQ];
  TORCH_CHECK_VALUE(q.dim() == 4 && q.size(0) == 1, "mamba3_jit: argument 'q' expected shape (1, T, G, N), got ",
                    shape_str(q.sizes()));
  pb.T = q.size(1);
  pb.N = q.size(3);
  TORCH_CHECK_VALUE(q.size(2) == 1, "mamba3_jit: argument 'q' expected G = 1 query/key head, got G = ", num(q.size(2)));
  const at::Tensor& v = args[kV];
  TORCH_CHECK_VALUE(v.dim() == 4, "mamba3_jit: argument 'v' expected shape (1, T, H, P), got ", shape_str(v.sizes()));
  pb.H = v.size(2);
  pb.P = v.size(3);
  const at::Tensor& angles = args[kAngles];
  TORCH_CHECK_VALUE(angles.dim() == 4, "mamba3_jit: argument 'angles' expected shape (1, T, H, A), got ",
                    shape_str(angles.sizes()));
  pb.A = angles.size(3);
  const at::Tensor& cu = args[kCu];
  TORCH_CHECK_VALUE(cu.dim() == 1 && cu.size(0) >= 2, "mamba3_jit: argument 'cu_seqlens' expected shape (S+1,) with S >= 1, got ",
                    shape_str(cu.sizes()));
  pb.S = cu.size(0) - 1;

  const int64_t T = pb.T, S = pb.S, H = pb.H, N = pb.N, P = pb.P, A = pb.A;
  check_shape(args[kK], kK, {1, T, 1, N}, "(1, T, 1, N)");
  check_shape(v, kV, {1, T, H, P}, "(1, T, H, P)");
  check_shape(args[kAdt], kAdt, {1, H, T}, "(1, H, T)");
  check_shape(args[kDt], kDt, {1, H, T}, "(1, H, T)");
  check_shape(args[kTrap], kTrap, {1, H, T}, "(1, H, T)");
  check_shape(args[kQBias], kQBias, {H, N}, "(H, N)");
  check_shape(args[kKBias], kKBias, {H, N}, "(H, N)");
  check_shape(angles, kAngles, {1, T, H, A}, "(1, T, H, A)");
  check_shape(args[kD], kD, {H}, "(H,)");
  check_shape(args[kZ], kZ, {1, T, H, P}, "(1, T, H, P)");
  if (args[kDout].defined()) check_shape(args[kDout], kDout, {1, T, H, P}, "(1, T, H, P)");
  if (args[kDfa].defined()) check_shape(args[kDfa], kDfa, {S, H, A}, "(S, H, A)");
  if (args[kDfs].defined()) check_shape(args[kDfs], kDfs, {S, H, P, N}, "(S, H, P, N)");
  if (args[kDfk].defined()) check_shape(args[kDfk], kDfk, {S, H, N}, "(S, H, N)");
  if (args[kDfv].defined()) check_shape(args[kDfv], kDfv, {S, H, P}, "(S, H, P)");

  TORCH_CHECK_VALUE(N == kSupportedDims.n && P == kSupportedDims.p && A == kSupportedDims.a,
                    "mamba3_jit: unsupported head dims N=", num(N), ", P=", num(P), ", A=", num(A),
                    "; this build supports N=", num(kSupportedDims.n), ", P=", num(kSupportedDims.p),
                    ", A=", num(kSupportedDims.a));
  TORCH_CHECK_VALUE(H >= 1 && H <= 1024, "mamba3_jit: expected 1 <= H <= 1024 value heads, got H = ", num(H));
  TORCH_CHECK_VALUE(S <= 65535, "mamba3_jit: at most 65535 sequences are supported, got S = ", num(S));
  TORCH_CHECK_VALUE(T <= (int64_t{1} << 22), "mamba3_jit: at most 4194304 tokens are supported, got T = ", num(T));

  return pb;
}

CuSeqlensReadback::CuSeqlensReadback(const at::Tensor& cu, int64_t S) {
  if (!cu.is_cuda()) {
    host_ = cu.data_ptr<int32_t>();
    return;
  }
  // On every call's path before the first launch: one copy into this thread's pinned buffer,
  // without the tensor, copy-operator and host allocator bookkeeping a pinned tensor would add.
  thread_local at::DataPtr pinned;
  thread_local size_t pinned_bytes = 0;
  const size_t bytes = static_cast<size_t>(S + 1) * sizeof(int32_t);
  if (pinned_bytes < bytes) {
    pinned = at::cuda::getPinnedMemoryAllocator()->allocate(bytes);
    pinned_bytes = bytes;
  }
  const c10::cuda::CUDAGuard guard(cu.device());
  stream_ = at::cuda::getCurrentCUDAStream(cu.device().index());
  C10_CUDA_CHECK(cudaMemcpyAsync(pinned.get(), cu.data_ptr(), bytes, cudaMemcpyDeviceToHost, stream_->stream()));
  host_ = static_cast<const int32_t*>(pinned.get());
}

CuSeqlensReadback::~CuSeqlensReadback() {
  if (!stream_ || waited_) return;
  // Only on a path that is throwing already: an error here must not replace the first one.
  (void)cudaStreamSynchronize(stream_->stream());
}

bool CuSeqlensReadback::can_start(const at::Tensor& cu, const at::Device& device) {
  return cu.defined() && cu.is_cuda() && cu.device() == device && cu.scalar_type() == at::kInt && cu.dim() == 1 &&
         cu.size(0) >= 2 && cu.is_contiguous();
}

void CuSeqlensReadback::finish(Problem& pb) {
  if (stream_) c10::cuda::stream_synchronize(stream_->stream());
  waited_ = true;
  const int64_t S = pb.S, T = pb.T;
  pb.cu_seqlens.assign(host_, host_ + S + 1);
  TORCH_CHECK_VALUE(pb.cu_seqlens[0] == 0, "mamba3_jit: argument 'cu_seqlens' expected cu_seqlens[0] = 0, got ",
                    num(pb.cu_seqlens[0]));
  for (int64_t i = 0; i < S; ++i) {
    TORCH_CHECK_VALUE(pb.cu_seqlens[i + 1] >= pb.cu_seqlens[i], "mamba3_jit: argument 'cu_seqlens' must not decrease, got cu_seqlens[",
                      num(i), "] = ", num(pb.cu_seqlens[i]), " > cu_seqlens[", num(i + 1), "] = ",
                      num(pb.cu_seqlens[i + 1]));
  }
  TORCH_CHECK_VALUE(pb.cu_seqlens[S] == T, "mamba3_jit: argument 'cu_seqlens' expected cu_seqlens[S] = T = ", num(T),
                    ", got ", num(pb.cu_seqlens[S]));
}

Problem validate_arguments(const std::vector<at::Tensor>& args, bool require_cuda, bool check_values) {
  Problem pb = validate_shapes(args, require_cuda);
  if (check_values) CuSeqlensReadback(args[kCu], pb.S).finish(pb);
  return pb;
}

void validate_initial_states(const std::vector<at::Tensor>& states, const Problem& pb, const at::Device& device) {
  static const char* kNames[4] = {"initial_angle_state", "initial_ssm_state", "initial_k_state", "initial_v_state"};
  static const at::ScalarType kTypes[4] = {at::kBFloat16, at::kFloat, at::kFloat, at::kBFloat16};
  const std::vector<int64_t> shapes[4] = {
      {pb.S, pb.H, pb.A}, {pb.S, pb.H, pb.P, pb.N}, {pb.S, pb.H, pb.N}, {pb.S, pb.H, pb.P}};
  const char* layouts[4] = {"(S, H, A)", "(S, H, P, N)", "(S, H, N)", "(S, H, P)"};
  TORCH_CHECK_VALUE(states.size() == 4, "mamba3_jit: expected 4 initial states (angle, ssm, k, v), got ",
                    num(static_cast<int64_t>(states.size())));
  for (int i = 0; i < 4; ++i) {
    const at::Tensor& t = states[i];
    TORCH_CHECK_VALUE(t.defined(), "mamba3_jit: argument '", kNames[i], "' is an undefined tensor");
    TORCH_CHECK_TYPE(t.scalar_type() == kTypes[i], "mamba3_jit: argument '", kNames[i], "' expected dtype ",
                     c10::toString(kTypes[i]), ", got ", c10::toString(t.scalar_type()));
    TORCH_CHECK_VALUE(t.device() == device, "mamba3_jit: argument '", kNames[i], "' expected device ",
                      device.str(), " (the device of 'q'), got ", t.device().str());
    bool ok = t.dim() == static_cast<int64_t>(shapes[i].size());
    for (size_t d = 0; ok && d < shapes[i].size(); ++d) ok = t.size(d) == shapes[i][d];
    TORCH_CHECK_VALUE(ok, "mamba3_jit: argument '", kNames[i], "' expected shape ", layouts[i], " = ",
                      shape_str(shapes[i]), ", got ", shape_str(t.sizes()));
    TORCH_CHECK_VALUE(t.is_contiguous() && reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0,
                      "mamba3_jit: argument '", kNames[i], "' expected a contiguous, 16-byte aligned tensor");
  }
}

}  // namespace mamba3_jit
