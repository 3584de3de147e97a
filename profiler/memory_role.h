// The roles a timeline splits memory into: what a user asks about when memory runs out
// ("is it the activations or the optimizer state?"). Finer than nothing, coarser than the
// planner's tensor roles: a cached section input is an activation the sections keep, and
// bytes offloaded to host memory are shown apart from device memory.
#ifndef HEADROOM_PROFILER_MEMORY_ROLE_H_
#define HEADROOM_PROFILER_MEMORY_ROLE_H_

#include <array>
#include <optional>

#include "absl/strings/string_view.h"

namespace headroom::profiler {

enum class MemoryRole {
  kParameter,       // Trainable weights.
  kGradient,        // Gradients of parameters and activations.
  kOptimizerState,  // Momentum, Adam's moments.
  kActivation,      // Forward outputs and what forward nodes save for backward.
  kCachedInput,     // A section's cached input, kept on the device for its backward pass.
  kBuffer,          // Non-trainable state kept across steps (batch-norm statistics).
  kBatch,           // The step's inputs and labels.
  kWorkspace,       // Scratch memory of kernels a backend holds outside the arena, which
                    // no plan accounts for (cuBLAS's own; a kernel handed too little).
  kHostOffload,     // Cached inputs copied to host memory (host bytes, not device bytes).
  kScratch,         // A node's planned kernel scratch, in the arena for that node alone
                    // (oneDNN scratchpads and staged copies, cuDNN workspaces).
};

inline constexpr std::array<MemoryRole, 10> kAllMemoryRoles = {
    MemoryRole::kParameter,  MemoryRole::kGradient,    MemoryRole::kOptimizerState,
    MemoryRole::kActivation, MemoryRole::kCachedInput, MemoryRole::kBuffer,
    MemoryRole::kBatch,      MemoryRole::kWorkspace,   MemoryRole::kHostOffload,
    MemoryRole::kScratch,
};

// Returns the role's name as labels and JSON keys use it: "parameters", "gradients",
// "optimizer_state", "activations", "cached_inputs", "buffers", "batch", "workspace",
// "host_offload", "scratch".
inline const char* MemoryRoleName(MemoryRole role) {
  switch (role) {
    case MemoryRole::kParameter: return "parameters";
    case MemoryRole::kGradient: return "gradients";
    case MemoryRole::kOptimizerState: return "optimizer_state";
    case MemoryRole::kActivation: return "activations";
    case MemoryRole::kCachedInput: return "cached_inputs";
    case MemoryRole::kBuffer: return "buffers";
    case MemoryRole::kBatch: return "batch";
    case MemoryRole::kWorkspace: return "workspace";
    case MemoryRole::kHostOffload: return "host_offload";
    case MemoryRole::kScratch: return "scratch";
  }
  return "unknown";
}

// Returns the role named `name` (as MemoryRoleName writes it), or nullopt.
inline std::optional<MemoryRole> MemoryRoleFromName(absl::string_view name) {
  for (MemoryRole role : kAllMemoryRoles) {
    if (name == MemoryRoleName(role)) return role;
  }
  return std::nullopt;
}

// Returns whether the role's bytes are host memory rather than device memory.
inline bool IsHostRole(MemoryRole role) { return role == MemoryRole::kHostOffload; }

}  // namespace headroom::profiler

#endif  // HEADROOM_PROFILER_MEMORY_ROLE_H_
