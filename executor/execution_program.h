// The compile step of the executor: what it will do for one expanded training step under
// one memory plan, decided before anything is allocated, as a value a test can read.
//
// CompileStep() returns an ExecutionProgram: for each schedule position the node run there,
// its kernel arguments (shapes, dtypes and which tensor each view is, no addresses), the
// buffers allocated before it and freed after it, the copies to host issued after it and
// the tensors captured after it; each tensor's slice of the arena and each offloaded
// tensor's slot in the host pool. The executor then binds the arguments to its arena
// (BindArgs) and runs the nodes in order. Nothing here touches a device.
#ifndef HEADROOM_EXECUTOR_EXECUTION_PROGRAM_H_
#define HEADROOM_EXECUTOR_EXECUTION_PROGRAM_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "executor/kernel_args.h"
#include "executor/node_args.h"
#include "graph/graph.h"
#include "planner/memory_planner.h"
#include "planner/sections.h"
#include "profiler/memory_role.h"

namespace headroom::executor {

// A range of bytes of the arena: `bytes` from `offset`.
struct ArenaSlice {
  uint64_t offset = 0;
  uint64_t bytes = 0;

  uint64_t end() const { return offset + bytes; }
  bool operator==(const ArenaSlice& other) const {
    return offset == other.offset && bytes == other.bytes;
  }
};

// The tensors that share bytes (in place or as views), alive from the first one's first
// schedule position to the last one's last.
struct ProgramBuffer {
  // Of its first tensor.
  std::string name;
  planner::TensorId first_tensor = planner::kNone;
  profiler::MemoryRole role = profiler::MemoryRole::kActivation;
  // Its bytes aligned as the plan reserves them.
  ArenaSlice slice;
  int32_t first_position = 0;
  int32_t last_position = 0;
  // Allocated once before the first step and never freed.
  bool persistent = false;
};

// The kernel arguments of one node; only the one its kind uses is set.
struct NodeKernelArgs {
  ForwardArgs forward;    // kForward, kRecompute.
  BackwardArgs backward;  // kBackward.
  UpdateArgs update;      // kUpdate.
};

// What the executor does at one schedule position, in this order: allocate `allocate`,
// run the node, read `capture_after`, issue `copy_out_after`, free `free`.
struct ProgramNode {
  // The training-graph node run here.
  planner::NodeId node = planner::kNone;
  planner::NodeKind kind = planner::NodeKind::kForward;
  // Buffers (indices into ExecutionProgram::buffers).
  std::vector<int32_t> allocate;
  std::vector<int32_t> free;
  // Its kernel arguments without data, and the tensor behind each view.
  NodeKernelArgs args;
  ArgTensors tensors;
  // kPrefetch: the offloaded tensor whose host copy it brings back.
  planner::TensorId prefetch_source = planner::kNone;
  // Offloaded tensors whose copy to host is issued right after this node.
  std::vector<planner::TensorId> copy_out_after;
  // Tensors ExecutorOptions::capture names that this (forward) node writes.
  std::vector<planner::TensorId> capture_after;
  // Gradients whose copy to the host pool (for a host update) is issued right after it.
  std::vector<planner::TensorId> grad_copy_after;
  // The host update (index into ExecutionProgram::host_updates) this node queues (a kUpdate
  // node with op "Host...") or copies back (a kPrefetch node "ParamToDevice"); -1 if none.
  int32_t host_update = -1;
};

// One parameter's update on the host (planner::HostUpdate): its slots in the host pool.
struct ProgramHostUpdate {
  // "SgdMomentumUpdate" or "AdamUpdate": the arithmetic of executor/optimizer_math.h.
  std::string op;
  planner::TensorId param = planner::kNone;
  planner::TensorId grad = planner::kNone;
  std::vector<planner::TensorId> state;
  // Host pool offsets: the parameter's master copy, the gradient's copy, each state tensor.
  uint64_t param_offset = 0;
  uint64_t grad_offset = 0;
  std::vector<uint64_t> state_offsets;
};

struct ExecutionProgram {
  // By tensor: where its bytes are (its own size, at its planned offset).
  std::vector<ArenaSlice> tensor_slices;
  std::vector<ProgramBuffer> buffers;
  // By schedule position.
  std::vector<ProgramNode> nodes;
  // Offloaded tensors whose copy to host is issued before the first node (the batch).
  std::vector<planner::TensorId> copy_out_first;
  // By tensor: its slot's offset in the host pool, for offloaded tensors, and for the
  // parameters (master copy), gradients and state of host updates.
  std::vector<std::optional<uint64_t>> host_offset;
  uint64_t host_pool_bytes = 0;
  // The host updates (optimizer state on the host), in schedule order; their slots follow
  // the offloaded tensors' in the host pool.
  std::vector<ProgramHostUpdate> host_updates;
  // The step's input and label tensors, uploaded before the first node.
  std::vector<planner::TensorId> batch_tensors;

  // Returns a line per schedule position: kind, node name, allocations, frees and copies.
  std::string DebugString(const planner::TrainingGraph& g) const;
};

struct CompileOptions {
  // The optimizer's hyper-parameters, handed to every update node. Default PyTorch's.
  OptimizerParams optimizer;
  // Forward tensors, by name, to read right after the forward node that writes them.
  // Default none.
  std::vector<std::string> capture;
};

// Returns the program that runs `step` (whose forward graph is `forward`) laid out by
// `plan`. InvalidArgument when the plan does not cover the step's tensors, for a dtype the
// executor cannot hold, or for a capture no forward node writes; Internal when the plan or
// the step is inconsistent (tensors of one buffer at different offsets, a backward node
// without its forward node, a prefetch with no offloaded source); Unimplemented where a
// backward node's arguments cannot be built (node_args.h).
absl::StatusOr<ExecutionProgram> CompileStep(const graph::Graph& forward,
                                             const planner::SectionedStep& step,
                                             const planner::MemoryPlan& plan,
                                             const CompileOptions& options);

// Returns `node`'s kernel arguments with every view's data at `arena_base` plus its
// tensor's offset.
NodeKernelArgs BindArgs(const ExecutionProgram& program, const ProgramNode& node,
                        void* arena_base);

}  // namespace headroom::executor

#endif  // HEADROOM_EXECUTOR_EXECUTION_PROGRAM_H_
