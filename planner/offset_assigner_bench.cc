// Times the offset strategies on training-like lifetimes at growing sizes, so that the growth
// rate shows: `bazel run -c opt //planner:offset_assigner_bench`.
//
// n buffers over L = n / 2 layers: activation i lives from forward position i to backward
// position 2L - i (all of them nested around position L), and the gradient made at backward
// position 2L - i lives until the next backward position. Sizes are drawn, with a fixed seed,
// from 4 KiB to 4 MiB. For contrast, BM_GreedyBySizeShortLived gives each buffer a random 1 to 8
// positions out of n.
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "planner/offset_assigner.h"

namespace headroom::planner {
namespace {

std::vector<BufferRequest> TrainingLifetimes(int64_t count) {
  std::mt19937_64 rng(42);
  std::uniform_int_distribution<uint64_t> bytes(4 << 10, 4 << 20);
  const int32_t layers = static_cast<int32_t>(count / 2);
  std::vector<BufferRequest> requests;
  requests.reserve(count);
  for (int32_t i = 0; i < layers; ++i) {
    requests.push_back({bytes(rng), i, 2 * layers - i});
    requests.push_back({bytes(rng), 2 * layers - i, 2 * layers - i + 1});
  }
  return requests;
}

std::vector<BufferRequest> ShortLifetimes(int64_t count) {
  std::mt19937_64 rng(42);
  std::uniform_int_distribution<uint64_t> bytes(4 << 10, 4 << 20);
  std::uniform_int_distribution<int32_t> first(0, static_cast<int32_t>(count) - 1);
  std::uniform_int_distribution<int32_t> extra(0, 7);
  std::vector<BufferRequest> requests;
  requests.reserve(count);
  for (int64_t i = 0; i < count; ++i) {
    const int32_t first_position = first(rng);
    requests.push_back({bytes(rng), first_position, first_position + extra(rng)});
  }
  return requests;
}

// Runs `strategy` on n buffers; reports its arena over the lower bound.
void RunStrategy(benchmark::State& state, const OffsetStrategy& strategy,
                 const std::vector<BufferRequest>& requests) {
  uint64_t arena_bytes = 0;
  for (auto _ : state) {
    const OffsetAssignment assignment = strategy.Assign(requests, kDefaultAlignmentBytes);
    arena_bytes = assignment.arena_bytes;
    benchmark::DoNotOptimize(arena_bytes);
  }
  state.SetComplexityN(state.range(0));
  state.counters["arena_over_lower_bound"] =
      static_cast<double>(arena_bytes) /
      static_cast<double>(AlignedLowerBound(requests, kDefaultAlignmentBytes));
}

void BM_GreedyBySize(benchmark::State& state) {
  RunStrategy(state, *GreedyBySizeBestFit(), TrainingLifetimes(state.range(0)));
}

void BM_GreedyByTime(benchmark::State& state) {
  RunStrategy(state, *GreedyByTimeBestFit(), TrainingLifetimes(state.range(0)));
}

void BM_GreedyBySizeShortLived(benchmark::State& state) {
  RunStrategy(state, *GreedyBySizeBestFit(), ShortLifetimes(state.range(0)));
}

// The verifier that checks every plan, on the greedy-by-time plan.
void BM_VerifyNoOverlap(benchmark::State& state) {
  const std::vector<BufferRequest> requests = TrainingLifetimes(state.range(0));
  const OffsetAssignment assignment =
      GreedyByTimeBestFit()->Assign(requests, kDefaultAlignmentBytes);
  for (auto _ : state) {
    benchmark::DoNotOptimize(VerifyNoOverlap(requests, assignment, kDefaultAlignmentBytes).ok());
  }
  state.SetComplexityN(state.range(0));
}

void BufferCounts(benchmark::internal::Benchmark* b) {
  b->RangeMultiplier(2)->Range(1 << 10, 32 << 10)->Unit(benchmark::kMillisecond)->Complexity();
}

BENCHMARK(BM_GreedyBySize)->Apply(BufferCounts);
BENCHMARK(BM_GreedyByTime)->Apply(BufferCounts);
BENCHMARK(BM_VerifyNoOverlap)->Apply(BufferCounts);
BENCHMARK(BM_GreedyBySizeShortLived)->Apply(BufferCounts);

}  // namespace
}  // namespace headroom::planner

BENCHMARK_MAIN();
