// Proves Google Benchmark links through @system: `bazel run //third_party/system:system_libs_bench`.
#include <string>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"

static void BM_StrCat(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(absl::StrCat("layer", state.iterations()));
}
BENCHMARK(BM_StrCat);

BENCHMARK_MAIN();
