// Predicted data-parallel scaling: throughput at N ranks over N times one rank's, for
// ResNet-50 (batch 32 per GPU, 224x224) and GPT-2 small (the zoo transformer's defaults,
// batch 8 per GPU of 1024 tokens) on H100s over NVLink within nodes of 8 and InfiniBand NDR
// across them (planner/collective_cost.h), beside the published figures of Horovod and
// IBM DDL. The step is the plain plan's (no budget), fp32 roofline of the h100 preset.
//
//   bazel run //planner:ranks_bench                         # the table
//   bazel run //planner:ranks_bench -- --allreduce cpu 2 BYTES...   # predicted seconds
//   bazel run //planner:ranks_bench -- --bucket-lifetimes          # bucket memory
//
// The second form prints, for each size, the seconds the preset predicts for one allreduce
// (planner/allreduce_check.py compares them with dist/allreduce_bench's measurement). The
// third prints the planned arena (cpu preset, no budget) of models without buckets, with
// buckets alive from their first gradient (the default), and with buckets held the whole
// backward (planner/gradient_buckets.h, BucketLifetime), for a few bucket sizes.
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "graph/summary.h"
#include "planner/bench_util.h"
#include "planner/collective_cost.h"
#include "planner/cost_model.h"
#include "planner/gradient_buckets.h"
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

// The plain plan (no budget) of `forward` under the roofline of `device`, with what it borrows.
struct Plain {
  std::unique_ptr<graph::Graph> forward;
  std::unique_ptr<TrainingGraph> training;
  std::unique_ptr<RooflineCostModel> cost;
  std::unique_ptr<SectionSearch> search;
  SectionPlan plan;
};

std::unique_ptr<Plain> PlainPlan(graph::Graph forward, const DeviceSpec& device) {
  auto p = std::make_unique<Plain>();
  p->forward = std::make_unique<graph::Graph>(std::move(forward));
  p->training = std::make_unique<TrainingGraph>(
      OrDie(TrainingGraph::Build(*p->forward, TrainingOptions()), "training graph"));
  p->cost = std::make_unique<RooflineCostModel>(*p->forward, device);
  p->search = OrDie(SectionSearch::Create(*p->training, *p->cost, SearchOptions()), "search");
  p->plan = OrDie(p->search->Unconstrained(), "plan");
  return p;
}

int BucketLifetimes() {
  struct Case {
    const char* name;
    uint64_t batch;
    std::map<std::string, int64_t> options;
  };
  const Case cases[] = {{"resnet18", 8, {{"image_size", 64}}},
                        {"resnet18", 8, {}},
                        {"small_cnn", 8, {}},
                        {"transformer", 2, {}}};
  const uint64_t sizes[] = {0, 4 << 20, uint64_t{1} << 40};
  const DeviceSpec device = OrDie(DevicePreset("cpu"), "cpu");
  std::printf("%-12s %5s %6s %12s %10s %12s %12s %12s\n", "MODEL", "BATCH", "IMAGE", "BUCKET KiB",
              "BUCKETS", "NO BUCKETS", "FROM FIRST", "WHOLE BWD");
  for (const Case& c : cases) {
    const std::unique_ptr<Plain> p = PlainPlan(bench::Load(c.name, c.batch, c.options), device);
    const SectionPlan& plain = p->plan;
    for (uint64_t b : sizes) {
      const SectionPlan first = OrDie(AddGradientBuckets(plain, b), "buckets");
      const SectionPlan whole =
          OrDie(AddGradientBuckets(plain, b, BucketLifetime::kWholeBackward), "buckets");
      auto it = c.options.find("image_size");
      std::printf("%-12s %5llu %6s %12s %10zu %12s %12s %12s\n", c.name,
                  static_cast<unsigned long long>(c.batch),
                  it == c.options.end() ? "default" : std::to_string(it->second).c_str(),
                  b > (uint64_t{1} << 30) ? "one bucket" : std::to_string(b >> 10).c_str(),
                  first.step->gradient_buckets.size(), graph::HumanBytes(plain.peak_bytes).c_str(),
                  graph::HumanBytes(first.peak_bytes).c_str(),
                  graph::HumanBytes(whole.peak_bytes).c_str());
    }
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
    const std::unique_ptr<Plain> p = PlainPlan(bench::Load(m.name, m.batch), device);
    const SectionPlan& plain = p->plan;
    const RooflineCostModel& cost = *p->cost;
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
  if (argc == 2 && std::string(argv[1]) == "--bucket-lifetimes") {
    return headroom::planner::BucketLifetimes();
  }
  if (argc != 1) {
    std::fprintf(stderr, "usage: %s [--allreduce PRESET RANKS BYTES... | --bucket-lifetimes]\n",
                 argv[0]);
    return 2;
  }
  return headroom::planner::Table();
}
