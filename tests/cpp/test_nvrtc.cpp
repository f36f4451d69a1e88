#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <limits>
#include <mutex>
#include <regex>
#include <set>
#include <thread>
#include <tuple>
#include <utility>

#include "../../kernel_src/m3_params.cuh"
#include "driver_api.h"
#include "jit.h"
#include "kernel_registry.h"
#include "nvrtc_compiler.h"
#include "test_util.h"

using namespace mamba3_jit;

namespace {
bool has_option(const KernelSource& src, const std::string& option) {
  return std::find(src.options.begin(), src.options.end(), option) != src.options.end();
}
}  // namespace

TEST_CASE("default_arch is sm_90a without a driver", "[nvrtc]") {
  if (driver::available()) {
    WARN("a CUDA driver is present: default_arch() is " << default_arch());
    return;
  }
  CHECK(default_arch() == "sm_90a");
  KernelSource s = test::smoke_source("defaultarch", "");
  KernelCache cache("");
  KernelSource explicit_arch = s;
  explicit_arch.arch = "sm_90a";
  CHECK(cache.key(s) == cache.key(explicit_arch));
}

TEST_CASE("a small kernel compiles to an ELF cubin for sm_90a", "[nvrtc]") {
  const CompileOutput out = compile_with_nvrtc(test::smoke_source("elf"));
  REQUIRE(out.cubin.size() > 4);
  CHECK(out.cubin.compare(0, 4, "\x7f" "ELF") == 0);
  CHECK(std::find(out.options.begin(), out.options.end(), "--gpu-architecture=sm_90a") !=
        out.options.end());
  CHECK(std::find(out.options.begin(), out.options.end(), "-std=c++17") != out.options.end());
  CHECK(std::find(out.options.begin(), out.options.end(), "--use_fast_math") == out.options.end());
  CHECK(std::find(out.options.begin(), out.options.end(), "-DM3_TEST_TAG_elf=1") !=
        out.options.end());
  CHECK(out.seconds > 0.0);
}

TEST_CASE("a kernel that includes a CUDA toolkit header compiles", "[nvrtc]") {
  KernelSource s;
  s.name = "uses_cuda_fp16";
  s.code = "#include <cuda_fp16.h>\n"
           "extern \"C\" __global__ void k(__half* p) { p[0] = __float2half(1.0f); }\n";
  s.arch = "sm_90a";
  CHECK(compile_with_nvrtc(s).cubin.compare(0, 4, "\x7f" "ELF") == 0);
}

TEST_CASE("the bf16-plane products and their probe compile", "[nvrtc]") {
  const CompileOutput k = compile_with_nvrtc(test::planes_probe_source());
  CHECK(k.cubin.compare(0, 4, "\x7f" "ELF") == 0);
  // mma.sync and ldmatrix.trans exist on sm_80 on: the block does not tie the kernels to sm_90a.
  CHECK(compile_with_nvrtc(test::planes_probe_source("sm_90")).cubin.compare(0, 4, "\x7f" "ELF") == 0);
  // In IEEE half, one plane an operand; and with every timing ablation of the cores at once.
  CHECK(compile_with_nvrtc(test::planes_probe_source("sm_90a", true)).cubin.compare(0, 4, "\x7f" "ELF") == 0);
  CHECK(compile_with_nvrtc(test::planes_probe_source("sm_90a", true, 7)).cubin.compare(0, 4, "\x7f" "ELF") == 0);
  // The chunk-64 core with its range guard.
  CHECK(compile_with_nvrtc(test::planes_probe_source("sm_90a", true, 0, true)).cubin.compare(0, 4, "\x7f" "ELF") == 0);
}

TEST_CASE("the wgmma tile product compiles for sm_90a and is refused, with NVRTC's log, for sm_90", "[nvrtc]") {
  CHECK(compile_with_nvrtc(test::wgmma_probe_source()).cubin.compare(0, 4, "\x7f" "ELF") == 0);
  // wgmma exists only in the architecture-specific target: plain sm_90 must fail loudly.
  try {
    compile_with_nvrtc(test::wgmma_probe_source("sm_90"));
    FAIL("wgmma compiled for sm_90");
  } catch (const JitError& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(what.find("wgmma") != std::string::npos);
    CHECK(what.find("--gpu-architecture=sm_90") != std::string::npos);
  }
}

TEST_CASE("v119's chunk-64 forward compiles for sm_90a with no product serialized by ptxas", "[nvrtc]") {
  // ptxas serializes every wgmma of a kernel, silently but for one info line, when a product runs
  // short of registers, reads register operands written since the last fence, or sits in a branch
  // per warpgroup; each happened while the kernel was written. The line must stay absent, for
  // the chunk-64 backward's kernels (v121, v123, v125: their modules hold the forward) too.
  for (const char* variant : {"v119", "v121", "v123", "v125", "v127", "v129", "v131", "v133", "v135", "v138", "v140",
                              "v142", "v146", "v148", "v150", "v152", "v156", "v158"}) {
    const CompileOutput out = compile_with_nvrtc(scan_source(parse_op_config(std::string("variant=") + variant), 8, "sm_90a"));
    INFO(variant << "\n" << out.log);
    CHECK(out.cubin.compare(0, 4, "\x7f" "ELF") == 0);
    CHECK(lines_containing(out.log, "Potential Performance Loss").empty());
    // Nor may ptxas inject a warpgroup wait or arrive (C7517, C7519: a register operand or
    // accumulator touched while a product may still use it), which stalls the warpgroup there.
    CHECK(lines_containing(out.log, "is injected").empty());
    // The module holds the q and k/v sides' entries only where the variant launches them (their
    // symbols name them).
    const std::string v(variant);
    const bool forward_only_module =
        v == "v119" || v == "v127" || v == "v129" || v == "v131" || v == "v133" || v == "v135" || v == "v138" ||
        v == "v140" || v == "v142" || v == "v146" || v == "v148" || v == "v150" || v == "v152" || v == "v156" ||
        v == "v158";
    CHECK((out.cubin.find("m3_cp_backward64q") != std::string::npos) == !forward_only_module);
    CHECK((out.cubin.find("m3_cp_backward64kv") != std::string::npos) == (v == "v123" || v == "v125"));
    CHECK((out.cubin.find(std::string("m3_cp_backward64\0", 17)) != std::string::npos) == (v == "v125"));
  }
  CHECK(lines_containing("a\nptxas info: Potential Performance Loss: x\nb", "Performance Loss") ==
        "ptxas info: Potential Performance Loss: x");
  // The kernel needs the architecture-specific target; plain sm_90 is refused with its reason.
  try {
    compile_with_nvrtc(scan_source(parse_op_config("variant=v119"), 8, "sm_90"));
    FAIL("v119 compiled for sm_90");
  } catch (const JitError& e) {
    CHECK(std::string(e.what()).find("compile for sm_90a") != std::string::npos);
  }
}

TEST_CASE("malformed architectures are refused", "[nvrtc]") {
  KernelSource s = test::smoke_source("badarch", "compute_90");
  CHECK_THROWS_AS(compile_with_nvrtc(s), JitError);
  s.arch = "sm_90a; rm -rf /";
  CHECK_THROWS_AS(compile_with_nvrtc(s), JitError);
}

TEST_CASE("every registered specialisation compiles for sm_90a", "[nvrtc][all]") {
  const std::vector<KernelSource> specs = all_specializations("sm_90a");
  REQUIRE(!specs.empty());
  std::mutex mu;
  std::vector<std::string> failures;
  std::atomic<std::size_t> next{0};
  auto worker = [&] {
    for (std::size_t i = next++; i < specs.size(); i = next++) {
      try {
        const CompileOutput out = compile_with_nvrtc(specs[i]);
        if (out.cubin.compare(0, 4, "\x7f" "ELF") != 0) {
          std::lock_guard<std::mutex> lock(mu);
          failures.push_back(specs[i].name + ": output is not an ELF cubin");
        }
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mu);
        failures.push_back(specs[i].name + ":\n" + e.what());
      }
    }
  };
  std::vector<std::thread> threads;
  const unsigned n = std::max(1u, std::min(4u, std::thread::hardware_concurrency()));
  for (unsigned t = 0; t < n; ++t) threads.emplace_back(worker);
  for (auto& t : threads) t.join();
  for (const auto& f : failures) UNSCOPED_INFO(f);
  INFO(failures.size() << " of " << specs.size() << " specialisations failed to compile");
  CHECK(failures.empty());
}

TEST_CASE("an NVRTC error names the line, the options and a file with the source", "[nvrtc]") {
  KernelSource s;
  s.name = "broken[test]";
  s.code =
      "// line 1\n"
      "// line 2\n"
      "extern \"C\" __global__ void broken(float* out) {\n"
      "  out[0] = 1.0f;\n"
      "  out[1] = this_is_not_declared;\n"
      "  out[2] = 3.0f;\n"
      "}\n";
  s.options = {"-DBROKEN_TEST_OPTION=7"};
  s.arch = "sm_90a";
  try {
    compile_with_nvrtc(s);
    FAIL("the broken kernel compiled");
  } catch (const NvrtcError& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(what.find("broken[test]") != std::string::npos);
    CHECK(what.find("this_is_not_declared") != std::string::npos);
    CHECK(what.find("-DBROKEN_TEST_OPTION=7") != std::string::npos);
    CHECK(what.find("--gpu-architecture=sm_90a") != std::string::npos);
    CHECK(what.find(">    5 |   out[1] = this_is_not_declared;") != std::string::npos);
    CHECK(what.find("    2 | // line 2") != std::string::npos);
    CHECK(!e.log().empty());
    REQUIRE(!e.source_path().empty());
    CHECK(what.find(e.source_path()) != std::string::npos);
    REQUIRE(std::filesystem::exists(e.source_path()));
    const std::string dumped = test::read_text(e.source_path());
    CHECK(dumped.rfind(s.code, 0) == 0);
    CHECK(dumped.find("-DBROKEN_TEST_OPTION=7") != std::string::npos);
  }
}

namespace {
// The NVRTC error of `variant`'s S<=8 source with one more option, or "(compiled)".
std::string error_with_option(const char* variant, const std::string& option) {
  KernelSource s = scan_source(parse_op_config(std::string("variant=") + variant), 8, "sm_90a");
  s.options.push_back(option);
  try {
    compile_with_nvrtc(s);
  } catch (const NvrtcError& e) {
    return e.what();
  }
  return "(compiled)";
}
}  // namespace

TEST_CASE("a forward that would read its states in the wrong order does not build", "[nvrtc]") {
  // v103's states are row-major (M3_CP_FRAG_DSTATES); its forward reading them as v31's does
  // would compute silently wrong outputs, so the kernel source refuses the combination; and the
  // converse, v111's fragment-order states read as row-major ones.
  CHECK(error_with_option("v103", "-DM3_CP_FWD_GLOBAL_STATE=1").find("it needs M3_CP_FRAG_STATES") !=
        std::string::npos);
  CHECK(error_with_option("v111", "-DM3_CP_FWD_GLOBAL_STATE=2")
            .find("reads row-major states: not with M3_CP_FRAG_STATES") != std::string::npos);
  // The bulk copies fill a row-major tile once per CTA: not fragment-order states, not persistent CTAs.
  CHECK(error_with_option("v111", "-DM3_CP_BULK_STATE=1").find("M3_CP_BULK_STATE stages row-major states") !=
        std::string::npos);
  CHECK(error_with_option("v99", "-DM3_CP_BULK_STATE=1").find("no persistent CTAs") != std::string::npos);
}

TEST_CASE("an error inside an embedded header is excerpted from that header", "[nvrtc]") {
  KernelSource s;
  s.name = "header_error";
  // Redefining the smoke kernel makes NVRTC report the error at the header's line.
  s.code = "extern \"C\" __global__ void m3_smoke_axpb(const float*, float*, float, float, int) {}\n"
           "#include \"m3_smoke.cuh\"\n";
  s.arch = "sm_90a";
  try {
    compile_with_nvrtc(s);
    FAIL("the redefinition compiled");
  } catch (const NvrtcError& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(what.find("--> m3_smoke.cuh:") != std::string::npos);
    CHECK(what.find("m3_smoke_axpb") != std::string::npos);
  }
}

TEST_CASE("an unsupported configuration names what is supported in one line", "[registry]") {
  const auto message = [](const std::string& text) {
    try {
      parse_op_config(text);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  const std::string shape = message("variant=v104,chunk=64,threads=512");
  CHECK(shape.find("'variant=v104,chunk=64,threads=512'") != std::string::npos);
  CHECK(shape.find("variant v104 runs with chunk=32, threads=256 only") != std::string::npos);
  const std::string unknown = message("variant=v9999");
  CHECK(unknown.find("unknown variant 'v9999'") != std::string::npos);
  // Runs of consecutive versions collapse; v167 is a solver version, not a kernel variant.
  CHECK(std::regex_search(
      unknown, std::regex("known variants: v1 to v[0-9]+(, v[0-9]+( to v[0-9]+)?)* \\(with chunk=32, threads=256\\)$")));
  CHECK(unknown.find("v1 to v166, v168 to v255") != std::string::npos);
  CHECK(unknown.size() < 300);
}

TEST_CASE("the dispatch-only variants run their fast kernels up to the exact-products length and v8's beyond",
          "[registry]") {
  const std::pair<const char*, const char*> dispatch[] = {
      {"v9", "v7"},   {"v12", "v11"}, {"v14", "v13"}, {"v16", "v15"}, {"v18", "v17"}, {"v20", "v19"},
      {"v22", "v21"}, {"v24", "v23"}, {"v26", "v25"}, {"v28", "v27"}, {"v30", "v29"}, {"v32", "v31"},
      {"v34", "v33"}, {"v36", "v35"}, {"v38", "v37"}, {"v40", "v39"}, {"v42", "v41"}, {"v44", "v43"}, {"v46", "v45"}, {"v48", "v47"}, {"v50", "v49"}, {"v52", "v51"}, {"v54", "v53"}, {"v56", "v55"}, {"v58", "v57"}, {"v60", "v59"}, {"v62", "v61"}, {"v64", "v63"}, {"v66", "v65"}, {"v68", "v67"}, {"v70", "v69"}, {"v72", "v71"}, {"v74", "v73"}, {"v76", "v75"}, {"v78", "v77"}, {"v80", "v79"}, {"v82", "v81"}, {"v84", "v83"}, {"v86", "v85"}, {"v88", "v87"}, {"v90", "v89"}, {"v92", "v91"}, {"v94", "v93"}, {"v96", "v95"}, {"v98", "v97"}, {"v100", "v99"}, {"v102", "v101"}, {"v104", "v103"}, {"v106", "v105"}, {"v108", "v107"}, {"v110", "v109"}, {"v112", "v111"}, {"v114", "v113"}, {"v116", "v115"}, {"v118", "v117"}, {"v120", "v119"}, {"v122", "v121"}, {"v124", "v123"}, {"v126", "v125"}, {"v128", "v127"}, {"v130", "v129"}, {"v132", "v131"}, {"v134", "v133"}, {"v136", "v135"}};
  for (const auto& [name, fast] : dispatch) {
    INFO(name);
    const OpConfig c = parse_op_config(std::string("variant=") + name);
    CHECK(resolve_kernels(c, 1).variant == fast);
    CHECK(resolve_kernels(c, kExactProductsAboveLen).variant == fast);
    CHECK(resolve_kernels(c, kExactProductsAboveLen + 1).variant == "v8");
    CHECK_THROWS_AS(scan_source(c, 0), std::invalid_argument);
    CHECK_FALSE(is_chunk_parallel(c));
    // Its kernels are other variants': the warm-up list has none under its own name.
    const std::string tag = std::string("[") + name + ",";
    for (const auto& s : all_specializations("sm_90a")) CHECK(s.name.find(tag) == std::string::npos);
  }
  CHECK(resolve_kernels(parse_op_config("variant=v5"), 1 << 20).variant == "v5");
  CHECK(resolve_kernels(parse_op_config("variant=v11"), 1 << 20).variant == "v11");
}

TEST_CASE("only the variants launched early carry griddepcontrol, in the scan and the reduce kernels", "[registry]") {
  const OpConfig v37 = parse_op_config("variant=v37"), v39 = parse_op_config("variant=v39");
  CHECK_FALSE(uses_programmatic_launch(v37));
  CHECK(uses_programmatic_launch(v39));
  CHECK_FALSE(has_option(scan_source(v37, 8), "-DM3_PDL=1"));
  CHECK(has_option(scan_source(v39, 8), "-DM3_PDL=1"));
  CHECK_FALSE(has_option(reduce_source(v37), "-DM3_PDL=1"));
  CHECK(has_option(reduce_source(v39), "-DM3_PDL=1"));
  // Its own reduce specialisation: the cache key and the warm-up list tell the two apart.
  CHECK(reduce_source(v39).name != reduce_source(v37).name);
  CHECK_THROWS_AS(uses_programmatic_launch(parse_op_config("variant=v40")), std::invalid_argument);
}

TEST_CASE("v45, v97 and v99 run persistent CTAs, each in its own kernels", "[registry]") {
  const OpConfig v43 = parse_op_config("variant=v43"), v45 = parse_op_config("variant=v45");
  CHECK_FALSE(uses_persistent_forward(v43));
  CHECK_FALSE(uses_persistent_backward(v43));
  CHECK(uses_persistent_forward(v45));
  CHECK(uses_persistent_backward(v45));
  CHECK_FALSE(has_option(scan_source(v43, 8), "-DM3_CP_PERSISTENT=1"));
  CHECK(has_option(scan_source(v45, 8), "-DM3_CP_PERSISTENT=1"));
  CHECK(has_option(scan_source(v45, 8), "-DM3_CP_BATCHED_REORDER=1"));
  CHECK(has_option(scan_source(v45, 8), "-DM3_LDMATRIX=2"));
  CHECK_THROWS_AS(uses_persistent_forward(parse_op_config("variant=v46")), std::invalid_argument);
  // v97: both kernels, each job drawing its successor's ticket late; v99: the forward's only.
  const OpConfig v95 = parse_op_config("variant=v95"), v97 = parse_op_config("variant=v97"),
                 v99 = parse_op_config("variant=v99");
  CHECK_FALSE(uses_persistent_forward(v95));
  CHECK(uses_persistent_forward(v97));
  CHECK(uses_persistent_backward(v97));
  CHECK(uses_persistent_forward(v99));
  CHECK_FALSE(uses_persistent_backward(v99));
  CHECK(has_option(scan_source(v97, 8), "-DM3_CP_PERSISTENT=2"));
  CHECK(has_option(scan_source(v99, 8), "-DM3_CP_PERSISTENT=3"));
  CHECK(has_option(scan_source(v99, 8), "-DM3_CP_EARLY_LOADS=3"));
  CHECK_THROWS_AS(uses_persistent_backward(parse_op_config("variant=v100")), std::invalid_argument);
}

TEST_CASE("v101 on overlap their reduce with the backward, from reduce specialisations of their own", "[registry]") {
  const OpConfig v95 = parse_op_config("variant=v95"), v101 = parse_op_config("variant=v101");
  CHECK_FALSE(overlaps_reduce(v95));
  CHECK(overlaps_reduce(v101));
  CHECK(uses_one_reduce_launch(v101));
  CHECK_FALSE(uses_programmatic_launch(v101));  // only the reduce launch is programmatic
  CHECK(has_option(scan_source(v101, 8), "-DM3_CP_OVERLAPPED_REDUCE=1"));
  CHECK(has_option(scan_source(v101, 8), "-DM3_CP_EARLY_LOADS=3"));
  CHECK_FALSE(has_option(scan_source(v95, 8), "-DM3_CP_OVERLAPPED_REDUCE=1"));
  CHECK(has_option(reduce_source(v101), "-DM3_REDUCE_CHUNK_READY=1"));
  CHECK(has_option(reduce_source(v101), "-DM3_CHUNK=32"));
  CHECK_FALSE(has_option(reduce_source(v95), "-DM3_REDUCE_CHUNK_READY=1"));
  CHECK(reduce_source(v101).name != reduce_source(v95).name);
  CHECK_THROWS_AS(overlaps_reduce(parse_op_config("variant=v102")), std::invalid_argument);
  // v103 drops the backward's dead states from L2, v105 the reduce's summed partials as well.
  const OpConfig v103 = parse_op_config("variant=v103"), v105 = parse_op_config("variant=v105");
  CHECK(overlaps_reduce(v103));
  CHECK(has_option(scan_source(v103, 8), "-DM3_CP_DISCARD_DEAD=1"));
  CHECK_FALSE(has_option(scan_source(v101, 8), "-DM3_CP_DISCARD_DEAD=1"));
  CHECK(reduce_source(v103).name == reduce_source(v101).name);
  CHECK(has_option(reduce_source(v105), "-DM3_REDUCE_DISCARD=1"));
  CHECK_FALSE(has_option(reduce_source(v103), "-DM3_REDUCE_DISCARD=1"));
  CHECK(reduce_source(v105).name != reduce_source(v103).name);
  // v107: the backward sums the chunk three ahead, the reduce the first three of each sequence.
  const OpConfig v107 = parse_op_config("variant=v107");
  CHECK(has_option(scan_source(v107, 8), "-DM3_CP_INLINE_HEAD_SUMS=3"));
  CHECK(has_option(scan_source(v107, 8), "-DM3_CP_DISCARD_DEAD=1"));
  CHECK(has_option(reduce_source(v107), "-DM3_REDUCE_INLINE_AHEAD=3"));
  CHECK_FALSE(has_option(reduce_source(v107), "-DM3_REDUCE_DISCARD=1"));
  CHECK(reduce_source(v107).name != reduce_source(v103).name);
  // v109: the backward beside the forward's last jobs, the reduce v103's.
  const OpConfig v109 = parse_op_config("variant=v109");
  CHECK(overlaps_backward(v109));
  CHECK_FALSE(overlaps_backward(v103));
  CHECK(has_option(scan_source(v109, 8), "-DM3_CP_OVERLAPPED_BACKWARD=1"));
  CHECK(reduce_source(v109).name == reduce_source(v103).name);
}

TEST_CASE("v111 and v113 hand the states in fragment order to a forward without a state tile, v115 row-major",
          "[registry]") {
  const OpConfig v103 = parse_op_config("variant=v103"), v111 = parse_op_config("variant=v111"),
                 v113 = parse_op_config("variant=v113");
  for (const OpConfig& c : {v111, v113}) {
    INFO(c.variant);
    const KernelSource src = scan_source(c, 8);
    CHECK(has_option(src, "-DM3_CP_FRAG_STATES=1"));
    CHECK_FALSE(has_option(src, "-DM3_CP_FRAG_DSTATES=1"));  // the two are exclusive
    CHECK(has_option(src, "-DM3_CP_FWD_GLOBAL_STATE=1"));
    CHECK(has_option(src, "-DM3_CP_DISCARD_DEAD=1"));
    CHECK(reduce_source(c).name == reduce_source(v103).name);
    CHECK(backward_smem_bytes(c) == backward_smem_bytes(v103));
    // 76,352 bytes without the P x N state tile: with the 1,056 static bytes (1 KB reserved) of
    // each CTA, three fit in an SM's 228 KB.
    CHECK(forward_smem_bytes(c) + 64 * 132 * sizeof(float) == forward_smem_bytes(v103));
    CHECK(3 * (forward_smem_bytes(c) + 1056) <= 228 * 1024);
  }
  CHECK(has_option(scan_source(v103, 8), "-DM3_CP_FRAG_DSTATES=1"));
  CHECK_FALSE(has_option(scan_source(v111, 8), "-DM3_CP_FORWARD_MIN_CTAS=3"));
  CHECK(has_option(scan_source(v113, 8), "-DM3_CP_FORWARD_MIN_CTAS=3"));
  // v115: the same forward layout and occupancy on v103's row-major states and backward.
  const OpConfig v115 = parse_op_config("variant=v115");
  const KernelSource src = scan_source(v115, 8);
  CHECK(has_option(src, "-DM3_CP_FWD_GLOBAL_STATE=2"));
  CHECK_FALSE(has_option(src, "-DM3_CP_FWD_GLOBAL_STATE=1"));
  CHECK(has_option(src, "-DM3_CP_FRAG_DSTATES=1"));
  CHECK_FALSE(has_option(src, "-DM3_CP_FRAG_STATES=1"));
  CHECK(has_option(src, "-DM3_CP_FORWARD_MIN_CTAS=3"));
  CHECK(forward_smem_bytes(v115) == forward_smem_bytes(v113));
  CHECK(backward_smem_bytes(v115) == backward_smem_bytes(v103));
  CHECK(reduce_source(v115).name == reduce_source(v103).name);
}

TEST_CASE("v117 is v103 with the forward's entering state bulk-copied, nothing else", "[registry]") {
  const OpConfig v103 = parse_op_config("variant=v103"), v117 = parse_op_config("variant=v117");
  KernelSource a = scan_source(v103, 8), b = scan_source(v117, 8);
  CHECK(has_option(b, "-DM3_CP_BULK_STATE=1"));
  CHECK_FALSE(has_option(a, "-DM3_CP_BULK_STATE=1"));
  b.options.erase(std::remove(b.options.begin(), b.options.end(), "-DM3_CP_BULK_STATE=1"), b.options.end());
  CHECK(a.options == b.options);
  CHECK(forward_smem_bytes(v117) == forward_smem_bytes(v103));
  CHECK(backward_smem_bytes(v117) == backward_smem_bytes(v103));
  CHECK(reduce_source(v117).name == reduce_source(v103).name);
  CHECK(overlaps_reduce(v117));
  CHECK_FALSE(uses_persistent_forward(v117));
}

TEST_CASE("v119 is v103 with the chunk-64 forward, nothing else", "[registry]") {
  const OpConfig v103 = parse_op_config("variant=v103"), v119 = parse_op_config("variant=v119");
  KernelSource a = scan_source(v103, 8), b = scan_source(v119, 8);
  CHECK(has_option(b, "-DM3_CP_FORWARD64=1"));
  CHECK_FALSE(has_option(a, "-DM3_CP_FORWARD64=1"));
  b.options.erase(std::remove(b.options.begin(), b.options.end(), "-DM3_CP_FORWARD64=1"), b.options.end());
  CHECK(a.options == b.options);
  CHECK(uses_forward64(v119));
  CHECK_FALSE(uses_forward64(v103));
  CHECK(forward_smem_bytes(v119) == static_cast<std::size_t>(kM3Forward64SmemBytes));
  CHECK(backward_smem_bytes(v119) == backward_smem_bytes(v103));
  CHECK(reduce_source(v119).name == reduce_source(v103).name);
  CHECK_FALSE(uses_persistent_forward(v119));
}

TEST_CASE("v121 is v119 with the q side of the chunk-64 backward, nothing else", "[registry]") {
  const OpConfig v119 = parse_op_config("variant=v119"), v121 = parse_op_config("variant=v121");
  KernelSource a = scan_source(v119, 8), b = scan_source(v121, 8);
  CHECK(has_option(b, "-DM3_CP_BACKWARD64Q=1"));
  CHECK_FALSE(has_option(a, "-DM3_CP_BACKWARD64Q=1"));
  b.options.erase(std::remove(b.options.begin(), b.options.end(), "-DM3_CP_BACKWARD64Q=1"), b.options.end());
  CHECK(a.options == b.options);
  CHECK(uses_backward64q(v121));
  CHECK_FALSE(uses_backward64q(v119));
  CHECK(uses_forward64(v121));
  CHECK(forward_smem_bytes(v121) == forward_smem_bytes(v119));
  CHECK(backward_smem_bytes(v121) == backward_smem_bytes(v119));
  CHECK(reduce_source(v121).name == reduce_source(v119).name);
  CHECK(resolve_kernels(parse_op_config("variant=v122"), 1).variant == "v121");
}

TEST_CASE("v123 is v121 with the k/v side of the chunk-64 backward, nothing else", "[registry]") {
  const OpConfig v121 = parse_op_config("variant=v121"), v123 = parse_op_config("variant=v123");
  KernelSource a = scan_source(v121, 8), b = scan_source(v123, 8);
  CHECK(has_option(b, "-DM3_CP_BACKWARD64KV=1"));
  CHECK_FALSE(has_option(a, "-DM3_CP_BACKWARD64KV=1"));
  b.options.erase(std::remove(b.options.begin(), b.options.end(), "-DM3_CP_BACKWARD64KV=1"), b.options.end());
  CHECK(a.options == b.options);
  CHECK(uses_backward64kv(v123));
  CHECK_FALSE(uses_backward64kv(v121));
  CHECK(uses_backward64q(v123));
  CHECK(reduce_source(v123).name == reduce_source(v121).name);
  CHECK(resolve_kernels(parse_op_config("variant=v124"), 1).variant == "v123");
}

TEST_CASE("v125 is v123 whose backward is the whole chunk-64 backward, nothing else", "[registry]") {
  const OpConfig v123 = parse_op_config("variant=v123"), v125 = parse_op_config("variant=v125");
  KernelSource a = scan_source(v123, 8), b = scan_source(v125, 8);
  CHECK(has_option(b, "-DM3_CP_BACKWARD64=1"));
  CHECK_FALSE(has_option(a, "-DM3_CP_BACKWARD64=1"));
  b.options.erase(std::remove(b.options.begin(), b.options.end(), "-DM3_CP_BACKWARD64=1"), b.options.end());
  CHECK(a.options == b.options);
  CHECK(uses_backward64(v125));
  CHECK_FALSE(uses_backward64(v123));
  CHECK(backward_smem_bytes(v125) == static_cast<std::size_t>(kM3Backward64SmemBytes));
  CHECK(forward_smem_bytes(v125) == forward_smem_bytes(v123));
  CHECK(reduce_source(v125).name == reduce_source(v123).name);
  CHECK(resolve_kernels(parse_op_config("variant=v126"), 1).variant == "v125");
}

// `variant`'s kernel options are `base`'s with `option` added, or with `option` in place of
// `replaced` (a leveled switch raised).
void check_one_more_option(const char* base, const char* variant, const std::string& option,
                           const std::string& replaced = "") {
  INFO(variant << " over " << base);
  KernelSource k = scan_source(parse_op_config(std::string("variant=") + variant), 8);
  const KernelSource b = scan_source(parse_op_config(std::string("variant=") + base), 8);
  CHECK(has_option(k, option));
  CHECK_FALSE(has_option(b, option));
  if (replaced.empty()) {
    k.options.erase(std::remove(k.options.begin(), k.options.end(), option), k.options.end());
  } else {
    std::replace(k.options.begin(), k.options.end(), option, replaced);
  }
  CHECK(k.options == b.options);
}

// v127 and v129 change only the order of the chunk-64 forward's work: one option each over their
// predecessor, the same launch shapes.
void check_one_more_forward64_option(const char* base, const char* variant, const std::string& option) {
  const OpConfig a_cfg = parse_op_config(std::string("variant=") + base);
  const OpConfig b_cfg = parse_op_config(std::string("variant=") + variant);
  check_one_more_option(base, variant, option);
  INFO(variant << " over " << base);
  CHECK(uses_forward64(b_cfg));
  CHECK_FALSE(uses_backward64q(b_cfg));
  CHECK(forward_smem_bytes(b_cfg) == forward_smem_bytes(a_cfg));
  CHECK(backward_smem_bytes(b_cfg) == backward_smem_bytes(a_cfg));
  CHECK(reduce_source(b_cfg).name == reduce_source(a_cfg).name);
}

TEST_CASE("v127 is v119 with staged state stores, v129/v131 v127 with early loads, nothing else", "[registry]") {
  check_one_more_forward64_option("v119", "v127", "-DM3_CP_F64_STAGED_STATES=1");
  check_one_more_forward64_option("v127", "v129", "-DM3_CP_F64_EARLY_LOADS=1");
  // v131 raises v129's level: the option's value differs, nothing else.
  KernelSource a = scan_source(parse_op_config("variant=v129"), 8), b = scan_source(parse_op_config("variant=v131"), 8);
  std::replace(b.options.begin(), b.options.end(), std::string("-DM3_CP_F64_EARLY_LOADS=2"),
               std::string("-DM3_CP_F64_EARLY_LOADS=1"));
  CHECK(a.options == b.options);
  CHECK(has_option(scan_source(parse_op_config("variant=v131"), 8), "-DM3_CP_F64_EARLY_LOADS=2"));
  CHECK(resolve_kernels(parse_op_config("variant=v128"), 1).variant == "v127");
  CHECK(resolve_kernels(parse_op_config("variant=v130"), 1).variant == "v129");
  CHECK(resolve_kernels(parse_op_config("variant=v132"), 1).variant == "v131");
}

TEST_CASE("v133 is v131 with lean descriptors, v135 v133 with a lean transpose, nothing else", "[registry]") {
  check_one_more_forward64_option("v131", "v133", "-DM3_CP_F64_LEAN_INDEX=1");
  // v135 raises v133's level: the option's value differs, nothing else.
  KernelSource a = scan_source(parse_op_config("variant=v133"), 8), b = scan_source(parse_op_config("variant=v135"), 8);
  CHECK(has_option(b, "-DM3_CP_F64_LEAN_INDEX=2"));
  std::replace(b.options.begin(), b.options.end(), std::string("-DM3_CP_F64_LEAN_INDEX=2"),
               std::string("-DM3_CP_F64_LEAN_INDEX=1"));
  CHECK(a.options == b.options);
  CHECK(resolve_kernels(parse_op_config("variant=v134"), 1).variant == "v133");
  CHECK(resolve_kernels(parse_op_config("variant=v136"), 1).variant == "v135");
}

TEST_CASE("v138 and v140 are v135 with the row layout of M3_CP_ROWS8 at levels 1 and 2, nothing else",
          "[registry]") {
  for (const auto& [variant, level] : {std::pair<const char*, int>{"v138", 1}, {"v140", 2}}) {
    INFO(variant);
    const OpConfig c = parse_op_config(std::string("variant=") + variant);
    check_one_more_option("v135", variant, "-DM3_CP_ROWS8=" + std::to_string(level));
    CHECK(uses_forward64(c));
    CHECK(is_chunk_parallel(c));
    // The q/k and v/dy tiles' rows are 8 floats wider than the padding of 4: 32 rows of each of the
    // four tiles, 4 floats more a row, in the 32-token kernels; the chunk-64 forward keeps its own.
    const OpConfig v135 = parse_op_config("variant=v135");
    CHECK(backward_smem_bytes(c) == backward_smem_bytes(v135) + 4 * 32 * 4 * sizeof(float));
    CHECK(scan_smem_bytes(c) == scan_smem_bytes(v135) + 4 * 32 * 4 * sizeof(float));
    CHECK(forward_smem_bytes(c) == forward_smem_bytes(v135));
    // Two backward CTAs still fit on an SM (233,472 bytes, 1 KB reserved and 1,040 static a CTA).
    CHECK(2 * (backward_smem_bytes(c) + 1024 + 1040) <= 233472);
  }
}

TEST_CASE("v148 is v142 with the m, x, t1 and t2 tiles in v138's rows, nothing else", "[registry]") {
  const OpConfig c = parse_op_config("variant=v148"), v142 = parse_op_config("variant=v142");
  check_one_more_option("v142", "v148", "-DM3_CP_ROWS8_MXT=1");
  // Four tiles of 32 rows, 4 floats more a row; two backward CTAs still fit on an SM.
  CHECK(backward_smem_bytes(c) == backward_smem_bytes(v142) + 4 * 32 * 4 * sizeof(float));
  CHECK(2 * (backward_smem_bytes(c) + 1024 + 1040) <= 233472);
  CHECK(forward_smem_bytes(c) == forward_smem_bytes(v142));
}

TEST_CASE("v150 is v148 with the state copy's second level, nothing else", "[registry]") {
  check_one_more_option("v148", "v150", "-DM3_CP_SMEM_STATE=2", "-DM3_CP_SMEM_STATE=1");
}

TEST_CASE("v152 is v148 with the successor's gradient read through L1, nothing else", "[registry]") {
  check_one_more_option("v148", "v152", "-DM3_CP_DS_L1=1");
  const OpConfig c = parse_op_config("variant=v152"), v148 = parse_op_config("variant=v148");
  CHECK(backward_smem_bytes(c) == backward_smem_bytes(v148));
  CHECK(resolve_kernels(parse_op_config("variant=v153"), 1).variant == "v152");
}

TEST_CASE("v154 is v144 with v148's m, x, t1 and t2 rows, nothing else", "[registry]") {
  check_one_more_option("v144", "v154", "-DM3_CP_ROWS8_MXT=1");
  const OpConfig c = parse_op_config("variant=v154"), v144 = parse_op_config("variant=v144");
  // The backward's four tiles and the forward's m tile: 32 rows, 4 floats more a row.
  CHECK(backward_smem_bytes(c) == backward_smem_bytes(v144) + 4 * 32 * 4 * sizeof(float));
  CHECK(forward_smem_bytes(c) == forward_smem_bytes(v144) + 32 * 4 * sizeof(float));
  CHECK(2 * (backward_smem_bytes(c) + 1024 + 1040) <= 233472);
  CHECK(2 * (forward_smem_bytes(c) + 1024 + 1056) <= 233472);
}

TEST_CASE("v156 is v148 with the chunk-64 forward's q/k halves stored in swapped order, nothing else",
          "[registry]") {
  check_one_more_forward64_option("v148", "v156", "-DM3_CP_F64_SWAPPED_QK=1");
  CHECK(resolve_kernels(parse_op_config("variant=v157"), 1).variant == "v156");
}

TEST_CASE("v158 and v159 are v148 and v154 with the lean angle kernel, nothing else", "[registry]") {
  check_one_more_forward64_option("v148", "v158", "-DM3_CP_LEAN_ANGLES=1");
  check_one_more_option("v154", "v159", "-DM3_CP_LEAN_ANGLES=1");
  CHECK(resolve_kernels(parse_op_config("variant=v160"), 1).variant == "v158");
}

TEST_CASE("v161, v162, v164 and v165 are v158, v159, v148 and v154 with the reduce's deeper loads, nothing else",
          "[registry]") {
  for (const auto& pair : {std::make_pair("v158", "v161"), std::make_pair("v159", "v162"),
                           std::make_pair("v148", "v164"), std::make_pair("v154", "v165")}) {
    INFO(pair.second);
    const OpConfig base = parse_op_config(std::string("variant=") + pair.first);
    const OpConfig deep = parse_op_config(std::string("variant=") + pair.second);
    CHECK(scan_source(deep, 8).options == scan_source(base, 8).options);
    KernelSource r = reduce_source(deep);
    CHECK(has_option(r, "-DM3_REDUCE_DEEP_LOADS=1"));
    CHECK_FALSE(has_option(reduce_source(base), "-DM3_REDUCE_DEEP_LOADS=1"));
    r.options.erase(std::remove(r.options.begin(), r.options.end(), "-DM3_REDUCE_DEEP_LOADS=1"), r.options.end());
    CHECK(r.options == reduce_source(base).options);
    CHECK(reduce_source(deep).name != reduce_source(base).name);
  }
  CHECK(resolve_kernels(parse_op_config("variant=v163"), 1).variant == "v161");
  CHECK(resolve_kernels(parse_op_config("variant=v166"), 1).variant == "v164");
}

TEST_CASE("v168 and v169 are v164 and v165 with sincosf's large-angle path out of line, nothing else", "[registry]") {
  check_one_more_forward64_option("v164", "v168", "-DM3_SINCOS_OUTLINE=1");
  check_one_more_option("v165", "v169", "-DM3_SINCOS_OUTLINE=1");
  for (const auto& pair : {std::make_pair("v164", "v168"), std::make_pair("v165", "v169")}) {
    INFO(pair.second);
    const OpConfig base = parse_op_config(std::string("variant=") + pair.first);
    const OpConfig outlined = parse_op_config(std::string("variant=") + pair.second);
    // Same reduce (same key: one cache entry for both), same layouts.
    CHECK(reduce_source(outlined).name == reduce_source(base).name);
    CHECK(reduce_source(outlined).options == reduce_source(base).options);
    CHECK(backward_smem_bytes(outlined) == backward_smem_bytes(base));
    CHECK(forward_smem_bytes(outlined) == forward_smem_bytes(base));
  }
  CHECK(resolve_kernels(parse_op_config("variant=v170"), 1).variant == "v168");
}

TEST_CASE("v171 and v172 are v168 and v169 whose backward takes its sequence from the ticket table, nothing else",
          "[registry]") {
  check_one_more_forward64_option("v168", "v171", "-DM3_CP_BACKWARD_TABLE_JOB=1");
  check_one_more_option("v169", "v172", "-DM3_CP_BACKWARD_TABLE_JOB=1");
  CHECK(has_option(scan_source(parse_op_config("variant=v171"), 8), "-DM3_CP_RICH_SCHEDULE=1"));
  CHECK(resolve_kernels(parse_op_config("variant=v173"), 1).variant == "v171");
}

TEST_CASE("v174 and v175 are v171 and v172 with the hardware's tanh, exp and gate sigmoid, nothing else",
          "[registry]") {
  check_one_more_forward64_option("v171", "v174", "-DM3_FAST_TRANSCENDENTALS=1");
  check_one_more_option("v172", "v175", "-DM3_FAST_TRANSCENDENTALS=1");
  CHECK_FALSE(has_option(scan_source(parse_op_config("variant=v8"), 8), "-DM3_FAST_TRANSCENDENTALS=1"));
  CHECK(resolve_kernels(parse_op_config("variant=v176"), 1).variant == "v174");
}

// The waves pickers from v179 on: each adds one switch to both kernel sets of an earlier picker.
struct SwitchTwins {
  const char* wide_base;    // the chunk-64 forward set it builds on
  const char* narrow_base;  // the 32-token set it builds on
  const char* wide;
  const char* narrow;
  const char* picker;
  const char* option;
  const char* what;
};

TEST_CASE("v177 to v206: each pair of kernel sets is its bases' with one more switch, nothing else", "[registry]") {
  for (const SwitchTwins& t :
       {SwitchTwins{"v174", "v175", "v177", "v178", "v179", "-DM3_CP_PAIRED_STORES=1",
                    "bf16 results stored in hardware-packed pairs"},
        SwitchTwins{"v177", "v178", "v180", "v181", "v182", "-DM3_CP_ANGLE_QUADS=1", "the angles loaded four to a word"},
        SwitchTwins{"v177", "v178", "v183", "v184", "v185", "-DM3_CP_SWIZZLE_FOLD=1",
                    "the state copy's swizzle folded per thread"},
        SwitchTwins{"v183", "v184", "v186", "v187", "v188", "-DM3_CP_ZERO_DS=1",
                    "a zero tile for a missing state gradient"},
        SwitchTwins{"v180", "v181", "v189", "v190", "v191", "-DM3_CP_ZERO_DS=1",
                    "a zero tile for a missing state gradient"},
        SwitchTwins{"v180", "v181", "v192", "v193", "v194", "-DM3_CP_INTER_PARKED=1", "dqr's inter product parked in t1"},
        SwitchTwins{"v180", "v181", "v195", "v196", "v197", "-Xptxas=-dlcm=cs",
                    "ptxas's default loads streaming (evict-first in L1)"},
        SwitchTwins{"v180", "v181", "v198", "v199", "v200", "-Xptxas=-dlcm=cg", "ptxas's default loads past L1"},
        SwitchTwins{"v195", "v196", "v201", "v202", "v203", "-Xptxas=--register-usage-level=1",
                    "ptxas's register usage level 1, with streaming loads"},
        SwitchTwins{"v180", "v181", "v204", "v205", "v206", "-Xptxas=--register-usage-level=1",
                    "ptxas's register usage level 1"}}) {
    INFO(t.wide << " and " << t.narrow << ": " << t.what);
    check_one_more_forward64_option(t.wide_base, t.wide, t.option);
    check_one_more_option(t.narrow_base, t.narrow, t.option);
    CHECK(resolve_kernels(parse_op_config(std::string("variant=") + t.picker), 1).variant == t.wide);
  }
}

TEST_CASE("v207 and v208 take m3_cp_backward from a module of its own with v201's ptxas options, the other "
          "kernels from v180's and v181's options",
          "[registry]") {
  for (const auto& [variant, plain, tuned] :
       {std::tuple<const char*, const char*, const char*>{"v207", "v180", "v201"}, {"v208", "v181", "v202"}}) {
    INFO(variant);
    const OpConfig c = parse_op_config(std::string("variant=") + variant);
    const KernelSource scan = scan_source(c, 0, "sm_90a"), backward = backward_source(c, 0, "sm_90a");
    CHECK(scan.options == scan_source(parse_op_config(std::string("variant=") + plain), 0, "sm_90a").options);
    CHECK(backward.options == scan_source(parse_op_config(std::string("variant=") + tuned), 0, "sm_90a").options);
    CHECK(has_option(backward, "-Xptxas=--register-usage-level=1"));
    CHECK(has_option(backward, "-Xptxas=-dlcm=cs"));
    CHECK(backward.code == scan.code);
    CHECK(backward.name != scan.name);
    CHECK(backward.name.find(",backward]") != std::string::npos);
    // Both modules are warmed for the variant and for its picker, and both are in the full list.
    for (const auto& specs : {specializations_for({c}, "sm_90a"),
                              specializations_for({parse_op_config("variant=v209")}, "sm_90a"),
                              all_specializations("sm_90a")}) {
      for (const KernelSource* k : {&scan, &backward}) {
        CHECK(std::any_of(specs.begin(), specs.end(), [&](const KernelSource& s) { return s.name == k->name; }));
      }
    }
  }
  // Every other variant's backward comes from its scan module.
  for (const char* v : {"v180", "v181", "v201", "v103", "v8", "v5"}) {
    INFO(v);
    const OpConfig c = parse_op_config(std::string("variant=") + v);
    CHECK(backward_source(c, 8, "sm_90a").name == scan_source(c, 8, "sm_90a").name);
    CHECK(backward_source(c, 8, "sm_90a").options == scan_source(c, 8, "sm_90a").options);
  }
}

TEST_CASE("v210 and v211 are v180 and v181 compiled with -ftz=true -prec-div=false, nothing else", "[registry]") {
  for (const auto& [variant, base] : {std::pair<const char*, const char*>{"v210", "v180"}, {"v211", "v181"}}) {
    INFO(variant);
    const OpConfig c = parse_op_config(std::string("variant=") + variant);
    const OpConfig b = parse_op_config(std::string("variant=") + base);
    std::vector<std::string> expected = scan_source(b, 0, "sm_90a").options;
    expected.insert(expected.end(), {"-ftz=true", "-prec-div=false"});
    CHECK(scan_source(c, 0, "sm_90a").options == expected);
    CHECK(scan_source(c, 0, "sm_90a").code == scan_source(b, 0, "sm_90a").code);
    // One module: the backward is the scan module's, and the reduce is the base's (one cache entry).
    CHECK(backward_source(c, 0, "sm_90a").name == scan_source(c, 0, "sm_90a").name);
    CHECK(reduce_source(c).options == reduce_source(b).options);
    CHECK(uses_forward64(c) == uses_forward64(b));
    CHECK(forward_smem_bytes(c) == forward_smem_bytes(b));
    CHECK(backward_smem_bytes(c) == backward_smem_bytes(b));
  }
  CHECK(resolve_kernels(parse_op_config("variant=v212"), 1).variant == "v210");
  CHECK(resolve_kernels(parse_op_config("variant=v212"), 1, 1.0).variant == "v211");
}

TEST_CASE("v213 and v214 are v210 and v211 with M3_SINCOS_WIDE, their backward v210's and v211's module",
          "[registry]") {
  for (const auto& [variant, base] : {std::pair<const char*, const char*>{"v213", "v210"}, {"v214", "v211"}}) {
    INFO(variant);
    const OpConfig c = parse_op_config(std::string("variant=") + variant);
    const OpConfig b = parse_op_config(std::string("variant=") + base);
    check_one_more_option(base, variant, "-DM3_SINCOS_WIDE=1");
    const KernelSource backward = backward_source(c, 0, "sm_90a"), plain = scan_source(b, 0, "sm_90a");
    // The base's options and text exactly: the same cache key, so one cubin serves both.
    CHECK(backward.options == plain.options);
    CHECK(backward.code == plain.code);
    CHECK(backward.name != scan_source(c, 0, "sm_90a").name);
    CHECK(backward.name.find(",backward]") != std::string::npos);
    const auto specs = specializations_for({parse_op_config("variant=v215")}, "sm_90a");
    CHECK(std::any_of(specs.begin(), specs.end(), [&](const KernelSource& s) { return s.name == backward.name; }));
  }
  CHECK(resolve_kernels(parse_op_config("variant=v215"), 1).variant == "v213");
  CHECK(resolve_kernels(parse_op_config("variant=v215"), 1, 1.0).variant == "v214");
}

TEST_CASE("v216 and v217 are v210 and v211 with the opaque tile index; v219 and v220 add M3_SINCOS_WIDE to every "
          "kernel, the backward's too",
          "[registry]") {
  check_one_more_option("v210", "v216", "-DM3_OPAQUE_TILE_TID=1");
  check_one_more_option("v211", "v217", "-DM3_OPAQUE_TILE_TID=1");
  check_one_more_option("v216", "v219", "-DM3_SINCOS_WIDE=1");
  check_one_more_option("v217", "v220", "-DM3_SINCOS_WIDE=1");
  for (const char* variant : {"v216", "v217", "v219", "v220"}) {
    INFO(variant);
    const OpConfig c = parse_op_config(std::string("variant=") + variant);
    // One module: the backward is compiled with the forward's options.
    CHECK(backward_source(c, 0, "sm_90a").name == scan_source(c, 0, "sm_90a").name);
    CHECK(backward_source(c, 0, "sm_90a").options == scan_source(c, 0, "sm_90a").options);
  }
  CHECK(resolve_kernels(parse_op_config("variant=v218"), 1).variant == "v216");
  CHECK(resolve_kernels(parse_op_config("variant=v218"), 1, 1.0).variant == "v217");
  CHECK(resolve_kernels(parse_op_config("variant=v221"), 1).variant == "v219");
  CHECK(resolve_kernels(parse_op_config("variant=v221"), 1, 1.0).variant == "v220");
}

TEST_CASE("v222 and v223 are v219 and v220 with every thread-index read opaque", "[registry]") {
  check_one_more_option("v219", "v222", "-DM3_OPAQUE_TILE_TID=2", "-DM3_OPAQUE_TILE_TID=1");
  check_one_more_option("v220", "v223", "-DM3_OPAQUE_TILE_TID=2", "-DM3_OPAQUE_TILE_TID=1");
  CHECK(resolve_kernels(parse_op_config("variant=v224"), 1).variant == "v222");
  CHECK(resolve_kernels(parse_op_config("variant=v224"), 1, 1.0).variant == "v223");
}

TEST_CASE("v225 is v222 whose chunk-64 forward prefetches its chain's next inputs; v227 adds the backward's", "[registry]") {
  check_one_more_forward64_option("v222", "v225", "-DM3_CP_F64_NEIGHBOUR_PREFETCH=1");
  check_one_more_option("v225", "v227", "-DM3_CP_NEIGHBOUR_L2_PREFETCH=3", "-DM3_CP_NEIGHBOUR_L2_PREFETCH=2");
  CHECK(resolve_kernels(parse_op_config("variant=v226"), 1).variant == "v225");
  CHECK(resolve_kernels(parse_op_config("variant=v226"), 1, 1.0).variant == "v223");
  CHECK(resolve_kernels(parse_op_config("variant=v228"), 1).variant == "v227");
  CHECK(resolve_kernels(parse_op_config("variant=v228"), 1, 1.0).variant == "v223");
}

TEST_CASE("v231 and v232 are v222 and v223 with the aligned ticket order", "[registry]") {
  check_one_more_option("v222", "v231", "-DM3_CP_ALIGNED_ENDS=1");
  check_one_more_option("v223", "v232", "-DM3_CP_ALIGNED_ENDS=1");
  CHECK(resolve_kernels(parse_op_config("variant=v233"), 1).variant == "v231");
  CHECK(resolve_kernels(parse_op_config("variant=v233"), 1, 1.0).variant == "v232");
}

TEST_CASE("v235 and v236 are v231's kernels launched one CTA an SM", "[registry]") {
  const OpConfig base = parse_op_config("variant=v231");
  for (const char* name : {"v235", "v236"}) {
    INFO(name);
    const OpConfig c = parse_op_config(std::string("variant=") + name);
    // The same modules (options and so cache keys) as v231's: only the launch differs.
    CHECK(scan_source(c, 0).options == scan_source(base, 0).options);
    CHECK(backward_source(c, 0).options == backward_source(base, 0).options);
    CHECK(reduce_source(c).options == reduce_source(base).options);
    CHECK(uses_forward64(c));
    CHECK_FALSE(picks_by_forward64_waves(c));
  }
  const OpConfig lone_backward = parse_op_config("variant=v235"), lone_forward = parse_op_config("variant=v236");
  // Two CTAs of 160 KB, with the 1 KB the SM reserves for each, do not fit in an SM's 228 KB.
  CHECK(2 * (backward_smem_bytes(lone_backward) + 1024) > 228 * 1024);
  CHECK(backward_smem_bytes(lone_backward) > backward_smem_bytes(base));
  CHECK(forward_smem_bytes(lone_backward) == forward_smem_bytes(base));
  CHECK(2 * (forward_smem_bytes(lone_forward) + 1024) > 228 * 1024);
  CHECK(forward_smem_bytes(lone_forward) > forward_smem_bytes(base));
  CHECK(backward_smem_bytes(lone_forward) == backward_smem_bytes(base));
  // And at most what one CTA may opt into (227 KB).
  CHECK(backward_smem_bytes(lone_backward) <= 227 * 1024);
  CHECK(forward_smem_bytes(lone_forward) <= 227 * 1024);
}

TEST_CASE("v234 picks as v233 but runs its wide kernels from 1.5 waves of chunk-64 forward jobs", "[registry]") {
  const OpConfig c = parse_op_config("variant=v234"), d = parse_op_config("variant=v233");
  CHECK(picks_by_forward64_waves(c));
  CHECK_FALSE(is_chunk_parallel(c));
  CHECK(kForward64MinWavesV234 < kForward64MinWaves);
  CHECK(resolve_kernels(c, 1).variant == "v231");
  CHECK(resolve_kernels(c, 1, 1.21).variant == "v232");  // c00
  CHECK(resolve_kernels(c, 1, 1.49).variant == "v232");
  CHECK(resolve_kernels(c, 1, kForward64MinWavesV234).variant == "v231");
  CHECK(resolve_kernels(c, 1, 1.70).variant == "v231");  // run 148's m1
  CHECK(resolve_kernels(d, 1, 1.70).variant == "v232");  // where v233 takes the 32-token set
  CHECK(resolve_kernels(c, 1, 2.42).variant == "v231");  // c06
  CHECK(resolve_kernels(c, kExactProductsAboveLen + 1, 1.0).variant == "v8");
  CHECK(resolve_kernels(c, kExactProductsAboveLen + 1, 9.0).variant == "v8");
  const auto specs = specializations_for({c}, "sm_90a");
  for (const char* set : {"v231", "v232", "v8"}) {
    INFO(set);
    const std::string tag = std::string("[") + set + ",";
    CHECK(std::any_of(specs.begin(), specs.end(), [&](const auto& s) { return s.name.find(tag) != std::string::npos; }));
  }
}

TEST_CASE("v252 and v254 hand on their states and partials in half; v253 and v255 pick as v248", "[registry]") {
  const OpConfig v246 = parse_op_config("variant=v246"), v252 = parse_op_config("variant=v252"),
                 v254 = parse_op_config("variant=v254");
  CHECK_FALSE(has_option(scan_source(v246, 0), "-DM3_CP_HALF_STATES=1"));
  CHECK(has_option(scan_source(v252, 0), "-DM3_CP_HALF_STATES=1"));
  CHECK_FALSE(has_option(scan_source(v252, 0), "-DM3_CP_HALF_PARTIALS=1"));
  CHECK(has_option(scan_source(v254, 0), "-DM3_CP_HALF_STATES=1"));
  CHECK(has_option(scan_source(v254, 0), "-DM3_CP_HALF_PARTIALS=1"));
  // The reduce reads what its backward wrote: v252 shares v246's, v254 has its own.
  CHECK(reduce_source(v252).name == reduce_source(v246).name);
  CHECK_FALSE(has_option(reduce_source(v252), "-DM3_REDUCE_HALF_PARTIALS=1"));
  CHECK(has_option(reduce_source(v254), "-DM3_REDUCE_HALF_PARTIALS=1"));
  CHECK(reduce_source(v254).name != reduce_source(v252).name);
  for (const auto& [picker, wide] : {std::pair{"v253", "v252"}, std::pair{"v255", "v254"}}) {
    INFO(picker);
    const OpConfig c = parse_op_config(std::string("variant=") + picker);
    CHECK(picks_by_forward64_waves(c));
    CHECK(resolve_kernels(c, 1).variant == wide);
    CHECK(resolve_kernels(c, 1, 1.49).variant == "v247");  // fp32 states and partials, both kernels
    CHECK(resolve_kernels(c, kExactProductsAboveLen + 1, 9.0).variant == "v8");
  }
}

TEST_CASE("v229 is v225 whose CTAs load their likely ticket's row with the atomic", "[registry]") {
  check_one_more_forward64_option("v225", "v229", "-DM3_CP_GUESSED_TICKET=1");
  CHECK(resolve_kernels(parse_op_config("variant=v230"), 1).variant == "v229");
  CHECK(resolve_kernels(parse_op_config("variant=v230"), 1, 1.0).variant == "v223");
}

TEST_CASE("v146 is v142 with the successor's gradient loaded at once, nothing else", "[registry]") {
  check_one_more_option("v142", "v146", "-DM3_CP_EARLY_DSTATE=1");
}

TEST_CASE("v142 is v138 with the entering state copied into shared memory, nothing else", "[registry]") {
  const OpConfig c = parse_op_config("variant=v142"), v138 = parse_op_config("variant=v138");
  check_one_more_option("v138", "v142", "-DM3_CP_SMEM_STATE=1");
  // The copy lives in the t1 and t2 tiles: no new shared memory.
  CHECK(backward_smem_bytes(c) == backward_smem_bytes(v138));
  CHECK(forward_smem_bytes(c) == forward_smem_bytes(v138));
}

TEST_CASE("v144 is v103 with v142's layout and state copy, its chunk-state product in the plain k order",
          "[registry]") {
  const OpConfig c = parse_op_config("variant=v144");
  KernelSource k = scan_source(c, 8);
  KernelSource base = scan_source(parse_op_config("variant=v103"), 8);
  CHECK(has_option(k, "-DM3_CP_ROWS8=1"));
  CHECK(has_option(k, "-DM3_CP_SMEM_STATE=1"));
  CHECK(has_option(base, "-DM3_CP_SPREAD_K=3"));
  CHECK_FALSE(has_option(k, "-DM3_CP_SPREAD_K=3"));
  for (const char* o : {"-DM3_CP_ROWS8=1", "-DM3_CP_SMEM_STATE=1"}) {
    k.options.erase(std::remove(k.options.begin(), k.options.end(), std::string(o)), k.options.end());
  }
  base.options.erase(std::remove(base.options.begin(), base.options.end(), std::string("-DM3_CP_SPREAD_K=3")),
                     base.options.end());
  CHECK(k.options == base.options);
  CHECK_FALSE(uses_forward64(c));
  CHECK(backward_smem_bytes(c) == backward_smem_bytes(parse_op_config("variant=v142")));
  CHECK(2 * (forward_smem_bytes(c) + 1024 + 1056) <= 233472);
}

TEST_CASE("the waves pickers (v137 to v233) run their wide kernels from two waves of chunk-64 forward jobs, their "
          "32-token set below, v8's past 4096 tokens",
          "[registry]") {
  struct Picker {
    const char* name;
    const char* wide;
    const char* few;
  };
  for (const auto& [name, wide, few] : {Picker{"v137", "v135", "v103"}, Picker{"v139", "v138", "v103"},
                                        Picker{"v141", "v140", "v103"}, Picker{"v143", "v142", "v103"},
                                        Picker{"v145", "v142", "v144"}, Picker{"v147", "v146", "v103"},
                                        Picker{"v149", "v148", "v103"}, Picker{"v151", "v150", "v103"},
                                        Picker{"v153", "v152", "v103"}, Picker{"v155", "v148", "v154"},
                                        Picker{"v157", "v156", "v154"}, Picker{"v160", "v158", "v159"},
                                        Picker{"v163", "v161", "v162"}, Picker{"v166", "v164", "v165"},
                                        Picker{"v170", "v168", "v169"}, Picker{"v173", "v171", "v172"},
                                        Picker{"v176", "v174", "v175"}, Picker{"v179", "v177", "v178"},
                                        Picker{"v182", "v180", "v181"}, Picker{"v185", "v183", "v184"},
                                        Picker{"v188", "v186", "v187"}, Picker{"v191", "v189", "v190"},
                                        Picker{"v194", "v192", "v193"}, Picker{"v197", "v195", "v196"},
                                        Picker{"v200", "v198", "v199"}, Picker{"v203", "v201", "v202"},
                                        Picker{"v206", "v204", "v205"}, Picker{"v209", "v207", "v208"},
                                        Picker{"v212", "v210", "v211"}, Picker{"v215", "v213", "v214"},
                                        Picker{"v218", "v216", "v217"}, Picker{"v221", "v219", "v220"},
                                        Picker{"v224", "v222", "v223"}, Picker{"v226", "v225", "v223"},
                                        Picker{"v228", "v227", "v223"}, Picker{"v230", "v229", "v223"},
                                        Picker{"v233", "v231", "v232"}}) {
    INFO(name);
    const OpConfig c = parse_op_config(std::string("variant=") + name);
    CHECK(picks_by_forward64_waves(c));
    CHECK_FALSE(is_chunk_parallel(c));
    CHECK_THROWS_AS(scan_source(c, 0), std::invalid_argument);
    CHECK(resolve_kernels(c, 1).variant == wide);  // no count given: the wide kernels
    CHECK(resolve_kernels(c, 1, 0.0).variant == few);
    CHECK(resolve_kernels(c, 1, 1.99).variant == few);
    CHECK(resolve_kernels(c, 1, kForward64MinWaves).variant == wide);
    CHECK(resolve_kernels(c, kExactProductsAboveLen, 1.0).variant == few);
    CHECK(resolve_kernels(c, kExactProductsAboveLen, 9.0).variant == wide);
    CHECK(resolve_kernels(c, kExactProductsAboveLen + 1, 1.0).variant == "v8");
    CHECK(resolve_kernels(c, kExactProductsAboveLen + 1, 9.0).variant == "v8");
    CHECK(forward64_waves_of(c, 320, 264) == 320.0 / 264);
    CHECK(forward64_waves_of(c, 528, 264) == kForward64MinWaves);
    CHECK(std::isinf(forward64_waves_of(c, 320, 0)));
    // Both of its short kernel sets have a chunk-64 forward or none, as the waves' count assumes.
    CHECK(uses_forward64(parse_op_config(std::string("variant=") + wide)));
    CHECK_FALSE(uses_forward64(parse_op_config(std::string("variant=") + few)));
    const std::string tag = std::string("[") + name + ",";
    for (const auto& s : all_specializations("sm_90a")) CHECK(s.name.find(tag) == std::string::npos);
    // Its warm-up fills all three kernel sets, so that no call of either size compiles.
    const auto specs = specializations_for({c}, "sm_90a");
    for (const char* set : {wide, few, "v8"}) {
      INFO(set);
      const KernelSource scan = scan_source(parse_op_config(std::string("variant=") + set), 0, "sm_90a");
      CHECK(std::any_of(specs.begin(), specs.end(), [&](const KernelSource& s) { return s.name == scan.name; }));
    }
  }
  CHECK_FALSE(uses_forward64(parse_op_config("variant=v103")));
  // No other variant picks by waves, and none of them is moved by a count.
  for (const char* name : {"v104", "v134", "v136", "v103", "v135", "v138", "v140", "v142", "v144", "v146", "v148",
                           "v150", "v152", "v154", "v156", "v158", "v159", "v161", "v162", "v164", "v165", "v168",
                           "v169", "v171", "v172", "v174", "v175", "v177", "v178", "v180", "v181", "v183",
                           "v184", "v186", "v187", "v189", "v190", "v192", "v193", "v195", "v196", "v198",
                           "v199", "v201", "v202", "v204", "v205", "v207", "v208", "v210", "v211", "v213", "v214",
                           "v216", "v217", "v219", "v220", "v222", "v223", "v225", "v227", "v229", "v231", "v232", "v235",
                           "v236", "v237", "v238", "v240", "v241", "v243", "v244", "v246", "v247", "v249", "v250", "v252", "v254", "v8"}) {
    INFO(name);
    const OpConfig o = parse_op_config(std::string("variant=") + name);
    CHECK_FALSE(picks_by_forward64_waves(o));
    CHECK(resolve_kernels(o, 1, 0.5).variant == resolve_kernels(o, 1).variant);
  }
}

TEST_CASE("only v49 on sum dq and dk over the heads in the backward", "[registry]") {
  const OpConfig v47 = parse_op_config("variant=v47"), v49 = parse_op_config("variant=v49");
  CHECK_FALSE(uses_fused_head_sums(v47));
  CHECK(uses_fused_head_sums(v49));
  CHECK(has_option(scan_source(v49, 8), "-DM3_CP_FUSED_HEADS=1"));
  CHECK_FALSE(uses_fused_head_sums(parse_op_config("variant=v8")));
  CHECK_THROWS_AS(uses_fused_head_sums(parse_op_config("variant=v50")), std::invalid_argument);
}

TEST_CASE("only v69 on hand the mixing matrix from the forward to the backward", "[registry]") {
  const OpConfig v65 = parse_op_config("variant=v65"), v69 = parse_op_config("variant=v69");
  CHECK_FALSE(stores_mixing(v65));
  CHECK(stores_mixing(v69));
  CHECK(has_option(scan_source(v69, 8), "-DM3_CP_STORED_MIXING=1"));
  CHECK_FALSE(has_option(scan_source(v65, 8), "-DM3_CP_STORED_MIXING=1"));
  CHECK_FALSE(stores_mixing(parse_op_config("variant=v8")));
  CHECK_THROWS_AS(stores_mixing(parse_op_config("variant=v70")), std::invalid_argument);
}

TEST_CASE("v71 swizzles the staged rows, v65 does not", "[registry]") {
  CHECK(has_option(scan_source(parse_op_config("variant=v71"), 8), "-DM3_CP_SWIZZLED_HALVES=1"));
  CHECK_FALSE(has_option(scan_source(parse_op_config("variant=v65"), 8), "-DM3_CP_SWIZZLED_HALVES=1"));
  CHECK_FALSE(has_option(scan_source(parse_op_config("variant=v69"), 8), "-DM3_CP_SWIZZLED_HALVES=1"));
}

TEST_CASE("v73 pairs the rows of its q/k staging lanes, v71 does not", "[registry]") {
  CHECK(has_option(scan_source(parse_op_config("variant=v73"), 8), "-DM3_CP_ROW_PAIRED_LANES=1"));
  CHECK(has_option(scan_source(parse_op_config("variant=v73"), 8), "-DM3_CP_SWIZZLED_HALVES=1"));
  CHECK_FALSE(has_option(scan_source(parse_op_config("variant=v71"), 8), "-DM3_CP_ROW_PAIRED_LANES=1"));
}

TEST_CASE("v75, v77 and v79 spread the k order of their k-major products, v73 does not", "[registry]") {
  CHECK(has_option(scan_source(parse_op_config("variant=v75"), 8), "-DM3_CP_SPREAD_K=1"));
  CHECK(has_option(scan_source(parse_op_config("variant=v77"), 8), "-DM3_CP_SPREAD_K=2"));
  CHECK(has_option(scan_source(parse_op_config("variant=v79"), 8), "-DM3_CP_SPREAD_K=3"));
  CHECK_FALSE(has_option(scan_source(parse_op_config("variant=v79"), 8), "-DM3_CP_SPREAD_K=1"));
  CHECK(has_option(scan_source(parse_op_config("variant=v77"), 8), "-DM3_CP_ROW_PAIRED_LANES=1"));
  CHECK_FALSE(has_option(scan_source(parse_op_config("variant=v73"), 8), "-DM3_CP_SPREAD_K=1"));
  CHECK_FALSE(has_option(scan_source(parse_op_config("variant=v73"), 8), "-DM3_CP_SPREAD_K=2"));
}

TEST_CASE("v81 spreads a sequence's angle chunks over a cluster sized by its longest sequence", "[registry]") {
  const OpConfig v79 = parse_op_config("variant=v79"), v81 = parse_op_config("variant=v81");
  CHECK(has_option(scan_source(v81, 8), "-DM3_CP_CLUSTER_ANGLES=1"));
  CHECK(has_option(scan_source(v81, 8), "-DM3_CP_SPREAD_K=3"));
  CHECK_FALSE(has_option(scan_source(v79, 8), "-DM3_CP_CLUSTER_ANGLES=1"));
  CHECK(angle_cluster_size(v79, 4096) == 1);
  // Chunks of 32 tokens, 8 warps a CTA: a CTA per 256 tokens, at most 8.
  CHECK(angle_cluster_size(v81, 0) == 1);
  CHECK(angle_cluster_size(v81, 256) == 1);
  CHECK(angle_cluster_size(v81, 257) == 2);
  CHECK(angle_cluster_size(v81, 1500) == 6);
  CHECK(angle_cluster_size(v81, 2048) == 8);
  CHECK(angle_cluster_size(v81, std::numeric_limits<int64_t>::max()) == 8);
  CHECK_THROWS_AS(angle_cluster_size(parse_op_config("variant=v82"), 100), std::invalid_argument);
}

TEST_CASE("v83 loads its angle rows a quarter per lane, v79 and v81 do not", "[registry]") {
  CHECK(has_option(scan_source(parse_op_config("variant=v83"), 8), "-DM3_CP_TOKEN_LANE_ANGLES=1"));
  CHECK(has_option(scan_source(parse_op_config("variant=v83"), 8), "-DM3_CP_SPREAD_K=3"));
  CHECK_FALSE(has_option(scan_source(parse_op_config("variant=v83"), 8), "-DM3_CP_CLUSTER_ANGLES=1"));
  CHECK_FALSE(has_option(scan_source(parse_op_config("variant=v79"), 8), "-DM3_CP_TOKEN_LANE_ANGLES=1"));
  CHECK_FALSE(has_option(scan_source(parse_op_config("variant=v81"), 8), "-DM3_CP_TOKEN_LANE_ANGLES=1"));
  CHECK(angle_cluster_size(parse_op_config("variant=v83"), 4096) == 1);
  // v85: both.
  CHECK(has_option(scan_source(parse_op_config("variant=v85"), 8), "-DM3_CP_TOKEN_LANE_ANGLES=1"));
  CHECK(has_option(scan_source(parse_op_config("variant=v85"), 8), "-DM3_CP_CLUSTER_ANGLES=1"));
  CHECK(angle_cluster_size(parse_op_config("variant=v85"), 4096) == 8);
}

TEST_CASE("v87 runs both reductions in one launch, from a reduce specialisation of its own", "[registry]") {
  const OpConfig v83 = parse_op_config("variant=v83"), v87 = parse_op_config("variant=v87");
  CHECK(uses_one_reduce_launch(v87));
  CHECK_FALSE(uses_one_reduce_launch(v83));
  CHECK(has_option(reduce_source(v87), "-DM3_REDUCE_ONE_LAUNCH=1"));
  CHECK(has_option(reduce_source(v87), "-DM3_REDUCE_WIDE=1"));
  CHECK_FALSE(has_option(reduce_source(v83), "-DM3_REDUCE_ONE_LAUNCH=1"));
  CHECK(reduce_source(v87).name != reduce_source(v83).name);
  // Its chunk-parallel kernels are v83's: the same options.
  CHECK(scan_source(v87, 8).options == scan_source(v83, 8).options);
  CHECK_THROWS_AS(uses_one_reduce_launch(parse_op_config("variant=v88")), std::invalid_argument);
}

TEST_CASE("v89 takes its forward gate from the hardware exponential and reciprocal", "[registry]") {
  const OpConfig v87 = parse_op_config("variant=v87"), v89 = parse_op_config("variant=v89");
  CHECK(has_option(scan_source(v89, 8), "-DM3_FAST_GATE=1"));
  CHECK_FALSE(has_option(scan_source(v87, 8), "-DM3_FAST_GATE=1"));
  CHECK(uses_one_reduce_launch(v89));
  CHECK(reduce_source(v89).name == reduce_source(v87).name);
  CHECK(resolve_kernels(parse_op_config("variant=v90"), kExactProductsAboveLen + 1).variant == "v8");
}

TEST_CASE("v91 adds the forward's early loads to v89's switches", "[registry]") {
  const OpConfig v91 = parse_op_config("variant=v91");
  CHECK(has_option(scan_source(v91, 8), "-DM3_CP_EARLY_LOADS=1"));
  CHECK(has_option(scan_source(v91, 8), "-DM3_FAST_GATE=1"));
  CHECK(has_option(scan_source(v91, 8), "-DM3_CP_ROW_PAIRED_LANES=1"));
  CHECK_FALSE(has_option(scan_source(parse_op_config("variant=v89"), 8), "-DM3_CP_EARLY_LOADS=1"));
  CHECK(uses_one_reduce_launch(v91));
  // v93: the gate inputs and v too, one level up.
  CHECK(has_option(scan_source(parse_op_config("variant=v93"), 8), "-DM3_CP_EARLY_LOADS=2"));
  CHECK_FALSE(has_option(scan_source(parse_op_config("variant=v93"), 8), "-DM3_CP_EARLY_LOADS=1"));
  // v95: and the backward's, one more.
  CHECK(has_option(scan_source(parse_op_config("variant=v95"), 8), "-DM3_CP_EARLY_LOADS=3"));
}

TEST_CASE("a variant's traits are the same however often and in whatever order they are asked for", "[registry]") {
  // traits() memoises each variant's; the answers must not depend on which was asked first.
  for (const char* name : {"v87", "v13", "v83", "v1", "v87"}) {
    INFO(name);
    const OpConfig c = parse_op_config(std::string("variant=") + name);
    CHECK(is_chunk_parallel(c) == (std::string(name) != "v1"));
    CHECK(uses_wide_reductions(c) == (std::string(name) == "v87" || std::string(name) == "v83"));
  }
}

TEST_CASE("v53 and v55 run the backward in clusters of heads that divide H", "[registry]") {
  const OpConfig v47 = parse_op_config("variant=v47"), v53 = parse_op_config("variant=v53"),
                 v55 = parse_op_config("variant=v55");
  CHECK(head_cluster_size(v47, 32) == 1);
  CHECK(head_cluster_size(v53, 32) == 4);
  CHECK(head_cluster_size(v53, 12) == 4);
  CHECK(head_cluster_size(v53, 6) == 2);
  CHECK(head_cluster_size(v53, 1) == 1);
  CHECK(head_cluster_size(v55, 32) == 8);
  CHECK(head_cluster_size(v55, 12) == 4);
  CHECK(head_cluster_size(v55, 7) == 1);
  CHECK(has_option(scan_source(v53, 8), "-DM3_CP_HEAD_CLUSTERS=1"));
  CHECK_FALSE(has_option(scan_source(v47, 8), "-DM3_CP_HEAD_CLUSTERS=1"));
  // The cluster size is the launch's: the two variants compile the same kernels.
  CHECK(scan_source(v53, 8).options == scan_source(v55, 8).options);
  CHECK(has_option(reduce_source(v53), "-DM3_REDUCE_HEAD_PARTS=1"));
  CHECK_FALSE(has_option(reduce_source(v47), "-DM3_REDUCE_HEAD_PARTS=1"));
  CHECK(reduce_source(v53).name != reduce_source(v47).name);
  CHECK_THROWS_AS(head_cluster_size(parse_op_config("variant=v54"), 32), std::invalid_argument);
}

TEST_CASE("a chunk-parallel variant has one scan source for every sequence count, a walker one per bucket",
          "[registry]") {
  for (const char* name : {"v10", "v59", "v103", "v179"}) {
    INFO(name);
    const OpConfig c = resolve_kernels(parse_op_config(std::string("variant=") + name), 1);
    REQUIRE(is_chunk_parallel(c));
    const KernelSource any = scan_source(c, 0);
    for (int b : {1, 2, 4, 8}) {
      const KernelSource s = scan_source(c, b);
      CHECK(s.name == any.name);
      CHECK(s.options == any.options);
      CHECK(s.code == any.code);
    }
    CHECK(has_option(any, "-DM3_SEQ_BUCKET=0"));
  }
  const OpConfig v8 = parse_op_config("variant=v8");
  REQUIRE_FALSE(is_chunk_parallel(v8));
  CHECK(has_option(scan_source(v8, 4), "-DM3_SEQ_BUCKET=4"));
  CHECK(scan_source(v8, 4).name != scan_source(v8, 0).name);
  // The full list holds each name once.
  const auto all = all_specializations("sm_90a");
  std::set<std::string> names;
  for (const auto& s : all) CHECK(names.insert(s.name).second);
}

TEST_CASE("specializations_for names every kernel a configuration can run, each once", "[registry]") {
  const auto has = [](const std::vector<KernelSource>& specs, const std::string& name) {
    return std::count_if(specs.begin(), specs.end(), [&](const KernelSource& s) { return s.name == name; }) == 1;
  };
  const OpConfig v59 = parse_op_config("variant=v59"), v60 = parse_op_config("variant=v60"),
                 v8 = parse_op_config("variant=v8");
  const auto own = specializations_for({v59}, "sm_90a");
  const auto dispatched = specializations_for({v60}, "sm_90a");
  // One scan source for a chunk-parallel kernel set, five sequence-count buckets for a walker's,
  // and one reduce source each; v60 dispatches to v59 (chunk-parallel) and v8 (a walker).
  CHECK(own.size() == 2);
  CHECK(dispatched.size() == 8);
  CHECK(has(own, "m3_chunk_parallel[v59,C=32,S<=any]"));
  CHECK(has(dispatched, "m3_chunk_parallel[v59,C=32,S<=any]"));
  for (const char* bucket : {"1", "2", "4", "8", "any"}) {
    CHECK(has(dispatched, std::string("m3_chunk_scan[v8,C=32,S<=") + bucket + "]"));
  }
  CHECK(has(dispatched, reduce_source(v59).name));
  CHECK(has(dispatched, reduce_source(v8).name));
  // The same sources the full list holds, so that a targeted warm-up fills the same cache keys.
  const auto all = all_specializations("sm_90a");
  for (const auto& s : dispatched) {
    INFO(s.name);
    const auto it = std::find_if(all.begin(), all.end(), [&](const KernelSource& a) { return a.name == s.name; });
    REQUIRE(it != all.end());
    CHECK(it->options == s.options);
    CHECK(it->code == s.code);
  }
  CHECK(specializations_for({OpConfig{}}, "sm_90a").size() == specializations_for({parse_op_config("variant=" + OpConfig{}.variant)}, "sm_90a").size());
  CHECK_THROWS_AS(specializations_for({OpConfig{"v999", 32, 256}}), std::invalid_argument);
}

TEST_CASE("MAMBA3_JIT_LINEINFO=1 adds -lineinfo, and with it a cache key of its own", "[nvrtc]") {
  KernelSource src;
  src.name = "smoke";
  src.code = "#include \"m3_smoke.cuh\"\n";
  src.arch = "sm_90a";
  test::TempDir tmp;
  KernelCache cache(tmp.path());
  ::unsetenv("MAMBA3_JIT_LINEINFO");
  const auto plain = builtin_options("sm_90a");
  const std::string plain_key = cache.key(src);
  CHECK(std::find(plain.begin(), plain.end(), "-lineinfo") == plain.end());
  ::setenv("MAMBA3_JIT_LINEINFO", "1", 1);
  const auto with = builtin_options("sm_90a");
  const std::string with_key = cache.key(src);
  ::unsetenv("MAMBA3_JIT_LINEINFO");
  CHECK(std::find(with.begin(), with.end(), "-lineinfo") != with.end());
  CHECK(with_key != plain_key);
}
