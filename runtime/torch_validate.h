// Argument checking for the operator. Needs no GPU, so CI can exercise every rejection.
#pragma once

#include <ATen/ATen.h>
#include <c10/cuda/CUDAStream.h>

#include <array>
#include <cstdint>
#include <vector>

namespace mamba3_jit {

constexpr int kNumArgs = 17;
extern const std::array<const char*, kNumArgs> kArgNames;

// What the arguments describe, once they are known to be consistent.
struct Problem {
  int64_t T = 0, S = 0, H = 0, N = 0, P = 0, A = 0;
  std::vector<int32_t> cu_seqlens;  // host copy
};

// Checks dtype, shape, device, contiguity, alignment and (with check_values) the cu_seqlens
// values of the 17 arguments, in signature order. The five cotangents may be undefined tensors
// (None from Python), which the kernels read as zeros. Throws c10::TypeError for a wrong dtype and
// c10::ValueError otherwise, naming the argument, what was expected and what was given. Touches
// no argument and launches nothing; a CUDA cu_seqlens is read back with one small copy, which is
// why a caller inside CUDA graph capture passes check_values = false (the kernels then guard the
// boundaries themselves and trap on bad ones).
Problem validate_arguments(const std::vector<at::Tensor>& args, bool require_cuda, bool check_values = true);

// validate_arguments in two steps, so that a caller can do host work while cu_seqlens travels:
// every check but the cu_seqlens values...
Problem validate_shapes(const std::vector<at::Tensor>& args, bool require_cuda);

// ...then the values: the constructor starts the copy of a CUDA cu_seqlens (S + 1 values) into a
// pinned buffer (asynchronous, on the current stream), finish() waits for it, fills pb.cu_seqlens
// and checks the boundaries, throwing c10::ValueError like validate_arguments. pb is the Problem
// validate_shapes returned for the same arguments.
//
// The copy may start before validate_shapes has run, as soon as can_start(cu_seqlens) holds: the
// other checks then run during its round trip. A read-back dropped before finish() (a check or an
// allocation threw) waits for its copy, so that no copy still in flight can land in the pinned
// buffer after a later call's copy.
class CuSeqlensReadback {
 public:
  CuSeqlensReadback(const at::Tensor& cu_seqlens, int64_t S);
  ~CuSeqlensReadback();
  CuSeqlensReadback(const CuSeqlensReadback&) = delete;
  CuSeqlensReadback& operator=(const CuSeqlensReadback&) = delete;
  void finish(Problem& pb);

  // Whether the copy may start before the checks: a defined, contiguous CUDA int32 tensor of
  // shape (S+1,) with S >= 1 on `device`. Anything else waits for validate_shapes' message.
  static bool can_start(const at::Tensor& cu_seqlens, const at::Device& device);

 private:
  const int32_t* host_ = nullptr;
  c10::optional<c10::cuda::CUDAStream> stream_;
  bool waited_ = false;
};

// Checks the four initial states (angle, ssm, k, v) against the problem: the dtypes, shapes and
// device of the final states, contiguous and 16-byte aligned.
void validate_initial_states(const std::vector<at::Tensor>& states, const Problem& pb, const at::Device& device);

}  // namespace mamba3_jit
