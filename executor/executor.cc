#include "executor/executor.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "executor/node_args.h"
#include "graph/shape.h"
#include "profiler/step_layout.h"
#include "util/check.h"
#include "util/split_mix.h"
#include "util/status_macros.h"

namespace headroom::executor {
namespace {

using planner::NodeId;
using planner::NodeKind;
using planner::TensorId;
using planner::TrainingGraph;
using planner::TrainingNode;

constexpr uint64_t kNoOffset = ~uint64_t{0};

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

bool Supported(proto::DType dtype) {
  return dtype == proto::DTYPE_FLOAT32 || dtype == proto::DTYPE_INT32 ||
         dtype == proto::DTYPE_INT64 || dtype == proto::DTYPE_BOOL;
}

}  // namespace

// Everything decided once in Create(): where each buffer lives and when, each node's
// arguments, where each copy goes; plus the copies in flight while a step runs.
struct Executor::Prepared {
  struct BufferInfo {
    std::string name;  // Of its first tensor.
    uint64_t offset = 0;
    uint64_t bytes = 0;  // Aligned, as the plan reserves.
    int32_t first_position = 0;
    int32_t last_position = 0;
    bool persistent = false;
    TensorId first_tensor = planner::kNone;
    profiler::MemoryRole role = profiler::MemoryRole::kActivation;  // Of its first tensor.
  };
  std::vector<int32_t> buffer_of;  // By tensor.
  std::vector<BufferInfo> buffers;
  std::vector<std::vector<int32_t>> allocate_at, free_at;  // By step: buffers.

  // By step: the arguments of the node run there (only the one its kind uses).
  std::vector<ForwardArgs> forward;
  std::vector<BackwardArgs> backward;
  std::vector<UpdateArgs> update;

  // Offload: each offloaded tensor's place in the host pool; copies to host issued after
  // each step (index s + 1; index 0 is before the first step); each prefetch node's source.
  std::vector<uint64_t> host_offset;
  std::vector<std::vector<TensorId>> copy_out_after;
  absl::flat_hash_map<NodeId, TensorId> prefetch_source;
  uint64_t host_pool_bytes = 0;

  // The step's input and label tensors.
  std::vector<TensorId> batch_tensors;
  // By step: the tensors ExecutorOptions::capture reads after the node there.
  std::vector<std::vector<TensorId>> capture_after;

  // In flight during a step.
  struct Copy {
    std::unique_ptr<Event> event;
    TensorId original = planner::kNone;
    int64_t issue_ns = 0;
  };
  absl::flat_hash_map<TensorId, Copy> copy_out_events;  // By original.
  absl::flat_hash_map<TensorId, Copy> prefetch_events;  // By device copy.
};

namespace {

// Reports the copy of `original` in `direction`, issued at `issue_ns` and awaited from
// `wait_start_ns` until now, to `sink`.
void ReportCopy(profiler::EventSink* sink, profiler::CopyEvent::Direction direction,
                int64_t step, TensorId original, const Event& event, int64_t issue_ns,
                uint64_t bytes, int64_t wait_start_ns) {
  if (sink == nullptr) return;
  profiler::CopyEvent e;
  e.direction = direction;
  e.step = step;
  e.tensor = original;
  e.bytes = bytes;
  e.issue_ns = issue_ns;
  const int64_t now = profiler::NowNanos();
  e.wait_ns = now - wait_start_ns;
  if (std::optional<Event::Interval> ran = event.interval()) {
    auto ns = [](std::chrono::steady_clock::time_point t) {
      return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
    };
    e.begin_ns = ns(ran->begin);
    e.end_ns = ns(ran->end);
    e.measured = true;
  } else {
    e.begin_ns = issue_ns;
    e.end_ns = now;
  }
  sink->OnCopy(e);
}

}  // namespace

Executor::Executor(const graph::Graph& forward,
                   std::shared_ptr<const planner::SectionedStep> step,
                   std::shared_ptr<const planner::MemoryPlan> memory, Backend* backend,
                   const ExecutorOptions& options)
    : forward_(forward),
      step_(std::move(step)),
      memory_(std::move(memory)),
      backend_(backend),
      options_(options),
      prepared_(std::make_unique<Prepared>()) {
  const TrainingGraph& g = step_->graph;
  for (TensorId t = 0; t < static_cast<TensorId>(g.tensors().size()); ++t) {
    const planner::TrainingTensor& tensor = g.tensor(t);
    if (!tensor.persistent()) continue;
    state_ids_.push_back(t);
    state_tensors_.push_back({tensor.name, tensor.shape, tensor.dtype, tensor.bytes});
  }
}

Executor::~Executor() {
  if (backend_ != nullptr) backend_->Synchronize().IgnoreError();
}

absl::StatusOr<std::unique_ptr<Executor>> Executor::Create(
    const graph::Graph& forward, std::shared_ptr<const planner::SectionedStep> step,
    std::shared_ptr<const planner::MemoryPlan> memory, Backend* backend,
    const std::vector<HostTensor>& initial_state, const ExecutorOptions& options) {
  absl::flat_hash_map<std::string, const HostTensor*> by_name;
  for (const HostTensor& t : initial_state) by_name[t.name] = &t;
  auto initial = [&](const StateTensorInfo& tensor, absl::Span<uint8_t> dst) -> absl::Status {
    auto it = by_name.find(tensor.name);
    if (it == by_name.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("executor: no initial value for '", tensor.name, "'"));
    }
    const HostTensor& value = *it->second;
    if (value.shape != tensor.shape || value.dtype != tensor.dtype ||
        value.bytes.size() != dst.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "executor: initial value of '", tensor.name, "' is ", graph::ShapeString(value.shape),
          " ", graph::DTypeName(value.dtype), "; the graph has ",
          graph::ShapeString(tensor.shape), " ", graph::DTypeName(tensor.dtype)));
    }
    std::copy(value.bytes.begin(), value.bytes.end(), dst.begin());
    return absl::OkStatus();
  };
  return Create(forward, std::move(step), std::move(memory), backend, initial, options);
}

absl::StatusOr<std::unique_ptr<Executor>> Executor::Create(
    const graph::Graph& forward, std::shared_ptr<const planner::SectionedStep> step,
    std::shared_ptr<const planner::MemoryPlan> memory, Backend* backend,
    InitialValueWriter initial, const ExecutorOptions& options) {
  CHECK(step != nullptr && memory != nullptr && backend != nullptr);
  if (memory->tensors.size() != step->graph.tensors().size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("executor: the memory plan has ", memory->tensors.size(),
                     " tensors but the step has ", step->graph.tensors().size()));
  }
  std::unique_ptr<Executor> e(
      new Executor(forward, std::move(step), std::move(memory), backend, options));
  // Decide everything before allocating anything.
  RETURN_IF_ERROR(e->Prepare());
  ASSIGN_OR_RETURN(std::unique_ptr<Buffer> arena,
                   backend->AllocateDevice(e->memory_->arena_bytes));
  e->arena_ = std::make_unique<DeviceArena>(std::move(arena));
  if (e->prepared_->host_pool_bytes > 0) {
    ASSIGN_OR_RETURN(e->host_pool_, backend->AllocateHost(e->prepared_->host_pool_bytes));
  }
  RETURN_IF_ERROR(e->PlaceState(initial));
  return e;
}

uint64_t Executor::host_pool_bytes() const { return prepared_->host_pool_bytes; }

TensorView Executor::View(TensorId t) const {
  const planner::TrainingTensor& tensor = step_->graph.tensor(t);
  TensorView v;
  v.shape = tensor.shape;
  v.dtype = tensor.dtype;
  // Before the arena exists (in Prepare) a view holds its offset plus one, so that offset
  // 0 is not taken for an absent tensor; PlaceState rebases it to an address.
  v.data = reinterpret_cast<void*>(static_cast<uintptr_t>(memory_->tensors[t].offset + 1));
  return v;
}

absl::Status Executor::Prepare() {
  const TrainingGraph& g = step_->graph;
  const planner::MemoryPlan& plan = *memory_;
  Prepared& p = *prepared_;
  const int32_t num_positions = static_cast<int32_t>(g.nodes().size());
  const uint64_t align = std::max<uint64_t>(plan.alignment_bytes, 1);

  // 1. Buffers: the tensors that share bytes, alive from the first one's first step to the
  //    last one's last step.
  for (TensorId t = 0; t < static_cast<TensorId>(g.tensors().size()); ++t) {
    const planner::TrainingTensor& tensor = g.tensor(t);
    if (!Supported(tensor.dtype)) {
      return absl::InvalidArgumentError(absl::StrCat("executor: tensor '", tensor.name,
                                                     "' has dtype ",
                                                     graph::DTypeName(tensor.dtype),
                                                     "; the executor takes float32, int32, "
                                                     "int64 and bool"));
    }
  }
  absl::flat_hash_map<int32_t, int32_t> index_of_buffer;
  p.buffer_of.assign(g.tensors().size(), -1);
  for (TensorId t = 0; t < static_cast<TensorId>(g.tensors().size()); ++t) {
    const planner::PlannedTensor& pt = plan.tensors[t];
    auto [it, added] =
        index_of_buffer.emplace(pt.buffer, static_cast<int32_t>(p.buffers.size()));
    if (added) {
      Prepared::BufferInfo b;
      b.name = pt.name;
      b.first_tensor = t;
      b.offset = pt.offset;
      b.first_position = pt.lifetime.first_position;
      b.last_position = pt.lifetime.last_position;
      p.buffers.push_back(b);
    }
    Prepared::BufferInfo& b = p.buffers[it->second];
    if (pt.offset != b.offset) {
      return absl::InternalError(absl::StrCat("executor: '", pt.name,
                                              "' shares a buffer with '", b.name,
                                              "' at another offset"));
    }
    b.bytes = std::max(b.bytes, (pt.bytes + align - 1) / align * align);
    b.first_position = std::min(b.first_position, pt.lifetime.first_position);
    b.last_position = std::max(b.last_position, pt.lifetime.last_position);
    b.persistent = b.persistent || g.tensor(t).persistent();
    p.buffer_of[t] = it->second;
  }
  if (options_.events != nullptr) {
    const profiler::StepLayout layout = profiler::DescribeStep(*step_);
    for (Prepared::BufferInfo& b : p.buffers) b.role = layout.tensors[b.first_tensor].role;
  }
  p.allocate_at.assign(num_positions, {});
  p.free_at.assign(num_positions, {});
  for (int32_t b = 0; b < static_cast<int32_t>(p.buffers.size()); ++b) {
    if (p.buffers[b].persistent) continue;
    p.allocate_at[std::clamp(p.buffers[b].first_position, 0, num_positions - 1)].push_back(b);
    p.free_at[std::clamp(p.buffers[b].last_position, 0, num_positions - 1)].push_back(b);
  }
  for (TensorId t = 0; t < g.num_forward_tensors(); ++t) {
    const proto::TensorRole role = g.tensor(t).role;
    if (role == proto::ROLE_INPUT || role == proto::ROLE_LABEL) p.batch_tensors.push_back(t);
  }

  // 2. Copies: a host slot per offloaded tensor, when each copy out is issued, and where
  //    each prefetch reads from.
  p.host_offset.assign(g.tensors().size(), kNoOffset);
  p.copy_out_after.assign(num_positions + 1, {});
  for (const planner::SectionInfo& section : step_->sections) {
    for (const planner::CachedInput& c : section.boundary) {
      // A tensor cached by several sections is copied out and prefetched once: the planner
      // gives each section's entry the same copy and prefetch.
      if (!c.offloaded || p.host_offset[c.tensor] != kNoOffset) continue;
      p.host_offset[c.tensor] = p.host_pool_bytes;
      p.host_pool_bytes += (c.bytes + align - 1) / align * align;
      p.copy_out_after[c.copy_out_after_position + 1].push_back(c.tensor);
      p.prefetch_source[c.prefetch_position] = c.tensor;
    }
  }

  // 3. Each node's arguments, as offsets (rebased once the arena exists). A backward node
  //    reads its forward node's saved state.
  const std::vector<NodeId> forward_node = ForwardNodeIndex(forward_, g);
  auto view = [&](TensorId t) { return View(t); };
  p.forward.resize(num_positions);
  p.backward.resize(num_positions);
  p.update.resize(num_positions);
  for (NodeId n = 0; n < num_positions; ++n) {
    const TrainingNode& node = g.node(step_->schedule.order[n]);
    switch (node.kind) {
      case NodeKind::kForward:
      case NodeKind::kRecompute:
        p.forward[n] = MakeForwardArgs(forward_, g, node, view);
        break;
      case NodeKind::kBackward: {
        const NodeId f = forward_node[node.forward_node];
        if (f == planner::kNone) {
          return absl::InternalError(absl::StrCat("executor: backward node '", node.name,
                                                  "' has no forward node in the step"));
        }
        absl::StatusOr<BackwardArgs> args = MakeBackwardArgs(forward_, g, node, g.node(f), view);
        if (!args.ok()) {
          return absl::Status(args.status().code(),
                              absl::StrCat("executor: ", args.status().message()));
        }
        p.backward[n] = *std::move(args);
        break;
      }
      case NodeKind::kUpdate: {
        UpdateArgs& args = p.update[n];
        args.op = node.op;
        args.grad = View(node.inputs[0]);
        args.param = View(node.updates[0]);
        for (size_t i = 1; i < node.updates.size(); ++i) {
          args.state.push_back(View(node.updates[i]));
        }
        args.params = options_.optimizer;
        break;
      }
      case NodeKind::kPrefetch:
        if (!p.prefetch_source.contains(n)) {
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

  // 4. Captured tensors: read right after the forward node that writes them.
  p.capture_after.assign(num_positions, {});
  for (const std::string& name : options_.capture) {
    bool found = false;
    for (NodeId n = 0; n < num_positions && !found; ++n) {
      const TrainingNode& node = g.node(step_->schedule.order[n]);
      if (node.kind != NodeKind::kForward) continue;
      for (TensorId t : node.outputs) {
        if (g.tensor(t).name != name) continue;
        p.capture_after[n].push_back(t);
        found = true;
      }
    }
    if (!found) {
      return absl::InvalidArgumentError(
          absl::StrCat("executor: cannot capture '", name, "': no forward node writes it"));
    }
  }
  return absl::OkStatus();
}

absl::Status Executor::PlaceState(InitialValueWriter initial) {
  Prepared& p = *prepared_;
  const TrainingGraph& g = step_->graph;
  // Rebase every prepared view from an offset to an address in the arena.
  auto rebase = [&](void*& data) {
    if (data != nullptr) data = arena_->At(reinterpret_cast<uintptr_t>(data) - 1);
  };
  auto rebase_all = [&](std::vector<TensorView>& views) {
    for (TensorView& v : views) rebase(v.data);
  };
  for (NodeId n = 0; n < static_cast<NodeId>(g.nodes().size()); ++n) {
    switch (g.node(step_->schedule.order[n]).kind) {
      case NodeKind::kForward:
      case NodeKind::kRecompute:
        rebase_all(p.forward[n].inputs);
        rebase_all(p.forward[n].outputs);
        rebase_all(p.forward[n].saved);
        rebase_all(p.forward[n].running);
        rebase(p.forward[n].scratch);
        break;
      case NodeKind::kBackward: {
        BackwardArgs& a = p.backward[n];
        for (auto* views : {&a.inputs, &a.outputs, &a.saved, &a.output_grads, &a.input_grads}) {
          rebase_all(*views);
        }
        rebase(a.scratch);
        break;
      }
      case NodeKind::kUpdate:
        rebase(p.update[n].param.data);
        rebase(p.update[n].grad.data);
        rebase_all(p.update[n].state);
        break;
      default:
        break;
    }
  }
  // Allocate persistent buffers for good, and write the initial state.
  for (int32_t b = 0; b < static_cast<int32_t>(p.buffers.size()); ++b) {
    const Prepared::BufferInfo& info = p.buffers[b];
    if (!info.persistent) continue;
    RETURN_IF_ERROR(arena_->Allocate(b, info.offset, info.bytes, info.name).status());
    ReportBuffer(profiler::MemoryEvent::Kind::kAllocate, b, -1);
  }
  ReportWorkspace(-1);
  // Each tensor through one host buffer: optimizer state zero, the rest as `initial` writes.
  uint64_t largest = 0;
  for (const StateTensorInfo& info : state_tensors_) largest = std::max(largest, info.bytes);
  std::vector<uint8_t> staging(largest);
  for (size_t i = 0; i < state_ids_.size(); ++i) {
    const planner::TrainingTensor& tensor = g.tensor(state_ids_[i]);
    const absl::Span<uint8_t> value(staging.data(), tensor.bytes);
    if (tensor.role == proto::ROLE_OPTIMIZER_STATE) {
      std::fill(value.begin(), value.end(), 0);
    } else {
      RETURN_IF_ERROR(initial(state_tensors_[i], value));
    }
    RETURN_IF_ERROR(
        backend_->Upload(arena_->At(memory_->tensors[state_ids_[i]].offset), value.data(),
                         tensor.bytes));
  }
  arena_->ResetPeaks();
  return absl::OkStatus();
}

absl::StatusOr<StepResult> Executor::RunStep(const std::vector<HostTensor>& batch) {
  const auto start = std::chrono::steady_clock::now();
  Prepared& p = *prepared_;
  const TrainingGraph& g = step_->graph;
  const int32_t num_positions = static_cast<int32_t>(g.nodes().size());
  StepResult result;
  result.step = steps_run_;
  const uint64_t high_water_before = arena_->high_water_bytes();
  arena_->ResetPeaks();

  absl::flat_hash_map<std::string, const HostTensor*> by_name;
  for (const HostTensor& t : batch) by_name[t.name] = &t;
  for (int32_t s = 0; s < num_positions; ++s) {
    for (int32_t b : p.allocate_at[s]) {
      const Prepared::BufferInfo& info = p.buffers[b];
      RETURN_IF_ERROR(arena_->Allocate(b, info.offset, info.bytes, info.name).status());
      ReportBuffer(profiler::MemoryEvent::Kind::kAllocate, b, s);
    }
    if (s == 0) {
      // The batch exists before the first node runs.
      for (TensorId t : p.batch_tensors) {
        const planner::TrainingTensor& tensor = g.tensor(t);
        auto it = by_name.find(tensor.name);
        if (it == by_name.end()) {
          return absl::InvalidArgumentError(
              absl::StrCat("executor: the batch has no '", tensor.name, "'"));
        }
        if (it->second->shape != tensor.shape || it->second->dtype != tensor.dtype ||
            it->second->bytes.size() != tensor.bytes) {
          return absl::InvalidArgumentError(absl::StrCat(
              "executor: batch tensor '", tensor.name, "' is ",
              graph::ShapeString(it->second->shape), " ", graph::DTypeName(it->second->dtype),
              "; the graph has ", graph::ShapeString(tensor.shape), " ",
              graph::DTypeName(tensor.dtype)));
        }
        RETURN_IF_ERROR(backend_->Upload(arena_->At(memory_->tensors[t].offset),
                                         it->second->bytes.data(), tensor.bytes));
      }
      RETURN_IF_ERROR(IssueCopiesOut(0, &result));
    }
    if (options_.cancel != nullptr && options_.cancel->load(std::memory_order_relaxed)) {
      return absl::CancelledError(absl::StrCat("executor: cancelled in step ", steps_run_,
                                               " before node '", g.node(s).name, "'"));
    }
    RETURN_IF_ERROR(RunNode(s, &result));
    for (TensorId t : p.capture_after[s]) {
      const planner::TrainingTensor& tensor = g.tensor(t);
      HostTensor value = MakeHostTensor(tensor.name, tensor.shape, tensor.dtype);
      RETURN_IF_ERROR(backend_->Synchronize());
      RETURN_IF_ERROR(backend_->Download(value.bytes.data(),
                                         arena_->At(memory_->tensors[t].offset), tensor.bytes));
      result.captured.push_back(std::move(value));
    }
    RETURN_IF_ERROR(IssueCopiesOut(s + 1, &result));
    for (int32_t b : p.free_at[s]) {
      RETURN_IF_ERROR(arena_->Free(b));
      ReportBuffer(profiler::MemoryEvent::Kind::kFree, b, s);
    }
  }
  RETURN_IF_ERROR(backend_->Synchronize());
  if (!p.copy_out_events.empty() || !p.prefetch_events.empty()) {
    return absl::InternalError("executor: copies left unawaited at the end of the step");
  }
  // The loss's bytes are intact: nothing runs after the last node.
  float loss = 0;
  RETURN_IF_ERROR(backend_->Download(&loss, arena_->At(memory_->tensors[g.loss()].offset),
                                     sizeof(float)));
  result.loss = loss;
  result.peak_live_bytes = arena_->peak_live_bytes();
  run_high_water_bytes_ =
      std::max({run_high_water_bytes_, high_water_before, arena_->high_water_bytes()});
  result.arena_high_water_bytes = run_high_water_bytes_;
  result.seconds = Seconds(start);
  if (options_.events != nullptr) {
    profiler::StepEvent e;
    e.step = steps_run_;
    e.end_ns = profiler::NowNanos();
    e.begin_ns = e.end_ns - static_cast<int64_t>(result.seconds * 1e9);
    e.loss = result.loss;
    options_.events->OnStep(e);
  }
  ++steps_run_;
  return result;
}

void Executor::ReportBuffer(profiler::MemoryEvent::Kind kind, int32_t b, int32_t node) {
  if (options_.events == nullptr) return;
  const Prepared::BufferInfo& info = prepared_->buffers[b];
  profiler::MemoryEvent e;
  e.kind = kind;
  e.time_ns = profiler::NowNanos();
  e.step = node < 0 ? profiler::kSetupStep : steps_run_;
  e.node = node;
  e.buffer = b;
  e.tensor = info.first_tensor;
  e.role = info.role;
  e.offset = info.offset;
  e.bytes = info.bytes;
  options_.events->OnMemory(e);
}

void Executor::ReportWorkspace(int32_t node) {
  if (options_.events == nullptr) return;
  const uint64_t now_bytes = backend_->workspace_bytes();
  if (now_bytes == reported_workspace_bytes_) return;
  // A grown workspace is a new allocation: the old one is freed, the new one allocated.
  profiler::MemoryEvent e;
  e.time_ns = profiler::NowNanos();
  e.step = node < 0 ? profiler::kSetupStep : steps_run_;
  e.node = node;
  e.buffer = -1;
  e.role = profiler::MemoryRole::kWorkspace;
  if (reported_workspace_bytes_ > 0) {
    e.kind = profiler::MemoryEvent::Kind::kFree;
    e.bytes = reported_workspace_bytes_;
    options_.events->OnMemory(e);
  }
  // Workspaces outlive steps; the timeline's balance checks leave them alone.
  e.kind = profiler::MemoryEvent::Kind::kAllocate;
  e.bytes = now_bytes;
  options_.events->OnMemory(e);
  reported_workspace_bytes_ = now_bytes;
}

absl::Status Executor::IssueCopiesOut(int32_t index, StepResult* result) {
  Prepared& p = *prepared_;
  for (TensorId t : p.copy_out_after[index]) {
    const uint64_t bytes = step_->graph.tensor(t).bytes;
    void* host = static_cast<char*>(host_pool_->data()) + p.host_offset[t];
    Prepared::Copy& copy = p.copy_out_events[t];
    copy.original = t;
    copy.issue_ns = options_.events != nullptr ? profiler::NowNanos() : 0;
    ASSIGN_OR_RETURN(copy.event,
                     backend_->CopyAsync(CopyDirection::kToHost, host,
                                         arena_->At(memory_->tensors[t].offset), bytes));
    result->offloaded_bytes += bytes;
    if (options_.events != nullptr) {
      // The host slot is in use from now until the copy back is done.
      profiler::MemoryEvent e;
      e.time_ns = copy.issue_ns;
      e.step = steps_run_;
      e.node = index - 1;
      e.buffer = t;
      e.tensor = t;
      e.role = profiler::MemoryRole::kHostOffload;
      e.offset = p.host_offset[t];
      e.bytes = bytes;
      options_.events->OnMemory(e);
    }
  }
  return absl::OkStatus();
}

absl::Status Executor::RunNode(int32_t s, StepResult* result) {
  Prepared& p = *prepared_;
  const TrainingGraph& g = step_->graph;
  const TrainingNode& node = g.node(step_->schedule.order[s]);
  // A prefetched copy is awaited where it is first read.
  for (TensorId t : node.inputs) {
    auto it = p.prefetch_events.find(t);
    if (it == p.prefetch_events.end()) continue;
    const auto wait_start = std::chrono::steady_clock::now();
    const int64_t wait_start_ns = options_.events != nullptr ? profiler::NowNanos() : 0;
    RETURN_IF_ERROR(backend_->ComputeWaits(*it->second.event));
    result->copy_wait_seconds += Seconds(wait_start);
    if (options_.events != nullptr) {
      const Prepared::Copy& copy = it->second;
      ReportCopy(options_.events, profiler::CopyEvent::Direction::kToDevice, steps_run_,
                 copy.original, *copy.event, copy.issue_ns, g.tensor(t).bytes, wait_start_ns);
      // The host slot is free once its bytes are back on the device.
      profiler::MemoryEvent e;
      e.kind = profiler::MemoryEvent::Kind::kFree;
      e.time_ns = profiler::NowNanos();
      e.step = steps_run_;
      e.node = s;
      e.buffer = copy.original;
      e.tensor = copy.original;
      e.role = profiler::MemoryRole::kHostOffload;
      e.offset = p.host_offset[copy.original];
      e.bytes = g.tensor(copy.original).bytes;
      options_.events->OnMemory(e);
    }
    p.prefetch_events.erase(it);
  }
  auto view = [&](TensorId t) {
    TensorView v = View(t);
    v.data = arena_->At(memory_->tensors[t].offset);
    return v;
  };
  const int64_t begin_ns = options_.events != nullptr ? profiler::NowNanos() : 0;
  absl::Status status;
  switch (node.kind) {
    case NodeKind::kForward:
    case NodeKind::kRecompute: {
      ForwardArgs& args = p.forward[s];
      // The same seed in the forward and the re-forward: dropout replays its mask.
      args.seed = SplitMix64(options_.seed ^
                             SplitMix64(static_cast<uint64_t>(steps_run_) * 1000003u +
                                        static_cast<uint64_t>(node.forward_node)));
      status = backend_->Forward(args);
      break;
    }
    case NodeKind::kLossSeed:
      status = backend_->Fill(view(node.outputs[0]), 1.0f);
      break;
    case NodeKind::kBackward:
      status = backend_->Backward(p.backward[s]);
      break;
    case NodeKind::kAccumulate:
      status = backend_->Accumulate(view(node.outputs[0]), view(node.inputs[0]),
                                    view(node.inputs[1]));
      break;
    case NodeKind::kUpdate:
      p.update[s].step = steps_run_ + 1;
      status = backend_->Update(p.update[s]);
      break;
    case NodeKind::kOffload: {
      const TensorId t = node.inputs[0];
      auto it = p.copy_out_events.find(t);
      if (it == p.copy_out_events.end()) {
        return absl::InternalError(absl::StrCat("executor: offload of '", g.tensor(t).name,
                                                "' before its copy was issued"));
      }
      // Compute after this point may overwrite the device bytes: it waits for the copy
      // (on a GPU the host does not block; on the CPU backend the thread does).
      const auto wait_start = std::chrono::steady_clock::now();
      status = backend_->ComputeWaits(*it->second.event);
      result->copy_wait_seconds += Seconds(wait_start);
      if (status.ok()) {
        ReportCopy(options_.events, profiler::CopyEvent::Direction::kToHost, steps_run_, t,
                   *it->second.event, it->second.issue_ns, g.tensor(t).bytes, begin_ns);
      }
      p.copy_out_events.erase(it);
      break;
    }
    case NodeKind::kPrefetch: {
      const TensorId source = p.prefetch_source.at(s);
      const TensorId copy = node.outputs[0];
      void* host = static_cast<char*>(host_pool_->data()) + p.host_offset[source];
      Prepared::Copy& prefetch = p.prefetch_events[copy];
      prefetch.original = source;
      prefetch.issue_ns = begin_ns;
      ASSIGN_OR_RETURN(prefetch.event,
                       backend_->CopyAsync(CopyDirection::kToDevice,
                                           arena_->At(memory_->tensors[copy].offset), host,
                                           g.tensor(copy).bytes));
      break;
    }
  }
  if (!status.ok()) {
    return absl::Status(status.code(),
                        absl::StrCat("node '", node.name, "' (", node.op, "): ",
                                     status.message()));
  }
  if (options_.events != nullptr) {
    options_.events->OnOp({steps_run_, s, begin_ns, profiler::NowNanos(),
                           node.kind == NodeKind::kRecompute});
    ReportWorkspace(s);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<HostTensor>> Executor::ReadState() const {
  RETURN_IF_ERROR(backend_->Synchronize());
  std::vector<HostTensor> state;
  const TrainingGraph& g = step_->graph;
  for (TensorId t = 0; t < g.num_forward_tensors(); ++t) {
    const planner::TrainingTensor& tensor = g.tensor(t);
    if (!tensor.persistent()) continue;
    HostTensor value = MakeHostTensor(tensor.name, tensor.shape, tensor.dtype);
    RETURN_IF_ERROR(backend_->Download(value.bytes.data(),
                                       arena_->At(memory_->tensors[t].offset), tensor.bytes));
    state.push_back(std::move(value));
  }
  return state;
}

absl::StatusOr<ExecutorState> Executor::SaveState() const {
  ExecutorState state;
  state.steps_run = steps_run_;
  for (size_t i = 0; i < state_tensors_.size(); ++i) {
    const StateTensorInfo& info = state_tensors_[i];
    HostTensor value = MakeHostTensor(info.name, info.shape, info.dtype);
    RETURN_IF_ERROR(ReadStateTensor(i, absl::MakeSpan(value.bytes)));
    state.tensors.push_back(std::move(value));
  }
  return state;
}

absl::Status Executor::ReadStateTensor(size_t index, absl::Span<uint8_t> host_dst) const {
  if (index >= state_tensors_.size()) {
    return absl::OutOfRangeError(absl::StrCat("executor: no persistent tensor ", index, " (",
                                              state_tensors_.size(), " of them)"));
  }
  const StateTensorInfo& info = state_tensors_[index];
  if (host_dst.size() != info.bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("executor: reading '", info.name, "' (", info.bytes, " bytes) into ",
                     host_dst.size(), " bytes"));
  }
  RETURN_IF_ERROR(backend_->Synchronize());
  return backend_->Download(host_dst.data(),
                            arena_->At(memory_->tensors[state_ids_[index]].offset), info.bytes);
}

absl::Status Executor::RestoreState(const ExecutorState& state) {
  std::vector<StateTensorView> views;
  views.reserve(state.tensors.size());
  for (const HostTensor& t : state.tensors) {
    views.push_back({t.name, t.shape, t.dtype, t.bytes});
  }
  return RestoreState(state.steps_run, views);
}

absl::Status Executor::RestoreState(int64_t steps_run, absl::Span<const StateTensorView> tensors) {
  if (steps_run < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("executor: a saved state with ", steps_run, " steps run"));
  }
  absl::flat_hash_map<absl::string_view, const StateTensorView*> by_name;
  for (const StateTensorView& t : tensors) by_name[t.name] = &t;
  // 1. Check every tensor before writing any.
  std::vector<const StateTensorView*> writes;  // By persistent tensor.
  for (const StateTensorInfo& info : state_tensors_) {
    auto it = by_name.find(info.name);
    if (it == by_name.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("executor: the saved state has no '", info.name, "'"));
    }
    const StateTensorView& value = *it->second;
    if (value.shape != absl::MakeConstSpan(info.shape) || value.dtype != info.dtype ||
        value.bytes.size() != info.bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "executor: saved '", info.name, "' is ",
          graph::ShapeString(graph::Shape(value.shape.begin(), value.shape.end())), " ",
          graph::DTypeName(value.dtype), " (", value.bytes.size(), " bytes); the graph has ",
          graph::ShapeString(info.shape), " ", graph::DTypeName(info.dtype)));
    }
    writes.push_back(&value);
  }
  // 2. Write them.
  for (size_t i = 0; i < writes.size(); ++i) {
    RETURN_IF_ERROR(backend_->Upload(arena_->At(memory_->tensors[state_ids_[i]].offset),
                                     writes[i]->bytes.data(), writes[i]->bytes.size()));
  }
  RETURN_IF_ERROR(backend_->Synchronize());
  steps_run_ = steps_run;
  return absl::OkStatus();
}

}  // namespace headroom::executor
