// For the CPU kernel tests: run a kernel in exactly the scratch it declares, as the executor
// hands it the node's planned scratch, and check that it stays inside.
#ifndef HEADROOM_EXECUTOR_CPU_CPU_KERNELS_TESTING_H_
#define HEADROOM_EXECUTOR_CPU_CPU_KERNELS_TESTING_H_

#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/status/statusor.h"
#include "executor/cpu/cpu_context.h"
#include "gtest/gtest.h"

namespace headroom::executor::cpu {

// Runs `run(args)` with args.scratch set to exactly `declared(args)` bytes, 64-byte aligned
// and followed by a guard; fails the test when the kernel writes into the guard or takes
// scratch from elsewhere (`unplanned()`, the bytes its context holds outside any plan,
// grows). Arguments whose query fails run as given, so the kernel reports its own error.
template <typename Args, typename Declared, typename Run, typename Unplanned>
absl::Status RunInDeclaredScratch(Args args, Declared declared, Run run, Unplanned unplanned) {
  const absl::StatusOr<uint64_t> bytes = declared(args);
  if (!bytes.ok()) return run(args);
  constexpr uint64_t kGuard = 256;
  constexpr uint8_t kCanary = 0xA5;
  std::vector<uint8_t> buffer(*bytes + kGuard + 64, kCanary);
  uint8_t* base = buffer.data() + (64 - reinterpret_cast<uintptr_t>(buffer.data()) % 64) % 64;
  args.scratch = *bytes > 0 ? base : nullptr;
  args.scratch_bytes = *bytes;
  const uint64_t unplanned_before = unplanned();
  const absl::Status status = run(args);
  EXPECT_EQ(unplanned(), unplanned_before)
      << args.op << ": took scratch beyond the " << *bytes << " bytes it declared";
  for (uint64_t i = 0; i < kGuard; ++i) {
    if (base[*bytes + i] != kCanary) {
      ADD_FAILURE() << args.op << ": wrote past its " << *bytes << " declared scratch bytes";
      break;
    }
  }
  return status;
}

// Runs the forward (backward) kernel of table entry `k` on `ctx` in exactly the scratch it
// declares, as RunInDeclaredScratch.
inline absl::Status RunForwardInDeclaredScratch(CpuContext& ctx, const OpKernels& k,
                                                const ForwardArgs& args) {
  return RunInDeclaredScratch(
      args,
      [&](const ForwardArgs& a) -> absl::StatusOr<uint64_t> {
        return k.forward_scratch == nullptr ? 0 : k.forward_scratch(ctx, a);
      },
      [&](const ForwardArgs& a) { return k.forward(ctx, a); },
      [&] { return ctx.unplanned_bytes; });
}

inline absl::Status RunBackwardInDeclaredScratch(CpuContext& ctx, const OpKernels& k,
                                                 const BackwardArgs& args) {
  return RunInDeclaredScratch(
      args,
      [&](const BackwardArgs& a) -> absl::StatusOr<uint64_t> {
        return k.backward_scratch == nullptr ? 0 : k.backward_scratch(ctx, a);
      },
      [&](const BackwardArgs& a) { return k.backward(ctx, a); },
      [&] { return ctx.unplanned_bytes; });
}

}  // namespace headroom::executor::cpu

#endif  // HEADROOM_EXECUTOR_CPU_CPU_KERNELS_TESTING_H_
