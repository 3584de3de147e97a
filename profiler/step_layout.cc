#include "profiler/step_layout.h"

#include <algorithm>
#include <utility>

namespace headroom::profiler {
namespace {

using planner::NodeKind;
using planner::TensorId;

MemoryRole RoleOf(proto::TensorRole role) {
  switch (role) {
    case proto::ROLE_PARAMETER: return MemoryRole::kParameter;
    case proto::ROLE_GRADIENT:
    case proto::ROLE_COMMUNICATION:
      return MemoryRole::kGradient;  // gradient buckets
    case proto::ROLE_OPTIMIZER_STATE: return MemoryRole::kOptimizerState;
    case proto::ROLE_BUFFER: return MemoryRole::kBuffer;
    case proto::ROLE_INPUT:
    case proto::ROLE_LABEL: return MemoryRole::kBatch;
    case proto::ROLE_CACHED_INPUT: return MemoryRole::kCachedInput;
    case proto::ROLE_TEMPORARY: return MemoryRole::kScratch;
    default: return MemoryRole::kActivation;
  }
}

const std::string& Empty() {
  static const std::string* empty = new std::string();
  return *empty;
}

}  // namespace

const std::string& StepLayout::NodeName(int32_t position) const {
  if (position < 0 || position >= static_cast<int32_t>(nodes.size())) return Empty();
  return nodes[position].name;
}

const std::string& StepLayout::ProducerName(int32_t t) const {
  if (t < 0 || t >= static_cast<int32_t>(tensors.size())) return Empty();
  return NodeName(tensors[t].producer);
}

StepLayout DescribeStep(const planner::SectionedStep& step) {
  const planner::TrainingGraph& g = step.graph;
  StepLayout layout;
  layout.num_sections = std::max<int32_t>(1, static_cast<int32_t>(step.sections.size()));

  // 1. Sections: forward ranges, and backward groups by their first position.
  std::vector<std::pair<int32_t, int32_t>> groups;  // (first position, section), by position.
  for (int32_t i = 0; i < static_cast<int32_t>(step.sections.size()); ++i) {
    if (step.sections[i].backward_position >= 0) {
      groups.emplace_back(step.sections[i].backward_position, i);
    }
  }
  std::sort(groups.begin(), groups.end());
  auto forward_section = [&](int32_t position) {
    for (int32_t i = 0; i < static_cast<int32_t>(step.sections.size()); ++i) {
      if (position >= step.sections[i].begin && position < step.sections[i].end) return i;
    }
    return layout.num_sections - 1;
  };
  auto backward_section = [&](int32_t position) {
    int32_t section = layout.num_sections - 1;  // The loss seed runs before any group.
    for (const auto& [first, i] : groups) {
      if (first <= position) section = i;
    }
    return section;
  };

  // 2. Nodes by schedule position. The forward phase runs until the first node that is
  //    neither a forward node nor an offload; section ranges count forward nodes only, and
  //    an offload awaited there belongs to the forward node before it.
  std::vector<int32_t> position_of(g.nodes().size(), -1);
  layout.nodes.resize(step.schedule.order.size());
  bool in_forward = true;
  int32_t forward_seen = 0;
  for (int32_t s = 0; s < static_cast<int32_t>(step.schedule.order.size()); ++s) {
    const planner::TrainingNode& node = g.node(step.schedule.order[s]);
    position_of[step.schedule.order[s]] = s;
    StepLayout::Node& out = layout.nodes[s];
    out.name = node.name;
    out.op = node.op;
    out.kind = node.kind;
    in_forward = in_forward && (node.kind == NodeKind::kForward || node.kind == NodeKind::kOffload);
    if (!in_forward) {
      out.section = backward_section(s);
    } else if (node.kind == NodeKind::kForward) {
      out.section = forward_section(forward_seen++);
    } else {
      out.section = forward_seen > 0 ? forward_section(forward_seen - 1) : 0;
    }
  }

  // 3. Tensors: names, producers, roles; then the sections' cached inputs.
  layout.tensors.resize(g.tensors().size());
  for (TensorId t = 0; t < static_cast<TensorId>(g.tensors().size()); ++t) {
    const planner::TrainingTensor& tensor = g.tensor(t);
    StepLayout::Tensor& out = layout.tensors[t];
    out.name = tensor.name;
    out.role = RoleOf(tensor.role);
    out.producer = tensor.producer == planner::kNone ? -1 : position_of[tensor.producer];
  }
  for (const planner::SectionInfo& section : step.sections) {
    for (const planner::CachedInput& c : section.boundary) {
      if (layout.tensors[c.tensor].role == MemoryRole::kActivation) {
        layout.tensors[c.tensor].role = MemoryRole::kCachedInput;
      }
    }
  }
  for (int32_t s = 0; s < static_cast<int32_t>(layout.nodes.size()); ++s) {
    const planner::TrainingNode& node = g.node(step.schedule.order[s]);
    if (node.kind != NodeKind::kPrefetch) continue;
    for (TensorId t : node.outputs) layout.tensors[t].role = MemoryRole::kCachedInput;
  }
  return layout;
}

}  // namespace headroom::profiler
