#include "driver_api.h"

#include <dlfcn.h>

#include <map>
#include <mutex>

#include "jit.h"
#include "logging.h"

namespace mamba3_jit::driver {
namespace {

#define MAMBA3_JIT_STR2(x) #x
#define MAMBA3_JIT_STR(x) MAMBA3_JIT_STR2(x)

struct State {
  Api api;
  bool ok = false;
  std::string why;  // set when !ok
};

const State& state() {
  static const State* s = [] {
    auto* st = new State;
    // RTLD_LOCAL: the driver's symbols must not interpose anyone else's.
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      const char* err = dlerror();
      st->why = std::string("CUDA driver libcuda.so.1 could not be loaded: ") +
                (err ? err : "unknown dlopen error");
      logger().debug("{}", st->why);
      return st;
    }
    // The string is taken after macro expansion, so cuMemAlloc resolves cuMemAlloc_v2: the
    // symbol whose prototype the member has.
#define MAMBA3_JIT_RESOLVE(name)                                                             \
  st->api.name = reinterpret_cast<decltype(st->api.name)>(dlsym(lib, MAMBA3_JIT_STR(name))); \
  if (!st->api.name) {                                                                       \
    st->why = "CUDA driver libcuda.so.1 has no symbol " MAMBA3_JIT_STR(                      \
        name) " (driver older than the CUDA " MAMBA3_JIT_STR(CUDA_VERSION) " headers?)";     \
    logger().warn("{}", st->why);                                                           \
    return st;                                                                               \
  }
    MAMBA3_JIT_DRIVER_FUNCTIONS(MAMBA3_JIT_RESOLVE)
#undef MAMBA3_JIT_RESOLVE
    const CUresult r = st->api.cuInit(0);
    if (r != CUDA_SUCCESS) {
      const char* name = nullptr;
      const char* text = nullptr;
      st->api.cuGetErrorName(r, &name);
      st->api.cuGetErrorString(r, &text);
      st->why = std::string("cuInit(0) failed: ") + (name ? name : "?") + " (" +
                (text ? text : "?") + ")";
      logger().debug("{}", st->why);
      return st;
    }
    int version = 0;
    st->api.cuDriverGetVersion(&version);
    logger().debug("CUDA driver loaded, version {}.{}", version / 1000, (version % 1000) / 10);
    st->ok = true;
    return st;
  }();
  return *s;
}

}  // namespace

bool available() { return state().ok; }

const Api& api() {
  const State& s = state();
  if (!s.ok) throw DriverError(s.why);
  return s.api;
}

std::string error_string(CUresult result) {
  const State& s = state();
  const char* name = nullptr;
  const char* text = nullptr;
  if (s.api.cuGetErrorName) s.api.cuGetErrorName(result, &name);
  if (s.api.cuGetErrorString) s.api.cuGetErrorString(result, &text);
  std::string out = name ? name : "CUresult " + std::to_string(static_cast<int>(result));
  if (text) out += std::string(" (") + text + ")";
  return out;
}

void check(CUresult result, const char* call) {
  if (result != CUDA_SUCCESS) {
    throw DriverError(std::string(call) + " failed: " + error_string(result));
  }
}

void check(CUresult result, const std::string& call) { check(result, call.c_str()); }

CUcontext current_context() {
  if (!available()) return nullptr;
  CUcontext ctx = nullptr;
  if (state().api.cuCtxGetCurrent(&ctx) != CUDA_SUCCESS) return nullptr;
  return ctx;
}

CUcontext ensure_context() {
  const Api& a = api();
  CUcontext ctx = nullptr;
  check(a.cuCtxGetCurrent(&ctx), "cuCtxGetCurrent");
  if (ctx) return ctx;
  CUdevice dev = 0;
  check(a.cuDeviceGet(&dev, 0), "cuDeviceGet(0)");
  // Retained once per device and never released: modules loaded into it live as long as the
  // process, like the LoadedKernel references handed out.
  static std::mutex mu;
  static auto* retained = new std::map<CUdevice, CUcontext>;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = retained->find(dev);
    if (it == retained->end()) {
      CUcontext primary = nullptr;
      check(a.cuDevicePrimaryCtxRetain(&primary, dev), "cuDevicePrimaryCtxRetain(device 0)");
      it = retained->emplace(dev, primary).first;
    }
    ctx = it->second;
  }
  check(a.cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  return ctx;
}

CUdevice current_device() {
  const Api& a = api();
  CUcontext ctx = nullptr;
  check(a.cuCtxGetCurrent(&ctx), "cuCtxGetCurrent");
  CUdevice dev = 0;
  if (ctx) {
    check(a.cuCtxGetDevice(&dev), "cuCtxGetDevice");
  } else {
    check(a.cuDeviceGet(&dev, 0), "cuDeviceGet(0)");
  }
  return dev;
}

bool stream_is_capturing(CUstream stream) {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  const CUresult r = api().cuStreamIsCapturing(stream, &status);
  // Querying the legacy stream while another stream captures in global mode is itself an
  // illegal operation for that capture; report it as capturing so callers stay off the stream.
  if (r == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT) return true;
  check(r, "cuStreamIsCapturing");
  return status != CU_STREAM_CAPTURE_STATUS_NONE;
}

}  // namespace mamba3_jit::driver
