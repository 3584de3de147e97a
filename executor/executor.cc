#include "executor/executor.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "graph/shape.h"
#include "util/check.h"
#include "util/split_mix.h"
#include "util/status_macros.h"

namespace headroom::executor {
namespace {

using planner::NodeKind;
using planner::TensorId;
using planner::TrainingGraph;
using planner::TrainingNode;
using BufferChange = ExecutionObserver::BufferChange;

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// Returns InvalidArgument, naming `what`, unless `value` has `shape`, `dtype` and `bytes`.
absl::Status CheckValue(absl::string_view what, const HostTensor& value, const graph::Shape& shape,
                        proto::DType dtype, uint64_t bytes) {
  if (value.shape == shape && value.dtype == dtype && value.bytes.size() == bytes) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "executor: ", what, " is ", graph::ShapeString(value.shape), " ",
      graph::DTypeName(value.dtype), "; the graph has ", graph::ShapeString(shape), " ",
      graph::DTypeName(dtype)));
}

// Returns the observer that reports to `events`, or one that does nothing when it is null.
std::unique_ptr<ExecutionObserver> MakeObserver(profiler::EventSink* events) {
  if (events == nullptr) return std::make_unique<ExecutionObserver>();
  return std::make_unique<EventSinkObserver>(events);
}

// Returns `bytes` rounded up to a multiple of `alignment` (>= 1).
uint64_t RoundUp(uint64_t bytes, uint64_t alignment) {
  return (bytes + alignment - 1) / alignment * alignment;
}

}  // namespace

uint64_t StagingSlotBytes(const planner::TrainingGraph& graph) {
  uint64_t bytes = 0;
  for (const planner::TrainingTensor& tensor : graph.tensors()) {
    if (tensor.role != proto::ROLE_INPUT && tensor.role != proto::ROLE_LABEL) continue;
    bytes += RoundUp(tensor.bytes, planner::kDefaultAlignmentBytes);
  }
  return bytes;
}

Executor::Executor(const graph::Graph& forward,
                   std::shared_ptr<const planner::SectionedStep> step,
                   std::shared_ptr<const planner::MemoryPlan> memory, Backend* backend,
                   const ExecutorOptions& options, ExecutionProgram program)
    : forward_(forward),
      step_(std::move(step)),
      memory_(std::move(memory)),
      backend_(backend),
      options_(options),
      program_(std::move(program)),
      observer_(MakeObserver(options.events)),
      learning_rate_(options.optimizer.learning_rate) {
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
    RETURN_IF_ERROR(CheckValue(absl::StrCat("initial value of '", tensor.name, "'"), value,
                               tensor.shape, tensor.dtype, dst.size()));
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
  // Decide everything before allocating anything.
  ASSIGN_OR_RETURN(ExecutionProgram program,
                   CompileStep(forward, *step, *memory,
                               CompileOptions{options.optimizer, options.capture}));
  std::unique_ptr<Executor> e(new Executor(forward, std::move(step), std::move(memory), backend,
                                           options, std::move(program)));
  if (options.prefetch_to_device) {
    // The staging slot goes after the plan's bytes, for the executor's life.
    e->staging_offset_ = RoundUp(e->memory_->arena_bytes, planner::kDefaultAlignmentBytes);
    e->staging_bytes_ =
        e->staging_offset_ - e->memory_->arena_bytes + StagingSlotBytes(e->step_->graph);
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Buffer> arena,
                   backend->AllocateDevice(e->predicted_peak_bytes()));
  e->arena_ = std::make_unique<DeviceArena>(std::move(arena));
  if (e->program_.host_pool_bytes > 0) {
    ASSIGN_OR_RETURN(e->host_pool_, backend->AllocateHost(e->program_.host_pool_bytes));
  }
  if (!e->program_.host_updates.empty()) {
    e->host_queue_ = std::make_unique<HostUpdateQueue>();
    e->host_tickets_.assign(e->program_.host_updates.size(), -1);
  }
  if (options.prefetch_to_device) RETURN_IF_ERROR(e->PrepareStaging());
  RETURN_IF_ERROR(e->PlaceState(initial));
  if (options.gradients != nullptr && !e->program_.host_updates.empty()) {
    return absl::UnimplementedError(
        "data-parallel ranks with the optimizer state on the host: the gradients' exchange and "
        "the host update are not joined yet (use --optimizer-state device with --ranks)");
  }
  if (options.gradients != nullptr) RETURN_IF_ERROR(e->PrepareGradientExchange());
  if (options.batch_norm_sync != nullptr) RETURN_IF_ERROR(e->PrepareBatchNormSync());
  return e;
}

uint64_t Executor::host_pool_bytes() const { return program_.host_pool_bytes; }

TensorView Executor::View(TensorId t) const {
  const planner::TrainingTensor& tensor = step_->graph.tensor(t);
  return TensorView{arena_->At(program_.tensor_slices[t].offset), tensor.shape, tensor.dtype};
}

void* Executor::HostSlot(TensorId original) const {
  return static_cast<char*>(host_pool_->data()) + *program_.host_offset[original];
}

absl::Status Executor::PlaceState(InitialValueWriter initial) {
  const TrainingGraph& g = step_->graph;
  for (const ProgramNode& node : program_.nodes) {
    bound_args_.push_back(BindArgs(program_, node, arena_->At(0)));
  }
  // Allocate persistent buffers for good, and write the initial state.
  for (int32_t b = 0; b < static_cast<int32_t>(program_.buffers.size()); ++b) {
    const ProgramBuffer& buffer = program_.buffers[b];
    if (!buffer.persistent) continue;
    RETURN_IF_ERROR(
        arena_->Allocate(b, buffer.slice.offset, buffer.slice.bytes, buffer.name).status());
    observer_->OnBuffer(BufferChange::kAllocated, b, buffer, profiler::kSetupStep, -1);
  }
  observer_->OnSetupEnd(backend_->workspace_bytes());
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
    RETURN_IF_ERROR(WriteState(state_ids_[i], value.data()));
  }
  arena_->ResetPeaks();
  return absl::OkStatus();
}

uint64_t Executor::staging_host_bytes() const {
  return staging_host_[0] == nullptr ? 0 : 2 * staging_host_[0]->bytes();
}

absl::Status Executor::PrepareStaging() {
  uint64_t at = 0;
  for (TensorId t : program_.batch_tensors) {
    staging_tensor_offsets_.push_back(at);
    at += RoundUp(step_->graph.tensor(t).bytes, planner::kDefaultAlignmentBytes);
  }
  CHECK(staging_offset_ + at <= predicted_peak_bytes());
  // Allocated for good, under an id no program buffer has, and reported as the batch's.
  ProgramBuffer slot;
  slot.name = "batch staging slot";
  slot.role = profiler::MemoryRole::kBatch;
  slot.slice.offset = staging_offset_;
  slot.slice.bytes = predicted_peak_bytes() - staging_offset_;
  slot.persistent = true;
  const int32_t id = static_cast<int32_t>(program_.buffers.size());
  RETURN_IF_ERROR(arena_->Allocate(id, slot.slice.offset, slot.slice.bytes, slot.name).status());
  observer_->OnBuffer(BufferChange::kAllocated, id, slot, profiler::kSetupStep, -1);
  for (std::unique_ptr<Buffer>& host : staging_host_) {
    ASSIGN_OR_RETURN(host, backend_->AllocateHost(std::max<uint64_t>(at, 1)));
  }
  return absl::OkStatus();
}

absl::Status Executor::StageBatch(const std::vector<HostTensor>& batch) {
  if (staging_host_[0] == nullptr) {
    return absl::FailedPreconditionError(
        "executor: StageBatch() needs ExecutorOptions::prefetch_to_device");
  }
  if (staged_host_ >= 0) {
    return absl::FailedPreconditionError(
        "executor: a batch is staged already; run a staged step first");
  }
  absl::flat_hash_map<std::string, const HostTensor*> by_name;
  for (const HostTensor& t : batch) by_name[t.name] = &t;
  const int k = next_staging_host_;
  // The buffer's last copy must be done before it is written again.
  if (staging_copies_[k] != nullptr) {
    RETURN_IF_ERROR(staging_copies_[k]->Wait());
    staging_copies_[k].reset();
  }
  char* host = static_cast<char*>(staging_host_[k]->data());
  uint64_t end = 0;
  for (size_t i = 0; i < program_.batch_tensors.size(); ++i) {
    const planner::TrainingTensor& tensor = step_->graph.tensor(program_.batch_tensors[i]);
    auto it = by_name.find(tensor.name);
    if (it == by_name.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("executor: the staged batch has no '", tensor.name, "'"));
    }
    const HostTensor& value = *it->second;
    RETURN_IF_ERROR(CheckValue(absl::StrCat("staged batch tensor '", tensor.name, "'"), value,
                               tensor.shape, tensor.dtype, tensor.bytes));
    std::copy(value.bytes.begin(), value.bytes.end(), host + staging_tensor_offsets_[i]);
    end = staging_tensor_offsets_[i] + tensor.bytes;
  }
  // One copy of the whole slot, on the copy stream.
  ASSIGN_OR_RETURN(staging_copies_[k], backend_->CopyAsync(CopyDirection::kToDevice,
                                                           arena_->At(staging_offset_), host, end));
  staged_host_ = k;
  next_staging_host_ = 1 - k;
  return absl::OkStatus();
}

absl::Status Executor::MoveStagedBatch() {
  RETURN_IF_ERROR(backend_->ComputeWaits(*staging_copies_[staged_host_]));
  for (size_t i = 0; i < program_.batch_tensors.size(); ++i) {
    const TensorId t = program_.batch_tensors[i];
    RETURN_IF_ERROR(backend_->CopyOnDevice(View(t).data,
                                           arena_->At(staging_offset_ + staging_tensor_offsets_[i]),
                                           step_->graph.tensor(t).bytes));
  }
  staged_host_ = -1;
  return absl::OkStatus();
}

absl::StatusOr<StepResult> Executor::RunStagedStep(const std::vector<HostTensor>* next) {
  if (staged_host_ < 0) {
    return absl::FailedPreconditionError("executor: no batch is staged (StageBatch())");
  }
  return RunStepOn(nullptr, next);
}

absl::StatusOr<StepResult> Executor::RunStep(const std::vector<HostTensor>& batch) {
  return RunStepOn(&batch, nullptr);
}

absl::StatusOr<StepResult> Executor::RunStepOn(const std::vector<HostTensor>* batch,
                                               const std::vector<HostTensor>* next) {
  const auto start = std::chrono::steady_clock::now();
  StepResult result;
  result.step = steps_run_;
  deferred_updates_.clear();  // a failed step may have left some
  const uint64_t high_water_before = arena_->high_water_bytes();
  arena_->ResetPeaks();
  for (int32_t s = 0; s < static_cast<int32_t>(program_.nodes.size()); ++s) {
    RETURN_IF_ERROR(AllocateBuffers(s));
    if (s == 0) {
      // The batch exists before the first node runs.
      if (batch != nullptr) {
        RETURN_IF_ERROR(UploadBatch(*batch));
      } else {
        RETURN_IF_ERROR(MoveStagedBatch());
        // The next batch's copy waits for the move and overlaps the step's compute.
        if (next != nullptr) RETURN_IF_ERROR(StageBatch(*next));
      }
      RETURN_IF_ERROR(IssueCopiesOut(program_.copy_out_first, -1, &result));
    }
    if (options_.cancel != nullptr && options_.cancel->load(std::memory_order_relaxed)) {
      return absl::CancelledError(absl::StrCat("executor: cancelled in step ", steps_run_,
                                               " before node '", step_->graph.node(s).name,
                                               "'"));
    }
    RETURN_IF_ERROR(RunNode(s, &result));
    RETURN_IF_ERROR(CaptureAfter(s, &result));
    RETURN_IF_ERROR(CheckRebuildAfter(s, &result));
    RETURN_IF_ERROR(IssueCopiesOut(program_.nodes[s].copy_out_after, s, &result));
    RETURN_IF_ERROR(IssueGradCopies(s, &result));
    // The deferred updates read the gradient buckets, which die at the last position.
    if (options_.gradients != nullptr && s + 1 == static_cast<int32_t>(program_.nodes.size())) {
      RETURN_IF_ERROR(RunDeferredUpdates());
    }
    RETURN_IF_ERROR(FreeBuffers(s));
  }
  RETURN_IF_ERROR(FinishStep(start, high_water_before, &result));
  return result;
}

absl::Status Executor::PrepareGradientExchange() {
  const std::vector<planner::GradientBucket>& planned = step_->gradient_buckets;
  if (planned.empty()) {
    return absl::InvalidArgumentError(
        "executor: data-parallel gradients need their buckets in the plan "
        "(planner::AddGradientBuckets); this plan has none");
  }
  // Each update node's bucket and offset, then the buckets' views of the arena.
  absl::flat_hash_map<planner::NodeId, std::pair<int32_t, uint64_t>> place;
  std::vector<TensorView> buckets;
  for (size_t k = 0; k < planned.size(); ++k) {
    for (size_t i = 0; i < planned[k].updates.size(); ++i) {
      place[planned[k].updates[i]] = {static_cast<int32_t>(k), planned[k].offsets_bytes[i]};
    }
    buckets.push_back(View(planned[k].tensor));
  }
  // The gradients in the order the step completes them: its update nodes' order.
  std::vector<GradientInfo> gradients;
  gradient_index_.assign(program_.nodes.size(), -1);
  for (size_t s = 0; s < program_.nodes.size(); ++s) {
    if (program_.nodes[s].kind != NodeKind::kUpdate) continue;
    const TrainingNode& node = step_->graph.node(program_.nodes[s].node);
    auto it = place.find(program_.nodes[s].node);
    if (it == place.end()) {
      return absl::InternalError(
          absl::StrCat("executor: update '", node.name, "' has no planned gradient bucket"));
    }
    const TensorView& grad = bound_args_[s].update.grad;
    gradient_index_[s] = static_cast<int32_t>(gradients.size());
    gradients.push_back({node.name, grad.shape, grad.dtype, grad.bytes(), static_cast<int32_t>(s),
                         it->second.first, it->second.second});
  }
  return options_.gradients->Prepare(gradients, buckets);
}

absl::Status Executor::HandOverGradient(int32_t s) {
  // The gradient's last writer has run; the exchange copies it out before it is freed.
  RETURN_IF_ERROR(backend_->Synchronize());
  RETURN_IF_ERROR(options_.gradients->OnGradientReady(steps_run_, gradient_index_[s],
                                                      bound_args_[s].update.grad));
  deferred_updates_.push_back(s);
  return absl::OkStatus();
}

absl::Status Executor::RunDeferredUpdates() {
  for (int32_t s : deferred_updates_) {
    ASSIGN_OR_RETURN(TensorView reduced,
                     options_.gradients->ReducedGradient(steps_run_, gradient_index_[s]));
    UpdateArgs args = bound_args_[s].update;
    args.grad = std::move(reduced);
    args.step = steps_run_ + 1;
    args.params.learning_rate = learning_rate_;
    const absl::Status status = backend_->Update(args);
    if (!status.ok()) {
      const TrainingNode& node = step_->graph.node(program_.nodes[s].node);
      return absl::Status(status.code(), absl::StrCat("node '", node.name, "' (", node.op,
                                                      "), deferred: ", status.message()));
    }
  }
  deferred_updates_.clear();
  return options_.gradients->OnStepEnd(steps_run_);
}

absl::Status Executor::AllocateBuffers(int32_t s) {
  for (int32_t b : program_.nodes[s].allocate) {
    const ProgramBuffer& buffer = program_.buffers[b];
    RETURN_IF_ERROR(
        arena_->Allocate(b, buffer.slice.offset, buffer.slice.bytes, buffer.name).status());
    observer_->OnBuffer(BufferChange::kAllocated, b, buffer, steps_run_, s);
  }
  return absl::OkStatus();
}

absl::Status Executor::FreeBuffers(int32_t s) {
  for (int32_t b : program_.nodes[s].free) {
    RETURN_IF_ERROR(arena_->Free(b));
    observer_->OnBuffer(BufferChange::kFreed, b, program_.buffers[b], steps_run_, s);
  }
  return absl::OkStatus();
}

absl::Status Executor::UploadBatch(const std::vector<HostTensor>& batch) {
  absl::flat_hash_map<std::string, const HostTensor*> by_name;
  for (const HostTensor& t : batch) by_name[t.name] = &t;
  for (TensorId t : program_.batch_tensors) {
    const planner::TrainingTensor& tensor = step_->graph.tensor(t);
    auto it = by_name.find(tensor.name);
    if (it == by_name.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("executor: the batch has no '", tensor.name, "'"));
    }
    const HostTensor& value = *it->second;
    RETURN_IF_ERROR(CheckValue(absl::StrCat("batch tensor '", tensor.name, "'"), value,
                               tensor.shape, tensor.dtype, tensor.bytes));
    RETURN_IF_ERROR(backend_->Upload(View(t).data, value.bytes.data(), tensor.bytes));
  }
  return absl::OkStatus();
}

absl::Status Executor::CaptureAfter(int32_t s, StepResult* result) {
  for (TensorId t : program_.nodes[s].capture_after) {
    const planner::TrainingTensor& tensor = step_->graph.tensor(t);
    HostTensor value = MakeHostTensor(tensor.name, tensor.shape, tensor.dtype);
    RETURN_IF_ERROR(backend_->Synchronize());
    RETURN_IF_ERROR(backend_->Download(value.bytes.data(), View(t).data, tensor.bytes));
    result->captured.push_back(std::move(value));
  }
  return absl::OkStatus();
}

absl::Status Executor::CheckRebuildAfter(int32_t s, StepResult* result) {
  if (options_.check_rebuild_every <= 0 || step_->rebuilt.empty() ||
      steps_run_ % options_.check_rebuild_every != 0) {
    return absl::OkStatus();
  }
  if (rebuild_original_of_.empty()) {
    for (const auto& [original, copy] : step_->rebuilt) {
      rebuild_original_of_[copy] = original;
      rebuild_originals_.insert(original);
    }
  }
  if (result->max_rebuild_error < 0) result->max_rebuild_error = 0;
  const planner::TrainingGraph& g = step_->graph;
  for (TensorId t : g.node(program_.nodes[s].node).outputs) {
    const bool original = rebuild_originals_.contains(t);
    auto copy_of = rebuild_original_of_.find(t);
    if (!original && copy_of == rebuild_original_of_.end()) continue;
    const planner::TrainingTensor& tensor = g.tensor(t);
    HostTensor value = MakeHostTensor(tensor.name, tensor.shape, tensor.dtype);
    RETURN_IF_ERROR(backend_->Synchronize());
    RETURN_IF_ERROR(backend_->Download(value.bytes.data(), View(t).data, tensor.bytes));
    if (original) {
      rebuild_forward_values_[t] = std::move(value);
      continue;
    }
    auto kept = rebuild_forward_values_.find(copy_of->second);
    if (kept == rebuild_forward_values_.end()) {
      return absl::InternalError(absl::StrCat("executor: rebuilt '", tensor.name,
                                              "' before the forward wrote its original"));
    }
    if (tensor.dtype == proto::DTYPE_FLOAT32) {
      for (int64_t i = 0; i < value.num_elements(); ++i) {
        result->max_rebuild_error =
            std::max(result->max_rebuild_error,
                     static_cast<double>(std::fabs(value.f32()[i] - kept->second.f32()[i])));
      }
    } else {
      const size_t size = graph::DTypeSize(tensor.dtype);
      for (size_t i = 0; i < value.bytes.size(); i += size) {
        result->rebuild_mismatches +=
            std::memcmp(&value.bytes[i], &kept->second.bytes[i], size) != 0 ? 1 : 0;
      }
    }
    rebuild_forward_values_.erase(kept);
  }
  return absl::OkStatus();
}

absl::Status Executor::FinishStep(std::chrono::steady_clock::time_point start,
                                  uint64_t high_water_before, StepResult* result) {
  RETURN_IF_ERROR(backend_->Synchronize());
  // Where the host does not block on a copy (a GPU), the stream's own wait.
  result->copy_wait_seconds += backend_->TakeStreamWaitSeconds();
  if (!copy_out_events_.empty() || !prefetch_events_.empty()) {
    return absl::InternalError("executor: copies left unawaited at the end of the step");
  }
  // The loss's bytes are intact: nothing runs after the last node.
  float loss = 0;
  RETURN_IF_ERROR(backend_->Download(&loss, View(step_->graph.loss()).data, sizeof(float)));
  result->loss = loss;
  result->peak_live_bytes = arena_->peak_live_bytes();
  run_high_water_bytes_ =
      std::max({run_high_water_bytes_, high_water_before, arena_->high_water_bytes()});
  result->arena_high_water_bytes = run_high_water_bytes_;
  result->planned_peak_bytes = predicted_peak_bytes();
  result->seconds = Seconds(start);
  observer_->OnStepEnd(steps_run_, result->seconds, result->loss);
  ++steps_run_;
  return absl::OkStatus();
}

absl::Status Executor::IssueCopiesOut(const std::vector<TensorId>& tensors, int32_t s,
                                      StepResult* result) {
  for (TensorId t : tensors) {
    const uint64_t bytes = step_->graph.tensor(t).bytes;
    observer_->OnCopyIssue(CopyDirection::kToHost, steps_run_, s, t, *program_.host_offset[t],
                           bytes);
    InFlightCopy& copy = copy_out_events_[t];
    copy.original = t;
    ASSIGN_OR_RETURN(copy.event,
                     backend_->CopyAsync(CopyDirection::kToHost, HostSlot(t), View(t).data,
                                         bytes));
    result->offloaded_bytes += bytes;
  }
  return absl::OkStatus();
}

absl::Status Executor::AwaitPrefetchedInputs(int32_t s, StepResult* result) {
  const TrainingGraph& g = step_->graph;
  // A prefetched copy is awaited where it is first read.
  for (TensorId t : g.node(program_.nodes[s].node).inputs) {
    auto it = prefetch_events_.find(t);
    if (it == prefetch_events_.end()) continue;
    const InFlightCopy& copy = it->second;
    const auto wait_start = std::chrono::steady_clock::now();
    observer_->OnCopyWait(CopyDirection::kToDevice, copy.original);
    RETURN_IF_ERROR(backend_->ComputeWaits(*copy.event));
    result->copy_wait_seconds += Seconds(wait_start);
    observer_->OnCopyAwaited(CopyDirection::kToDevice, steps_run_, s, copy.original,
                             *program_.host_offset[copy.original],
                             g.tensor(copy.original).bytes, *copy.event);
    prefetch_events_.erase(it);
  }
  return absl::OkStatus();
}

absl::Status Executor::RunNode(int32_t s, StepResult* result) {
  RETURN_IF_ERROR(AwaitPrefetchedInputs(s, result));
  observer_->OnNodeBegin(steps_run_, s);
  const absl::Status status = RunKernel(s, result);
  const TrainingNode& node = step_->graph.node(program_.nodes[s].node);
  if (!status.ok()) {
    return absl::Status(status.code(),
                        absl::StrCat("node '", node.name, "' (", node.op, "): ",
                                     status.message()));
  }
  observer_->OnNodeEnd(steps_run_, s,
                       node.kind == NodeKind::kRecompute || node.kind == NodeKind::kRebuild,
                       backend_->workspace_bytes());
  return absl::OkStatus();
}

absl::Status Executor::RunKernel(int32_t s, StepResult* result) {
  const TrainingNode& node = step_->graph.node(program_.nodes[s].node);
  NodeKernelArgs& args = bound_args_[s];
  switch (node.kind) {
    case NodeKind::kForward:
    case NodeKind::kRecompute:
      // The same seed in the forward and the re-forward: dropout replays its mask.
      args.forward.seed = SplitMix64(options_.seed ^
                                     SplitMix64(static_cast<uint64_t>(steps_run_) * 1000003u +
                                                static_cast<uint64_t>(node.forward_node)));
      if (!synced_batch_norm_.empty() && synced_batch_norm_[s]) return SyncedBatchNormForward(s);
      return backend_->Forward(args.forward);
    case NodeKind::kRebuild:  // x = y - F(..) of a reversible block.
      return backend_->Forward(args.forward);
    case NodeKind::kLossSeed:
      return backend_->Fill(View(node.outputs[0]), 1.0f);
    case NodeKind::kBackward:
      return backend_->Backward(args.backward);
    case NodeKind::kAccumulate:
      return backend_->Accumulate(View(node.outputs[0]), View(node.inputs[0]),
                                  View(node.inputs[1]));
    case NodeKind::kUpdate:
      if (program_.nodes[s].host_update >= 0) return QueueHostUpdate(s);
      if (options_.gradients != nullptr) return HandOverGradient(s);
      args.update.step = steps_run_ + 1;
      args.update.params.learning_rate = learning_rate_;
      return backend_->Update(args.update);
    case NodeKind::kOffload:
      return AwaitCopyOut(s, result);
    case NodeKind::kPrefetch:
      if (program_.nodes[s].host_update >= 0) return CopyBackParameter(s, result);
      return IssuePrefetch(s);
  }
  return absl::OkStatus();
}

absl::Status Executor::PrepareBatchNormSync() {
  if (!backend_->host_is_device_memory()) {
    return absl::UnimplementedError(
        absl::StrCat("synchronised batch norm (--sync-batchnorm) on the ", backend_->name(),
                     " backend: only the cpu backend's kernels have it"));
  }
  const TrainingGraph& g = step_->graph;
  BatchNormSync* sync = options_.batch_norm_sync;
  std::vector<BatchNormCollective> collectives;
  synced_batch_norm_.assign(program_.nodes.size(), false);
  for (size_t s = 0; s < program_.nodes.size(); ++s) {
    const TrainingNode& node = g.node(program_.nodes[s].node);
    const NodeKind kind = program_.nodes[s].kind;
    const bool runs_kernel =
        kind == NodeKind::kForward || kind == NodeKind::kRecompute || kind == NodeKind::kBackward;
    if (!runs_kernel || g.inference() || node.forward_node < 0 ||
        forward_.node(node.forward_node).op->name != "BatchNorm") {
      continue;
    }
    const std::string name = forward_.node(node.forward_node).name;
    auto bind = [&](const char* phase) -> StatisticsAllreduce {
      return [sync, name, phase](float* data, size_t count, const char* what) {
        return sync->AllreduceSum(
            data, count, absl::StrCat("allreduce of batch norm '", name, "' ", what, phase));
      };
    };
    const auto position = static_cast<int32_t>(s);
    if (kind == NodeKind::kForward || kind == NodeKind::kRecompute) {
      ForwardArgs& args = bound_args_[s].forward;
      if (args.saved.size() < 2) {
        return absl::InvalidArgumentError(absl::StrCat("synchronised batch norm: node '", node.name,
                                                       "' saves no statistics to share"));
      }
      synced_batch_norm_[s] = true;
      if (kind == NodeKind::kRecompute) {
        // Copied in from the forward: normalised as the synchronised forward does, with no
        // collective (the kernel calls none when the statistics are given).
        args.saved_statistics_given = true;
        args.sync_statistics = bind(" (re-forward)");
        continue;
      }
      args.sync_statistics = bind(" (forward)");
      const uint64_t channels = static_cast<uint64_t>(args.saved[0].num_elements());
      collectives.push_back(
          {absl::StrCat("allreduce of batch norm '", name, "' count and sum(x) (forward)"),
           channels + 1, position});
      collectives.push_back(
          {absl::StrCat("allreduce of batch norm '", name, "' sum((x - mean)^2) (forward)"),
           channels, position});
    } else if (kind == NodeKind::kBackward) {
      BackwardArgs& args = bound_args_[s].backward;
      // Only a backward that computes dx with a gradient flowing sums across the ranks.
      if (args.input_grads.empty() || !args.input_grads[0].present() || args.output_grads.empty() ||
          !args.output_grads[0].present()) {
        continue;
      }
      args.sync_statistics = bind(" (backward)");
      const uint64_t channels = static_cast<uint64_t>(args.inputs[0].dim(1));
      collectives.push_back({absl::StrCat("allreduce of batch norm '", name,
                                          "' sum(dy) and sum(dy * xhat) (backward)"),
                             2 * channels + 1, position});
    }
  }
  return sync->Prepare(collectives);
}

absl::Status Executor::SyncedBatchNormForward(int32_t s) {
  const TrainingNode& node = step_->graph.node(program_.nodes[s].node);
  ForwardArgs& args = bound_args_[s].forward;
  std::vector<float>& kept = batch_norm_statistics_[node.forward_node];
  const TensorView& mean = args.saved[0];
  const TensorView& var = args.saved[1];
  const size_t channels = static_cast<size_t>(mean.num_elements());
  if (args.saved_statistics_given) {  // A re-forward: the forward's statistics, no collective.
    if (kept.size() != 2 * channels) {
      return absl::InternalError("re-forward of a synchronised batch norm before its forward");
    }
    std::memcpy(mean.data, kept.data(), channels * sizeof(float));
    std::memcpy(var.data, kept.data() + channels, channels * sizeof(float));
    return backend_->Forward(args);
  }
  RETURN_IF_ERROR(backend_->Forward(args));
  kept.resize(2 * channels);
  std::memcpy(kept.data(), mean.data, channels * sizeof(float));
  std::memcpy(kept.data() + channels, var.data, channels * sizeof(float));
  return absl::OkStatus();
}

absl::Status Executor::AwaitCopyOut(int32_t s, StepResult* result) {
  const TrainingGraph& g = step_->graph;
  const TensorId t = g.node(program_.nodes[s].node).inputs[0];
  auto it = copy_out_events_.find(t);
  if (it == copy_out_events_.end()) {
    return absl::InternalError(
        absl::StrCat("executor: offload of '", g.tensor(t).name, "' before its copy was issued"));
  }
  // Compute after this point may overwrite the device bytes: it waits for the copy (on a
  // GPU the host does not block; on the CPU backend the thread does).
  const auto wait_start = std::chrono::steady_clock::now();
  observer_->OnCopyWait(CopyDirection::kToHost, t);
  const absl::Status status = backend_->ComputeWaits(*it->second.event);
  result->copy_wait_seconds += Seconds(wait_start);
  if (status.ok()) {
    observer_->OnCopyAwaited(CopyDirection::kToHost, steps_run_, s, t,
                             *program_.host_offset[t], g.tensor(t).bytes, *it->second.event);
  }
  // A gradient's host update waits on the copy itself (on a GPU the host did not block).
  if (host_queue_ != nullptr && g.tensor(t).role == proto::ROLE_GRADIENT) {
    grad_ready_[t] = std::move(it->second.event);
  }
  copy_out_events_.erase(it);
  return status;
}

absl::Status Executor::IssueGradCopies(int32_t s, StepResult* result) {
  for (TensorId t : program_.nodes[s].grad_copy_after) {
    const uint64_t bytes = step_->graph.tensor(t).bytes;
    InFlightCopy& copy = copy_out_events_[t];
    copy.original = t;
    ASSIGN_OR_RETURN(copy.event,
                     backend_->CopyAsync(CopyDirection::kToHost, HostSlot(t), View(t).data, bytes));
    result->offloaded_bytes += bytes;
  }
  return absl::OkStatus();
}

absl::Status Executor::QueueHostUpdate(int32_t s) {
  const int32_t index = program_.nodes[s].host_update;
  const ProgramHostUpdate& h = program_.host_updates[index];
  const TrainingGraph& g = step_->graph;
  auto host = [&](TensorId t, uint64_t offset) {
    return TensorView{static_cast<char*>(host_pool_->data()) + offset, g.tensor(t).shape,
                      g.tensor(t).dtype};
  };
  UpdateArgs args;
  args.op = h.op;
  args.param = host(h.param, h.param_offset);
  args.grad = host(h.grad, h.grad_offset);
  for (size_t i = 0; i < h.state.size(); ++i) {
    args.state.push_back(host(h.state[i], h.state_offsets[i]));
  }
  args.params = options_.optimizer;
  args.params.learning_rate = learning_rate_;
  args.step = steps_run_ + 1;
  std::unique_ptr<Event> ready;
  if (auto it = grad_ready_.find(h.grad); it != grad_ready_.end()) {
    ready = std::move(it->second);
    grad_ready_.erase(it);
  }
  host_tickets_[index] = host_queue_->Submit(std::move(args), std::move(ready));
  return absl::OkStatus();
}

absl::Status Executor::CopyBackParameter(int32_t s, StepResult* result) {
  const int32_t index = program_.nodes[s].host_update;
  const ProgramHostUpdate& h = program_.host_updates[index];
  const auto wait_start = std::chrono::steady_clock::now();
  RETURN_IF_ERROR(host_queue_->Wait(host_tickets_[index]));
  // A parameter on the host between uses: each use prefetches the updated master copy.
  if (step_->graph.tensor(h.param).on_host) {
    result->copy_wait_seconds += Seconds(wait_start);
    return absl::OkStatus();
  }
  const uint64_t bytes = step_->graph.tensor(h.param).bytes;
  ASSIGN_OR_RETURN(
      std::unique_ptr<Event> event,
      backend_->CopyAsync(CopyDirection::kToDevice, View(h.param).data, HostSlot(h.param), bytes));
  RETURN_IF_ERROR(backend_->ComputeWaits(*event));
  result->copy_wait_seconds += Seconds(wait_start);
  result->offloaded_bytes += bytes;
  return absl::OkStatus();
}

absl::Status Executor::WriteState(TensorId t, const void* value) {
  const planner::TrainingTensor& tensor = step_->graph.tensor(t);
  if (tensor.on_host) {
    std::memcpy(HostSlot(t), value, tensor.bytes);
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(backend_->Upload(View(t).data, value, tensor.bytes));
  // A parameter updated on the host has its master copy there too.
  if (tensor.role == proto::ROLE_PARAMETER && host_queue_ != nullptr &&
      program_.host_offset[t].has_value()) {
    std::memcpy(HostSlot(t), value, tensor.bytes);
  }
  return absl::OkStatus();
}

absl::Status Executor::IssuePrefetch(int32_t s) {
  const ProgramNode& node = program_.nodes[s];
  const TensorId source = node.prefetch_source;
  const TensorId copy = step_->graph.node(node.node).outputs[0];
  const uint64_t bytes = step_->graph.tensor(copy).bytes;
  observer_->OnCopyIssue(CopyDirection::kToDevice, steps_run_, s, source,
                         *program_.host_offset[source], bytes);
  InFlightCopy& prefetch = prefetch_events_[copy];
  prefetch.original = source;
  ASSIGN_OR_RETURN(prefetch.event, backend_->CopyAsync(CopyDirection::kToDevice,
                                                       View(copy).data, HostSlot(source), bytes));
  return absl::OkStatus();
}

absl::Status Executor::MakeEvalArgs() {
  const TrainingGraph& g = step_->graph;
  eval_args_.assign(program_.nodes.size(), std::nullopt);
  for (size_t s = 0; s < program_.nodes.size(); ++s) {
    if (program_.nodes[s].kind != NodeKind::kForward) continue;
    // Inference: batch norm reads its running statistics as inputs and saves nothing.
    ForwardArgs args = bound_args_[s].forward;
    args.training = false;
    args.saved.clear();
    args.sync_statistics = nullptr;
    args.saved_statistics_given = false;
    for (const TensorView& r : args.running) args.inputs.push_back(r);
    args.running.clear();
    ASSIGN_OR_RETURN(const uint64_t scratch, backend_->ScratchBytes(args));
    if (scratch > args.scratch_bytes) {
      const TrainingNode& node = g.node(program_.nodes[s].node);
      return absl::InvalidArgumentError(absl::StrCat(
          "executor: evaluating node '", node.name, "' (", node.op, ") needs ", scratch,
          " bytes of scratch; the training plan gave it ", args.scratch_bytes));
    }
    eval_args_[s] = std::move(args);
  }
  return absl::OkStatus();
}

absl::StatusOr<EvalResult> Executor::Evaluate(const std::vector<HostTensor>& batch,
                                              absl::Span<const std::string> read) {
  const auto start = std::chrono::steady_clock::now();
  const TrainingGraph& g = step_->graph;
  // 1. Decide: the tensors to read, the last forward position, the inference arguments.
  std::vector<TensorId> read_ids;
  for (const std::string& name : read) {
    const TensorId t = g.FindTensor(name);
    if (t < 0 || t >= g.num_forward_tensors() || g.tensor(t).producer == planner::kNone) {
      return absl::InvalidArgumentError(
          absl::StrCat("executor: '", name, "' is no tensor a forward node writes"));
    }
    read_ids.push_back(t);
  }
  int32_t last = -1;
  for (int32_t s = 0; s < static_cast<int32_t>(program_.nodes.size()); ++s) {
    if (program_.nodes[s].kind == NodeKind::kForward) last = s;
  }
  if (eval_args_.empty()) RETURN_IF_ERROR(MakeEvalArgs());
  EvalResult result;
  result.read.resize(read_ids.size());
  const uint64_t high_water_before = arena_->high_water_bytes();
  arena_->ResetPeaks();
  // 2. The forward positions with their planned buffers; copies to host are skipped.
  absl::flat_hash_set<int32_t> live;
  for (int32_t s = 0; s <= last; ++s) {
    const ProgramNode& node = program_.nodes[s];
    for (int32_t b : node.allocate) {
      const ProgramBuffer& buffer = program_.buffers[b];
      RETURN_IF_ERROR(
          arena_->Allocate(b, buffer.slice.offset, buffer.slice.bytes, buffer.name).status());
      live.insert(b);
    }
    if (s == 0) RETURN_IF_ERROR(UploadBatch(batch));
    if (node.kind == NodeKind::kPrefetch && node.prefetch_source != planner::kNone &&
        g.tensor(node.prefetch_source).on_host) {
      // A parameter on the host between uses: its copy for the forward, from the master.
      const TensorId copy = g.node(node.node).outputs[0];
      RETURN_IF_ERROR(
          backend_->Upload(View(copy).data, HostSlot(node.prefetch_source), g.tensor(copy).bytes));
    }
    if (eval_args_[s].has_value()) {
      eval_args_[s]->seed = 0;
      const absl::Status status = backend_->Forward(*eval_args_[s]);
      if (!status.ok()) {
        const TrainingNode& n = g.node(node.node);
        return absl::Status(status.code(), absl::StrCat("evaluating node '", n.name, "' (", n.op,
                                                        "): ", status.message()));
      }
      for (size_t i = 0; i < read_ids.size(); ++i) {
        if (g.tensor(read_ids[i]).producer != node.node) continue;
        const planner::TrainingTensor& tensor = g.tensor(read_ids[i]);
        result.read[i] = MakeHostTensor(tensor.name, tensor.shape, tensor.dtype);
        RETURN_IF_ERROR(backend_->Synchronize());
        RETURN_IF_ERROR(
            backend_->Download(result.read[i].bytes.data(), View(read_ids[i]).data, tensor.bytes));
      }
    }
    for (int32_t b : node.free) {
      RETURN_IF_ERROR(arena_->Free(b));
      live.erase(b);
    }
  }
  // 3. The loss, then free what only the backward would have read.
  RETURN_IF_ERROR(backend_->Synchronize());
  float loss = 0;
  RETURN_IF_ERROR(backend_->Download(&loss, View(g.loss()).data, sizeof(float)));
  result.loss = loss;
  for (int32_t b : live) RETURN_IF_ERROR(arena_->Free(b));
  result.peak_live_bytes = arena_->peak_live_bytes();
  run_high_water_bytes_ =
      std::max({run_high_water_bytes_, high_water_before, arena_->high_water_bytes()});
  result.arena_high_water_bytes = run_high_water_bytes_;
  result.seconds = Seconds(start);
  return result;
}

absl::StatusOr<std::vector<HostTensor>> Executor::ReadState() const {
  RETURN_IF_ERROR(backend_->Synchronize());
  std::vector<HostTensor> state;
  const TrainingGraph& g = step_->graph;
  for (TensorId t = 0; t < g.num_forward_tensors(); ++t) {
    const planner::TrainingTensor& tensor = g.tensor(t);
    if (!tensor.persistent()) continue;
    HostTensor value = MakeHostTensor(tensor.name, tensor.shape, tensor.dtype);
    if (tensor.on_host) {  // A parameter on the host between uses: its master copy.
      std::memcpy(value.bytes.data(), HostSlot(t), tensor.bytes);
    } else {
      RETURN_IF_ERROR(backend_->Download(value.bytes.data(), View(t).data, tensor.bytes));
    }
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
  const TensorId t = state_ids_[index];
  if (step_->graph.tensor(t).on_host) {
    std::memcpy(host_dst.data(), HostSlot(t), info.bytes);
    return absl::OkStatus();
  }
  return backend_->Download(host_dst.data(), View(t).data, info.bytes);
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
    RETURN_IF_ERROR(WriteState(state_ids_[i], writes[i]->bytes.data()));
  }
  RETURN_IF_ERROR(backend_->Synchronize());
  steps_run_ = steps_run;
  return absl::OkStatus();
}

}  // namespace headroom::executor
