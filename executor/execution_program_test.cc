// The compile step on small sectioned steps: every argument at its planned offset, buffers
// that never overlap while live, copies and re-forwards where the sections put them, and
// the errors of inconsistent plans.
#include "executor/execution_program.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "graph/graph.h"
#include "graph/graph_builder.h"
#include "gtest/gtest.h"
#include "planner/memory_planner.h"
#include "planner/offset_assigner.h"
#include "planner/scratch_model.h"
#include "planner/sections.h"

namespace headroom::executor {
namespace {

using planner::NodeKind;
using planner::TensorId;
using ::testing::HasSubstr;

constexpr uint64_t kScratchBytes = 64;

// x -> fc1 -> bn -> s1 -> fc2 -> s2 -> fc3 -> loss: saved state (bn's statistics, the
// sigmoids' outputs), running statistics, and every activation [8, 32] floats (1024 bytes).
graph::Graph Net() {
  graph::GraphBuilder b("net");
  std::string x = b.Input("x", {8, 32});
  x = b.Linear("fc1", x, 32, 32);
  x = b.BatchNorm("bn", x, 32);
  x = b.Unary("Sigmoid", "s1", x);
  x = b.Linear("fc2", x, 32, 32);
  x = b.Unary("Sigmoid", "s2", x);
  x = b.Linear("fc3", x, 32, 32);
  b.Op("SoftmaxCrossEntropy", "loss", {x, b.Label("labels", {8})});
  b.SetLoss("loss");
  return graph::Graph::FromProto(b.Build()).value();
}

// Every forward node asks for kScratchBytes of scratch.
class ForwardScratch : public planner::ScratchModel {
 public:
  absl::StatusOr<uint64_t> NodeScratchBytes(const graph::Graph&,
                                            const planner::TrainingGraph& g,
                                            planner::NodeId id) const override {
    return g.node(id).kind == NodeKind::kForward ? kScratchBytes : 0;
  }
};

// Compute nodes take a second; copy nodes and updates none; a copy of 1024 bytes half one.
class HalfSecondCopies : public planner::CostModel {
 public:
  std::string name() const override { return "half-second copies"; }
  double NodeSeconds(const planner::TrainingGraph& g, planner::NodeId id) const override {
    const NodeKind kind = g.node(id).kind;
    const bool free = kind == NodeKind::kOffload || kind == NodeKind::kPrefetch ||
                      kind == NodeKind::kUpdate;
    return free ? 0 : 1;
  }
  uint64_t NodeFlops(const planner::TrainingGraph&, planner::NodeId) const override { return 0; }
  double CopySeconds(uint64_t bytes) const override { return 0.5 * bytes / 1024; }
};

// A step of Net() cut at `cuts`, offloading `offload` by name, and its memory plan.
struct Planned {
  graph::Graph forward;
  std::unique_ptr<planner::SectionedStep> step;
  planner::MemoryPlan plan;
};

Planned Plan(std::vector<int32_t> cuts, const std::vector<std::string>& offload) {
  Planned p{Net(), nullptr, {}};
  static const ForwardScratch scratch;
  planner::TrainingOptions options;
  options.scratch = &scratch;
  const planner::TrainingGraph t = planner::TrainingGraph::Build(p.forward, options).value();
  planner::SectionCuts section_cuts{std::move(cuts), {}};
  for (const std::string& name : offload) section_cuts.offload.push_back(t.FindTensor(name));
  p.step = std::make_unique<planner::SectionedStep>(
      planner::ExpandSections(t, section_cuts, HalfSecondCopies()).value());
  p.plan = planner::PlanScheduledGraph(p.step->graph, p.step->schedule,
                                       planner::kDefaultAlignmentBytes,
                                       planner::DefaultStrategies())
               .value();
  return p;
}

ExecutionProgram Compile(const Planned& p, const CompileOptions& options = {}) {
  absl::StatusOr<ExecutionProgram> program =
      CompileStep(p.forward, *p.step, p.plan, options);
  EXPECT_TRUE(program.ok()) << program.status();
  return std::move(program).value();
}

// Each list of views of a node's arguments beside the tensors behind them.
std::vector<std::pair<const std::vector<TensorView>*, const std::vector<TensorId>*>> Lists(
    const ProgramNode& node, const NodeKernelArgs& args) {
  const ArgTensors& t = node.tensors;
  switch (node.kind) {
    case NodeKind::kForward:
    case NodeKind::kRecompute:
      return {{&args.forward.inputs, &t.inputs},
              {&args.forward.outputs, &t.outputs},
              {&args.forward.saved, &t.saved},
              {&args.forward.running, &t.running}};
    case NodeKind::kBackward:
      return {{&args.backward.inputs, &t.inputs},
              {&args.backward.outputs, &t.outputs},
              {&args.backward.saved, &t.saved},
              {&args.backward.output_grads, &t.output_grads},
              {&args.backward.input_grads, &t.input_grads}};
    case NodeKind::kUpdate:
      return {{&args.update.state, &t.state}};
    default:
      return {};
  }
}

TEST(ExecutionProgramTest, EveryArgumentResolvesToItsPlannedOffset) {
  const Planned p = Plan({3, 5}, {"s1"});
  const ExecutionProgram program = Compile(p);
  const planner::TrainingGraph& g = p.step->graph;
  ASSERT_EQ(program.nodes.size(), g.nodes().size());
  std::vector<char> arena(p.plan.arena_bytes);
  int views_checked = 0;
  for (size_t n = 0; n < program.nodes.size(); ++n) {
    const ProgramNode& node = program.nodes[n];
    SCOPED_TRACE(absl::StrCat("position ", n, ": ", g.node(node.node).name));
    EXPECT_EQ(node.node, p.step->schedule.order[n]);
    const NodeKernelArgs bound = BindArgs(program, node, arena.data());
    for (const auto& [views, tensors] : Lists(node, bound)) {
      ASSERT_EQ(views->size(), tensors->size());
      for (size_t i = 0; i < views->size(); ++i) {
        const TensorId t = (*tensors)[i];
        if (t == planner::kNone) {
          EXPECT_EQ((*views)[i].data, nullptr);
          continue;
        }
        EXPECT_EQ(program.tensor_slices[t], (ArenaSlice{p.plan.tensors[t].offset,
                                                        g.tensor(t).bytes}));
        EXPECT_EQ((*views)[i].data, arena.data() + p.plan.tensors[t].offset);
        EXPECT_EQ((*views)[i].shape, g.tensor(t).shape);
        ++views_checked;
      }
    }
    // A forward node is handed exactly its inputs, in order.
    if (node.kind == NodeKind::kForward) {
      EXPECT_EQ(node.tensors.inputs, g.node(node.node).inputs);
    }
  }
  EXPECT_GT(views_checked, 40);
}

TEST(ExecutionProgramTest, ForwardNodesGetTheirPlannedScratch) {
  const Planned p = Plan({}, {});
  const ExecutionProgram program = Compile(p);
  std::vector<char> arena(p.plan.arena_bytes);
  int forward_nodes = 0;
  for (const ProgramNode& node : program.nodes) {
    const TensorId scratch = node.tensors.scratch;
    if (node.kind != NodeKind::kForward) {
      EXPECT_EQ(scratch, planner::kNone);
      continue;
    }
    ++forward_nodes;
    ASSERT_NE(scratch, planner::kNone);
    EXPECT_EQ(program.tensor_slices[scratch].bytes, kScratchBytes);
    const ForwardArgs args = BindArgs(program, node, arena.data()).forward;
    EXPECT_EQ(args.scratch, arena.data() + p.plan.tensors[scratch].offset);
    EXPECT_EQ(args.scratch_bytes, kScratchBytes);
  }
  EXPECT_EQ(forward_nodes, 7);
}

TEST(ExecutionProgramTest, LiveBuffersNeverOverlapAndEachComesAndGoesOnce) {
  const Planned p = Plan({3, 5}, {"s1"});
  const ExecutionProgram program = Compile(p);
  std::vector<int> allocated(program.buffers.size()), freed(program.buffers.size());
  std::vector<int32_t> live;
  for (int32_t b = 0; b < static_cast<int32_t>(program.buffers.size()); ++b) {
    if (program.buffers[b].persistent) live.push_back(b);
  }
  auto overlap = [&](int32_t a, int32_t b) {
    const ArenaSlice& x = program.buffers[a].slice;
    const ArenaSlice& y = program.buffers[b].slice;
    return x.offset < y.end() && y.offset < x.end();
  };
  for (size_t n = 0; n < program.nodes.size(); ++n) {
    for (int32_t b : program.nodes[n].allocate) {
      ++allocated[b];
      for (int32_t other : live) {
        EXPECT_FALSE(overlap(b, other)) << program.buffers[b].name << " overlaps "
                                        << program.buffers[other].name << " at " << n;
      }
      live.push_back(b);
    }
    for (int32_t b : program.nodes[n].free) {
      ++freed[b];
      live.erase(std::find(live.begin(), live.end(), b));
    }
  }
  for (size_t b = 0; b < program.buffers.size(); ++b) {
    const int expected = program.buffers[b].persistent ? 0 : 1;
    EXPECT_EQ(allocated[b], expected) << program.buffers[b].name;
    EXPECT_EQ(freed[b], expected) << program.buffers[b].name;
  }
}

// The program's nodes in order, updates left out: name, and for copies what they move.
std::string Actions(const ExecutionProgram& program, const planner::TrainingGraph& g) {
  std::vector<std::string> actions;
  for (const ProgramNode& node : program.nodes) {
    if (node.kind == NodeKind::kUpdate) continue;
    std::string action = g.node(node.node).name;
    for (TensorId t : node.copy_out_after) {
      absl::StrAppend(&action, " out(", g.tensor(t).name, ")");
    }
    if (node.prefetch_source != planner::kNone) {
      absl::StrAppend(&action, "(", g.tensor(node.prefetch_source).name, ")");
    }
    actions.push_back(action);
  }
  return absl::StrJoin(actions, ", ");
}

TEST(ExecutionProgramTest, SectionsRecomputeAndOffloadInOrder) {
  const Planned p = Plan({3, 5}, {"s1"});
  const ExecutionProgram program = Compile(p);
  const planner::TrainingGraph& g = p.step->graph;
  // s1 is copied out right after it is written, awaited after fc2 (the copy takes half
  // a second), and brought back before the last section's backward, for fc2's re-forward.
  // Sections [fc1 bn s1] and [fc2 s2] are re-run before their backward.
  EXPECT_EQ(Actions(program, g),
            "fc1, bn, s1 out(s1), fc2, s1.offload, s2, fc3, loss, s1.prefetch(s1), loss.seed, "
            "loss.backward, fc3.backward, fc2.recompute, s2.recompute, s2.backward, "
            "fc2.backward, fc1.recompute, bn.recompute, s1.recompute, s1.backward, "
            "bn.backward, fc1.backward")
      << program.DebugString(g);
  const TensorId s1 = g.FindTensor("s1");
  ASSERT_TRUE(program.host_offset[s1].has_value());
  EXPECT_EQ(*program.host_offset[s1], 0u);
  EXPECT_EQ(program.host_pool_bytes, 1024u);
  EXPECT_TRUE(program.copy_out_first.empty());
  for (TensorId t = 0; t < static_cast<TensorId>(g.tensors().size()); ++t) {
    if (t == s1) continue;
    EXPECT_FALSE(program.host_offset[t].has_value()) << g.tensor(t).name;
  }
  std::vector<std::string> batch;
  for (TensorId t : program.batch_tensors) batch.push_back(g.tensor(t).name);
  EXPECT_THAT(batch, ::testing::UnorderedElementsAre("x", "labels"));
}

TEST(ExecutionProgramTest, OnlyTheForwardUpdatesRunningStatistics) {
  const Planned p = Plan({3, 5}, {});
  const ExecutionProgram program = Compile(p);
  const planner::TrainingGraph& g = p.step->graph;
  int seen = 0;
  for (const ProgramNode& node : program.nodes) {
    const std::string& name = g.node(node.node).name;
    seen += name == "bn" || name == "bn.recompute";
    if (name == "bn") {
      EXPECT_EQ(node.args.forward.running.size(), 2u);
      EXPECT_EQ(node.args.forward.saved.size(), 2u);
    } else if (name == "bn.recompute") {
      EXPECT_TRUE(node.args.forward.running.empty());
      EXPECT_EQ(node.args.forward.saved.size(), 2u);
    }
  }
  EXPECT_EQ(seen, 2);
}

TEST(ExecutionProgramTest, CapturesAreReadAfterTheForwardNodeThatWritesThem) {
  const Planned p = Plan({3, 5}, {});
  const ExecutionProgram program = Compile(p, CompileOptions{{}, {"s2"}});
  const planner::TrainingGraph& g = p.step->graph;
  for (const ProgramNode& node : program.nodes) {
    const bool writes_s2 = g.node(node.node).name == "s2";
    EXPECT_EQ(node.capture_after.size(), writes_s2 ? 1u : 0u) << g.node(node.node).name;
  }
  const absl::StatusOr<ExecutionProgram> missing =
      CompileStep(p.forward, *p.step, p.plan, CompileOptions{{}, {"nowhere"}});
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(missing.status().message(), HasSubstr("cannot capture 'nowhere'"));
}

TEST(ExecutionProgramTest, APlanOfAnotherStepIsRejected) {
  const Planned p = Plan({}, {});
  planner::MemoryPlan short_plan = p.plan;
  short_plan.tensors.pop_back();
  const absl::StatusOr<ExecutionProgram> program =
      CompileStep(p.forward, *p.step, short_plan, {});
  EXPECT_EQ(program.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(program.status().message(), HasSubstr("tensors but the step has"));
}

TEST(ExecutionProgramTest, TensorsOfOneBufferAtTwoOffsetsAreAnInternalError) {
  const Planned p = Plan({}, {});
  // Move the second tensor of the first buffer that holds two (a gradient written in place).
  planner::MemoryPlan plan = p.plan;
  std::vector<int> tensors_of_buffer(plan.tensors.size());
  for (planner::PlannedTensor& t : plan.tensors) {
    if (++tensors_of_buffer[t.buffer] < 2) continue;
    t.offset += planner::kDefaultAlignmentBytes;
    break;
  }
  ASSERT_TRUE(std::count(tensors_of_buffer.begin(), tensors_of_buffer.end(), 2) == 1)
      << "no buffer holds two tensors";
  const absl::StatusOr<ExecutionProgram> program = CompileStep(p.forward, *p.step, plan, {});
  EXPECT_EQ(program.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(program.status().message(), HasSubstr("at another offset"));
}

TEST(ExecutionProgramTest, APrefetchWithoutAnOffloadedSourceIsAnInternalError) {
  Planned p = Plan({3, 5}, {"s1"});
  for (planner::SectionInfo& section : p.step->sections) {
    for (planner::CachedInput& c : section.boundary) c.offloaded = false;
  }
  const absl::StatusOr<ExecutionProgram> program = CompileStep(p.forward, *p.step, p.plan, {});
  EXPECT_EQ(program.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(program.status().message(), HasSubstr("prefetch node 's1.prefetch'"));
}

}  // namespace
}  // namespace headroom::executor
