// The process sampler against allocations this test makes itself: it must see them, and an
// allocation outside any plan must show as unplanned bytes beyond the bound.
#include "profiler/process_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>

#include "gtest/gtest.h"

namespace headroom::profiler {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

// `bytes` of fresh anonymous memory, every page written (so resident), unmapped when done.
class Touched {
 public:
  explicit Touched(uint64_t bytes) : bytes_(bytes) {
    data_ = static_cast<char*>(
        mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    EXPECT_NE(data_, MAP_FAILED);
    volatile char* p = data_;
    for (uint64_t i = 0; i < bytes; i += 4096) p[i] = 1;
  }
  ~Touched() { munmap(data_, bytes_); }

 private:
  char* data_;
  uint64_t bytes_;
};

uint64_t Resident() {
  absl::StatusOr<ProcessMemory> m = SampleProcessMemory();
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? m->resident_bytes : 0;
}

TEST(ProcessMemoryTest, ResidentBytesFollowAKnownAllocation) {
  const uint64_t before = Resident();
  uint64_t during = 0;
  {
    Touched block(64 * kMiB);
    during = Resident();
  }
  const uint64_t after = Resident();
  // The block's 64 MiB, give or take the test's own small allocations.
  EXPECT_GE(during, before + 63 * kMiB);
  EXPECT_LE(during, before + 66 * kMiB);
  EXPECT_LE(after, before + 2 * kMiB);
}

TEST(ProcessMemoryTest, HeapBytesCountMalloc) {
  absl::StatusOr<ProcessMemory> before = SampleProcessMemory();
  ASSERT_TRUE(before.ok());
  void* p = std::malloc(32 * kMiB);
  ASSERT_NE(p, nullptr);
  absl::StatusOr<ProcessMemory> during = SampleProcessMemory();
  std::free(p);
  ASSERT_TRUE(during.ok());
  EXPECT_GE(during->heap_bytes, before->heap_bytes + 32 * kMiB);
}

TEST(ProcessMemoryTest, TheKernelsPeakSeesWhatWasFreedAndResetsToNow) {
  { Touched block(96 * kMiB); }
  absl::StatusOr<uint64_t> peak = PeakResidentBytes();
  ASSERT_TRUE(peak.ok()) << peak.status();
  EXPECT_GE(*peak, Resident() + 90 * kMiB);
  if (absl::Status s = ResetPeakResident(); !s.ok()) GTEST_SKIP() << s;
  peak = PeakResidentBytes();
  ASSERT_TRUE(peak.ok());
  EXPECT_LE(*peak, Resident() + 2 * kMiB);
}

TEST(ProcessMemoryTest, UnplannedLimitIsFivePercentOrThirtyTwoMiB) {
  EXPECT_EQ(UnplannedLimitBytes(0), 32 * kMiB);
  EXPECT_EQ(UnplannedLimitBytes(400 * kMiB), 32 * kMiB);
  EXPECT_EQ(UnplannedLimitBytes(2000 * kMiB), 100 * kMiB);
}

// A run whose "plan" holds 48 MiB: a 48 MiB block sampled at a node boundary is planned; a
// block of 80 MiB more, outside the plan, is unplanned beyond the bound and must show so.
TEST(ProcessMemorySamplerTest, AnAllocationOutsideThePlanIsUnplannedBeyondTheBound) {
  ProcessMemorySampler sampler;
  Touched arena(48 * kMiB);
  sampler.OnOp({0, 3, 0, 0, false});
  proto::ProcessMemory within = sampler.Account(48 * kMiB, 0);
  ASSERT_TRUE(within.unavailable_reason().empty()) << within.unavailable_reason();
  EXPECT_LT(within.unplanned_bytes(), 2 * kMiB);
  EXPECT_EQ(within.peak_step(), 0);

  Touched planted(80 * kMiB);
  sampler.OnOp({1, 5, 0, 0, false});
  const proto::ProcessMemory caught = sampler.Account(48 * kMiB, 0);
  EXPECT_GE(caught.unplanned_bytes(), 78 * kMiB);
  EXPECT_GT(caught.unplanned_bytes(), caught.unplanned_limit_bytes());
  EXPECT_EQ(caught.peak_step(), 1);
  EXPECT_EQ(caught.physical_peak_bytes(), sampler.peak_bytes());
  EXPECT_EQ(caught.baseline_bytes(), sampler.baseline_bytes());
  EXPECT_EQ(caught.samples(), 3u);
  ASSERT_EQ(sampler.step_peak_bytes().size(), 2u);
  EXPECT_GE(sampler.step_peak_bytes()[1], sampler.step_peak_bytes()[0] + 78 * kMiB);
}

// Between two samples a block comes and goes: the samples miss it; with reset_peak the
// kernel's own high-water mark does not.
TEST(ProcessMemorySamplerTest, TheKernelsPeakSeesBetweenSamples) {
  if (!ResetPeakResident().ok()) GTEST_SKIP() << "the kernel cannot reset its peak";
  ProcessMemorySampler sampled_only;
  ProcessMemorySampler with_kernel(nullptr, {.reset_peak = true});
  { Touched transient(64 * kMiB); }
  sampled_only.OnOp({0, 1, 0, 0, false});
  with_kernel.OnOp({0, 1, 0, 0, false});
  EXPECT_LT(sampled_only.peak_bytes(), sampled_only.baseline_bytes() + 8 * kMiB);
  EXPECT_GE(with_kernel.peak_bytes(), with_kernel.baseline_bytes() + 60 * kMiB);
}

}  // namespace
}  // namespace headroom::profiler
