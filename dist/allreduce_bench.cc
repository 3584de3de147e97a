// Times MPI allreduces alone, with no training beside them: what one step's gradient
// averaging costs when nothing hides it. Run under mpirun; rank 0 prints one JSON line.
//
//   mpirun -np 2 allreduce_bench BYTES_PER_STEP BUCKET_BYTES [STEPS]
//   mpirun -np 2 allreduce_bench - BYTES,BYTES,... [STEPS]
//
// Each step issues ceil(BYTES_PER_STEP / BUCKET_BYTES) averaging allreduces of BUCKET_BYTES
// (the last smaller), or one of each size listed (a run's buckets: `headroom train --json`
// prints them as bucket_sizes_bytes), at once through dist/mpi_collectives and waits for them all;
// prints the median step's seconds and the bus bandwidth of the ring (2 (N-1)/N x bytes / time).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "dist/mpi_collectives.h"

int main(int argc, char** argv) {
  using headroom::dist::CollectiveHandle;
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s BYTES_PER_STEP BUCKET_BYTES [STEPS]\n", argv[0]);
    return 2;
  }
  const std::string sizes = argv[2];
  const bool listed = sizes.find(',') != std::string::npos || std::string(argv[1]) == "-";
  uint64_t total = listed ? 0 : std::strtoull(argv[1], nullptr, 10);
  const uint64_t bucket = std::max<uint64_t>(4, std::strtoull(argv[2], nullptr, 10));
  const int steps = argc > 3 ? std::atoi(argv[3]) : 20;
  if (steps < 1) {
    std::fprintf(stderr, "STEPS must be at least 1, not %s\n", argv[3]);
    return 2;
  }
  auto c = headroom::dist::CreateMpiCollectives({});
  if (!c.ok()) {
    std::fprintf(stderr, "%s\n", std::string(c.status().message()).c_str());
    return 1;
  }
  std::vector<std::vector<float>> buckets;
  if (listed) {
    for (const char* p = sizes.c_str(); *p != '\0';) {
      char* end = nullptr;
      const uint64_t bytes = std::strtoull(p, &end, 10);
      if (end == p || bytes < 4) {
        std::fprintf(stderr, "bucket sizes: '%s' is not a list of byte counts of at least 4\n",
                     sizes.c_str());
        return 2;
      }
      buckets.emplace_back(bytes / 4, 1.0f);
      total += bytes / 4 * 4;
      p = *end == ',' ? end + 1 : end;
    }
  } else {
    for (uint64_t done = 0; done < total; done += bucket) {
      buckets.emplace_back(std::min(bucket, total - done) / 4, 1.0f);
    }
  }
  std::vector<double> seconds;
  for (int s = 0; s < steps + 1; ++s) {
    const auto start = std::chrono::steady_clock::now();
    std::vector<CollectiveHandle> handles;
    for (auto& b : buckets) {
      handles.push_back(*(*c)->AllreduceAsync(b.data(), b.size(),
                                              headroom::dist::ReduceOp::kAverage, "bench"));
    }
    for (CollectiveHandle h : handles) {
      if (!(*c)->Wait(h).ok()) return 1;
    }
    if (s > 0) {  // the first warms up
      seconds.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
  }
  std::sort(seconds.begin(), seconds.end());
  const double median = seconds[seconds.size() / 2];
  const int n = (*c)->size();
  if ((*c)->rank() == 0) {
    std::printf(
        "{\"ranks\":%d,\"bytes_per_step\":%llu,\"bucket_bytes\":%llu,\"buckets\":%zu,"
        "\"median_step_seconds\":%.6f,\"bus_bandwidth_gbps\":%.3f}\n",
        n, static_cast<unsigned long long>(total),
        static_cast<unsigned long long>(listed ? 0 : bucket), buckets.size(), median,
        2.0 * (n - 1) / n * total / median / 1e9);
  }
  return 0;
}
