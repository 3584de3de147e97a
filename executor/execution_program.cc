#include "executor/execution_program.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "profiler/step_layout.h"
#include "util/status_macros.h"

namespace headroom::executor {
namespace {

using planner::NodeId;
using planner::NodeKind;
using planner::TensorId;
using planner::TrainingGraph;
using planner::TrainingNode;

bool Supported(proto::DType dtype) {
  return dtype == proto::DTYPE_FLOAT32 || dtype == proto::DTYPE_BFLOAT16 ||
         dtype == proto::DTYPE_INT32 || dtype == proto::DTYPE_INT64 || dtype == proto::DTYPE_BOOL;
}

uint64_t AlignUp(uint64_t bytes, uint64_t align) { return (bytes + align - 1) / align * align; }

// Checks that `plan` covers every tensor of `g` and that the executor can hold each one.
absl::Status CheckTensors(const TrainingGraph& g, const planner::MemoryPlan& plan) {
  if (plan.tensors.size() != g.tensors().size()) {
    return absl::InvalidArgumentError(absl::StrCat("executor: the memory plan has ",
                                                   plan.tensors.size(),
                                                   " tensors but the step has ",
                                                   g.tensors().size()));
  }
  for (const planner::TrainingTensor& tensor : g.tensors()) {
    if (Supported(tensor.dtype)) continue;
    return absl::InvalidArgumentError(absl::StrCat(
        "executor: tensor '", tensor.name, "' has dtype ", graph::DTypeName(tensor.dtype),
        "; the executor takes float32, bfloat16, int32, int64 and bool"));
  }
  return absl::OkStatus();
}

// Sets each tensor's slice and gathers the tensors of each planned buffer into one
// ProgramBuffer. Internal when two tensors of a buffer have different offsets.
absl::Status AssignBuffers(const planner::SectionedStep& step, const planner::MemoryPlan& plan,
                           ExecutionProgram& p) {
  const TrainingGraph& g = step.graph;
  const uint64_t align = std::max<uint64_t>(plan.alignment_bytes, 1);
  const profiler::StepLayout layout = profiler::DescribeStep(step);
  absl::flat_hash_map<int32_t, int32_t> index_of_buffer;
  for (TensorId t = 0; t < static_cast<TensorId>(g.tensors().size()); ++t) {
    const planner::PlannedTensor& pt = plan.tensors[t];
    if (g.tensor(t).on_host) {  // Optimizer state on the host: a host slot, no arena bytes.
      p.tensor_slices.push_back({0, 0});
      continue;
    }
    p.tensor_slices.push_back({pt.offset, g.tensor(t).bytes});
    auto [it, added] =
        index_of_buffer.emplace(pt.buffer, static_cast<int32_t>(p.buffers.size()));
    if (added) {
      ProgramBuffer b;
      b.name = pt.name;
      b.first_tensor = t;
      b.role = layout.tensors[t].role;
      b.slice.offset = pt.offset;
      b.first_position = pt.lifetime.first_position;
      b.last_position = pt.lifetime.last_position;
      p.buffers.push_back(b);
    }
    ProgramBuffer& b = p.buffers[it->second];
    if (pt.offset != b.slice.offset) {
      return absl::InternalError(absl::StrCat("executor: '", pt.name,
                                              "' shares a buffer with '", b.name,
                                              "' at another offset"));
    }
    b.slice.bytes = std::max(b.slice.bytes, AlignUp(pt.bytes, align));
    b.first_position = std::min(b.first_position, pt.lifetime.first_position);
    b.last_position = std::max(b.last_position, pt.lifetime.last_position);
    b.persistent = b.persistent || g.tensor(t).persistent();
  }
  // Buffers that are not persistent come and go with their lifetimes.
  const int32_t last = static_cast<int32_t>(p.nodes.size()) - 1;
  for (int32_t b = 0; b < static_cast<int32_t>(p.buffers.size()); ++b) {
    if (p.buffers[b].persistent) continue;
    p.nodes[std::clamp(p.buffers[b].first_position, 0, last)].allocate.push_back(b);
    p.nodes[std::clamp(p.buffers[b].last_position, 0, last)].free.push_back(b);
  }
  return absl::OkStatus();
}

// Gives each offloaded section input (or kept tensor) a host slot and schedules its copy out
// and back.
void AssignHostSlots(const planner::SectionedStep& step, uint64_t align, ExecutionProgram& p) {
  p.host_offset.assign(step.graph.tensors().size(), std::nullopt);
  for (const planner::SectionInfo& section : step.sections) {
    for (const planner::CachedInput* c : section.Held()) {
      // A tensor cached by several sections is copied out and prefetched once: the planner
      // gives each section's entry the same copy and prefetch.
      if (!c->offloaded || p.host_offset[c->tensor].has_value()) continue;
      p.host_offset[c->tensor] = p.host_pool_bytes;
      p.host_pool_bytes += AlignUp(c->bytes, align);
      (c->copy_out_after_position < 0 ? p.copy_out_first
                                      : p.nodes[c->copy_out_after_position].copy_out_after)
          .push_back(c->tensor);
      p.nodes[c->prefetch_position].prefetch_source = c->tensor;
    }
  }
  // Then each host update's master parameter, gradient and state.
  const TrainingGraph& g = step.graph;
  auto slot = [&](TensorId t) {
    const uint64_t offset = p.host_pool_bytes;
    p.host_offset[t] = offset;
    p.host_pool_bytes += AlignUp(g.tensor(t).bytes, align);
    return offset;
  };
  for (const planner::HostUpdate& u : step.host_updates) {
    ProgramHostUpdate h;
    const std::string& op = g.node(u.update_position).op;
    h.op = op.substr(std::min<size_t>(op.size(), 4));  // "HostAdamUpdate" -> "AdamUpdate".
    h.param = u.param;
    h.grad = u.grad;
    h.state = u.state;
    h.param_offset = slot(u.param);
    h.grad_offset = slot(u.grad);
    for (TensorId t : u.state) h.state_offsets.push_back(slot(t));
    const int32_t index = static_cast<int32_t>(p.host_updates.size());
    p.nodes[u.grad_copy_after_position].grad_copy_after.push_back(u.grad);
    p.nodes[u.update_position].host_update = index;
    p.nodes[u.copy_back_position].host_update = index;
    p.host_updates.push_back(std::move(h));
  }
  // Parameters on the host between uses: each copy is prefetched from the master copy.
  for (const planner::ParameterCopy& c : step.parameter_copies) {
    p.nodes[c.prefetch_position].prefetch_source = c.param;
  }
}

// Describes the kernel arguments of the node at each position; a backward node reads its
// forward node's saved state.
absl::Status DescribeNodes(const graph::Graph& forward, const planner::SectionedStep& step,
                           const CompileOptions& options, ExecutionProgram& p) {
  const TrainingGraph& g = step.graph;
  const std::vector<NodeId> forward_node = ForwardNodeIndex(forward, g);
  for (ProgramNode& pn : p.nodes) {
    const TrainingNode& node = g.node(pn.node);
    switch (node.kind) {
      case NodeKind::kForward:
      case NodeKind::kRecompute:
      case NodeKind::kRebuild: {
        DescribedArgs<ForwardArgs> d = DescribeForwardArgs(forward, g, node);
        pn.args.forward = std::move(d.args);
        pn.tensors = std::move(d.tensors);
        break;
      }
      case NodeKind::kBackward: {
        const NodeId f = forward_node[node.forward_node];
        if (f == planner::kNone) {
          return absl::InternalError(absl::StrCat("executor: backward node '", node.name,
                                                  "' has no forward node in the step"));
        }
        absl::StatusOr<DescribedArgs<BackwardArgs>> d =
            DescribeBackwardArgs(forward, g, node, g.node(f));
        if (!d.ok()) {
          return absl::Status(d.status().code(),
                              absl::StrCat("executor: ", d.status().message()));
        }
        pn.args.backward = std::move(d->args);
        pn.tensors = std::move(d->tensors);
        break;
      }
      case NodeKind::kUpdate: {
        if (pn.host_update >= 0) break;  // On the host: ProgramHostUpdate says it all.
        DescribedArgs<UpdateArgs> d = DescribeUpdateArgs(g, node, options.optimizer);
        pn.args.update = std::move(d.args);
        pn.tensors = std::move(d.tensors);
        break;
      }
      case NodeKind::kPrefetch:
        if (pn.prefetch_source == planner::kNone && pn.host_update < 0) {
          return absl::InternalError(absl::StrCat("executor: prefetch node '", node.name,
                                                  "' has no offloaded source"));
        }
        break;
      case NodeKind::kLossSeed:
      case NodeKind::kAccumulate:
      case NodeKind::kOffload:
        break;
    }
  }
  return absl::OkStatus();
}

// Finds the forward node that writes each captured tensor.
absl::Status FindCaptures(const TrainingGraph& g, const std::vector<std::string>& capture,
                          ExecutionProgram& p) {
  for (const std::string& name : capture) {
    bool found = false;
    for (ProgramNode& pn : p.nodes) {
      const TrainingNode& node = g.node(pn.node);
      if (node.kind != NodeKind::kForward) continue;
      for (TensorId t : node.outputs) {
        if (g.tensor(t).name != name) continue;
        pn.capture_after.push_back(t);
        found = true;
      }
      if (found) break;
    }
    if (!found) {
      return absl::InvalidArgumentError(
          absl::StrCat("executor: cannot capture '", name, "': no forward node writes it"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ExecutionProgram> CompileStep(const graph::Graph& forward,
                                             const planner::SectionedStep& step,
                                             const planner::MemoryPlan& plan,
                                             const CompileOptions& options) {
  const TrainingGraph& g = step.graph;
  RETURN_IF_ERROR(CheckTensors(g, plan));
  ExecutionProgram p;
  p.nodes.resize(g.nodes().size());
  for (size_t n = 0; n < p.nodes.size(); ++n) {
    p.nodes[n].node = step.schedule.order[n];
    p.nodes[n].kind = g.node(p.nodes[n].node).kind;
  }
  RETURN_IF_ERROR(AssignBuffers(step, plan, p));
  AssignHostSlots(step, std::max<uint64_t>(plan.alignment_bytes, 1), p);
  RETURN_IF_ERROR(DescribeNodes(forward, step, options, p));
  RETURN_IF_ERROR(FindCaptures(g, options.capture, p));
  for (TensorId t = 0; t < g.num_forward_tensors(); ++t) {
    const proto::TensorRole role = g.tensor(t).role;
    if (role == proto::ROLE_INPUT || role == proto::ROLE_LABEL) p.batch_tensors.push_back(t);
  }
  return p;
}

NodeKernelArgs BindArgs(const ExecutionProgram& program, const ProgramNode& node,
                        void* arena_base) {
  auto data = [&](TensorId t) -> void* {
    return static_cast<char*>(arena_base) + program.tensor_slices[t].offset;
  };
  NodeKernelArgs bound;
  switch (node.kind) {
    case NodeKind::kForward:
    case NodeKind::kRecompute:
    case NodeKind::kRebuild:
      bound.forward = Bind({node.args.forward, node.tensors}, data);
      break;
    case NodeKind::kBackward:
      bound.backward = Bind({node.args.backward, node.tensors}, data);
      break;
    case NodeKind::kUpdate:
      if (node.host_update >= 0) break;  // On the host: the executor binds its host slots.
      bound.update = Bind({node.args.update, node.tensors}, data);
      break;
    default:
      break;
  }
  return bound;
}

std::string ExecutionProgram::DebugString(const TrainingGraph& g) const {
  auto names = [&](const std::vector<TensorId>& tensors) {
    return absl::StrJoin(tensors, " ", [&](std::string* out, TensorId t) {
      absl::StrAppend(out, g.tensor(t).name);
    });
  };
  std::string out = absl::StrCat("arena tensors ", tensor_slices.size(), ", buffers ",
                                 buffers.size(), ", host pool ", host_pool_bytes, " bytes\n");
  if (!copy_out_first.empty()) absl::StrAppend(&out, "   out: ", names(copy_out_first), "\n");
  for (size_t n = 0; n < nodes.size(); ++n) {
    const ProgramNode& pn = nodes[n];
    absl::StrAppend(&out, n, " ", planner::NodeKindName(pn.kind), " '", g.node(pn.node).name,
                    "' +[", absl::StrJoin(pn.allocate, " "), "] -[",
                    absl::StrJoin(pn.free, " "), "]");
    if (!pn.copy_out_after.empty()) absl::StrAppend(&out, " out: ", names(pn.copy_out_after));
    if (pn.prefetch_source != planner::kNone) {
      absl::StrAppend(&out, " back: ", g.tensor(pn.prefetch_source).name);
    }
    if (!pn.grad_copy_after.empty()) {
      absl::StrAppend(&out, " grad out: ", names(pn.grad_copy_after));
    }
    if (pn.host_update >= 0) {
      const TensorId param = host_updates[pn.host_update].param;
      absl::StrAppend(&out,
                      pn.kind == NodeKind::kUpdate ? " host update: "
                      : g.tensor(param).on_host    ? " host update awaited: "
                                                   : " param back: ",
                      g.tensor(param).name);
    }
    absl::StrAppend(&out, "\n");
  }
  return out;
}

}  // namespace headroom::executor
