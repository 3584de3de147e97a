#include "planner/sharing.h"

#include <algorithm>
#include <numeric>

namespace headroom::planner {
namespace {

// Union-find over tensors, each group knowing its lifetime and whether it may be overwritten.
class Groups {
 public:
  Groups(const TrainingGraph& graph, const std::vector<Lifetime>& lifetimes)
      : parent_(graph.tensors().size()),
        lifetime_(lifetimes),
        fixed_(graph.tensors().size()),
        joined_(graph.tensors().size(), false) {
    std::iota(parent_.begin(), parent_.end(), 0);
    for (size_t t = 0; t < fixed_.size(); ++t) {
      const TrainingTensor& tensor = graph.tensor(t);
      fixed_[t] = tensor.persistent() || tensor.producer == kNone;
    }
  }

  TensorId Find(TensorId t) {
    while (parent_[t] != t) t = parent_[t] = parent_[parent_[t]];
    return t;
  }

  // Joins `member`'s group into `root`'s.
  void Join(TensorId member, TensorId root) {
    member = Find(member);
    root = Find(root);
    if (member == root) return;
    parent_[member] = root;
    lifetime_[root].first_position =
        std::min(lifetime_[root].first_position, lifetime_[member].first_position);
    lifetime_[root].last_position =
        std::max(lifetime_[root].last_position, lifetime_[member].last_position);
    fixed_[root] = fixed_[root] || fixed_[member];
  }

  bool Alone(TensorId t) { return Find(t) == t && !joined_[t]; }
  void MarkJoined(TensorId t) { joined_[t] = true; }
  const Lifetime& lifetime(TensorId root) const { return lifetime_[root]; }
  bool fixed(TensorId root) const { return fixed_[root]; }

 private:
  std::vector<TensorId> parent_;
  std::vector<Lifetime> lifetime_;
  std::vector<bool> fixed_;
  std::vector<bool> joined_;
};

}  // namespace

BufferAssignment AssignBuffers(const TrainingGraph& graph, const Schedule& schedule,
                               const std::vector<Lifetime>& lifetimes) {
  Groups groups(graph, lifetimes);
  for (Position position = 0; position < schedule.num_positions(); ++position) {
    const TrainingNode& node = graph.node(schedule.order[position]);
    for (const auto& [o, i] : node.views) {
      groups.Join(node.outputs[o], node.inputs[i]);
      groups.MarkJoined(node.outputs[o]);
    }
    std::vector<TensorId> taken;
    for (const auto& [o, i] : node.inplace) {
      const TensorId out = node.outputs[o];
      const TensorId root = groups.Find(node.inputs[i]);
      const bool free_here = !groups.fixed(root) && groups.lifetime(root).last_position == position;
      const bool untaken = std::find(taken.begin(), taken.end(), root) == taken.end();
      if (!groups.Alone(out) || !free_here || !untaken) continue;
      groups.Join(out, root);
      groups.MarkJoined(out);
      taken.push_back(root);
    }
  }
  BufferAssignment result;
  result.buffer_of.assign(graph.tensors().size(), -1);
  std::vector<int32_t> buffer_of_root(graph.tensors().size(), -1);
  for (TensorId t = 0; t < static_cast<TensorId>(graph.tensors().size()); ++t) {
    const TensorId root = groups.Find(t);
    if (buffer_of_root[root] < 0) {
      buffer_of_root[root] = static_cast<int32_t>(result.buffers.size());
      result.buffers.push_back({graph.tensor(root).bytes, groups.lifetime(root), {}});
    }
    Buffer& buffer = result.buffers[buffer_of_root[root]];
    buffer.bytes = std::max(buffer.bytes, graph.tensor(t).bytes);
    buffer.tensors.push_back(t);
    result.buffer_of[t] = buffer_of_root[root];
  }
  return result;
}

}  // namespace headroom::planner
