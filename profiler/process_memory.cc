#include "profiler/process_memory.h"

#include <fcntl.h>
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace headroom::profiler {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

// Returns the text of a /proc file (small: one read).
absl::StatusOr<std::string> ReadProc(const char* path) {
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::UnavailableError(absl::StrCat(path, ": ", std::strerror(errno)));
  char buffer[4096];
  const ssize_t n = read(fd, buffer, sizeof(buffer) - 1);
  const int saved = errno;
  close(fd);
  if (n < 0) return absl::UnavailableError(absl::StrCat(path, ": ", std::strerror(saved)));
  return std::string(buffer, n);
}

uint64_t HeapBytes() {
  const struct mallinfo2 info = mallinfo2();
  return info.uordblks + info.hblkhd;
}

}  // namespace

absl::StatusOr<ProcessMemory> SampleProcessMemory() {
  // statm: size resident shared text lib data dt, in pages.
  absl::StatusOr<std::string> statm = ReadProc("/proc/self/statm");
  if (!statm.ok()) return statm.status();
  const std::vector<absl::string_view> fields = absl::StrSplit(*statm, ' ');
  uint64_t pages = 0;
  if (fields.size() < 2 || !absl::SimpleAtoi(fields[1], &pages)) {
    return absl::UnavailableError(absl::StrCat("/proc/self/statm: cannot read '", *statm, "'"));
  }
  return ProcessMemory{pages * static_cast<uint64_t>(sysconf(_SC_PAGESIZE)), HeapBytes()};
}

absl::StatusOr<uint64_t> PeakResidentBytes() {
  absl::StatusOr<std::string> status = ReadProc("/proc/self/status");
  if (!status.ok()) return status.status();
  for (absl::string_view line : absl::StrSplit(*status, '\n')) {
    if (!absl::ConsumePrefix(&line, "VmHWM:")) continue;
    line = absl::StripAsciiWhitespace(line);
    uint64_t kib = 0;
    if (!absl::ConsumeSuffix(&line, " kB") || !absl::SimpleAtoi(line, &kib)) break;
    return kib * 1024;
  }
  return absl::UnavailableError("/proc/self/status: no VmHWM line");
}

absl::Status ResetPeakResident() {
  const int fd = open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat("/proc/self/clear_refs: ", std::strerror(errno)));
  }
  // "5" resets the peak resident set size to the current one (Linux 4.0).
  const ssize_t n = write(fd, "5", 1);
  const int saved = errno;
  close(fd);
  if (n != 1) {
    return absl::UnavailableError(absl::StrCat("/proc/self/clear_refs: ", std::strerror(saved)));
  }
  return absl::OkStatus();
}

uint64_t UnplannedLimitBytes(uint64_t planned_bytes) {
  return std::max<uint64_t>(planned_bytes / 20, 32 * kMiB);
}

ProcessMemorySampler::ProcessMemorySampler(EventSink* next, Options options)
    : next_(next), options_(options) {
  if (options_.reset_peak) peak_reset_ = ResetPeakResident().ok();
  absl::StatusOr<ProcessMemory> now = SampleProcessMemory();
  if (!now.ok()) {
    unavailable_reason_ = std::string(now.status().message());
    return;
  }
  baseline_ = last_ = peak_ = *now;
  samples_ = 1;
}

void ProcessMemorySampler::Sample(int64_t step, int32_t node) {
  if (!unavailable_reason_.empty()) return;
  absl::StatusOr<ProcessMemory> now = SampleProcessMemory();
  if (!now.ok()) return;
  ++samples_;
  last_ = *now;
  if (now->resident_bytes > peak_.resident_bytes) {
    peak_ = *now;
    peak_step_ = step;
    peak_node_ = node;
  }
  if (step >= 0) {
    if (step_peak_bytes_.size() <= static_cast<size_t>(step)) step_peak_bytes_.resize(step + 1, 0);
    step_peak_bytes_[step] = std::max(step_peak_bytes_[step], now->resident_bytes);
  }
}

void ProcessMemorySampler::OnMemory(const MemoryEvent& e) {
  if (next_ != nullptr) next_->OnMemory(e);
}

void ProcessMemorySampler::OnOp(const OpEvent& e) {
  Sample(e.step, e.node);
  if (next_ != nullptr) next_->OnOp(e);
}

void ProcessMemorySampler::OnCopy(const CopyEvent& e) {
  if (next_ != nullptr) next_->OnCopy(e);
}

void ProcessMemorySampler::OnStep(const StepEvent& e) {
  Sample(e.step, -1);
  if (next_ != nullptr) next_->OnStep(e);
}

uint64_t ProcessMemorySampler::peak_bytes() const {
  uint64_t peak = peak_.resident_bytes;
  if (peak_reset_) {
    absl::StatusOr<uint64_t> kernel = PeakResidentBytes();
    if (kernel.ok()) peak = std::max(peak, *kernel);
  }
  return peak;
}

proto::ProcessMemory ProcessMemorySampler::Account(uint64_t arena_bytes,
                                                   uint64_t host_pool_bytes,
                                                   const StepLayout* layout) const {
  proto::ProcessMemory account;
  account.set_arena_bytes(arena_bytes);
  account.set_host_pool_bytes(host_pool_bytes);
  account.set_unplanned_limit_bytes(UnplannedLimitBytes(arena_bytes + host_pool_bytes));
  if (!unavailable_reason_.empty()) {
    account.set_unavailable_reason(unavailable_reason_);
    return account;
  }
  const uint64_t peak = peak_bytes();
  account.set_baseline_bytes(baseline_.resident_bytes);
  account.set_physical_peak_bytes(peak);
  const uint64_t accounted = baseline_.resident_bytes + arena_bytes + host_pool_bytes;
  account.set_unplanned_bytes(peak > accounted ? peak - accounted : 0);
  account.set_heap_bytes_at_peak(peak_.heap_bytes);
  account.set_peak_step(peak_step_);
  if (layout != nullptr && peak_node_ >= 0) account.set_peak_node(layout->NodeName(peak_node_));
  account.set_samples(samples_);
  return account;
}

}  // namespace headroom::profiler
