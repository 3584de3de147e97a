// Reversible blocks: the targets, measured. `bazel run -c opt //executor:revnet_bench`
// prints
//   1. planned activation peaks at batch 128 on 32x32 (the arena less the parameters,
//      buffers, optimizer state and one gradient per parameter): revnet164 against revnet38
//      (target <= 1.25x), and revnet164 rebuilt against resnet164_cifar and revnet164
//      keeping everything (target >= 4x less);
//   2. training runs at a smaller batch (--batch, default 16) on the CPU backend, each in its
//      own process: the OS's maximum RSS (VmHWM of /proc/self/status) and the median step
//      time, for revnet164 rebuilt and kept, resnet164_cifar kept, revnet38 rebuilt and kept;
//      the ratios rebuild/keep of time (target <= 1.35x) and of RSS above the process's start.
// `revnet_bench train MODEL BATCH STEPS keep|rebuild` runs one training run and prints one
// line of figures (what part 2 runs in its child processes).
// `revnet_bench choose MODEL BATCH` prints the planner's choice (rebuild or keep per block,
// with cuts and offload) at budgets from the smallest plan to keeping everything, against
// rebuilding every block and checkpointing alone (predicted times, exact peaks).
// `revnet_bench curve MODEL BATCH STEPS [FRACTION [DATA]]` trains under a budget of FRACTION
// (default 0.35; 0: the largest budget at which the planner's choice rebuilds blocks, found
// on the frontier, printed) of the keep-everything planned peak, and with every block
// rebuilt, each against keeping everything from the same seed in its own process (and the
// float32 floor: keeping everything with the learning rate 2e-7 larger, one rounding): the
// largest relative loss difference over the steps, raw and smoothed (moving averages over
// kSmoothSteps steps), planned and measured peaks (the arena's high-water mark, the
// process's max RSS from /proc/self/status) and max_rebuild_error (checked every 50 steps).
// DATA is synthetic (the default: synthetic CIFAR-sized batches) or fashion-mnist (the
// network built for 1x28x28, Fashion-MNIST's training images in a seeded order, and the
// eval accuracy of the first kEvalItems test images after the last step).
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <numeric>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "data/batch_loader.h"
#include "data/image_dataset.h"
#include "executor/backend_scratch.h"
#include "executor/cpu/cpu_backend.h"
#include "executor/image_task.h"
#include "executor/trainer.h"
#include "graph/graph.h"
#include "graph/zoo.h"
#include "planner/cost_model.h"
#include "planner/memory_planner.h"
#include "planner/offset_assigner.h"
#include "planner/reversible.h"
#include "planner/reversible_search.h"
#include "planner/sections.h"
#include "planner/training_graph.h"
#include "util/check.h"

namespace headroom::executor {
namespace {

// The data a loss curve trains on: synthetic CIFAR-sized batches (the trainer's own), or
// Fashion-MNIST's training images (1x28x28: the network built for them) in a seeded order.
constexpr char kSynthetic[] = "synthetic";
constexpr char kFashionMnist[] = "fashion-mnist";

graph::Graph Build(const std::string& name, uint64_t batch, bool reversible,
                   const std::string& data = kSynthetic) {
  std::map<std::string, int64_t> options;
  if (name.rfind("revnet", 0) == 0) options["reversible"] = reversible ? 1 : 0;
  if (data == kFashionMnist) options["channels"] = 1, options["image_size"] = 28;
  absl::StatusOr<proto::GraphDef> def = graph::BuildZooModel(graph::ZooSpec(name, batch, options));
  CHECK(def.ok()) << def.status();
  absl::StatusOr<graph::Graph> g = graph::Graph::FromProto(*def);
  CHECK(g.ok()) << g.status();
  return *std::move(g);
}

struct Planned {
  uint64_t arena_bytes = 0;
  uint64_t persistent_bytes = 0;  // Parameters, buffers, optimizer state, parameter gradients.
  uint64_t activation_bytes() const { return arena_bytes - persistent_bytes; }
};

// Plans `name` at `batch`, rebuilding every reversible block or keeping everything.
Planned Plan(const std::string& name, uint64_t batch, bool rebuild) {
  const graph::Graph g = Build(name, batch, rebuild);
  const planner::TrainingGraph t = planner::TrainingGraph::Build(g, {}).value();
  const planner::RooflineCostModel cost(g, planner::DevicePreset("cpu").value());
  planner::MemoryPlan plan;
  if (rebuild) {
    const planner::ReversibleStep r = planner::ExpandReversible(g, t, cost).value();
    plan =
        planner::PlanScheduledGraph(r.step.graph, r.step.schedule, planner::kDefaultAlignmentBytes,
                                    planner::DefaultStrategies())
            .value();
  } else {
    const planner::SectionedStep s = planner::ExpandSections(t, {}, cost).value();
    plan = planner::PlanScheduledGraph(s.graph, s.schedule, planner::kDefaultAlignmentBytes,
                                       planner::DefaultStrategies())
               .value();
  }
  Planned p;
  p.arena_bytes = plan.arena_bytes;
  for (const planner::TrainingTensor& tensor : t.tensors()) {
    if (tensor.persistent()) p.persistent_bytes += tensor.bytes;
    if (tensor.role == proto::ROLE_PARAMETER) p.persistent_bytes += tensor.bytes;  // Its gradient.
  }
  return p;
}

double MiB(uint64_t bytes) { return bytes / 1048576.0; }

void PrintPlanned() {
  constexpr uint64_t kBatch = 128;
  std::cout << "== Planned activation peaks, batch " << kBatch << ", 32x32 (arena less "
            << "parameters, buffers, optimizer state and one gradient per parameter) ==\n";
  struct Row {
    std::string name;
    bool rebuild;
    Planned p;
  };
  std::vector<Row> rows;
  for (const auto& [name, rebuild] :
       std::vector<std::pair<std::string, bool>>{{"revnet38", true},
                                                 {"revnet38", false},
                                                 {"revnet110", true},
                                                 {"revnet110", false},
                                                 {"revnet164", true},
                                                 {"revnet164", false},
                                                 {"resnet164_cifar", false}}) {
    rows.push_back({name, rebuild, Plan(name, kBatch, rebuild)});
    const Row& r = rows.back();
    std::cout << absl::StrFormat("%-16s %-8s arena %9.1f MiB  activations %9.1f MiB\n", name,
                                 rebuild ? "rebuild" : "keep", MiB(r.p.arena_bytes),
                                 MiB(r.p.activation_bytes()));
  }
  auto find = [&](const std::string& name, bool rebuild) {
    for (const Row& r : rows) {
      if (r.name == name && r.rebuild == rebuild) return r.p.activation_bytes();
    }
    return uint64_t{0};
  };
  std::cout << absl::StrFormat(
      "revnet164 / revnet38 activations, both rebuilt: %.2fx (target <= 1.25x)\n",
      static_cast<double>(find("revnet164", true)) / find("revnet38", true));
  std::cout << absl::StrFormat(
      "revnet110 / revnet38 activations, both rebuilt (same basic widths, 3x the depth): "
      "%.2fx\n",
      static_cast<double>(find("revnet110", true)) / find("revnet38", true));
  std::cout << absl::StrFormat(
      "resnet164_cifar kept / revnet164 rebuilt: %.2fx less (target >= 4x)\n",
      static_cast<double>(find("resnet164_cifar", false)) / find("revnet164", true));
  std::cout << absl::StrFormat(
      "revnet164 kept / revnet164 rebuilt: %.2fx less\n",
      static_cast<double>(find("revnet164", false)) / find("revnet164", true));
  std::cout << absl::StrFormat(
      "revnet110 kept / revnet110 rebuilt: %.2fx less\n",
      static_cast<double>(find("revnet110", false)) / find("revnet110", true));
}

// Returns a field of /proc/self/status in bytes (VmRSS, VmHWM), or 0.
uint64_t StatusBytes(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) {
      return std::strtoull(line.c_str() + field.size() + 1, nullptr, 10) * 1024;
    }
  }
  return 0;
}

// One training run; prints "planned_bytes step_seconds start_rss_bytes max_rss_bytes loss".
int TrainOne(const std::string& name, uint64_t batch, int steps, bool rebuild) {
  const uint64_t start_rss = StatusBytes("VmRSS");
  const graph::Graph g = Build(name, batch, rebuild);
  std::unique_ptr<Backend> backend = cpu::CreateCpuBackend();
  TrainerOptions options;
  options.seed = 3;
  options.rebuild_reversible = rebuild;
  absl::StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(g, backend.get(), options);
  CHECK(trainer.ok()) << trainer.status();
  std::vector<double> seconds;
  double loss = 0;
  for (int i = 0; i < steps; ++i) {
    absl::StatusOr<StepResult> r = (*trainer)->Step();
    CHECK(r.ok()) << r.status();
    if (i > 0) seconds.push_back(r->seconds);
    loss = r->loss;
  }
  std::sort(seconds.begin(), seconds.end());
  const double median = seconds.empty() ? 0 : seconds[seconds.size() / 2];
  std::cout << (*trainer)->plan().peak_bytes << " " << median << " " << start_rss << " "
            << StatusBytes("VmHWM") << " " << loss << "\n";
  return 0;
}

struct Trained {
  uint64_t planned = 0;
  double step_seconds = 0;
  uint64_t start_rss = 0, max_rss = 0;
  double loss = 0;
};

Trained RunChild(const std::string& self, const std::string& name, uint64_t batch, int steps,
                 bool rebuild) {
  const std::string command = absl::StrCat(self, " train ", name, " ", batch, " ", steps, " ",
                                           rebuild ? "rebuild" : "keep");
  FILE* pipe = popen(command.c_str(), "r");
  CHECK(pipe != nullptr) << command;
  char buffer[512] = {0};
  std::string out;
  while (fgets(buffer, sizeof(buffer), pipe) != nullptr) out += buffer;
  CHECK(pclose(pipe) == 0) << command << ": " << out;
  Trained t;
  std::istringstream in(out);
  in >> t.planned >> t.step_seconds >> t.start_rss >> t.max_rss >> t.loss;
  return t;
}

void PrintTrained(const std::string& self, uint64_t batch, int steps) {
  std::cout << "== Training on the CPU backend, batch " << batch << ", 32x32, " << steps
            << " steps (median step after the first; RSS from /proc/self/status) ==\n";
  struct Row {
    std::string name;
    bool rebuild;
    Trained t;
  };
  std::vector<Row> rows;
  for (const auto& [name, rebuild] :
       std::vector<std::pair<std::string, bool>>{{"revnet38", false},
                                                 {"revnet38", true},
                                                 {"revnet164", false},
                                                 {"revnet164", true},
                                                 {"resnet164_cifar", false}}) {
    rows.push_back({name, rebuild, RunChild(self, name, batch, steps, rebuild)});
    const Trained& t = rows.back().t;
    std::cout << absl::StrFormat(
        "%-16s %-8s planned %8.1f MiB  max RSS %8.1f MiB (%8.1f above start)  step %.3f s  "
        "loss %.4f\n",
        name, rebuild ? "rebuild" : "keep", MiB(t.planned), MiB(t.max_rss),
        MiB(t.max_rss - t.start_rss), t.step_seconds, t.loss);
  }
  auto find = [&](const std::string& name, bool rebuild) {
    for (const Row& r : rows) {
      if (r.name == name && r.rebuild == rebuild) return r.t;
    }
    return Trained{};
  };
  for (const char* name : {"revnet38", "revnet164"}) {
    const Trained keep = find(name, false), rebuild = find(name, true);
    std::cout << absl::StrFormat(
        "%s step time rebuild / keep: %.2fx (target <= 1.35x); RSS above start keep / "
        "rebuild: %.2fx; planned keep / rebuild: %.2fx\n",
        name, rebuild.step_seconds / keep.step_seconds,
        static_cast<double>(keep.max_rss - keep.start_rss) / (rebuild.max_rss - rebuild.start_rss),
        static_cast<double>(keep.planned) / rebuild.planned);
  }
  const Trained resnet = find("resnet164_cifar", false), rev = find("revnet164", true);
  std::cout << absl::StrFormat(
      "resnet164_cifar kept / revnet164 rebuilt, RSS above start: %.2fx; planned: %.2fx\n",
      static_cast<double>(resnet.max_rss - resnet.start_rss) / (rev.max_rss - rev.start_rss),
      static_cast<double>(resnet.planned) / rev.planned);
}

// Test images a Fashion-MNIST curve run evaluates after its last step.
constexpr int64_t kEvalItems = 2000;

// One run of the loss-curve comparison: `mode` is "keep" (every block kept, no budget),
// "rebuild" (every block rebuilt) or a budget in bytes (the planner's choice); `data` is
// kSynthetic or kFashionMnist (then the first kEvalItems test images are evaluated at the
// end). Checks the rebuilt tensors every 50 steps. Prints "planned_bytes
// arena_high_water_bytes start_rss max_rss max_rebuild_error blocks_rebuilt off_plan_steps
// eval_accuracy strategy", then the losses on one line.
int CurveRun(const std::string& name, uint64_t batch, int steps, const std::string& mode,
             const std::string& data) {
  const uint64_t start_rss = StatusBytes("VmRSS");
  const graph::Graph g = Build(name, batch, true, data);
  std::unique_ptr<Backend> backend = cpu::CreateCpuBackend();
  TrainerOptions options;
  options.seed = 3;
  // "floor": keeping everything with the learning rate one float32 rounding larger (2e-7
  // relative), the drift any change of rounding alone causes on this run.
  const bool keeps = mode == "keep" || mode == "floor";
  options.rebuild_reversible = !keeps;
  if (mode == "floor") options.optimizer_params.learning_rate *= 1 + 2e-7;
  if (!keeps && mode != "rebuild") options.budget_bytes = std::stoull(mode);
  options.check_rebuild_every = 50;
  absl::StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(g, backend.get(), options);
  CHECK(trainer.ok()) << trainer.status();
  // Real data: the training part in an order seeded like the weights, no augmentation.
  std::optional<data::ImageDataset> train_set, test_set;
  std::optional<ImageTask> task;
  std::unique_ptr<data::BatchLoader> loader;
  if (data == kFashionMnist) {
    train_set = data::ImageDataset::LoadFashionMnist(data::FashionMnistPart::kTrain).value();
    test_set = data::ImageDataset::LoadFashionMnist(data::FashionMnistPart::kTest).value();
    task = ImageTask::Create(g, *train_set).value();
    std::vector<int64_t> items(train_set->size());
    std::iota(items.begin(), items.end(), 0);
    data::LoaderOptions loading;
    loading.batch = static_cast<int64_t>(batch);
    loading.seed = 3;
    loader = data::BatchLoader::Create(&*train_set, std::move(items), loading).value();
  } else {
    CHECK(data == kSynthetic) << "data '" << data << "': needs " << kSynthetic << " or "
                              << kFashionMnist;
  }
  std::vector<double> losses;
  uint64_t high_water = 0;
  double max_error = -1;
  int off_plan_steps = 0;  // Steps whose arena high-water mark is not the planned peak.
  for (int i = 0; i < steps; ++i) {
    absl::StatusOr<StepResult> r;
    if (loader != nullptr) {
      const data::Batch b = loader->Next();
      r = (*trainer)->StepOn(task->Tensors(b.pixels, b.labels));
    } else {
      r = (*trainer)->Step();
    }
    CHECK(r.ok()) << r.status();
    losses.push_back(r->loss);
    high_water = std::max(high_water, r->arena_high_water_bytes);
    max_error = std::max(max_error, r->max_rebuild_error);
    off_plan_steps += r->arena_high_water_bytes != r->planned_peak_bytes ? 1 : 0;
  }
  double accuracy = -1;
  if (test_set.has_value()) {
    std::vector<int64_t> items(std::min<int64_t>(kEvalItems, test_set->size()));
    std::iota(items.begin(), items.end(), 0);
    accuracy = EvaluateImages(**trainer, *task, *test_set, items).value().accuracy;
  }
  const planner::SectionPlan& plan = (*trainer)->plan();
  std::cout << plan.peak_bytes << " " << high_water << " " << start_rss << " "
            << StatusBytes("VmHWM") << " " << max_error << " " << plan.rebuilt_blocks.size() << " "
            << off_plan_steps << " " << accuracy << " " << plan.strategy << "\n";
  for (double l : losses) std::cout << absl::StrFormat("%.9g ", l);
  std::cout << "\n";
  return 0;
}

struct Curve {
  uint64_t planned = 0, high_water = 0, start_rss = 0, max_rss = 0;
  double max_rebuild_error = -1;
  int rebuilt = 0;
  int off_plan_steps = 0;
  double eval_accuracy = -1;  // -1: not evaluated (synthetic data)
  std::string strategy;
  std::vector<double> losses;
};

// A curve run started in its own process (CurveRun), its figures read by Finish().
struct CurveChild {
  std::string command;
  int steps = 0;
  FILE* pipe = nullptr;
};

CurveChild StartCurveChild(const std::string& self, const std::string& name, uint64_t batch,
                           int steps, const std::string& mode, const std::string& data) {
  CurveChild child;
  child.command =
      absl::StrCat(self, " curve-run ", name, " ", batch, " ", steps, " ", mode, " ", data);
  child.steps = steps;
  child.pipe = popen(child.command.c_str(), "r");
  CHECK(child.pipe != nullptr) << child.command;
  return child;
}

// Returns the figures `child` prints once it ends.
Curve FinishCurveChild(const CurveChild& child) {
  const std::string& command = child.command;
  const int steps = child.steps;
  FILE* pipe = child.pipe;
  std::string out;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) out.append(buffer, n);
  CHECK(pclose(pipe) == 0) << command << ": " << out;
  Curve c;
  std::istringstream in(out);
  in >> c.planned >> c.high_water >> c.start_rss >> c.max_rss >> c.max_rebuild_error >> c.rebuilt >>
      c.off_plan_steps >> c.eval_accuracy >> c.strategy;
  double l;
  while (in >> l) c.losses.push_back(l);
  CHECK(static_cast<int>(c.losses.size()) == steps) << command << ": " << out;
  return c;
}

// Steps of the moving average the smoothed loss difference compares.
constexpr int kSmoothSteps = 20;

// Returns the means of each `window` consecutive values of `values` (all of them if fewer).
std::vector<double> MovingAverage(const std::vector<double>& values, int window) {
  const size_t w = std::min<size_t>(std::max(window, 1), values.size());
  std::vector<double> out;
  double sum = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    sum += values[i];
    if (i >= w) sum -= values[i - w];
    if (i + 1 >= w) out.push_back(sum / w);
  }
  return out;
}

// Returns the largest budget at which the planner's choice for `name` rebuilds some block,
// as the trainer plans it (the CPU backend's kernel scratch, the CPU roofline); 0 when none
// does. The candidates are the points of the Pareto frontier over every rebuild set's
// section search and keeping every block (each search built once), from the largest peak
// down; the first whose peak, asked of Plan() as a budget, takes a plan that rebuilds wins.
// (A grid of budgets asked of Plan() one by one built every rebuild set's search again at
// each budget: slower, and it stepped over the narrow ranges where rebuilding wins.)
uint64_t BudgetThatRebuilds(const std::string& name, uint64_t batch, const std::string& data) {
  const graph::Graph g = Build(name, batch, true, data);
  std::unique_ptr<Backend> backend = cpu::CreateCpuBackend();
  const BackendScratchModel scratch(backend.get());
  planner::TrainingOptions training;
  training.scratch = &scratch;
  const planner::TrainingGraph t = planner::TrainingGraph::Build(g, training).value();
  const planner::RooflineCostModel cost(g, planner::DevicePreset("cpu").value());
  planner::SearchOptions options;
  options.host_pool_in_budget =
      planner::HostPoolInBudget(proto::HOST_MEMORY_BACKEND, backend->host_is_device_memory());
  std::unique_ptr<planner::ReversibleSearch> search =
      planner::ReversibleSearch::Create(g, t, cost, options, proto::OPTIMIZER_STATE_DEVICE).value();
  const std::vector<planner::TradeOffPoint> frontier = search->Frontier().value();
  int rebuilding = 0;
  for (const planner::TradeOffPoint& p : frontier) {
    rebuilding += p.strategy.rfind("reversible:", 0) == 0 ? 1 : 0;
  }
  std::cout << absl::StrFormat("  frontier: %d points, %d of them rebuild blocks\n",
                               frontier.size(), rebuilding);
  for (const planner::TradeOffPoint& p : frontier) {
    std::cout << absl::StrFormat("    %10.2f MiB  %.4f s  %s\n", MiB(p.peak_bytes), p.step_seconds,
                                 p.strategy);
  }
  for (const planner::TradeOffPoint& p : frontier) {
    if (p.strategy.rfind("reversible:", 0) != 0) continue;
    const planner::SectionPlan chosen = search->Plan(p.peak_bytes).value();
    std::cout << absl::StrFormat(
        "  budget %.2f MiB (frontier point '%s', %.4f s): chosen '%s', %d of %d blocks "
        "rebuilt, %.4f s\n",
        MiB(p.peak_bytes), p.strategy, p.step_seconds, chosen.strategy,
        chosen.rebuilt_blocks.size(), g.reversible_blocks().size(), chosen.step_seconds);
    if (!chosen.rebuilt_blocks.empty()) return p.peak_bytes;
  }
  return 0;
}

// The training target: `name` for `steps` steps under a budget of `fraction` of its
// keep-everything planned peak (fraction 0: the largest budget at which the planner's
// choice rebuilds blocks, BudgetThatRebuilds) and with every block rebuilt, each against
// keeping everything from the same seed, each run its own process.
int CompareCurves(const std::string& self, const std::string& name, uint64_t batch, int steps,
                  double fraction, const std::string& data) {
  uint64_t budget = 0;
  if (fraction == 0) {
    std::cout << "finding a budget at which the planner rebuilds blocks:\n";
    budget = BudgetThatRebuilds(name, batch, data);
    CHECK(budget > 0) << "no budget makes the planner rebuild a block: no point of the "
                         "frontier that rebuilds is chosen";
  }
  // Each run its own process; with the budget known, the four run side by side (on a
  // shared machine one after another took most of an hour for 300 steps).
  CurveChild keep_child = StartCurveChild(self, name, batch, steps, "keep", data);
  CurveChild floor_child = StartCurveChild(self, name, batch, steps, "floor", data);
  std::optional<CurveChild> chosen_child, all_child;
  if (fraction == 0) {
    chosen_child = StartCurveChild(self, name, batch, steps, absl::StrCat(budget), data);
    all_child = StartCurveChild(self, name, batch, steps, "rebuild", data);
  }
  const Curve keep = FinishCurveChild(keep_child);
  if (fraction != 0) {
    budget = static_cast<uint64_t>(keep.planned * fraction);
    chosen_child = StartCurveChild(self, name, batch, steps, absl::StrCat(budget), data);
    all_child = StartCurveChild(self, name, batch, steps, "rebuild", data);
  }
  std::cout << absl::StrFormat(
      "== %s batch %d, %d steps on %s data, seed 3: loss curves against keeping everything; "
      "budget %.2f MiB (%d B, %.3f of keeping everything's planned peak) ==\n",
      name, batch, steps, data, MiB(budget), budget, static_cast<double>(budget) / keep.planned);
  const Curve floor = FinishCurveChild(floor_child);
  const Curve chosen = FinishCurveChild(*chosen_child);
  const Curve all = FinishCurveChild(*all_child);
  for (const auto& [label, c] : std::vector<std::pair<std::string, const Curve*>>{
           {"keep", &keep}, {"floor", &floor}, {"budget", &chosen}, {"rebuild all", &all}}) {
    double worst = 0, worst_smoothed = 0;
    int worst_step = 0;
    for (int i = 0; i < steps; ++i) {
      const double rel = std::fabs(c->losses[i] - keep.losses[i]) / std::fabs(keep.losses[i]);
      if (rel > worst) worst = rel, worst_step = i;
    }
    const std::vector<double> smoothed = MovingAverage(c->losses, kSmoothSteps);
    const std::vector<double> smoothed_keep = MovingAverage(keep.losses, kSmoothSteps);
    for (size_t i = 0; i < smoothed.size(); ++i) {
      worst_smoothed = std::max(
          worst_smoothed, std::fabs(smoothed[i] - smoothed_keep[i]) / std::fabs(smoothed_keep[i]));
    }
    std::cout << absl::StrFormat(
        "%-11s plan %-24s rebuilt %2d  planned %7.2f MiB  arena high-water %7.2f MiB (steps "
        "off plan: %d)  max RSS %7.1f MiB (%7.1f above start)  max_rebuild_error %.2g  loss "
        "%.5f -> %.5f  max rel loss diff vs keep %.2e (step %d), smoothed over %d steps "
        "%.2e%s\n",
        label, c->strategy, c->rebuilt, MiB(c->planned), MiB(c->high_water), c->off_plan_steps,
        MiB(c->max_rss), MiB(c->max_rss - c->start_rss), c->max_rebuild_error, c->losses.front(),
        c->losses.back(), worst, worst_step, kSmoothSteps, worst_smoothed,
        c->eval_accuracy < 0 ? std::string()
                             : absl::StrFormat("  eval accuracy %.4f (first %d test images)",
                                               c->eval_accuracy, kEvalItems));
  }
  return 0;
}

std::string Fits(const absl::StatusOr<planner::SectionPlan>& plan) {
  if (!plan.ok()) return "       does not fit";
  return absl::StrFormat("%6.1f MiB %.4f s", MiB(plan->peak_bytes), plan->step_seconds);
}

// The planner's choice under budgets between `name`'s every-block-rebuilt peak and its
// keep-everything peak, against rebuilding every block and checkpointing alone (every block
// kept: cuts, offload), all planned exactly with the CPU roofline.
int Choose(const std::string& name, uint64_t batch) {
  const graph::Graph g = Build(name, batch, true);
  const planner::TrainingGraph t = planner::TrainingGraph::Build(g, {}).value();
  const planner::RooflineCostModel cost(g, planner::DevicePreset("cpu").value());
  std::unique_ptr<planner::ReversibleSearch> search =
      planner::ReversibleSearch::Create(g, t, cost, {}, proto::OPTIMIZER_STATE_DEVICE).value();
  const planner::SectionPlan plain = search->Unconstrained().value();
  const planner::SectionPlan all = search->RebuildAll().value();
  std::cout << absl::StrFormat(
      "== %s batch %d: planner's choice per block under a budget (CPU roofline, predicted) ==\n"
      "keep everything %.1f MiB %.4f s; rebuild every block (%d) %.1f MiB %.4f s\n"
      "%10s  %-45s %-22s %-22s %s\n",
      name, batch, MiB(plain.peak_bytes), plain.step_seconds, g.reversible_blocks().size(),
      MiB(all.peak_bytes), all.step_seconds, "budget", "choice: MiB s rebuilt/blocks strategy",
      "rebuild all: MiB s", "checkpointing alone", "choice / best other");
  // From the smallest peak of any candidate up to keeping everything.
  const uint64_t smallest = search->MinimumPeakBytes().value();
  constexpr int kBudgets = 7;
  for (int i = 0; i < kBudgets; ++i) {
    const double f = static_cast<double>(i) / (kBudgets - 1);
    const uint64_t budget = static_cast<uint64_t>(
        smallest * std::pow(static_cast<double>(plain.peak_bytes) / smallest, f));
    const absl::StatusOr<planner::SectionPlan> chosen = search->Plan(budget);
    CHECK(chosen.ok()) << chosen.status();
    const absl::StatusOr<planner::SectionPlan> rebuild_all =
        all.peak_bytes <= budget ? absl::StatusOr<planner::SectionPlan>(all)
                                 : absl::FailedPreconditionError("does not fit");
    const absl::StatusOr<planner::SectionPlan> kept = search->PlanKeepingBlocks(budget);
    double best_other = std::numeric_limits<double>::infinity();
    if (rebuild_all.ok()) best_other = rebuild_all->step_seconds;
    if (kept.ok()) best_other = std::min(best_other, kept->step_seconds);
    std::cout << absl::StrFormat(
        "%6.1f MiB  %6.1f MiB %.4f s %2d/%d %-18s  %-22s %-22s %s\n", MiB(budget),
        MiB(chosen->peak_bytes), chosen->step_seconds, chosen->rebuilt_blocks.size(),
        g.reversible_blocks().size(), chosen->strategy, Fits(rebuild_all), Fits(kept),
        std::isinf(best_other) ? std::string("(neither fits)")
                               : absl::StrFormat("%.3fx", chosen->step_seconds / best_other));
  }
  return 0;
}

}  // namespace
}  // namespace headroom::executor

int main(int argc, char** argv) {
  using headroom::executor::PrintPlanned;
  if (argc == 7 && std::strcmp(argv[1], "curve-run") == 0) {
    return headroom::executor::CurveRun(argv[2], std::strtoull(argv[3], nullptr, 10),
                                        std::atoi(argv[4]), argv[5], argv[6]);
  }
  if (argc >= 5 && argc <= 7 && std::strcmp(argv[1], "curve") == 0) {
    char self[4096] = {0};
    if (readlink("/proc/self/exe", self, sizeof(self) - 1) <= 0) return 1;
    return headroom::executor::CompareCurves(self, argv[2], std::strtoull(argv[3], nullptr, 10),
                                             std::atoi(argv[4]),
                                             argc >= 6 ? std::atof(argv[5]) : 0.35,
                                             argc == 7 ? argv[6] : headroom::executor::kSynthetic);
  }
  if (argc == 4 && std::strcmp(argv[1], "choose") == 0) {
    return headroom::executor::Choose(argv[2], std::strtoull(argv[3], nullptr, 10));
  }
  if (argc == 6 && std::strcmp(argv[1], "train") == 0) {
    return headroom::executor::TrainOne(argv[2], std::strtoull(argv[3], nullptr, 10),
                                        std::atoi(argv[4]), std::strcmp(argv[5], "rebuild") == 0);
  }
  uint64_t batch = 16;
  int steps = 6;
  bool plan_only = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--batch") == 0 && i + 1 < argc)
      batch = std::strtoull(argv[++i], nullptr, 10);
    else if (std::strcmp(argv[i], "--steps") == 0 && i + 1 < argc)
      steps = std::atoi(argv[++i]);
    else if (std::strcmp(argv[i], "--plan-only") == 0)
      plan_only = true;
    else {
      std::cerr << "usage: revnet_bench [--batch N] [--steps N] [--plan-only] | train MODEL "
                   "BATCH STEPS keep|rebuild | choose MODEL BATCH | curve MODEL BATCH STEPS "
                   "[BUDGET_FRACTION [synthetic|fashion-mnist]]\n";
      return 2;
    }
  }
  PrintPlanned();
  if (plan_only) return 0;
  char self[4096] = {0};
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return 1;
  headroom::executor::PrintTrained(self, batch, steps);
  return 0;
}
