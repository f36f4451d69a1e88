// The CUDA driver API, opened with dlopen on first use so that the runtime links and compiles
// kernels on machines without a driver (CI, offline warm-up).
#pragma once

#include <cuda.h>

#include <string>

namespace mamba3_jit::driver {

// The resolved entry points. Each member is declared through the same name cuda.h uses, so a
// macro such as cuMemAlloc -> cuMemAlloc_v2 gives the member the versioned prototype, and the
// symbol looked up is that versioned one too.
#define MAMBA3_JIT_DRIVER_FUNCTIONS(X) \
  X(cuInit)                            \
  X(cuDriverGetVersion)                \
  X(cuDeviceGet)                       \
  X(cuDeviceGetCount)                  \
  X(cuDeviceGetAttribute)              \
  X(cuCtxGetCurrent)                   \
  X(cuCtxSetCurrent)                   \
  X(cuCtxGetDevice)                    \
  X(cuCtxSynchronize)                  \
  X(cuDevicePrimaryCtxRetain)          \
  X(cuModuleLoadData)                  \
  X(cuModuleUnload)                    \
  X(cuModuleGetFunction)               \
  X(cuFuncSetAttribute)                \
  X(cuFuncGetAttribute)                \
  X(cuLaunchKernelEx)                  \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessor) \
  X(cuStreamIsCapturing)               \
  X(cuGetErrorName)                    \
  X(cuGetErrorString)                  \
  X(cuMemAlloc)                        \
  X(cuMemFree)                         \
  X(cuMemcpyHtoD)                      \
  X(cuMemcpyDtoH)

struct Api {
#define MAMBA3_JIT_DRIVER_MEMBER(name) decltype(&::name) name = nullptr;
  MAMBA3_JIT_DRIVER_FUNCTIONS(MAMBA3_JIT_DRIVER_MEMBER)
#undef MAMBA3_JIT_DRIVER_MEMBER
};

// True when libcuda.so.1 was loaded, every entry point resolved and cuInit succeeded. The first
// call does that work; it never throws.
bool available();

// The entry points; throws DriverError saying why the driver is unusable.
const Api& api();

// "CUDA_ERROR_X (text)" for a CUresult, usable even when the driver is absent.
std::string error_string(CUresult result);

// Throws DriverError "<call> failed: CUDA_ERROR_X (text)" unless result is CUDA_SUCCESS.
void check(CUresult result, const char* call);
void check(CUresult result, const std::string& call);

// The calling thread's context. When none is current, device 0's primary context is retained
// (once, never released) and made current. Throws DriverError.
CUcontext ensure_context();

// The calling thread's current context, or nullptr; never creates one and never throws.
CUcontext current_context();

// The device of the current context, or device 0 when none is current. Throws DriverError.
CUdevice current_device();

// True while `stream` is being captured into a CUDA graph (an operation that would invalidate
// another stream's global-mode capture counts as capturing). Throws DriverError.
bool stream_is_capturing(CUstream stream);

}  // namespace mamba3_jit::driver
