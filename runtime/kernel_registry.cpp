#include "kernel_registry.h"

#include <algorithm>
#include <set>
#include <sstream>
#include <stdexcept>
#include <unordered_map>

#include "../kernel_src/m3_params.cuh"
#include "logging.h"

namespace mamba3_jit {
namespace {

// The configurations each variant supports; warm-up compiles exactly these.
const std::vector<OpConfig>& known_configs() {
  static const std::vector<OpConfig> configs = {OpConfig{"v1", 32, 256}, OpConfig{"v2", 32, 256},
                                                OpConfig{"v3", 32, 256}, OpConfig{"v4", 32, 256},
                                                OpConfig{"v5", 32, 256}, OpConfig{"v6", 32, 256},
                                                OpConfig{"v7", 32, 256}, OpConfig{"v8", 32, 256},
                                                OpConfig{"v9", 32, 256}, OpConfig{"v10", 32, 256},
                                                OpConfig{"v11", 32, 256}, OpConfig{"v12", 32, 256},
                                                OpConfig{"v13", 32, 256}, OpConfig{"v14", 32, 256},
                                                OpConfig{"v15", 32, 256}, OpConfig{"v16", 32, 256},
                                                OpConfig{"v17", 32, 256}, OpConfig{"v18", 32, 256},
                                                OpConfig{"v19", 32, 256}, OpConfig{"v20", 32, 256},
                                                OpConfig{"v21", 32, 256}, OpConfig{"v22", 32, 256},
                                                OpConfig{"v23", 32, 256}, OpConfig{"v24", 32, 256},
                                                OpConfig{"v25", 32, 256}, OpConfig{"v26", 32, 256},
                                                OpConfig{"v27", 32, 256}, OpConfig{"v28", 32, 256},
                                                OpConfig{"v29", 32, 256}, OpConfig{"v30", 32, 256},
                                                OpConfig{"v31", 32, 256}, OpConfig{"v32", 32, 256},
                                                OpConfig{"v33", 32, 256}, OpConfig{"v34", 32, 256},
                                                OpConfig{"v35", 32, 256}, OpConfig{"v36", 32, 256},
                                                OpConfig{"v37", 32, 256}, OpConfig{"v38", 32, 256},
                                                OpConfig{"v39", 32, 256}, OpConfig{"v40", 32, 256},
                                                OpConfig{"v41", 32, 256}, OpConfig{"v42", 32, 256},
                                                OpConfig{"v43", 32, 256}, OpConfig{"v44", 32, 256},
                                                OpConfig{"v45", 32, 256}, OpConfig{"v46", 32, 256},
                                                OpConfig{"v47", 32, 256}, OpConfig{"v48", 32, 256},
                                                OpConfig{"v49", 32, 256}, OpConfig{"v50", 32, 256},
                                                OpConfig{"v51", 32, 256}, OpConfig{"v52", 32, 256},
                                                OpConfig{"v53", 32, 256}, OpConfig{"v54", 32, 256},
                                                OpConfig{"v55", 32, 256}, OpConfig{"v56", 32, 256},
                                                OpConfig{"v57", 32, 256}, OpConfig{"v58", 32, 256},
                                                OpConfig{"v59", 32, 256}, OpConfig{"v60", 32, 256},
                                                OpConfig{"v61", 32, 256}, OpConfig{"v62", 32, 256},
                                                OpConfig{"v63", 32, 256}, OpConfig{"v64", 32, 256},
                                                OpConfig{"v65", 32, 256}, OpConfig{"v66", 32, 256},
                                                OpConfig{"v67", 32, 256}, OpConfig{"v68", 32, 256},
                                                OpConfig{"v69", 32, 256}, OpConfig{"v70", 32, 256},
                                                OpConfig{"v71", 32, 256}, OpConfig{"v72", 32, 256},
                                                OpConfig{"v73", 32, 256}, OpConfig{"v74", 32, 256},
                                                OpConfig{"v75", 32, 256}, OpConfig{"v76", 32, 256},
                                                OpConfig{"v77", 32, 256}, OpConfig{"v78", 32, 256},
                                                OpConfig{"v79", 32, 256}, OpConfig{"v80", 32, 256},
                                                OpConfig{"v81", 32, 256}, OpConfig{"v82", 32, 256},
                                                OpConfig{"v83", 32, 256}, OpConfig{"v84", 32, 256},
                                                OpConfig{"v85", 32, 256}, OpConfig{"v86", 32, 256},
                                                OpConfig{"v87", 32, 256}, OpConfig{"v88", 32, 256},
                                                OpConfig{"v89", 32, 256}, OpConfig{"v90", 32, 256},
                                                OpConfig{"v91", 32, 256}, OpConfig{"v92", 32, 256},
                                                OpConfig{"v93", 32, 256}, OpConfig{"v94", 32, 256},
                                                OpConfig{"v95", 32, 256}, OpConfig{"v96", 32, 256},
                                                OpConfig{"v97", 32, 256}, OpConfig{"v98", 32, 256},
                                                OpConfig{"v99", 32, 256}, OpConfig{"v100", 32, 256},
                                                OpConfig{"v101", 32, 256}, OpConfig{"v102", 32, 256},
                                                OpConfig{"v103", 32, 256}, OpConfig{"v104", 32, 256},
                                                OpConfig{"v105", 32, 256}, OpConfig{"v106", 32, 256},
                                                OpConfig{"v107", 32, 256}, OpConfig{"v108", 32, 256},
                                                OpConfig{"v109", 32, 256}, OpConfig{"v110", 32, 256},
                                                OpConfig{"v111", 32, 256}, OpConfig{"v112", 32, 256},
                                                OpConfig{"v113", 32, 256}, OpConfig{"v114", 32, 256},
                                                OpConfig{"v115", 32, 256}, OpConfig{"v116", 32, 256},
                                                OpConfig{"v117", 32, 256}, OpConfig{"v118", 32, 256},
                                                OpConfig{"v119", 32, 256}, OpConfig{"v120", 32, 256},
                                                OpConfig{"v121", 32, 256}, OpConfig{"v122", 32, 256},
                                                OpConfig{"v123", 32, 256}, OpConfig{"v124", 32, 256},
                                                OpConfig{"v125", 32, 256}, OpConfig{"v126", 32, 256},
                                                OpConfig{"v127", 32, 256}, OpConfig{"v128", 32, 256},
                                                OpConfig{"v129", 32, 256}, OpConfig{"v130", 32, 256},
                                                OpConfig{"v131", 32, 256}, OpConfig{"v132", 32, 256},
                                                OpConfig{"v133", 32, 256}, OpConfig{"v134", 32, 256},
                                                OpConfig{"v135", 32, 256}, OpConfig{"v136", 32, 256},
                                                OpConfig{"v137", 32, 256}, OpConfig{"v138", 32, 256},
                                                OpConfig{"v139", 32, 256}, OpConfig{"v140", 32, 256},
                                                OpConfig{"v141", 32, 256}, OpConfig{"v142", 32, 256},
                                                OpConfig{"v143", 32, 256}, OpConfig{"v144", 32, 256},
                                                OpConfig{"v145", 32, 256}, OpConfig{"v146", 32, 256},
                                                OpConfig{"v147", 32, 256}, OpConfig{"v148", 32, 256},
                                                OpConfig{"v149", 32, 256}, OpConfig{"v150", 32, 256},
                                                OpConfig{"v151", 32, 256}, OpConfig{"v152", 32, 256},
                                                OpConfig{"v153", 32, 256}, OpConfig{"v154", 32, 256},
                                                OpConfig{"v155", 32, 256}, OpConfig{"v156", 32, 256},
                                                OpConfig{"v157", 32, 256}, OpConfig{"v158", 32, 256},
                                                OpConfig{"v159", 32, 256}, OpConfig{"v160", 32, 256},
                                                OpConfig{"v161", 32, 256}, OpConfig{"v162", 32, 256},
                                                OpConfig{"v163", 32, 256}, OpConfig{"v164", 32, 256},
                                                OpConfig{"v165", 32, 256}, OpConfig{"v166", 32, 256},
                                                OpConfig{"v168", 32, 256}, OpConfig{"v169", 32, 256},
                                                OpConfig{"v170", 32, 256}, OpConfig{"v171", 32, 256},
                                                OpConfig{"v172", 32, 256}, OpConfig{"v173", 32, 256},
                                                OpConfig{"v174", 32, 256}, OpConfig{"v175", 32, 256},
                                                OpConfig{"v176", 32, 256}, OpConfig{"v177", 32, 256},
                                                OpConfig{"v178", 32, 256}, OpConfig{"v179", 32, 256},
                                                OpConfig{"v180", 32, 256}, OpConfig{"v181", 32, 256},
                                                OpConfig{"v182", 32, 256}, OpConfig{"v183", 32, 256},
                                                OpConfig{"v184", 32, 256}, OpConfig{"v185", 32, 256},
                                                OpConfig{"v186", 32, 256}, OpConfig{"v187", 32, 256},
                                                OpConfig{"v188", 32, 256}, OpConfig{"v189", 32, 256},
                                                OpConfig{"v190", 32, 256}, OpConfig{"v191", 32, 256},
                                                OpConfig{"v192", 32, 256}, OpConfig{"v193", 32, 256},
                                                OpConfig{"v194", 32, 256}, OpConfig{"v195", 32, 256},
                                                OpConfig{"v196", 32, 256}, OpConfig{"v197", 32, 256},
                                                OpConfig{"v198", 32, 256}, OpConfig{"v199", 32, 256},
                                                OpConfig{"v200", 32, 256}, OpConfig{"v201", 32, 256},
                                                OpConfig{"v202", 32, 256}, OpConfig{"v203", 32, 256},
                                                OpConfig{"v204", 32, 256}, OpConfig{"v205", 32, 256},
                                                OpConfig{"v206", 32, 256}, OpConfig{"v207", 32, 256},
                                                OpConfig{"v208", 32, 256}, OpConfig{"v209", 32, 256},
                                                OpConfig{"v210", 32, 256}, OpConfig{"v211", 32, 256},
                                                OpConfig{"v212", 32, 256}, OpConfig{"v213", 32, 256},
                                                OpConfig{"v214", 32, 256}, OpConfig{"v215", 32, 256},
                                                OpConfig{"v216", 32, 256}, OpConfig{"v217", 32, 256},
                                                OpConfig{"v218", 32, 256}, OpConfig{"v219", 32, 256},
                                                OpConfig{"v220", 32, 256}, OpConfig{"v221", 32, 256},
                                                OpConfig{"v222", 32, 256}, OpConfig{"v223", 32, 256},
                                                OpConfig{"v224", 32, 256}, OpConfig{"v225", 32, 256},
                                                OpConfig{"v226", 32, 256}, OpConfig{"v227", 32, 256},
                                                OpConfig{"v228", 32, 256}, OpConfig{"v229", 32, 256},
                                                OpConfig{"v230", 32, 256}, OpConfig{"v231", 32, 256},
                                                OpConfig{"v232", 32, 256}, OpConfig{"v233", 32, 256},
                                                OpConfig{"v234", 32, 256}, OpConfig{"v235", 32, 256},
                                                OpConfig{"v236", 32, 256}, OpConfig{"v237", 32, 256},
                                                OpConfig{"v238", 32, 256}, OpConfig{"v239", 32, 256},
                                                OpConfig{"v240", 32, 256}, OpConfig{"v241", 32, 256},
                                                OpConfig{"v242", 32, 256}, OpConfig{"v243", 32, 256},
                                                OpConfig{"v244", 32, 256}, OpConfig{"v245", 32, 256},
                                                OpConfig{"v246", 32, 256}, OpConfig{"v247", 32, 256},
                                                OpConfig{"v248", 32, 256}, OpConfig{"v249", 32, 256},
                                                OpConfig{"v250", 32, 256}, OpConfig{"v251", 32, 256},
                                                OpConfig{"v252", 32, 256}, OpConfig{"v253", 32, 256},
                                                OpConfig{"v254", 32, 256}, OpConfig{"v255", 32, 256}};
  return configs;
}
const int kBuckets[] = {1, 2, 4, 8, 0};

// Variants without kernels of their own: they run `short_kernels` while every sequence has at most
// kExactProductsAboveLen tokens and `long_kernels` (about fp32-exact tile products) beyond; where
// set, `few_waves_kernels` replace the short ones when the chunk-64 forward's jobs would fill fewer
// than `min_waves` waves of its resident CTAs (kForward64MinWaves; v234 kForward64MinWavesV234).
struct Dispatch {
  const char* variant;
  const char* short_kernels;
  const char* long_kernels;
  const char* few_waves_kernels = nullptr;
  double min_waves = kForward64MinWaves;
};
const Dispatch kDispatch[] = {{"v9", "v7", "v8"},   {"v12", "v11", "v8"}, {"v14", "v13", "v8"},
                              {"v16", "v15", "v8"}, {"v18", "v17", "v8"}, {"v20", "v19", "v8"},
                              {"v22", "v21", "v8"}, {"v24", "v23", "v8"}, {"v26", "v25", "v8"},
                              {"v28", "v27", "v8"}, {"v30", "v29", "v8"},
                              {"v32", "v31", "v8"}, {"v34", "v33", "v8"},
                              {"v36", "v35", "v8"}, {"v38", "v37", "v8"}, {"v40", "v39", "v8"},
                              {"v42", "v41", "v8"}, {"v44", "v43", "v8"},
                              {"v46", "v45", "v8"}, {"v48", "v47", "v8"},
                              {"v50", "v49", "v8"}, {"v52", "v51", "v8"},
                              {"v54", "v53", "v8"}, {"v56", "v55", "v8"},
                              {"v58", "v57", "v8"}, {"v60", "v59", "v8"},
                              {"v62", "v61", "v8"}, {"v64", "v63", "v8"},
                              {"v66", "v65", "v8"}, {"v68", "v67", "v8"},
                              {"v70", "v69", "v8"}, {"v72", "v71", "v8"},
                              {"v74", "v73", "v8"}, {"v76", "v75", "v8"},
                              {"v78", "v77", "v8"}, {"v80", "v79", "v8"},
                              {"v82", "v81", "v8"}, {"v84", "v83", "v8"},
                              {"v86", "v85", "v8"}, {"v88", "v87", "v8"},
                              {"v90", "v89", "v8"}, {"v92", "v91", "v8"},
                              {"v94", "v93", "v8"}, {"v96", "v95", "v8"},
                              {"v98", "v97", "v8"}, {"v100", "v99", "v8"},
                              {"v102", "v101", "v8"}, {"v104", "v103", "v8"},
                              {"v106", "v105", "v8"}, {"v108", "v107", "v8"},
                              {"v110", "v109", "v8"}, {"v112", "v111", "v8"}, {"v114", "v113", "v8"},
                              {"v116", "v115", "v8"},
                              {"v118", "v117", "v8"}, {"v120", "v119", "v8"},
                              {"v122", "v121", "v8"}, {"v124", "v123", "v8"},
                              {"v126", "v125", "v8"}, {"v128", "v127", "v8"},
                              {"v130", "v129", "v8"}, {"v132", "v131", "v8"},
                              {"v134", "v133", "v8"}, {"v136", "v135", "v8"},
                              {"v137", "v135", "v8", "v103"}, {"v139", "v138", "v8", "v103"},
                              {"v141", "v140", "v8", "v103"}, {"v143", "v142", "v8", "v103"},
                              {"v145", "v142", "v8", "v144"}, {"v147", "v146", "v8", "v103"},
                              {"v149", "v148", "v8", "v103"}, {"v151", "v150", "v8", "v103"},
                              {"v153", "v152", "v8", "v103"}, {"v155", "v148", "v8", "v154"},
                              {"v157", "v156", "v8", "v154"}, {"v160", "v158", "v8", "v159"},
                              {"v163", "v161", "v8", "v162"}, {"v166", "v164", "v8", "v165"},
                              {"v170", "v168", "v8", "v169"}, {"v173", "v171", "v8", "v172"},
                              {"v176", "v174", "v8", "v175"}, {"v179", "v177", "v8", "v178"},
                              {"v182", "v180", "v8", "v181"}, {"v185", "v183", "v8", "v184"},
                              {"v188", "v186", "v8", "v187"}, {"v191", "v189", "v8", "v190"},
                              {"v194", "v192", "v8", "v193"}, {"v197", "v195", "v8", "v196"},
                              {"v200", "v198", "v8", "v199"}, {"v203", "v201", "v8", "v202"},
                              {"v206", "v204", "v8", "v205"}, {"v209", "v207", "v8", "v208"},
                              {"v212", "v210", "v8", "v211"}, {"v215", "v213", "v8", "v214"},
                              {"v218", "v216", "v8", "v217"}, {"v221", "v219", "v8", "v220"},
                              {"v224", "v222", "v8", "v223"}, {"v226", "v225", "v8", "v223"},
                              {"v228", "v227", "v8", "v223"}, {"v230", "v229", "v8", "v223"},
                              {"v233", "v231", "v8", "v232"},
                              {"v234", "v231", "v8", "v232", kForward64MinWavesV234},
                              {"v239", "v237", "v8", "v238", kForward64MinWavesV234},
                              {"v242", "v240", "v8", "v241", kForward64MinWavesV234},
                              {"v245", "v243", "v8", "v244", kForward64MinWavesV234},
                              {"v248", "v246", "v8", "v247", kForward64MinWavesV234},
                              {"v251", "v249", "v8", "v250", kForward64MinWavesV234},
                              {"v253", "v252", "v8", "v247", kForward64MinWavesV234},
                              {"v255", "v254", "v8", "v247", kForward64MinWavesV234}};

// A call asks about twenty questions of three or four variants before its first launch. With this
// table scanned (70 entries) and the two lookups below in ordered maps, they cost 7.8 us of host
// time a call, 0.43 us a question, on the development CPU; indexed by name once, 0.5 us a call
// (methods/results/run118/registry_bench.cpp). The device's host ran the old scan fast enough that
// the call's latency did not move measurably (run 121).
const Dispatch* dispatch_of(const OpConfig& c) {
  static const std::unordered_map<std::string, const Dispatch*> index = [] {
    std::unordered_map<std::string, const Dispatch*> m;
    for (const auto& d : kDispatch) m.emplace(d.variant, &d);
    return m;
  }();
  const auto it = index.find(c.variant);
  return it == index.end() ? nullptr : it->second;
}
bool dispatch_only(const OpConfig& c) { return dispatch_of(c) != nullptr; }

std::vector<std::string> dims_options(const OpConfig& c) {
  return {"-DM3_CHUNK=" + std::to_string(c.chunk), "-DM3_N=" + std::to_string(kSupportedDims.n),
          "-DM3_P=" + std::to_string(kSupportedDims.p), "-DM3_A=" + std::to_string(kSupportedDims.a),
          "-DM3_THREADS=" + std::to_string(c.threads)};
}

// Every call's dispatch asks several of the questions below; a scan of known_configs() by name
// for each would cost microseconds of host time per call, so the configurations are indexed once.
const OpConfig* known_config(const std::string& variant) {
  static const std::unordered_map<std::string, const OpConfig*> index = [] {
    std::unordered_map<std::string, const OpConfig*> m;
    for (const auto& k : known_configs()) m.emplace(k.variant, &k);
    return m;
  }();
  const auto it = index.find(variant);
  return it == index.end() ? nullptr : it->second;
}

// "v1 to v110" for the known variants (runs of consecutive vN collapse), so that an error can
// list them in one line instead of a hundred configurations.
std::string known_variant_ranges() {
  std::vector<int> numbers;
  std::string others;
  for (const auto& k : known_configs()) {
    const bool numbered = k.variant.size() > 1 && k.variant[0] == 'v' &&
                          k.variant.find_first_not_of("0123456789", 1) == std::string::npos;
    if (numbered) numbers.push_back(std::stoi(k.variant.substr(1)));
    else others += (others.empty() ? "" : ", ") + k.variant;
  }
  std::sort(numbers.begin(), numbers.end());
  std::string out;
  for (size_t i = 0; i < numbers.size();) {
    size_t j = i;
    while (j + 1 < numbers.size() && numbers[j + 1] == numbers[j] + 1) ++j;
    out += (out.empty() ? "v" : ", v") + std::to_string(numbers[i]);
    if (j > i) out += " to v" + std::to_string(numbers[j]);
    i = j + 1;
  }
  if (!others.empty()) out += (out.empty() ? "" : ", ") + others;
  return out;
}

void require_known(const OpConfig& c) {
  const OpConfig* k = known_config(c.variant);
  if (k != nullptr && k->chunk == c.chunk && k->threads == c.threads) return;
  if (k != nullptr) {
    throw std::invalid_argument("mamba3_jit: unsupported kernel configuration '" + to_string(c) + "': variant " +
                                c.variant + " runs with chunk=" + std::to_string(k->chunk) +
                                ", threads=" + std::to_string(k->threads) + " only");
  }
  std::set<std::string> shapes;
  for (const auto& known : known_configs()) {
    shapes.insert("chunk=" + std::to_string(known.chunk) + ", threads=" + std::to_string(known.threads));
  }
  std::string shape_list;
  for (const auto& sh : shapes) shape_list += (shape_list.empty() ? "" : "; ") + sh;
  throw std::invalid_argument("mamba3_jit: unsupported kernel configuration '" + to_string(c) + "': unknown variant '" +
                              c.variant + "'; known variants: " + known_variant_ranges() + " (with " + shape_list +
                              ")");
}

}  // namespace

OpConfig parse_op_config(const std::string& text) {
  OpConfig c;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    const auto eq = item.find('=');
    if (eq == std::string::npos) {
      throw std::invalid_argument("mamba3_jit: config item '" + item + "' is not key=value");
    }
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    try {
      if (key == "variant") {
        c.variant = value;
      } else if (key == "chunk") {
        c.chunk = std::stoi(value);
      } else if (key == "threads") {
        c.threads = std::stoi(value);
      } else {
        throw std::invalid_argument("unknown key");
      }
    } catch (const std::exception&) {
      throw std::invalid_argument("mamba3_jit: bad config item '" + item +
                                  "'; expected variant=NAME, chunk=INT or threads=INT");
    }
  }
  require_known(c);
  return c;
}

std::string to_string(const OpConfig& c) {
  return "variant=" + c.variant + ",chunk=" + std::to_string(c.chunk) +
         ",threads=" + std::to_string(c.threads);
}

int seq_bucket(long long num_seqs) {
  for (int b : kBuckets) {
    if (b > 0 && num_seqs <= b) return b;
  }
  return 0;
}

// What each variant switches on in the scan source. v1: CUDA-core fp32 tiles; v2: tf32 tensor
// cores, with the padding that suits their fragments; v3: v2 plus the per-token scalar phases
// (angle sums, their reverse, dadt and the dt/trap shift) spread over lanes instead of threads;
// v4: v3 plus 16-byte loads issued before their stores, and 16 lanes per token in the q/k
// staging and the backward epilogue; v5: v4 plus the forward gate inputs (z, dout) and the
// angles staged with all loads in flight at once; v6: v5 that starts every sequence from given
// initial states and returns their gradients (and needs them); v7: v5 with the tensor-core
// operands rounded by one integer add and the k loops fully unrolled (the same products); v8: v7
// with the products that feed the angle gradient (and the states they go through) split into
// three tf32 products, about fp32-exact, so that dangles stays accurate on long sequences; v10:
// v7's chunk code run by one CTA per (chunk, head), the carries between chunks passed through
// global memory (kernel_src/m3_chunk_parallel.cuh); v11: v10 with the forward kernel on a layout
// of its own (107 KB) and at most 128 registers, two CTAs per SM; v13: v11 with the rotary sin
// and cos from the hardware approximations after an explicit range reduction, and the states
// handed between chunks stored two columns at a time; v15: v13 with shorter serial latency chains
// per chunk (M3_CP_TRIMS: the ticket's schedule from a table, one fence per publish, interleaved
// warp reductions and scans, no second load of q and k); v17: v15 with every input tile of a chunk
// requested at once by cp.async (M3_CP_PREFETCH); v19: v15 with the backward's per-token sums taken
// from the tensor-core accumulators (M3_CP_FRAG_SUMS), three phases fewer; v21: v19 without the
// backward's barriers that guard nothing (M3_CP_TRIMS2); v23: v21 whose backward reads the states
// from global memory instead of shared tiles (M3_CP_GLOBAL_STATES), two CTAs per SM; v25: v23 with
// the bank conflicts and the serialized loads run 28's profile found removed (M3_CP_CONFLICT_FREE),
// results bitwise v23's; v27: v25 with the states handed between chunks, and their gradients, in
// the tensor-core fragments' order (M3_CP_FRAG_STATES), read and written 16 bytes at a time,
// results bitwise v25's; v29: v27 storing whole 32-byte sectors per instruction
// (M3_CP_FULL_SECTORS), results bitwise v27's; v31: v29 whose forward reads the entering state from
// the workspace too (M3_CP_FWD_GLOBAL_STATE), no shared state tile, results bitwise v29's; v33: v25
// with only the state gradients in v29's fragment order (M3_CP_FRAG_DSTATES), the forward v25's,
// results bitwise v25's; v35: v33 handing the tensor cores unrounded fp32 bits (M3_TF32_TRUNCATE:
// tf32 toward zero, no rounding add); v37: v35 with the head and partial reductions spread wider
// (M3_REDUCE_WIDE, dq and dk bitwise v35's); v39: v37 whose kernels after the first are launched
// with programmatic stream serialization (M3_PDL), results bitwise v37's; v41: v39 whose tile
// products read their row-major shared operands by ldmatrix (M3_LDMATRIX), results bitwise v39's;
// v43: v37 with ldmatrix in the backward's own products only (M3_LDMATRIX=2), results bitwise
// v37's; v45: v43 with persistent forward and backward CTAs that draw their next ticket while a
// job runs (M3_CP_PERSISTENT) and the angle kernel's gradient reorder with all loads first
// (M3_CP_BATCHED_REORDER), results bitwise v43's; v47: v43 with only the batched reorder; v49: v47
// whose backward sums dq and dk over the heads itself, the last CTA of each chunk from L2
// (M3_CP_FUSED_HEADS; m3_reduce_heads not launched), results bitwise v47's; v51: v47 whose backward
// asks L2 for its entering state when a job starts (M3_CP_STATE_L2_PREFETCH), results bitwise
// v47's; v53: v47 whose backward runs in clusters of 4 CTAs, the heads of one chunk, which sum
// their dq and dk rows over the cluster through distributed shared memory (M3_CP_HEAD_CLUSTERS,
// m3_reduce_heads then sums H / 4 rows per token); v55: v53 with clusters of 8; v57: v51 whose
// forward and backward jobs also ask L2 for the inputs of the next chunk of their chain
// (M3_CP_NEIGHBOUR_L2_PREFETCH), results bitwise v51's; v59: v51 with that prefetch in the forward
// only; v61: v59 whose backward writes its bias partials before its tail waits (M3_CP_EARLY_BIAS),
// results bitwise v59's; v63: v61 whose ticket table holds each chunk's sequence start, length and
// first chunk (M3_CP_RICH_SCHEDULE), results bitwise v61's; v65: v59 with that table (the early bias
// partials of v61 lost, run 48), results bitwise v59's; v67: v65 whose backward computes dqr in
// tiles whose n-tiles interleave (M3_CP_QUAD_COLUMNS: 16-byte operand loads of the entering state
// and of kr), the same dqr, u summed in another order; v69: v65 whose forward stores each chunk's
// mixing matrix for the backward, which loads it instead of rebuilding it (M3_CP_STORED_MIXING),
// results bitwise v65's; v71: v65 whose 32-byte shared row pieces are written and read in a
// bank-conflict-free order (M3_CP_SWIZZLED_HALVES), results bitwise v65's; v73: v71 whose q/k
// staging lanes take two rows per quarter-warp (M3_CP_ROW_PAIRED_LANES), results bitwise v71's;
// v75: v73 whose four products with both operands read along k element by element take their k
// in a bank-conflict-free order (M3_CP_SPREAD_K=1), the same products summed in other groups;
// v77: the same but for the backward's state-gradient product (M3_CP_SPREAD_K=2); v79: only the
// forward's chunk-state product (M3_CP_SPREAD_K=3), the backward kernel v73's; v81: v79 whose
// angle kernel spreads a (sequence, head) over a cluster of CTAs (M3_CP_CLUSTER_ANGLES), results
// bitwise v79's; v83: v79 whose angle kernel loads a chunk's angle rows a 16-byte quarter per lane
// (M3_CP_TOKEN_LANE_ANGLES), results bitwise v79's; v85: v83 with v81's clusters; v87: v83 whose
// two reduce kernels run as one launch (M3_REDUCE_ONE_LAUNCH), results bitwise v83's; v89: v87
// whose forward computes its output gate's sigmoid from the hardware approximations
// (M3_FAST_GATE), output and dz within a few ulp of v87's before the bf16 rounding; v91: v89
// whose forward requests its q/k rows, biases and angles before the per-token scalar phases
// (M3_CP_EARLY_LOADS), results bitwise v89's; v93: v91 whose forward requests its v, z and dout
// rows there too (M3_CP_EARLY_LOADS=2), results bitwise v89's; v95: v93 whose backward does the
// same (M3_CP_EARLY_LOADS=3), results bitwise v89's; v97: v95 with persistent CTAs that draw the
// next job's ticket late in the current job (M3_CP_PERSISTENT=2), results bitwise v89's; v99: the
// same for the forward's CTAs only (M3_CP_PERSISTENT=3); v101: v95 whose reduce kernel runs
// beside the backward's last wave, each chunk's head sums once its H CTAs have counted in
// (M3_CP_OVERLAPPED_REDUCE, M3_REDUCE_CHUNK_READY), results bitwise v89's; v103: v101 whose
// backward drops the two workspace states it has read for the last time from L2 without a
// write-back (M3_CP_DISCARD_DEAD); v105: v103 whose reduce does the same with the summed partials
// (M3_REDUCE_DISCARD); both bitwise v89's; v107: v103 whose backward jobs each sum a share of the
// dq/dk partials of the chunk three ahead in their sequence while they are in L2, then drop them
// (M3_CP_INLINE_HEAD_SUMS=3), the reduce only the first three chunks of each sequence
// (M3_REDUCE_INLINE_AHEAD=3), results bitwise v89's; v109: v103 whose backward is launched
// programmatically beside the forward's last jobs, each job waiting for its entering state's
// forward flag (M3_CP_OVERLAPPED_BACKWARD), results bitwise v89's; v111: v103 whose states, not
// only their gradients, are in fragment order (M3_CP_FRAG_STATES instead of M3_CP_FRAG_DSTATES)
// and whose forward reads its entering state from the workspace (M3_CP_FWD_GLOBAL_STATE), its
// layout 76 KB without the state tile; v113: v111 whose forward is built for three CTAs per SM
// (M3_CP_FORWARD_MIN_CTAS=3, 80 registers); both meant to be bitwise v89's; v115: v103 whose
// forward, built for three CTAs per SM, reads its entering state row-major from the workspace
// (M3_CP_FWD_GLOBAL_STATE=2), the backward v103's; states bitwise v89's, the forward's outputs
// within rounding (its inter-chunk product sums in other groups of eight); v117: v103 whose
// forward takes its entering state into the shared tile by bulk copies of the TMA engine, off the
// L1 data pipe (M3_CP_BULK_STATE), results bitwise v89's; v119: v103 whose forward is the
// chunk-64 job on warpgroup products (M3_CP_FORWARD64, m3_cp_forward64), results within rounding;
// v121: v119 whose per-head dq and dq_bias partials come from the q side of a chunk-64 backward on
// warpgroup products, launched between the forward and the backward, which leaves them alone
// (M3_CP_BACKWARD64Q, m3_cp_backward64q), results within rounding; v123: v121 whose per-head dk,
// dk_bias partials and dv come from the k/v side of that backward, with its own state-gradient
// chain, launched after the q side (M3_CP_BACKWARD64KV, m3_cp_backward64kv), results within rounding;
// v125: v123 whose backward is the whole chunk-64 backward in one kernel (M3_CP_BACKWARD64,
// m3_cp_backward64: both sides' phases, the dc and dphi terms and v103's tail) instead of the
// q side, the k/v side and v103's backward, results within rounding; v127: v119 whose forward
// writes its row-major states through a shared tile instead of a shuffle transpose
// (M3_CP_F64_STAGED_STATES); v129: v127 whose forward also issues its q and k loads before its
// scalars and angles (M3_CP_F64_EARLY_LOADS=1); v131: the angles' and v's loads with them
// (M3_CP_F64_EARLY_LOADS=2); v133: v131 whose forward makes each wgmma descriptor
// by one add to its tile's first (M3_CP_F64_LEAN_INDEX=1); v135: v133 whose KS^T transpose works
// its offsets out once (M3_CP_F64_LEAN_INDEX=2); all bitwise v119's. v138: v135 whose 32-token
// kernels lay the q/k and v/dy tiles out with rows 8 (mod 32) floats apart and rows 4-7 of every
// 8 skewed by 4 (M3_CP_ROWS8=1): the backward's operands read along k meet 32 banks; v140: v138
// whose q/k tiles also hold odd rows' octet halves swapped (M3_CP_ROWS8=2), so that the q/k
// staging's row-pair stores meet 32 banks as well; both bitwise v135's. v142: v138 whose backward
// copies the forward's entering state into shared memory by cp.async as a job starts
// (M3_CP_SMEM_STATE) instead of reading it from L2 where it is used; bitwise v135's. v144: v103
// (32-token forward and backward) with v142's row layout and shared state copy, its forward's
// chunk-state product in the plain k order (M3_CP_SPREAD_K=0: the spread order of v79 meets two
// lanes a bank at rows 8 (mod 32) apart); the forward's states within rounding of v103's. v146:
// v142 whose update loads the successor's state gradient for all its row pairs before using any
// (M3_CP_EARLY_DSTATE); bitwise v135's. v148: v142 whose m, x, t1 and t2 tiles take v138's rows as
// well, t1 and t2 stored as 8-byte pairs (M3_CP_ROWS8_MXT); bitwise v135's. v150: v148 whose state
// copy's quarter-warps write eight consecutive shared slots (M3_CP_SMEM_STATE=2); bitwise v135's.
// v152: v148 whose backward reads the successor's state gradient through L1 (M3_CP_DS_L1); bitwise
// v135's. v154: v144 (the 32-token set) with v148's m, x, t1 and t2 rows; bitwise v144's.
// v156: v148 whose chunk-64 forward stores the staged q/k octets' halves in an order that meets 32
// banks (M3_CP_F64_SWAPPED_QK); bitwise v148's.
// v158: v148 whose angle kernel overlaps its round trips (M3_CP_LEAN_ANGLES, m3_angles_lean.cuh);
// meant bitwise v148's. v159: v154 with the same angle kernel; meant bitwise v154's. v161 and
// v162: v158 and v159 whose reduce loads more rows at once (M3_REDUCE_DEEP_LOADS); meant bitwise.
// v164 and v165: v148 and v154 with that reduce alone (their own angle kernel); meant bitwise.
// v168 and v169: v164 and v165 whose sin and cos of the rotary angles call sincosf's large-angle
// path out of line (M3_SINCOS_OUTLINE) instead of inlining it at every call site; meant bitwise.
// v171 and v172: v168 and v169 whose backward takes its job's sequence from the ticket table
// (M3_CP_BACKWARD_TABLE_JOB) instead of cu_seqlens; meant bitwise.
// v174 and v175: v171 and v172 whose angle, forward and backward kernels take the angles' tanh,
// the decays' exp and the backward's gate sigmoid from the hardware approximations
// (M3_FAST_TRANSCENDENTALS); within rounding, not bitwise.
// v177 and v178: v174 and v175 whose bf16 results are packed two at a time by the hardware and
// whose backward stores dv and dangles in pairs (M3_CP_PAIRED_STORES); meant bitwise.
// v180 and v181: v177 and v178 whose early loads take a thread's four angle elements as one
// 8-byte word of one token (M3_CP_ANGLE_QUADS); meant bitwise.
// v183 and v184: v177 and v178 whose backward reads the state's swizzled copy at per-thread
// column offsets (M3_CP_SWIZZLE_FOLD); meant bitwise.
// v186 and v187: v183 and v184 whose missing state gradient is a zero tile of the module, not
// nullptr (M3_CP_ZERO_DS); meant bitwise.
// v189 and v190: v180 and v181 with v186's zero tile (M3_CP_ZERO_DS) alone; meant bitwise.
// v192 and v193: v180 and v181 whose dqr inter product waits in t1 while the intra product runs
// (M3_CP_INTER_PARKED); meant bitwise.
// v195 and v196: v180 and v181 compiled with ptxas's default load caching set to streaming
// (-dlcm=cs: the global loads without an explicit cache operator allocate in L1 as evict-first),
// meant to keep the backward's register spills, which run 138 found missing L1 on every load, in
// the 22 KB of L1 left beside two CTAs' shared memory. The same instructions but for the cache
// bits; meant bitwise. v198 and v199: the same with -dlcm=cg (those loads do not allocate in L1 at
// all). Run 140: the spills missed L1 under both, their own 30 KB of slots being more than it holds.
// v201 and v202: v195 and v196 compiled with ptxas's --register-usage-level=1, whose allocation
// leaves the backward 36 bytes of spill slots a thread (v180: 60): 18 KB for two CTAs, inside the
// about 22 KB of L1 that their shared memory leaves, where run 140 found 30 KB missing it every
// time. v204 and v205: v180 and v181 with that level alone. Meant bitwise.
// v207 and v208: v201 and v202 whose two ptxas options apply to m3_cp_backward alone, compiled
// in a module of its own (backward_source); the other kernels are v180's and v181's, whose
// chunk-64 forward the options gave more spills. Meant bitwise.
// v210 and v211: v180 and v181 compiled with NVRTC's -ftz=true and -prec-div=false: fp32
// denormals flushed to zero and fp32 division to about 2 ulp instead of IEEE rounding (the
// dangles' tanh recovered as th / pi, the angles' wrap x / 2 pi). In SASS (CPU) every kernel of
// the module is smaller with nothing spilled more: the backward 6,864 -> 6,552 instructions (LDL/STL
// 16/15 -> 15/12), the chunk-64 forward 4,840 -> 4,560, the chunk-32 forward 3,320 -> 3,176. Not
// bitwise: within rounding of v180's and v181's results.
// v213 and v214: v210 and v211 whose forward kernels take M3_FAST_SINCOS's path for every angle
// (M3_SINCOS_WIDE: no call to the outlined sincosf, whose call sites cost the chunk-64 forward its
// spills, LDL/STL 3/2 -> 0/0, and 6% of its instructions); m3_cp_backward comes from a module of
// its own without the switch (backward_source), since there ptxas spilled twice as much with it
// (15/12 -> 30/22). Bitwise v210's and v211's wherever every angle is within 8192 rad.
// v216 and v217: v210 and v211 whose MmaTiles read their thread index through a volatile asm
// (M3_OPAQUE_TILE_TID), so that no two products share lane-derived addresses across the phases
// between them: ptxas had spilled six values of the state update's product (four shared-memory
// addresses) and reloaded them at the inter product. In SASS (CPU) the backward 6,552 -> 6,448
// instructions, stack 80 -> 48 bytes, LDL/STL 15/12 -> 12/6; the chunk-32 forward 125 -> 118
// registers. Bitwise v210's and v211's.
// v219 and v220: v216 and v217 with M3_SINCOS_WIDE in every kernel, the backward's too, which
// without the opaque index spilled twice as much and with it spills least: stack 24 bytes, LDL/STL
// 11/6, 6,240 instructions; the chunk-64 and chunk-32 forwards without spills. Bitwise v210's and
// v211's wherever every angle is within 8192 rad.
// v222 and v223: v219 and v220 with every thread-index read of the chunk-parallel kernels opaque
// (M3_OPAQUE_TILE_TID=2), not only the MmaTiles': the backward 6,088 instructions, LDL/STL 6/5
// (stack 24 bytes), most reloads in the per-token tail. Bitwise v210's and v211's wherever every
// angle is within 8192 rad.
// v225: v222 whose chunk-64 forward asks L2 for its chain's next job's inputs (and a sequence's
// first job for its own), M3_CP_F64_NEIGHBOUR_PREFETCH; v227: v225 whose backward asks for its
// chain's next chunk's inputs, without v57's state lines (M3_CP_NEIGHBOUR_L2_PREFETCH=3). Only
// prefetches: bitwise v222's. v229: v225 whose forward and backward CTAs load the ticket table's
// row of their likely ticket (blockIdx.x's) while the ticket's atomic travels
// (M3_CP_GUESSED_TICKET): the same jobs, bitwise v222's.
// v231 and v232: v222 and v223 whose ticket tables align every chain's last round with the
// longest's (M3_CP_ALIGNED_ENDS: the longest chains start first). The same jobs: bitwise v222's
// and v223's.
// v235 and v236, diagnostics: v231 with m3_cp_backward (v235) or m3_cp_forward64 (v236) launched
// with 160 KB of dynamic shared memory, so that one CTA an SM fits instead of two. The same
// cubins and results as v231's; they time a job that has its SM to itself, which the waves
// reading of the kernels (design note) only inferred.
// v237 and v238: v231 and v232 whose backward jobs take the angle and decay carries from the
// successor's hand-off instead of its tail record (M3_CP_HANDOFF_CARRIES): cross(G, S) and sum G S
// written right after the successor's update, K from the sequence's last chunk, and the one-token
// shift at a chunk boundary combined by whichever of its two jobs comes second. Other sums: the
// angle, decay, dt and trap gradients within rounding of v231's and v232's, the rest bitwise.
// v240 and v241: the same carries without flags, fences or atomics (M3_CP_HANDOFF_CARRIES=2):
// m3_cp_angles fills the records with an unwritten mark, each word is polled until written, and
// the job before a boundary writes its first token's ddt and dtrap at its end (run 156: level 1's
// fences and atomics made the backward slower than v231's).
// v243 and v244: v240 and v241 whose hand-off sums come from the update loop's registers, with a
// transposed butterfly for the angle sums (M3_CP_HANDOFF_CARRIES=3; run 157: level 2's second read
// of S and its shuffles cost what the chain saved).
// v246 and v247: v243 and v244 whose jobs write dc_pending right after backward_intra and copy the
// successor's record and K into shared memory (cp.async) while the epilogue runs, so that the
// tail's start reads them there instead of from L2 (M3_CP_HANDOFF_CARRIES=4).
// v249 and v250: v246 and v247 whose count for the overlapped reduce is released by warp 1 after
// the per-token tail instead of by thread 0 before it (M3_CP_LATE_HEADS_DONE): its fence off
// warp 0's path. The same sums: bitwise v246's and v247's.
// v252: v246 whose chunk-64 forward hands the backward its entering states in IEEE half, a power of
// two a 16 x 64 block (M3_CP_HALF_STATES): half the states' bytes through HBM. Its jobs of one
// chunk fall back to v247, whose states stay fp32 (the flag changes both kernels of a variant).
// v254: v252 whose backward hands the reduce its per-head dq and dk rows in IEEE half, a power of two
// a row (M3_CP_HALF_PARTIALS, and M3_REDUCE_HALF_PARTIALS in its reduce); v255 picks v254's kernels
// or v247's as v253 does.
// v9, v12, v14, v16, v18, v20, v22, v24, v26, v28, v30, v32, v34, v36, v38, v40, v42, v44, v46,
// v48, v50, v52, v54, v56, v58, v60, v62, v64, v66, v68, v70, v72, v74, v76, v78, v80, v82, v84,
// v86, v88, v90, v92, v94, v96, v98, v100, v102, v104, v106, v108, v110, v112, v114, v116, v118,
// v120, v122, v124, v126, v128, v130, v132, v134, v136, v137, v139, v141, v143, v145, v147, v149,
// v151, v153, v155, v157, v160, v163, v166, v170, v173, v176, v179, v182, v185, v188, v191, v194,
// v197, v200, v203, v206, v209, v212, v215, v218, v221, v224, v226, v228, v230, v233, v234, v239, v242, v245, v248, v251, v253 and v255 have no kernels of their own (kDispatch); v137 runs v135's, or v103's
// where the chunk-64 forward's jobs make few waves; v139, v141, v143, v147, v149, v151 and v153
// likewise v138's, v140's, v142's, v146's, v148's, v150's and v152's, or v103's; v145 v142's, or
// v144's; v155 v148's, or v154's; v157 v156's, or v154's; v160 v158's, or v159's; v163
// v161's, or v162's; v166 v164's, or v165's; v170 v168's, or v169's; v173 v171's, or v172's;
// v176 v174's, or v175's; v179 v177's, or v178's; v182 v180's, or v181's; v185 v183's, or
// v184's; v188 v186's, or v187's; v191 v189's, or v190's; v194 v192's, or v193's; v197 v195's, or
// v196's; v200 v198's, or v199's; v203 v201's, or v202's; v206 v204's, or v205's; v209 v207's, or
// v208's; v212 v210's, or v211's; v215 v213's, or v214's; v218 v216's, or v217's; v221 v219's, or
// v220's; v224 v222's, or v223's; v226 v225's, or v223's; v228 v227's, or v223's; v230 v229's, or
// v223's; v233 v231's, or v232's; v234 likewise, below 1.5 waves instead of two; v239 v237's, or
// v238's, as v234; v242 v240's, or v241's, likewise; v245 v243's, or v244's; v248 v246's, or v247's; v251 v249's, or
// v250's; v253 v252's, or v247's; v255 v254's, or v247's.
struct VariantTraits {
  bool mma;
  int pad;
  bool parallel_scalars;
  bool vector_io;
  bool stage_all;
  bool initial_states;
  bool lean_mma;
  bool split_tf32;
  bool chunk_parallel;
  bool lean_forward;
  bool fast_sincos;
  bool paired_state_stores;
  // The switches of the variants from v15 on (see `derived` below); off before.
  bool latency_trims = false;
  bool prefetch = false;
  bool frag_sums = false;
  bool trims2 = false;
  bool global_states = false;
  bool conflict_free = false;
  bool frag_states = false;
  bool full_sectors = false;
  int fwd_global_state = 0;         // M3_CP_FWD_GLOBAL_STATE: 1 fragment order (v31, v111), 2 row-major (v115)
  bool frag_dstates = false;
  bool tf32_truncate = false;
  bool wide_reductions = false;
  bool programmatic_launch = false;
  bool ldmatrix = false;
  bool ldmatrix_backward = false;
  bool persistent = false;
  bool batched_reorder = false;
  bool fused_heads = false;
  bool state_l2_prefetch = false;
  bool head_clusters = false;       // clusters of 4 heads (v53)
  bool wide_head_clusters = false;  // of 8 (v55)
  bool neighbour_l2_prefetch = false;
  bool neighbour_l2_prefetch_forward_only = false;
  bool early_bias = false;
  bool rich_schedule = false;
  bool quad_columns = false;
  bool stored_mixing = false;
  bool swizzled_halves = false;
  bool row_paired_lanes = false;
  int spread_k = 0;                 // M3_CP_SPREAD_K: 1 (v75), 2 (v77), 3 (v79)
  bool cluster_angles = false;      // v81
  bool token_lane_angles = false;   // v83
  bool one_reduce_launch = false;   // v87
  bool fast_gate = false;           // v89
  int early_loads = 0;              // M3_CP_EARLY_LOADS: 1 (v91), 2 (v93), 3 (v95)
  int late_tickets = 0;             // persistent CTAs drawing late: 2 both kernels (v97), 1 the forward's (v99)
  bool overlapped_reduce = false;  // v101
  bool discard_dead = false;       // v103
  bool reduce_discard = false;     // v105
  int inline_head_sums = 0;         // v107: the chunk this many ahead summed by each backward job
  bool overlapped_backward = false; // v109
  int forward_ctas = 0;             // M3_CP_FORWARD_MIN_CTAS where set: 3 (v113, v115)
  bool bulk_state = false;          // v117
  bool forward64 = false;           // v119
  bool backward64q = false;         // v121
  bool backward64kv = false;        // v123
  bool backward64 = false;          // v125
  bool f64_staged_states = false;   // v127
  int f64_early_loads = 0;          // M3_CP_F64_EARLY_LOADS: 1 (v129), 2 (v131)
  int f64_lean_index = 0;           // M3_CP_F64_LEAN_INDEX: 1 (v133), 2 (v135)
  int rows8 = 0;                    // M3_CP_ROWS8: 1 (v138), 2 (v140)
  int smem_state = 0;               // M3_CP_SMEM_STATE: 1 (v142), 2 (v150)
  bool early_dstate = false;        // v146
  bool rows8_mxt = false;           // v148
  bool ds_l1 = false;               // v152
  bool f64_swapped_qk = false;      // v156
  bool lean_angles = false;         // v158
  bool deep_reduce_loads = false;   // v161
  bool sincos_outline = false;      // v168
  bool backward_table_job = false;  // v171
  bool fast_transcendentals = false;  // v174
  bool paired_stores = false;       // v177
  bool angle_quads = false;         // v180
  bool swizzle_fold = false;        // v183
  bool zero_ds = false;             // v186
  bool inter_parked = false;        // v192
  int load_cache = 0;               // v195 (2: -dlcm=cs), v198 (1: -dlcm=cg)
  int register_usage_level = -1;    // v201, v204: ptxas's level; -1 its default
  bool ptxas_backward_only = false; // v207: the two above in m3_cp_backward's own module only
  bool ftz_approx_div = false;      // v210: NVRTC's -ftz=true -prec-div=false
  bool wide_sincos_forward = false; // v213: M3_SINCOS_WIDE, but not in m3_cp_backward's module
  int opaque_tile_tid = 0;          // v216 (1: the MmaTiles), v222 (2: every read): M3_OPAQUE_TILE_TID
  bool wide_sincos = false;         // v219: M3_SINCOS_WIDE in every kernel
  bool f64_neighbour_prefetch = false;   // v225: M3_CP_F64_NEIGHBOUR_PREFETCH
  bool backward_input_prefetch = false;  // v227: M3_CP_NEIGHBOUR_L2_PREFETCH=3 where v59 set 2
  bool guessed_ticket = false;           // v229: M3_CP_GUESSED_TICKET
  bool aligned_ends = false;             // v231: M3_CP_ALIGNED_ENDS
  int lone_kernel = 0;                   // v235 (1: m3_cp_backward), v236 (2: the chunk-64 forward)
  int handoff_carries = 0;               // v237 (1), v240 (2), v243 (3), v246 (4): M3_CP_HANDOFF_CARRIES
  bool late_heads_done = false;          // v249: M3_CP_LATE_HEADS_DONE
  bool half_states = false;              // v252: M3_CP_HALF_STATES
  bool half_partials = false;            // v254: M3_CP_HALF_PARTIALS and M3_REDUCE_HALF_PARTIALS
};
static VariantTraits compute_traits(const OpConfig& c) {
  if (c.variant == "v1") return {false, 1, false, false, false, false, false, false, false, false, false, false};
  if (c.variant == "v2") return {true, 4, false, false, false, false, false, false, false, false, false, false};
  if (c.variant == "v3") return {true, 4, true, false, false, false, false, false, false, false, false, false};
  if (c.variant == "v4") return {true, 4, true, true, false, false, false, false, false, false, false, false};
  if (c.variant == "v5") return {true, 4, true, true, true, false, false, false, false, false, false, false};
  if (c.variant == "v6") return {true, 4, true, true, true, true, false, false, false, false, false, false};
  if (c.variant == "v7") return {true, 4, true, true, true, false, true, false, false, false, false, false};
  if (c.variant == "v10") return {true, 4, true, true, true, false, true, false, true, false, false, false};
  if (c.variant == "v11") return {true, 4, true, true, true, false, true, false, true, true, false, false};
  if (c.variant == "v13") return {true, 4, true, true, true, false, true, false, true, true, true, true};
  // From v15 on each variant is its predecessor with one more switch (v33, v45: two), or with a
  // leveled switch set to a level (v115, v144: two or three); v111 also turns a switch off.
  struct Derived {
    const char* variant;
    const char* base;
    bool VariantTraits::*adds;
    bool VariantTraits::*also = nullptr;
    int VariantTraits::*level = nullptr;
    int value = 0;
    bool VariantTraits::*clears = nullptr;
    int VariantTraits::*level2 = nullptr;
    int value2 = 0;
    int VariantTraits::*level3 = nullptr;
    int value3 = 0;
  };
  static const Derived derived[] = {{"v15", "v13", &VariantTraits::latency_trims},
                                    {"v17", "v15", &VariantTraits::prefetch},
                                    {"v19", "v15", &VariantTraits::frag_sums},
                                    {"v21", "v19", &VariantTraits::trims2},
                                    {"v23", "v21", &VariantTraits::global_states},
                                    {"v25", "v23", &VariantTraits::conflict_free},
                                    {"v27", "v25", &VariantTraits::frag_states},
                                    {"v29", "v27", &VariantTraits::full_sectors},
                                    {"v31", "v29", nullptr, nullptr, &VariantTraits::fwd_global_state, 1},
                                    {"v33", "v25", &VariantTraits::frag_dstates, &VariantTraits::full_sectors},
                                    {"v35", "v33", &VariantTraits::tf32_truncate},
                                    {"v37", "v35", &VariantTraits::wide_reductions},
                                    {"v39", "v37", &VariantTraits::programmatic_launch},
                                    {"v41", "v39", &VariantTraits::ldmatrix},
                                    {"v43", "v37", &VariantTraits::ldmatrix_backward},
                                    {"v45", "v43", &VariantTraits::persistent, &VariantTraits::batched_reorder},
                                    {"v47", "v43", &VariantTraits::batched_reorder},
                                    {"v49", "v47", &VariantTraits::fused_heads},
                                    {"v51", "v47", &VariantTraits::state_l2_prefetch},
                                    {"v53", "v47", &VariantTraits::head_clusters},
                                    {"v55", "v53", &VariantTraits::wide_head_clusters},
                                    {"v57", "v51", &VariantTraits::neighbour_l2_prefetch},
                                    {"v59", "v51", &VariantTraits::neighbour_l2_prefetch_forward_only},
                                    {"v61", "v59", &VariantTraits::early_bias},
                                    {"v63", "v61", &VariantTraits::rich_schedule},
                                    {"v65", "v59", &VariantTraits::rich_schedule},
                                    {"v67", "v65", &VariantTraits::quad_columns},
                                    {"v69", "v65", &VariantTraits::stored_mixing},
                                    {"v71", "v65", &VariantTraits::swizzled_halves},
                                    {"v73", "v71", &VariantTraits::row_paired_lanes},
                                    {"v75", "v73", nullptr, nullptr, &VariantTraits::spread_k, 1},
                                    {"v77", "v73", nullptr, nullptr, &VariantTraits::spread_k, 2},
                                    {"v79", "v73", nullptr, nullptr, &VariantTraits::spread_k, 3},
                                    {"v81", "v79", &VariantTraits::cluster_angles},
                                    {"v83", "v79", &VariantTraits::token_lane_angles},
                                    {"v85", "v83", &VariantTraits::cluster_angles},
                                    {"v87", "v83", &VariantTraits::one_reduce_launch},
                                    {"v89", "v87", &VariantTraits::fast_gate},
                                    {"v91", "v89", nullptr, nullptr, &VariantTraits::early_loads, 1},
                                    {"v93", "v91", nullptr, nullptr, &VariantTraits::early_loads, 2},
                                    {"v95", "v93", nullptr, nullptr, &VariantTraits::early_loads, 3},
                                    {"v97", "v95", nullptr, nullptr, &VariantTraits::late_tickets, 2},
                                    {"v99", "v95", nullptr, nullptr, &VariantTraits::late_tickets, 1},
                                    {"v101", "v95", &VariantTraits::overlapped_reduce},
                                    {"v103", "v101", &VariantTraits::discard_dead},
                                    {"v105", "v103", &VariantTraits::reduce_discard},
                                    {"v107", "v103", nullptr, nullptr, &VariantTraits::inline_head_sums, 3},
                                    {"v109", "v103", &VariantTraits::overlapped_backward},
                                    {"v111", "v103", &VariantTraits::frag_states, nullptr, &VariantTraits::fwd_global_state, 1,
                                     &VariantTraits::frag_dstates},
                                    {"v113", "v111", nullptr, nullptr, &VariantTraits::forward_ctas, 3},
                                    {"v115", "v103", nullptr, nullptr, &VariantTraits::fwd_global_state, 2, nullptr,
                                     &VariantTraits::forward_ctas, 3},
                                    {"v117", "v103", &VariantTraits::bulk_state},
                                    {"v119", "v103", &VariantTraits::forward64},
                                    {"v121", "v119", &VariantTraits::backward64q},
                                    {"v123", "v121", &VariantTraits::backward64kv},
                                    {"v125", "v123", &VariantTraits::backward64},
                                    {"v127", "v119", &VariantTraits::f64_staged_states},
                                    {"v129", "v127", nullptr, nullptr, &VariantTraits::f64_early_loads, 1},
                                    {"v131", "v129", nullptr, nullptr, &VariantTraits::f64_early_loads, 2},
                                    {"v133", "v131", nullptr, nullptr, &VariantTraits::f64_lean_index, 1},
                                    {"v135", "v133", nullptr, nullptr, &VariantTraits::f64_lean_index, 2},
                                    {"v138", "v135", nullptr, nullptr, &VariantTraits::rows8, 1},
                                    {"v140", "v135", nullptr, nullptr, &VariantTraits::rows8, 2},
                                    {"v142", "v138", nullptr, nullptr, &VariantTraits::smem_state, 1},
                                    {"v144", "v103", nullptr, nullptr, &VariantTraits::rows8, 1, nullptr,
                                     &VariantTraits::spread_k, 0, &VariantTraits::smem_state, 1},
                                    {"v146", "v142", &VariantTraits::early_dstate},
                                    {"v148", "v142", &VariantTraits::rows8_mxt},
                                    {"v150", "v148", nullptr, nullptr, &VariantTraits::smem_state, 2},
                                    {"v152", "v148", &VariantTraits::ds_l1},
                                    {"v154", "v144", &VariantTraits::rows8_mxt},
                                    {"v156", "v148", &VariantTraits::f64_swapped_qk},
                                    {"v158", "v148", &VariantTraits::lean_angles},
                                    {"v159", "v154", &VariantTraits::lean_angles},
                                    {"v161", "v158", &VariantTraits::deep_reduce_loads},
                                    {"v162", "v159", &VariantTraits::deep_reduce_loads},
                                    {"v164", "v148", &VariantTraits::deep_reduce_loads},
                                    {"v165", "v154", &VariantTraits::deep_reduce_loads},
                                    {"v168", "v164", &VariantTraits::sincos_outline},
                                    {"v169", "v165", &VariantTraits::sincos_outline},
                                    {"v171", "v168", &VariantTraits::backward_table_job},
                                    {"v172", "v169", &VariantTraits::backward_table_job},
                                    {"v174", "v171", &VariantTraits::fast_transcendentals},
                                    {"v175", "v172", &VariantTraits::fast_transcendentals},
                                    {"v177", "v174", &VariantTraits::paired_stores},
                                    {"v178", "v175", &VariantTraits::paired_stores},
                                    {"v180", "v177", &VariantTraits::angle_quads},
                                    {"v181", "v178", &VariantTraits::angle_quads},
                                    {"v183", "v177", &VariantTraits::swizzle_fold},
                                    {"v184", "v178", &VariantTraits::swizzle_fold},
                                    {"v186", "v183", &VariantTraits::zero_ds},
                                    {"v187", "v184", &VariantTraits::zero_ds},
                                    {"v189", "v180", &VariantTraits::zero_ds},
                                    {"v190", "v181", &VariantTraits::zero_ds},
                                    {"v192", "v180", &VariantTraits::inter_parked},
                                    {"v193", "v181", &VariantTraits::inter_parked},
                                    {"v195", "v180", nullptr, nullptr, &VariantTraits::load_cache, 2},
                                    {"v196", "v181", nullptr, nullptr, &VariantTraits::load_cache, 2},
                                    {"v198", "v180", nullptr, nullptr, &VariantTraits::load_cache, 1},
                                    {"v199", "v181", nullptr, nullptr, &VariantTraits::load_cache, 1},
                                    {"v201", "v195", nullptr, nullptr, &VariantTraits::register_usage_level, 1},
                                    {"v202", "v196", nullptr, nullptr, &VariantTraits::register_usage_level, 1},
                                    {"v204", "v180", nullptr, nullptr, &VariantTraits::register_usage_level, 1},
                                    {"v205", "v181", nullptr, nullptr, &VariantTraits::register_usage_level, 1},
                                    {"v207", "v201", &VariantTraits::ptxas_backward_only},
                                    {"v208", "v202", &VariantTraits::ptxas_backward_only},
                                    {"v210", "v180", &VariantTraits::ftz_approx_div},
                                    {"v211", "v181", &VariantTraits::ftz_approx_div},
                                    {"v213", "v210", &VariantTraits::wide_sincos_forward},
                                    {"v214", "v211", &VariantTraits::wide_sincos_forward},
                                    {"v216", "v210", nullptr, nullptr, &VariantTraits::opaque_tile_tid, 1},
                                    {"v217", "v211", nullptr, nullptr, &VariantTraits::opaque_tile_tid, 1},
                                    {"v219", "v216", &VariantTraits::wide_sincos},
                                    {"v220", "v217", &VariantTraits::wide_sincos},
                                    {"v222", "v219", nullptr, nullptr, &VariantTraits::opaque_tile_tid, 2},
                                    {"v223", "v220", nullptr, nullptr, &VariantTraits::opaque_tile_tid, 2},
                                    {"v225", "v222", &VariantTraits::f64_neighbour_prefetch},
                                    {"v227", "v225", &VariantTraits::backward_input_prefetch},
                                    {"v229", "v225", &VariantTraits::guessed_ticket},
                                    {"v231", "v222", &VariantTraits::aligned_ends},
                                    {"v232", "v223", &VariantTraits::aligned_ends},
                                    {"v235", "v231", nullptr, nullptr, &VariantTraits::lone_kernel, 1},
                                    {"v236", "v231", nullptr, nullptr, &VariantTraits::lone_kernel, 2},
                                    {"v237", "v231", nullptr, nullptr, &VariantTraits::handoff_carries, 1},
                                    {"v238", "v232", nullptr, nullptr, &VariantTraits::handoff_carries, 1},
                                    {"v240", "v231", nullptr, nullptr, &VariantTraits::handoff_carries, 2},
                                    {"v241", "v232", nullptr, nullptr, &VariantTraits::handoff_carries, 2},
                                    {"v243", "v231", nullptr, nullptr, &VariantTraits::handoff_carries, 3},
                                    {"v244", "v232", nullptr, nullptr, &VariantTraits::handoff_carries, 3},
                                    {"v246", "v231", nullptr, nullptr, &VariantTraits::handoff_carries, 4},
                                    {"v247", "v232", nullptr, nullptr, &VariantTraits::handoff_carries, 4},
                                    {"v249", "v246", &VariantTraits::late_heads_done},
                                    {"v250", "v247", &VariantTraits::late_heads_done},
                                    {"v252", "v246", &VariantTraits::half_states},
                                    {"v254", "v252", &VariantTraits::half_partials}};
  for (const auto& d : derived) {
    if (c.variant != d.variant) continue;
    VariantTraits t = compute_traits(OpConfig{d.base, c.chunk, c.threads});
    if (d.adds != nullptr) t.*(d.adds) = true;
    if (d.also != nullptr) t.*(d.also) = true;
    if (d.level != nullptr) t.*(d.level) = d.value;
    if (d.clears != nullptr) t.*(d.clears) = false;
    if (d.level2 != nullptr) t.*(d.level2) = d.value2;
    if (d.level3 != nullptr) t.*(d.level3) = d.value3;
    return t;
  }
  return {true, 4, true, true, true, false, true, true, false, false, false, false};
}

// compute_traits walks the chain of derived variants by name, about 5 us for a recent variant
// (measured on the CPU), and a call asks for the traits several times: each known variant's are
// worked out once, beside known_configs() in its order, so that known_config's index finds them too.
// The traits depend on the variant's name only.
static const VariantTraits* known_traits(const std::string& variant) {
  static const std::vector<VariantTraits> table = [] {
    std::vector<VariantTraits> t;
    for (const auto& k : known_configs()) t.push_back(compute_traits(k));
    return t;
  }();
  const OpConfig* k = known_config(variant);
  return k == nullptr ? nullptr : &table[static_cast<size_t>(k - known_configs().data())];
}
VariantTraits traits(const OpConfig& c) {
  const VariantTraits* known = known_traits(c.variant);
  return known != nullptr ? *known : compute_traits(c);
}
int smem_pad(const OpConfig& c) { return traits(c).pad; }

namespace {
// The traits of a configuration that has kernels of its own.
// By reference: the per-call questions below copy nothing.
const VariantTraits& kernel_traits(const OpConfig& c) {
  require_known(c);
  if (dispatch_only(c)) {
    throw std::invalid_argument("mamba3_jit: variant " + c.variant +
                                " has no kernels of its own; call resolve_kernels() first");
  }
  return *known_traits(c.variant);  // known: require_known passed
}
}  // namespace

bool is_chunk_parallel(const OpConfig& c) {
  require_known(c);
  return !dispatch_only(c) && traits(c).chunk_parallel;
}

bool takes_initial_states(const OpConfig& c) {
  require_known(c);
  return traits(c).initial_states;
}

OpConfig resolve_kernels(const OpConfig& c, int64_t longest_sequence, double forward64_waves) {
  require_known(c);
  const Dispatch* d = dispatch_of(c);
  if (d == nullptr) return c;
  OpConfig r = c;
  if (longest_sequence > kExactProductsAboveLen) {
    r.variant = d->long_kernels;
  } else if (d->few_waves_kernels != nullptr && forward64_waves < d->min_waves) {
    r.variant = d->few_waves_kernels;
  } else {
    r.variant = d->short_kernels;
  }
  return r;
}

bool picks_by_forward64_waves(const OpConfig& c) {
  require_known(c);
  const Dispatch* d = dispatch_of(c);
  return d != nullptr && d->few_waves_kernels != nullptr;
}

double forward64_waves_of(const OpConfig& c, int64_t jobs, unsigned resident) {
  const double waves = resident > 0 ? static_cast<double>(jobs) / resident : std::numeric_limits<double>::infinity();
  // Checked first: the kernel set named in the message would otherwise be resolved on every call.
  if (logger().should_log(spdlog::level::debug)) {
    logger().debug("{}: {} chunk-64 forward jobs over {} resident CTAs make {:.2f} waves: {}'s kernels", c.variant,
                   jobs, resident, waves, resolve_kernels(c, 0, waves).variant);
  }
  return waves;
}

namespace {
constexpr const char* kWideSincos = "-DM3_SINCOS_WIDE=1";  // v213

// ptxas options, not macros: the source is the variant's base's, only the code ptxas makes of it
// changes (v195 on).
void append_ptxas_options(const VariantTraits& tr, KernelSource& src) {
  if (tr.load_cache) src.options.push_back(tr.load_cache == 2 ? "-Xptxas=-dlcm=cs" : "-Xptxas=-dlcm=cg");
  if (tr.register_usage_level >= 0) {
    src.options.push_back("-Xptxas=--register-usage-level=" + std::to_string(tr.register_usage_level));
  }
}
}  // namespace

KernelSource scan_source(const OpConfig& c, int bucket, const std::string& arch) {
  const VariantTraits& tr = kernel_traits(c);
  const std::string file = tr.chunk_parallel ? "m3_chunk_parallel" : "m3_chunk_scan";
  // M3_SEQ_BUCKET unrolls the walkers' search for their sequence's first chunk (locate); the
  // chunk-parallel kernels find their jobs in the ticket tables and never read it (their SASS is
  // the same for every bucket, cuobjdump compare), so one source, the "any" one, serves all
  // sequence counts: a fifth of the compiles, cache entries and warm-up time.
  if (tr.chunk_parallel) bucket = 0;
  KernelSource src;
  src.name = file + "[" + c.variant + ",C=" + std::to_string(c.chunk) + ",S<=" +
             (bucket > 0 ? std::to_string(bucket) : std::string("any")) + "]";
  src.code = "#include \"" + file + ".cuh\"\n";
  src.options = dims_options(c);
  src.options.push_back("-DM3_SEQ_BUCKET=" + std::to_string(bucket));
  src.options.push_back("-DM3_USE_MMA=" + std::to_string(tr.mma ? 1 : 0));
  src.options.push_back("-DM3_PAD=" + std::to_string(tr.pad));
  src.options.push_back("-DM3_PARALLEL_SCALARS=" + std::to_string(tr.parallel_scalars ? 1 : 0));
  src.options.push_back("-DM3_VECTOR_IO=" + std::to_string(tr.vector_io ? 1 : 0));
  src.options.push_back("-DM3_STAGE_ALL=" + std::to_string(tr.stage_all ? 1 : 0));
  src.options.push_back("-DM3_INITIAL_STATES=" + std::to_string(tr.initial_states ? 1 : 0));
  src.options.push_back("-DM3_LEAN_MMA=" + std::to_string(tr.lean_mma ? 1 : 0));
  src.options.push_back("-DM3_SPLIT_TF32=" + std::to_string(tr.split_tf32 ? 1 : 0));
  if (tr.chunk_parallel) src.options.push_back("-DM3_CP_LEAN_FORWARD=" + std::to_string(tr.lean_forward ? 1 : 0));
  // Only where set, so that the earlier variants keep their options, and with them their keys.
  if (tr.fast_sincos) src.options.push_back("-DM3_FAST_SINCOS=1");
  if (tr.paired_state_stores) src.options.push_back("-DM3_PAIRED_STATE_STORES=1");
  if (tr.latency_trims) src.options.push_back("-DM3_CP_TRIMS=1");
  if (tr.prefetch) src.options.push_back("-DM3_CP_PREFETCH=1");
  if (tr.frag_sums) src.options.push_back("-DM3_CP_FRAG_SUMS=1");
  if (tr.trims2) src.options.push_back("-DM3_CP_TRIMS2=1");
  if (tr.global_states) src.options.push_back("-DM3_CP_GLOBAL_STATES=1");
  if (tr.conflict_free) src.options.push_back("-DM3_CP_CONFLICT_FREE=1");
  if (tr.frag_states) src.options.push_back("-DM3_CP_FRAG_STATES=1");
  if (tr.frag_dstates) src.options.push_back("-DM3_CP_FRAG_DSTATES=1");
  if (tr.tf32_truncate) src.options.push_back("-DM3_TF32_TRUNCATE=1");
  if (tr.full_sectors) src.options.push_back("-DM3_CP_FULL_SECTORS=1");
  if (tr.fwd_global_state) src.options.push_back("-DM3_CP_FWD_GLOBAL_STATE=" + std::to_string(tr.fwd_global_state));
  if (tr.programmatic_launch) src.options.push_back("-DM3_PDL=1");
  if (tr.ldmatrix || tr.ldmatrix_backward) src.options.push_back(tr.ldmatrix ? "-DM3_LDMATRIX=1" : "-DM3_LDMATRIX=2");
  if (tr.persistent) src.options.push_back("-DM3_CP_PERSISTENT=1");
  if (tr.late_tickets) src.options.push_back(tr.late_tickets == 2 ? "-DM3_CP_PERSISTENT=2" : "-DM3_CP_PERSISTENT=3");
  if (tr.batched_reorder) src.options.push_back("-DM3_CP_BATCHED_REORDER=1");
  if (tr.fused_heads) src.options.push_back("-DM3_CP_FUSED_HEADS=1");
  if (tr.state_l2_prefetch) src.options.push_back("-DM3_CP_STATE_L2_PREFETCH=1");
  // The cluster size is the launch's (head_cluster_size): v53's and v55's kernels are the same.
  if (tr.head_clusters) src.options.push_back("-DM3_CP_HEAD_CLUSTERS=1");
  if (tr.neighbour_l2_prefetch) src.options.push_back("-DM3_CP_NEIGHBOUR_L2_PREFETCH=1");
  if (tr.neighbour_l2_prefetch_forward_only) {
    src.options.push_back(tr.backward_input_prefetch ? "-DM3_CP_NEIGHBOUR_L2_PREFETCH=3" : "-DM3_CP_NEIGHBOUR_L2_PREFETCH=2");
  }
  if (tr.early_bias) src.options.push_back("-DM3_CP_EARLY_BIAS=1");
  if (tr.rich_schedule) src.options.push_back("-DM3_CP_RICH_SCHEDULE=1");
  if (tr.quad_columns) src.options.push_back("-DM3_CP_QUAD_COLUMNS=1");
  if (tr.stored_mixing) src.options.push_back("-DM3_CP_STORED_MIXING=1");
  if (tr.swizzled_halves) src.options.push_back("-DM3_CP_SWIZZLED_HALVES=1");
  if (tr.row_paired_lanes) src.options.push_back("-DM3_CP_ROW_PAIRED_LANES=1");
  if (tr.spread_k) src.options.push_back("-DM3_CP_SPREAD_K=" + std::to_string(tr.spread_k));
  // The cluster size is the launch's (angle_cluster_size).
  if (tr.cluster_angles) src.options.push_back("-DM3_CP_CLUSTER_ANGLES=1");
  if (tr.token_lane_angles) src.options.push_back("-DM3_CP_TOKEN_LANE_ANGLES=1");
  if (tr.fast_gate) src.options.push_back("-DM3_FAST_GATE=1");
  if (tr.early_loads) src.options.push_back("-DM3_CP_EARLY_LOADS=" + std::to_string(tr.early_loads));
  if (tr.overlapped_reduce) src.options.push_back("-DM3_CP_OVERLAPPED_REDUCE=1");
  if (tr.discard_dead) src.options.push_back("-DM3_CP_DISCARD_DEAD=1");
  if (tr.inline_head_sums) src.options.push_back("-DM3_CP_INLINE_HEAD_SUMS=" + std::to_string(tr.inline_head_sums));
  if (tr.overlapped_backward) src.options.push_back("-DM3_CP_OVERLAPPED_BACKWARD=1");
  if (tr.forward_ctas) src.options.push_back("-DM3_CP_FORWARD_MIN_CTAS=" + std::to_string(tr.forward_ctas));
  if (tr.bulk_state) src.options.push_back("-DM3_CP_BULK_STATE=1");
  if (tr.forward64) src.options.push_back("-DM3_CP_FORWARD64=1");
  if (tr.backward64q) src.options.push_back("-DM3_CP_BACKWARD64Q=1");
  if (tr.backward64kv) src.options.push_back("-DM3_CP_BACKWARD64KV=1");
  if (tr.backward64) src.options.push_back("-DM3_CP_BACKWARD64=1");
  if (tr.f64_staged_states) src.options.push_back("-DM3_CP_F64_STAGED_STATES=1");
  if (tr.f64_early_loads > 0) src.options.push_back("-DM3_CP_F64_EARLY_LOADS=" + std::to_string(tr.f64_early_loads));
  if (tr.f64_lean_index > 0) src.options.push_back("-DM3_CP_F64_LEAN_INDEX=" + std::to_string(tr.f64_lean_index));
  if (tr.rows8 > 0) src.options.push_back("-DM3_CP_ROWS8=" + std::to_string(tr.rows8));
  if (tr.smem_state > 0) src.options.push_back("-DM3_CP_SMEM_STATE=" + std::to_string(tr.smem_state));
  if (tr.early_dstate) src.options.push_back("-DM3_CP_EARLY_DSTATE=1");
  if (tr.rows8_mxt) src.options.push_back("-DM3_CP_ROWS8_MXT=1");
  if (tr.ds_l1) src.options.push_back("-DM3_CP_DS_L1=1");
  if (tr.f64_swapped_qk) src.options.push_back("-DM3_CP_F64_SWAPPED_QK=1");
  if (tr.lean_angles) src.options.push_back("-DM3_CP_LEAN_ANGLES=1");
  if (tr.sincos_outline) src.options.push_back("-DM3_SINCOS_OUTLINE=1");
  if (tr.backward_table_job) src.options.push_back("-DM3_CP_BACKWARD_TABLE_JOB=1");
  if (tr.fast_transcendentals) src.options.push_back("-DM3_FAST_TRANSCENDENTALS=1");
  if (tr.paired_stores) src.options.push_back("-DM3_CP_PAIRED_STORES=1");
  if (tr.angle_quads) src.options.push_back("-DM3_CP_ANGLE_QUADS=1");
  if (tr.swizzle_fold) src.options.push_back("-DM3_CP_SWIZZLE_FOLD=1");
  if (tr.zero_ds) src.options.push_back("-DM3_CP_ZERO_DS=1");
  if (tr.inter_parked) src.options.push_back("-DM3_CP_INTER_PARKED=1");
  if (tr.f64_neighbour_prefetch) src.options.push_back("-DM3_CP_F64_NEIGHBOUR_PREFETCH=1");
  if (tr.guessed_ticket) src.options.push_back("-DM3_CP_GUESSED_TICKET=1");
  if (tr.aligned_ends) src.options.push_back("-DM3_CP_ALIGNED_ENDS=1");
  if (tr.handoff_carries) src.options.push_back("-DM3_CP_HANDOFF_CARRIES=" + std::to_string(tr.handoff_carries));
  if (tr.late_heads_done) src.options.push_back("-DM3_CP_LATE_HEADS_DONE=1");
  if (tr.half_states) src.options.push_back("-DM3_CP_HALF_STATES=1");
  if (tr.half_partials) src.options.push_back("-DM3_CP_HALF_PARTIALS=1");
  // The same source; what NVRTC makes of its fp32 arithmetic changes (v210 on).
  if (tr.ftz_approx_div) src.options.insert(src.options.end(), {"-ftz=true", "-prec-div=false"});
  if (tr.opaque_tile_tid) src.options.push_back("-DM3_OPAQUE_TILE_TID=" + std::to_string(tr.opaque_tile_tid));
  if (tr.wide_sincos_forward || tr.wide_sincos) src.options.push_back(kWideSincos);
  if (!tr.ptxas_backward_only) append_ptxas_options(tr, src);
  src.arch = arch;
  return src;
}

KernelSource backward_source(const OpConfig& c, int bucket, const std::string& arch) {
  KernelSource src = scan_source(c, bucket, arch);
  const VariantTraits& tr = kernel_traits(c);
  if (!tr.ptxas_backward_only && !tr.wide_sincos_forward) return src;
  // The same text; only m3_cp_backward is taken from this module.
  src.name.insert(src.name.size() - 1, ",backward");
  if (tr.ptxas_backward_only) append_ptxas_options(tr, src);
  // The base's options exactly, so the same cache key and cubin as the base's module.
  if (tr.wide_sincos_forward) {
    src.options.erase(std::remove(src.options.begin(), src.options.end(), kWideSincos), src.options.end());
  }
  return src;
}

bool uses_wide_reductions(const OpConfig& c) { return kernel_traits(c).wide_reductions; }
bool uses_programmatic_launch(const OpConfig& c) { return kernel_traits(c).programmatic_launch; }
bool uses_persistent_forward(const OpConfig& c) {
  const VariantTraits& tr = kernel_traits(c);
  return tr.persistent || tr.late_tickets > 0;
}
bool uses_persistent_backward(const OpConfig& c) {
  const VariantTraits& tr = kernel_traits(c);
  return tr.persistent || tr.late_tickets == 2;
}
bool uses_fused_head_sums(const OpConfig& c) { return kernel_traits(c).fused_heads; }
bool stores_mixing(const OpConfig& c) { return kernel_traits(c).stored_mixing; }
bool uses_one_reduce_launch(const OpConfig& c) { return kernel_traits(c).one_reduce_launch; }
bool overlaps_reduce(const OpConfig& c) { return kernel_traits(c).overlapped_reduce; }
bool overlaps_backward(const OpConfig& c) { return kernel_traits(c).overlapped_backward; }
bool uses_forward64(const OpConfig& c) { return kernel_traits(c).forward64; }
bool uses_backward64q(const OpConfig& c) { return kernel_traits(c).backward64q; }
bool uses_backward64kv(const OpConfig& c) { return kernel_traits(c).backward64kv; }
bool uses_backward64(const OpConfig& c) { return kernel_traits(c).backward64; }
unsigned head_cluster_size(const OpConfig& c, int64_t heads) {
  const VariantTraits& tr = kernel_traits(c);
  if (!tr.head_clusters) return 1;
  // The largest power of two up to the variant's size that divides H: every cluster then holds
  // heads of one chunk. (H = 1 runs clusters of one CTA: the same code, no partner.)
  unsigned g = tr.wide_head_clusters ? 8 : 4;
  while (g > 1 && heads % g != 0) g /= 2;
  return g;
}

unsigned angle_cluster_size(const OpConfig& c, int64_t longest_sequence) {
  if (!kernel_traits(c).cluster_angles) return 1;
  // Enough ranks of threads / 32 warps for a warp per chunk of the longest sequence, at most the
  // portable cluster size.
  const int64_t len = std::max<int64_t>(longest_sequence, 0);
  const int64_t chunks = len / c.chunk + (len % c.chunk != 0);
  const int64_t warps = c.threads / 32;
  return static_cast<unsigned>(std::min<int64_t>(std::max<int64_t>((chunks + warps - 1) / warps, 1), 8));
}

KernelSource reduce_source(const OpConfig& c, const std::string& arch) {
  const VariantTraits& tr = kernel_traits(c);
  const bool wide = tr.wide_reductions, pdl = tr.programmatic_launch, parts = tr.head_clusters;
  const bool one = tr.one_reduce_launch, ready = tr.overlapped_reduce, discard = tr.reduce_discard;
  KernelSource src;
  src.name = "m3_reduce[threads=" + std::to_string(c.threads) + (wide ? ",wide" : "") + (pdl ? ",pdl" : "") +
             (parts ? ",head_parts" : "") + (one ? ",one_launch" : "") +
             (ready ? ",chunk_ready,C=" + std::to_string(c.chunk) : std::string()) + (discard ? ",discard" : "") +
             (tr.inline_head_sums ? ",ahead=" + std::to_string(tr.inline_head_sums) : std::string()) +
             (tr.deep_reduce_loads ? ",deep" : "") + (tr.half_partials ? ",half" : "") + "]";
  src.code = "#include \"m3_reduce.cuh\"\n";
  src.options = {"-DM3_N=" + std::to_string(kSupportedDims.n), "-DM3_THREADS=" + std::to_string(c.threads)};
  // Only where set, so that the other variants keep their options, and with them their keys.
  if (wide) src.options.push_back("-DM3_REDUCE_WIDE=1");
  if (pdl) src.options.push_back("-DM3_PDL=1");
  if (parts) src.options.push_back("-DM3_REDUCE_HEAD_PARTS=1");
  if (one) src.options.push_back("-DM3_REDUCE_ONE_LAUNCH=1");
  if (ready) {
    src.options.push_back("-DM3_REDUCE_CHUNK_READY=1");
    src.options.push_back("-DM3_CHUNK=" + std::to_string(c.chunk));
  }
  if (discard) src.options.push_back("-DM3_REDUCE_DISCARD=1");
  if (tr.inline_head_sums) src.options.push_back("-DM3_REDUCE_INLINE_AHEAD=" + std::to_string(tr.inline_head_sums));
  if (tr.deep_reduce_loads) src.options.push_back("-DM3_REDUCE_DEEP_LOADS=1");
  if (tr.half_partials) src.options.push_back("-DM3_REDUCE_HALF_PARTIALS=1");
  src.arch = arch;
  return src;
}

namespace {
// Bytes of the kernels' shared-memory layout (m3_layout) for a configuration.
std::size_t layout_bytes(const OpConfig& c, bool forward_only, bool global_states) {
  const M3ScanLayout l = m3_layout(c.chunk, kSupportedDims.n, kSupportedDims.p, kSupportedDims.a, c.threads,
                                   smem_pad(c), forward_only, global_states, traits(c).conflict_free ? 1 : 0,
                                   traits(c).rows8 > 0, traits(c).rows8_mxt);
  return static_cast<std::size_t>(l.total) * sizeof(float);
}
}  // namespace

std::size_t scan_smem_bytes(const OpConfig& c) { return layout_bytes(c, false, false); }
// v235 and v236 (diagnostics): one kernel launched with more shared memory than it uses, so that
// one CTA an SM fits instead of two (two of these, with the 1 KB the SM reserves for each, exceed
// its 228 KB). The same cubin; what changes is how many jobs share an SM.
constexpr std::size_t kLoneCtaSmemBytes = 160 * 1024;
std::size_t backward_smem_bytes(const OpConfig& c) {
  if (traits(c).backward64) return kM3Backward64SmemBytes;
  const std::size_t bytes = layout_bytes(c, false, traits(c).global_states);
  return traits(c).lone_kernel == 1 ? std::max(bytes, kLoneCtaSmemBytes) : bytes;
}
std::size_t forward_smem_bytes(const OpConfig& c) {
  if (traits(c).forward64) {
    return traits(c).lone_kernel == 2 ? std::max<std::size_t>(kM3Forward64SmemBytes, kLoneCtaSmemBytes)
                                      : kM3Forward64SmemBytes;
  }
  return layout_bytes(c, traits(c).lean_forward, traits(c).fwd_global_state != 0);
}

namespace {
// Appends `src` unless a specialisation of the same name is there already.
void append_unique(std::vector<KernelSource>& specs, KernelSource src) {
  const bool seen = std::any_of(specs.begin(), specs.end(), [&](const KernelSource& s) { return s.name == src.name; });
  if (!seen) specs.push_back(std::move(src));
}

// The scan modules of a configuration with kernels of its own, one per sequence bucket (one in all
// for the chunk-parallel variants), and the backward's own where it has one (v207 on).
void append_scan_sources(std::vector<KernelSource>& specs, const OpConfig& c, const std::string& arch) {
  for (int b : kBuckets) {
    append_unique(specs, scan_source(c, b, arch));
    append_unique(specs, backward_source(c, b, arch));
  }
}
}  // namespace

std::vector<KernelSource> all_specializations(const std::string& arch) {
  std::vector<KernelSource> all;
  KernelSource smoke;
  smoke.name = "smoke";
  smoke.code = "#include \"m3_smoke.cuh\"\n";
  smoke.arch = arch;
  all.push_back(smoke);
  for (const auto& c : known_configs()) {
    if (dispatch_only(c)) continue;
    append_scan_sources(all, c, arch);
  }
  // Many variants share a reduce specialisation (the block size and the reduce switches name it).
  for (const auto& c : known_configs()) {
    if (!dispatch_only(c)) append_unique(all, reduce_source(c, arch));
  }
  return all;
}

std::vector<KernelSource> specializations_for(const std::vector<OpConfig>& configs, const std::string& arch) {
  std::vector<KernelSource> specs;
  for (const auto& config : configs) {
    // The longest sequence picks a dispatch-only variant's kernels, and for v137 the chunk-64
    // forward's waves too: these three give every set (the same one thrice for the others).
    for (const OpConfig& c :
         {resolve_kernels(config, kExactProductsAboveLen), resolve_kernels(config, kExactProductsAboveLen + 1),
          resolve_kernels(config, kExactProductsAboveLen, 0.0)}) {
      append_scan_sources(specs, c, arch);
      append_unique(specs, reduce_source(c, arch));
    }
  }
  return specs;
}

}  // namespace mamba3_jit
