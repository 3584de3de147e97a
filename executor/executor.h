// The executor: runs training steps of one expanded training step (planner/sections.h)
// on a backend, with every tensor in one device arena at the offset its memory plan gave
// it, allocated when the plan says it comes alive and freed when the plan says it dies.
// Sections need nothing special here: the expanded step already lists the forward pass,
// each section's re-forward and backward, and the copies to and from host memory; the
// executor runs its nodes in order, issues each offloaded tensor's copy to host right
// after it is written, awaits it at the offload node, issues each prefetch at its node and
// waits for it only where the prefetched copy is first read.
//
// Create() compiles the step (CompileStep, executor/execution_program.h: every decision,
// before anything is allocated), then allocates everything once (the arena of the plan's size, the host pool for
// offloaded tensors) and places the persistent state; then call RunStep() per batch. Between
// steps, SaveState()/RestoreState() take and set the persistent state whole;
// StateTensors() and ReadStateTensor() read it a tensor at a time (for checkpoints).
// Measured peak: the arena's high-water mark, which equals the plan's arena_bytes when the
// run keeps to the plan (the contract "predicted is measured").
//
// Thread-compatible. Borrows the backend, which must outlive it.
#ifndef HEADROOM_EXECUTOR_EXECUTOR_H_
#define HEADROOM_EXECUTOR_EXECUTOR_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "executor/backend.h"
#include "executor/batch_norm_sync.h"
#include "executor/device_arena.h"
#include "executor/execution_observer.h"
#include "executor/execution_program.h"
#include "executor/gradient_exchange.h"
#include "executor/host_tensor.h"
#include "executor/host_update.h"
#include "executor/kernel_args.h"
#include "graph/graph.h"
#include "planner/memory_planner.h"
#include "planner/sections.h"
#include "profiler/events.h"

namespace headroom::executor {

struct ExecutorOptions {
  // The optimizer's hyper-parameters (which optimizer is fixed by the training graph).
  OptimizerParams optimizer;
  // Seeds the dropout masks (with the step number and the node).
  uint64_t seed = 1;
  // Where to report every allocation, free, node, copy and step as it happens (borrowed;
  // must outlive the executor). Default none: nothing is recorded.
  profiler::EventSink* events = nullptr;
  // When set (borrowed), RunStep() checks it before every node and stops with Cancelled once
  // it is true; the executor can then only be destroyed. Default none.
  const std::atomic<bool>* cancel = nullptr;
  // Forward tensors, by name, copied to the host as soon as the forward pass writes them
  // in every step (not their re-forward copies); they come back in StepResult::captured.
  // For checks against a reference. Default none.
  std::vector<std::string> capture;
  // Data-parallel training (borrowed; must outlive the executor): each parameter's update
  // is deferred to the end of the step and reads the exchange's reduced gradient from its
  // planned bucket (executor/gradient_exchange.h; the step must hold the buckets,
  // planner::AddGradientBuckets). Default none: updates run where the schedule puts them.
  GradientExchange* gradients = nullptr;
  // Batch norm synchronised across data-parallel ranks (borrowed; must outlive the
  // executor): every training BatchNorm normalises over the global batch
  // (executor/batch_norm_sync.h). Default none: each rank normalises its own batch.
  BatchNormSync* batch_norm_sync = nullptr;
  // A debug mode for steps that rebuild reversible blocks (SectionedStep::rebuilt): every
  // this many steps (from the first; 0 never), each tensor a rebuild writes anew is compared
  // with the forward's copy of it (both downloaded to host memory, outside the plan), and
  // StepResult reports the largest difference. Default 0.
  int64_t check_rebuild_every = 0;
  // Prefetch to device: the arena gains a staging slot (StagingSlotBytes() after the plan's
  // bytes, allocated for the executor's life) into which StageBatch() copies the next batch
  // from pinned host memory on the copy stream while the current step computes;
  // RunStagedStep() moves it into the batch's place at its start. Default false.
  bool prefetch_to_device = false;
};

// Returns the bytes of the staging slot ExecutorOptions::prefetch_to_device adds to the
// arena: every input and label tensor of `graph`, each rounded up to the plan's alignment.
uint64_t StagingSlotBytes(const planner::TrainingGraph& graph);

// Everything a run needs to go on where it stopped: every persistent tensor of the training
// graph (parameters, buffers and the optimizer's state) and the steps run.
struct ExecutorState {
  int64_t steps_run = 0;
  std::vector<HostTensor> tensors;
};

// One persistent tensor as SaveState() saves it, without its values: what a checkpoint
// writer needs to lay the state out before reading it one tensor at a time.
struct StateTensorInfo {
  std::string name;
  graph::Shape shape;
  proto::DType dtype = proto::DTYPE_FLOAT32;
  // Its size: elements times the dtype's size.
  uint64_t bytes = 0;
};

// A saved tensor's values, borrowed from whoever holds them (a HostTensor, a checkpoint's
// TensorValue): what RestoreState() reads. Valid while the holder is.
struct StateTensorView {
  absl::string_view name;
  absl::Span<const int64_t> shape;
  proto::DType dtype = proto::DTYPE_FLOAT32;
  absl::Span<const uint8_t> bytes;
};

// What one step did.
struct StepResult {
  // 0 for the first step run.
  int64_t step = 0;
  // The loss before this step's update.
  double loss = 0;
  double seconds = 0;
  // The arena's high-water mark (over the whole run so far) and its live peak this step.
  uint64_t arena_high_water_bytes = 0;
  uint64_t peak_live_bytes = 0;
  // The plan's peak this step ran under (predicted_peak_bytes()).
  uint64_t planned_peak_bytes = 0;
  // Time compute spent waiting for copies: the thread's wait on the CPU backend, the compute
  // stream's on a GPU (Backend::TakeStreamWaitSeconds).
  double copy_wait_seconds = 0;
  // Bytes copied to host and back.
  uint64_t offloaded_bytes = 0;
  // The tensors ExecutorOptions::capture names, as the forward pass wrote them.
  std::vector<HostTensor> captured;
  // In a step checked by ExecutorOptions::check_rebuild_every: the largest absolute
  // difference between a rebuilt float32 tensor and the forward's copy (-1 when not
  // checked), and the elements of other rebuilt tensors (dropout's masks) that differ at all.
  double max_rebuild_error = -1;
  int64_t rebuild_mismatches = 0;
};

// What one evaluation pass (Executor::Evaluate) did.
struct EvalResult {
  // The loss on the batch, the forward pass in inference mode.
  double loss = 0;
  // The tensors asked for, as the forward pass wrote them, in the order asked.
  std::vector<HostTensor> read;
  double seconds = 0;
  // The arena's live peak during the pass, and its high-water mark over the whole run so
  // far (steps and passes): never above the plan's arena_bytes.
  uint64_t peak_live_bytes = 0;
  uint64_t arena_high_water_bytes = 0;
};

// Writes the initial value of parameter or buffer `tensor` into `dst` (exactly its bytes);
// an error stops Executor::Create.
using InitialValueWriter =
    absl::FunctionRef<absl::Status(const StateTensorInfo& tensor, absl::Span<uint8_t> dst)>;

class Executor {
 public:
  // Returns an executor for `step`, laid out by `memory` (its plan), with parameters and
  // buffers set from `initial_state` (every one must be present, by name, with its shape
  // and dtype). InvalidArgument for a tensor the backend cannot hold or an op it lacks;
  // ResourceExhausted if the arena cannot be allocated.
  static absl::StatusOr<std::unique_ptr<Executor>> Create(
      const graph::Graph& forward, std::shared_ptr<const planner::SectionedStep> step,
      std::shared_ptr<const planner::MemoryPlan> memory, Backend* backend,
      const std::vector<HostTensor>& initial_state, const ExecutorOptions& options);
  // The same with each parameter and buffer written by `initial` in turn, through one host
  // buffer of the largest one's size: the initial state never exists whole outside the
  // arena.
  static absl::StatusOr<std::unique_ptr<Executor>> Create(
      const graph::Graph& forward, std::shared_ptr<const planner::SectionedStep> step,
      std::shared_ptr<const planner::MemoryPlan> memory, Backend* backend,
      InitialValueWriter initial, const ExecutorOptions& options);

  ~Executor();

  // Runs one training step on `batch`: every input and label tensor, by name.
  absl::StatusOr<StepResult> RunStep(const std::vector<HostTensor>& batch);

  // Copies `batch` (every input and label tensor, by name) into pinned host memory (two
  // buffers, used in turn) and issues its copy into the staging slot on the copy stream,
  // after the compute issued so far; the next RunStagedStep() runs on it.
  // REQUIRES: options.prefetch_to_device. FailedPrecondition without it or when a batch is
  // staged already; InvalidArgument naming a missing or mismatched tensor.
  absl::Status StageBatch(const std::vector<HostTensor>& batch);
  // Runs one training step on the staged batch: the compute stream waits for its copy, and
  // it is copied on the device into the batch's place; then `next` (when given) is staged,
  // its copy overlapping this step's compute. The same arithmetic as RunStep() on the same
  // batch. FailedPrecondition when no batch is staged.
  absl::StatusOr<StepResult> RunStagedStep(const std::vector<HostTensor>* next);
  // Whether a batch is staged for the next RunStagedStep().
  bool batch_staged() const { return staged_host_ >= 0; }
  // Forgets the staged batch, if any (a run that stopped before its step); its copy is
  // awaited before its host buffer is written again.
  void DiscardStagedBatch() { staged_host_ = -1; }
  // The staging slot's device bytes (counted in predicted_peak_bytes()) and its pinned host
  // buffers' bytes; 0 without prefetch_to_device.
  uint64_t staging_bytes() const { return staging_bytes_; }
  uint64_t staging_host_bytes() const;

  // Returns the loss of the forward pass on `batch` (every input and label tensor, by name)
  // in inference mode, and the forward tensors `read` names, each downloaded right after the
  // node that writes it (so its planned lifetime covers the read). Inside the training
  // arena, under the training plan: it runs the forward nodes of the step's schedule with
  // their planned buffers (batch norm on its running statistics, dropout the identity), skips
  // the copies to host, frees what the backward would have read after the loss, and runs no
  // backward or update. So its peak is at most the step's, the persistent state is untouched
  // and steps_run() does not move. It reports nothing to the event sink. InvalidArgument for
  // a name that is no forward tensor, or a node whose inference kernel needs more scratch
  // than the plan gave its training kernel.
  absl::StatusOr<EvalResult> Evaluate(const std::vector<HostTensor>& batch,
                                      absl::Span<const std::string> read);

  // Returns the values of every parameter and buffer now, in tensor-id order.
  absl::StatusOr<std::vector<HostTensor>> ReadState() const;

  // Returns every persistent tensor now, the optimizer's state included, and the steps run.
  // It holds the whole state in host memory; StateTensors() and ReadStateTensor() read it
  // one tensor at a time instead.
  absl::StatusOr<ExecutorState> SaveState() const;

  // Returns the name, shape, dtype and size of every persistent tensor, in the order
  // SaveState() saves them. Fixed for the executor's life.
  const std::vector<StateTensorInfo>& StateTensors() const { return state_tensors_; }

  // Waits for the device, then copies persistent tensor `index` (of StateTensors()) as it
  // is now into `host_dst`. OutOfRange for an index past the end; InvalidArgument naming
  // the tensor when host_dst.size() is not its bytes.
  absl::Status ReadStateTensor(size_t index, absl::Span<uint8_t> host_dst) const;

  // Sets every persistent tensor and the step counter from `state` (taken by SaveState() of
  // an executor of the same training graph, under any plan). InvalidArgument naming the
  // tensor when one is missing or its shape, dtype or size differs; nothing is written then.
  absl::Status RestoreState(const ExecutorState& state);
  // The same from borrowed values (e.g. a checkpoint's, without copying them to HostTensors):
  // `tensors` by name, any order, and `steps_run` steps run.
  absl::Status RestoreState(int64_t steps_run, absl::Span<const StateTensorView> tensors);

  int64_t steps_run() const { return steps_run_; }

  // Sets the learning rate of the steps from the next one on (a schedule's); the other
  // hyper-parameters stay options.optimizer's.
  void set_learning_rate(double rate) { learning_rate_ = rate; }
  double learning_rate() const { return learning_rate_; }

  // The arena's size: the plan's predicted peak, plus the staging slot.
  uint64_t predicted_peak_bytes() const { return memory_->arena_bytes + staging_bytes_; }
  // The host pool's size: where offloaded tensors wait, and with the optimizer state on
  // the host, each parameter's master copy, gradient copy and state (0 when neither).
  uint64_t host_pool_bytes() const;
  const DeviceArena& arena() const { return *arena_; }

 private:
  // A copy between device and host in flight during a step.
  struct InFlightCopy {
    std::unique_ptr<Event> event;
    // The offloaded tensor it copies.
    planner::TensorId original = planner::kNone;
  };

  Executor(const graph::Graph& forward, std::shared_ptr<const planner::SectionedStep> step,
           std::shared_ptr<const planner::MemoryPlan> memory, Backend* backend,
           const ExecutorOptions& options, ExecutionProgram program);

  absl::Status PlaceState(InitialValueWriter initial);
  // The steps of RunStep at schedule position `s`, in order.
  absl::Status AllocateBuffers(int32_t s);
  absl::Status UploadBatch(const std::vector<HostTensor>& batch);
  // RunStep() on `batch`, or with nullptr on the staged batch (then staging `next`).
  absl::StatusOr<StepResult> RunStepOn(const std::vector<HostTensor>* batch,
                                       const std::vector<HostTensor>* next);
  // The staging slot (prefetch_to_device): allocates it and its host buffers; at a staged
  // step's start, waits for the copy and moves the batch into its place.
  absl::Status PrepareStaging();
  absl::Status MoveStagedBatch();
  absl::Status RunNode(int32_t s, StepResult* result);
  absl::Status CaptureAfter(int32_t s, StepResult* result);
  // In a step checked for rebuild error: downloads what the node at `s` writes that a
  // rebuild writes again (or rebuilt), comparing each rebuilt tensor with its original.
  absl::Status CheckRebuildAfter(int32_t s, StepResult* result);
  absl::Status FreeBuffers(int32_t s);
  // Issues the copies to host of `tensors`, due after position `s` (-1: before the first).
  absl::Status IssueCopiesOut(const std::vector<planner::TensorId>& tensors, int32_t s,
                              StepResult* result);
  // The parts of RunNode: waiting for prefetched inputs, the node's own work by kind, and
  // the offload and prefetch nodes' copies.
  absl::Status AwaitPrefetchedInputs(int32_t s, StepResult* result);
  absl::Status RunKernel(int32_t s, StepResult* result);
  absl::Status AwaitCopyOut(int32_t s, StepResult* result);
  absl::Status IssuePrefetch(int32_t s);
  // With ExecutorOptions::gradients: tells the exchange the gradients and their planned
  // buckets (at Create); hands the gradient of the update at `s` over, and runs the deferred
  // updates at the last position.
  absl::Status PrepareGradientExchange();
  absl::Status HandOverGradient(int32_t s);
  absl::Status RunDeferredUpdates();
  // With ExecutorOptions::batch_norm_sync: binds the batch norms' allreduces and tells the
  // sync every collective of a step (at Create); around the forward of the node at `s`,
  // keeps its global statistics (a forward) or copies them in (a re-forward).
  absl::Status PrepareBatchNormSync();
  absl::Status SyncedBatchNormForward(int32_t s);
  // The host update of the node at `s`: queued (kUpdate), or its parameter copied back once
  // done (kPrefetch "ParamToDevice").
  absl::Status QueueHostUpdate(int32_t s);
  absl::Status CopyBackParameter(int32_t s, StepResult* result);
  // Issues the copies to host of the gradients the host updates read, due after `s`.
  absl::Status IssueGradCopies(int32_t s, StepResult* result);
  // Writes persistent tensor `t` (its bytes at `value`) where it lives: the arena, or its
  // host slot for optimizer state on the host; a parameter updated on the host also into
  // its master copy.
  absl::Status WriteState(planner::TensorId t, const void* value);
  // Sets the result's loss, peaks and time, and ends the step.
  absl::Status FinishStep(std::chrono::steady_clock::time_point start,
                          uint64_t high_water_before, StepResult* result);
  // Returns the forward nodes' arguments in inference mode, by schedule position, made once
  // (Evaluate); positions of other nodes hold nothing.
  absl::Status MakeEvalArgs();
  // Returns training-graph tensor `t` in the arena.
  TensorView View(planner::TensorId t) const;
  void* HostSlot(planner::TensorId original) const;

  const graph::Graph& forward_;
  std::shared_ptr<const planner::SectionedStep> step_;
  std::shared_ptr<const planner::MemoryPlan> memory_;
  Backend* backend_;
  ExecutorOptions options_;
  const ExecutionProgram program_;
  // Where telemetry goes: an EventSinkObserver of options_.events, or one that does nothing.
  std::unique_ptr<ExecutionObserver> observer_;
  std::unique_ptr<DeviceArena> arena_;
  std::unique_ptr<Buffer> host_pool_;
  // Runs the host updates (optimizer state on the host); null when there are none. After
  // host_pool_, so it finishes before the pool goes.
  std::unique_ptr<HostUpdateQueue> host_queue_;
  // By host update: its ticket in host_queue_ this step.
  std::vector<int64_t> host_tickets_;
  // By gradient: its copy to host, awaited by the compute stream, for the host update to wait
  // on before it reads the host copy.
  absl::flat_hash_map<planner::TensorId, std::unique_ptr<Event>> grad_ready_;
  // By schedule position: the program's kernel arguments bound to the arena.
  std::vector<NodeKernelArgs> bound_args_;
  // By schedule position, the forward nodes' arguments in inference mode (MakeEvalArgs).
  std::vector<std::optional<ForwardArgs>> eval_args_;
  // Copies in flight: to host by original tensor, to device by the device copy.
  absl::flat_hash_map<planner::TensorId, InFlightCopy> copy_out_events_;
  absl::flat_hash_map<planner::TensorId, InFlightCopy> prefetch_events_;
  // The persistent tensors, in tensor-id order: their ids and what StateTensors() says.
  std::vector<planner::TensorId> state_ids_;
  std::vector<StateTensorInfo> state_tensors_;
  // With ExecutorOptions::gradients: by schedule position, the update's index among the
  // gradients (-1 for other nodes), and this step's deferred update positions in order.
  std::vector<int32_t> gradient_index_;
  std::vector<int32_t> deferred_updates_;
  // With ExecutorOptions::batch_norm_sync: by schedule position, whether the node is a
  // synchronised batch norm's forward or re-forward; by forward node, the global mean and
  // variance the forward saved this step (2C floats, host memory outside the plan).
  std::vector<bool> synced_batch_norm_;
  absl::flat_hash_map<int32_t, std::vector<float>> batch_norm_statistics_;
  int64_t steps_run_ = 0;
  // check_rebuild_every: the original of each rebuilt copy, the originals, and the
  // originals' values downloaded in this step's forward.
  absl::flat_hash_map<planner::TensorId, planner::TensorId> rebuild_original_of_;
  absl::flat_hash_set<planner::TensorId> rebuild_originals_;
  absl::flat_hash_map<planner::TensorId, HostTensor> rebuild_forward_values_;
  uint64_t run_high_water_bytes_ = 0;
  // prefetch_to_device: the slot's offset in the arena and bytes, each batch tensor's
  // offset within it (program_.batch_tensors' order), the pinned host buffers with their
  // last copies, and the buffer whose batch is staged (-1: none).
  uint64_t staging_offset_ = 0;
  uint64_t staging_bytes_ = 0;
  std::vector<uint64_t> staging_tensor_offsets_;
  std::unique_ptr<Buffer> staging_host_[2];
  std::unique_ptr<Event> staging_copies_[2];
  int next_staging_host_ = 0;
  int staged_host_ = -1;
  double learning_rate_;  // options_.optimizer.learning_rate until set_learning_rate()
};

}  // namespace headroom::executor

#endif  // HEADROOM_EXECUTOR_EXECUTOR_H_
