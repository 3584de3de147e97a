// Predicted data-parallel scaling: throughput at N ranks over N times one rank's, for
// ResNet-50 (batch 32 per GPU, 224x224) and GPT-2 small (the zoo transformer's defaults,
// batch 8 per GPU of 1024 tokens) on H100s over NVLink within nodes of 8 and InfiniBand NDR
// across them (planner/collective_cost.h), beside the published figures of Horovod and
// IBM DDL. The step is the plain plan's (no budget), fp32 roofline of the h100 preset.
//
//   bazel run //planner:ranks_bench                         # the table
//   bazel run //planner:ranks_bench -- --allreduce cpu 2 BYTES...   # predicted seconds
//
// The second form prints, for each size, the seconds the preset predicts for one allreduce
// (planner/allreduce_check.py compares them with dist/allreduce_bench's measurement).
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "graph/summary.h"
#include "planner/bench_util.h"
#include "planner/collective_cost.h"
#include "planner/cost_model.h"
#include "planner/section_search.h"
#include "planner/training_graph.h"

namespace headroom::planner {
namespace {

using bench::OrDie;

int PredictAllreduces(int argc, char** argv) {
  const InterconnectSpec link = OrDie(InterconnectPreset(argv[2]), "--allreduce");
  const uint32_t ranks = static_cast<uint32_t>(std::atoi(argv[3]));
  for (int i = 4; i < argc; ++i) {
    const uint64_t bytes = std::strtoull(argv[i], nullptr, 10);
    std::printf(
        "{\"interconnect\":\"%s\",\"ranks\":%u,\"bytes\":%llu,\"predicted_seconds\":%.9f}\n",
        link.name.c_str(), ranks, static_cast<unsigned long long>(bytes),
        OrDie(AllreduceSeconds(bytes, ranks, link), "allreduce"));
  }
  return 0;
}

struct Model {
  std::string label;
  std::string name;
  uint64_t batch;
};

int Table() {
  const Model models[] = {
      {"resnet50, batch 32/GPU, 224x224", "resnet50", 32},
      {"GPT-2 small (transformer defaults), batch 8/GPU x 1024 tokens", "transformer", 8}};
  const uint32_t ranks[] = {8, 64, 256};
  struct Bucket {
    const char* label;
    uint64_t bytes;
  };
  const Bucket buckets[] = {{"one per gradient (default)", 0},
                            {"1 MiB", 1 << 20},
                            {"4 MiB", 4 << 20},
                            {"25 MiB (PyTorch DDP's default)", 25 << 20},
                            {"one bucket", uint64_t{1} << 40}};
  const DeviceSpec device = OrDie(DevicePreset("h100"), "h100");
  const InterconnectSpec link = OrDie(InterconnectPreset("nvlink+ib"), "nvlink+ib");
  std::printf(
      "model: %s within nodes of %u (%.0f GB/s, %.1f us a ring step), %s across (%.0f GB/s per "
      "GPU, %.1f us a step), %.1f us a collective; hierarchical ring allreduce; buckets issued "
      "where the plan's schedule writes their last gradient, one communication stream, updates "
      "deferred to the backward's end each waiting for its bucket; h100 fp32 roofline "
      "(%.0f TFLOP/s, %.0f GB/s)\n\n",
      "NVLink 4", link.ranks_per_node, link.bytes_per_second / 1e9, link.latency_seconds * 1e6,
      "InfiniBand NDR", link.inter_node_bytes_per_second / 1e9,
      link.inter_node_latency_seconds * 1e6, link.collective_overhead_seconds * 1e6,
      device.peak_flops_per_second / 1e12, device.memory_bytes_per_second / 1e9);
  std::printf("%-62s %-31s %5s %8s %9s %8s %9s %7s %10s\n", "MODEL", "BUCKETS", "RANKS", "BUCKETS",
              "STEP1 ms", "STEP ms", "ALLRED ms", "HIDDEN", "EFFICIENCY");
  for (const Model& m : models) {
    const graph::Graph forward = bench::Load(m.name, m.batch);
    const TrainingGraph training =
        OrDie(TrainingGraph::Build(forward, TrainingOptions()), "training graph");
    const RooflineCostModel cost(forward, device);
    std::unique_ptr<SectionSearch> search =
        OrDie(SectionSearch::Create(training, cost, SearchOptions()), "search");
    const SectionPlan plain = OrDie(search->Unconstrained(), "plan");
    for (const Bucket& b : buckets) {
      for (uint32_t n : ranks) {
        DataParallelOptions options;
        options.ranks = n;
        options.interconnect = link;
        options.bucket_bytes = b.bytes;
        const DataParallelStep dp =
            OrDie(PredictDataParallelStep(*plain.step, cost, options), "data parallel");
        std::printf("%-62s %-31s %5u %8zu %9.2f %8.2f %9.2f %6.1f%% %9.1f%%\n", m.label.c_str(),
                    b.label, n, dp.buckets.size(), dp.single_rank_step_seconds * 1e3,
                    dp.step_seconds * 1e3, dp.allreduce_seconds * 1e3, 100 * dp.hidden_fraction(),
                    100 * dp.scaling_efficiency());
      }
    }
    const uint64_t gradient_bytes =
        OrDie(PredictDataParallelStep(*plain.step, cost, {}), "one rank").communication_bytes;
    std::printf("%s: gradients (the buckets) %s beside a peak of %s\n\n", m.label.c_str(),
                graph::HumanBytes(gradient_bytes).c_str(),
                graph::HumanBytes(plain.peak_bytes).c_str());
  }
  std::printf(
      "published: Horovod 90%% (ResNet-101, 512 GPUs, Sergeev & Del Balso 2018); IBM DDL 95%% "
      "(ResNet-50, 256 GPUs, Cho et al. 2017)\n");
  return 0;
}

}  // namespace
}  // namespace headroom::planner

int main(int argc, char** argv) {
  if (argc >= 5 && std::string(argv[1]) == "--allreduce") {
    return headroom::planner::PredictAllreduces(argc, argv);
  }
  if (argc != 1) {
    std::fprintf(stderr, "usage: %s [--allreduce PRESET RANKS BYTES...]\n", argv[0]);
    return 2;
  }
  return headroom::planner::Table();
}
