#include "planner/schedule.h"

#include <algorithm>
#include <functional>
#include <queue>

#include "absl/strings/str_cat.h"

namespace headroom::planner {

absl::StatusOr<Schedule> ScheduleGraph(const TrainingGraph& graph) {
  const int32_t n = static_cast<int32_t>(graph.nodes().size());
  std::vector<int32_t> missing(n, 0);
  std::vector<std::vector<NodeId>> next(n);
  auto edge = [&](NodeId from, NodeId to) {
    if (from == kNone || from == to) return;
    next[from].push_back(to);
    ++missing[to];
  };
  for (NodeId id = 0; id < n; ++id) {
    const TrainingNode& node = graph.node(id);
    for (TensorId t : node.inputs) edge(graph.tensor(t).producer, id);
    for (NodeId before : node.after) edge(before, id);
  }
  std::priority_queue<NodeId, std::vector<NodeId>, std::greater<NodeId>> ready;
  for (NodeId id = 0; id < n; ++id) {
    if (missing[id] == 0) ready.push(id);
  }
  Schedule schedule;
  schedule.position_of.assign(n, -1);
  while (!ready.empty()) {
    const NodeId id = ready.top();
    ready.pop();
    schedule.position_of[id] = static_cast<Position>(schedule.order.size());
    schedule.order.push_back(id);
    for (NodeId m : next[id]) {
      if (--missing[m] == 0) ready.push(m);
    }
  }
  if (schedule.num_positions() != n) {
    const std::vector<Position>& position_of = schedule.position_of;
    const NodeId stuck = static_cast<NodeId>(
        std::find(position_of.begin(), position_of.end(), -1) - position_of.begin());
    return absl::InternalError(
        absl::StrCat("training graph has a cycle through node '", graph.node(stuck).name, "'"));
  }
  return schedule;
}

std::vector<Lifetime> ComputeLifetimes(const TrainingGraph& graph, const Schedule& schedule) {
  const Position last = std::max(schedule.num_positions() - 1, 0);
  std::vector<Lifetime> lifetimes(graph.tensors().size());
  for (size_t t = 0; t < graph.tensors().size(); ++t) {
    const TrainingTensor& tensor = graph.tensor(t);
    Lifetime& life = lifetimes[t];
    if (tensor.persistent()) {
      life = {0, last};
      continue;
    }
    life.first_position = tensor.producer == kNone ? 0 : schedule.position_of[tensor.producer];
    life.last_position = life.first_position;
    for (NodeId c : tensor.consumers) {
      life.last_position = std::max(life.last_position, schedule.position_of[c]);
    }
  }
  if (graph.loss() != kNone) lifetimes[graph.loss()].last_position = last;
  return lifetimes;
}

LivePeak FindLivePeak(const std::vector<uint64_t>& bytes, const std::vector<Lifetime>& lifetimes) {
  Position positions = 0;
  for (const Lifetime& l : lifetimes) positions = std::max(positions, l.last_position + 1);
  // Difference array: +bytes at the first position, -bytes after the last.
  std::vector<int64_t> delta(positions + 1, 0);
  for (size_t i = 0; i < bytes.size(); ++i) {
    delta[lifetimes[i].first_position] += static_cast<int64_t>(bytes[i]);
    delta[lifetimes[i].last_position + 1] -= static_cast<int64_t>(bytes[i]);
  }
  LivePeak peak;
  int64_t live = 0, most = -1;
  for (Position p = 0; p < positions; ++p) {
    live += delta[p];
    if (live > most) {
      most = live;
      peak.position = p;
    }
  }
  peak.bytes = static_cast<uint64_t>(std::max<int64_t>(most, 0));
  return peak;
}

uint64_t PeakLiveBytes(const std::vector<uint64_t>& bytes, const std::vector<Lifetime>& lifetimes) {
  return FindLivePeak(bytes, lifetimes).bytes;
}

}  // namespace headroom::planner
