#include "profiler/cupti_memory.h"

#include <cuda_runtime.h>
#include <cupti.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <unordered_map>
#include <utility>

#include "absl/base/const_init.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "util/cuda_status.h"

namespace headroom::profiler {
namespace {

// CUPTI's record layout, which the parser relies on: records start 8-byte aligned, the kind
// is the first field of each, and a memory record is CUDA 13's CUpti_ActivityMemory4.
constexpr size_t kRecordAlignment = ACTIVITY_RECORD_ALIGNMENT;
static_assert(kRecordAlignment == 8, "CUPTI activity records are 8-byte aligned");
static_assert(alignof(CUpti_ActivityMemory4) == kRecordAlignment);
static_assert(sizeof(CUpti_ActivityMemory4) % kRecordAlignment == 0);
static_assert(sizeof(CUpti_ActivityMemory4) == 128, "CUpti_ActivityMemory4 changed layout");
static_assert(offsetof(CUpti_Activity, kind) == 0 && offsetof(CUpti_ActivityMemory4, kind) == 0);
static_assert(sizeof(CUpti_ActivityKind) == sizeof(uint32_t));
static_assert(PhysicalMemoryEvent::kNoId == CUPTI_INVALID_STREAM_ID &&
              PhysicalMemoryEvent::kNoId == CUPTI_INVALID_CONTEXT_ID);

// Returns the number of CUDA devices, or FailedPrecondition (CUDA's error as
// util/cuda_status.h maps it, for one that is not about the device) saying "no usable CUDA
// device" and why.
absl::StatusOr<int> CudaDeviceCount() {
  int count = 0;
  absl::Status status = CudaStatus(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  if (!status.ok()) {
    return absl::Status(status.code(), absl::StrCat("no usable CUDA device: ", status.message()));
  }
  if (count == 0) {
    return absl::FailedPreconditionError("no usable CUDA device: cudaGetDeviceCount is 0");
  }
  return count;
}

// Returns the size of a record of `kind` as CUPTI's iterator steps over it, or nullopt if
// CUPTI will not step over one. Asks the iterator to walk a probe buffer whose first record
// has `kind` and whose every 8-byte slot after it reads as the start of a memory record: the
// second record it returns starts where the first ends.
std::optional<size_t> CuptiRecordBytes(uint32_t kind) {
  constexpr size_t kProbeSlots = 1024;  // 8 KiB: more than any CUDA 13 record needs
  std::vector<uint64_t> probe(kProbeSlots, 0);
  uint8_t* bytes = reinterpret_cast<uint8_t*>(probe.data());
  const uint32_t memory_kind = CUPTI_ACTIVITY_KIND_MEMORY2;
  for (size_t slot = 1; slot < kProbeSlots; ++slot) {
    std::memcpy(bytes + slot * kRecordAlignment, &memory_kind, sizeof(memory_kind));
  }
  std::memcpy(bytes, &kind, sizeof(kind));
  const size_t probe_bytes = kProbeSlots * kRecordAlignment;
  CUpti_Activity* record = nullptr;
  if (cuptiActivityGetNextRecord(bytes, probe_bytes, &record) != CUPTI_SUCCESS) return std::nullopt;
  if (cuptiActivityGetNextRecord(bytes, probe_bytes, &record) != CUPTI_SUCCESS) return std::nullopt;
  return static_cast<size_t>(reinterpret_cast<uint8_t*>(record) - bytes);
}

// Returns the event one memory record describes, or DataLoss for an operation that is
// neither allocation nor release.
absl::StatusOr<PhysicalMemoryEvent> EventFromRecord(const CUpti_ActivityMemory4& record,
                                                    size_t offset) {
  PhysicalMemoryEvent event;
  switch (record.memoryOperationType) {
    case CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION:
      event.kind = PhysicalMemoryEvent::Kind::kAllocate;
      break;
    case CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE:
      event.kind = PhysicalMemoryEvent::Kind::kFree;
      break;
    default:
      return absl::DataLossError(absl::StrFormat(
          "CUPTI activity buffer: memory record at byte %d has memoryOperationType %d, neither "
          "allocation (1) nor release (2)",
          offset, static_cast<int>(record.memoryOperationType)));
  }
  event.address = record.address;
  event.bytes = record.bytes;
  event.timestamp_ns = static_cast<int64_t>(record.timestamp);
  event.device = record.deviceId;
  event.context = record.contextId;
  event.stream = record.streamId;
  event.process_id = record.processId;
  event.correlation_id = record.correlationId;
  event.memory_kind = CuptiMemoryKindName(static_cast<uint32_t>(record.memoryKind));
  event.is_async = record.isAsync != 0;
  event.pc = record.PC;
  if (record.name != nullptr) event.name = record.name;
  if (record.source != nullptr) event.source = record.source;
  return event;
}

// Returns a GiB figure for messages.
double GiB(uint64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0); }

}  // namespace

// ---------------------------------------------------------------------------------------
// Events and parsing.

std::string PhysicalMemoryEvent::DebugString() const {
  const std::string stream_text = stream == kNoId ? "-" : absl::StrCat(stream);
  return absl::StrFormat("%c%s %d B at 0x%x dev %d stream %s t=%d ns%s",
                         kind == Kind::kAllocate ? '+' : '-', memory_kind, bytes, address, device,
                         stream_text, timestamp_ns, is_async ? " async" : "");
}

bool operator==(const PhysicalMemoryEvent& a, const PhysicalMemoryEvent& b) {
  return a.kind == b.kind && a.address == b.address && a.bytes == b.bytes &&
         a.timestamp_ns == b.timestamp_ns && a.device == b.device && a.context == b.context &&
         a.stream == b.stream && a.process_id == b.process_id &&
         a.correlation_id == b.correlation_id && a.memory_kind == b.memory_kind &&
         a.is_async == b.is_async && a.pc == b.pc && a.name == b.name && a.source == b.source;
}

std::string CuptiMemoryKindName(uint32_t cupti_memory_kind) {
  switch (cupti_memory_kind) {
    case CUPTI_ACTIVITY_MEMORY_KIND_UNKNOWN: return "unknown";
    case CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE: return "pageable";
    case CUPTI_ACTIVITY_MEMORY_KIND_PINNED: return "pinned";
    case CUPTI_ACTIVITY_MEMORY_KIND_DEVICE: return "device";
    case CUPTI_ACTIVITY_MEMORY_KIND_ARRAY: return "array";
    case CUPTI_ACTIVITY_MEMORY_KIND_MANAGED: return "managed";
    case CUPTI_ACTIVITY_MEMORY_KIND_DEVICE_STATIC: return "device_static";
    case CUPTI_ACTIVITY_MEMORY_KIND_MANAGED_STATIC: return "managed_static";
  }
  return absl::StrCat("kind_", cupti_memory_kind);
}

bool IsDeviceMemoryKind(const std::string& memory_kind) {
  return memory_kind == "device" || memory_kind == "device_static" || memory_kind == "array";
}

absl::StatusOr<std::vector<PhysicalMemoryEvent>> ParseActivityBuffer(const uint8_t* buffer,
                                                                     size_t valid_bytes) {
  std::vector<PhysicalMemoryEvent> events;
  if (valid_bytes == 0) return events;
  if (buffer == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("CUPTI activity buffer is null but has ", valid_bytes, " valid bytes"));
  }
  if (reinterpret_cast<uintptr_t>(buffer) % kRecordAlignment != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "CUPTI activity buffer at %p is not %d-byte aligned", static_cast<const void*>(buffer),
        kRecordAlignment));
  }
  // CUPTI's iterator takes a non-const buffer but only reads it.
  uint8_t* base = const_cast<uint8_t*>(buffer);

  // Step 1: walk the records with CUPTI's iterator, converting the memory ones.
  CUpti_Activity* record = nullptr;
  std::optional<size_t> last_offset;  // of the last record the iterator returned
  uint32_t last_kind = 0;
  std::unordered_map<uint32_t, size_t> record_bytes_by_kind;  // learnt from record offsets
  CUptiResult result;
  while ((result = cuptiActivityGetNextRecord(base, valid_bytes, &record)) == CUPTI_SUCCESS) {
    const size_t offset = static_cast<size_t>(reinterpret_cast<uint8_t*>(record) - base);
    if (last_offset.has_value()) record_bytes_by_kind[last_kind] = offset - *last_offset;
    last_offset = offset;
    std::memcpy(&last_kind, base + offset, sizeof(last_kind));
    if (last_kind != CUPTI_ACTIVITY_KIND_MEMORY2) continue;
    // Guards against a libcupti whose memory record is shorter than this header's.
    if (offset + sizeof(CUpti_ActivityMemory4) > valid_bytes) {
      return absl::DataLossError(absl::StrFormat(
          "CUPTI activity buffer: memory record at byte %d runs past the %d valid bytes",
          offset, valid_bytes));
    }
    CUpti_ActivityMemory4 memory;
    std::memcpy(&memory, base + offset, sizeof(memory));
    absl::StatusOr<PhysicalMemoryEvent> event = EventFromRecord(memory, offset);
    if (!event.ok()) return event.status();
    events.push_back(*std::move(event));
  }
  const std::string after =
      last_offset.has_value()
          ? absl::StrFormat("after the record at byte %d (kind %d)", *last_offset, last_kind)
          : std::string("at byte 0");
  if (result != CUPTI_ERROR_MAX_LIMIT_REACHED) {
    return absl::DataLossError(absl::StrFormat("CUPTI activity buffer of %d valid bytes: %s %s",
                                               valid_bytes, CuptiStatus(result, "cuptiActivityGetNextRecord").message(), after));
  }

  // Step 2: the iterator stops quietly before a partial record; check that the last record
  // ends exactly at valid_bytes.
  if (!last_offset.has_value()) {
    return absl::DataLossError(absl::StrFormat(
        "CUPTI activity buffer of %d valid bytes holds no complete record", valid_bytes));
  }
  std::optional<size_t> last_bytes;
  if (last_kind == CUPTI_ACTIVITY_KIND_MEMORY2) {
    last_bytes = sizeof(CUpti_ActivityMemory4);
  } else if (auto it = record_bytes_by_kind.find(last_kind); it != record_bytes_by_kind.end()) {
    last_bytes = it->second;
  } else {
    last_bytes = CuptiRecordBytes(last_kind);
  }
  // A size CUPTI will not tell leaves a partial record after it undetectable.
  if (last_bytes.has_value() && *last_offset + *last_bytes != valid_bytes) {
    return absl::DataLossError(absl::StrFormat(
        "CUPTI activity buffer is truncated: %d of its %d valid bytes, %s, form no complete "
        "record",
        valid_bytes - (*last_offset + *last_bytes), valid_bytes, after));
  }
  return events;
}

// ---------------------------------------------------------------------------------------
// Accounting.

std::string MemoryUsage::DebugString() const {
  return absl::StrFormat("live %d B, peak %d B at t=%d ns, %d allocations, %d frees", live_bytes,
                         peak_bytes, peak_timestamp_ns, allocations, frees);
}

std::string PhysicalMemoryAccounting::DebugString() const {
  std::string out = absl::StrFormat("peak device bytes %d\n", peak_device_bytes);
  for (const auto& [kind, usage] : by_memory_kind) {
    absl::StrAppend(&out, "  ", kind, ": ", usage.DebugString(), "\n");
  }
  for (const auto& [device, usage] : device_memory_by_device) {
    absl::StrAppend(&out, "  device memory on cuda:", device, ": ", usage.DebugString(), "\n");
  }
  absl::StrAppendFormat(&out, "  %d live at end, %d unmatched frees, %d replaced allocations\n",
                        live_at_end.size(), unmatched_frees.size(), replaced_allocations.size());
  return out;
}

namespace {

// Adds `bytes` to `usage` at `timestamp_ns`, raising the peak if it rises.
void AddLive(MemoryUsage& usage, uint64_t bytes, int64_t timestamp_ns) {
  usage.live_bytes += bytes;
  ++usage.allocations;
  if (usage.live_bytes > usage.peak_bytes) {
    usage.peak_bytes = usage.live_bytes;
    usage.peak_timestamp_ns = timestamp_ns;
  }
}

// Takes `bytes` from `usage`; the caller matched them to an earlier AddLive.
void RemoveLive(MemoryUsage& usage, uint64_t bytes) {
  usage.live_bytes -= bytes;
  ++usage.frees;
}

}  // namespace

PhysicalMemoryAccounting AccountPhysicalMemory(absl::Span<const PhysicalMemoryEvent> events) {
  PhysicalMemoryAccounting out;

  // Step 1: visit the events in timestamp order.
  std::vector<const PhysicalMemoryEvent*> order;
  order.reserve(events.size());
  for (const PhysicalMemoryEvent& event : events) order.push_back(&event);
  std::stable_sort(order.begin(), order.end(),
                   [](const PhysicalMemoryEvent* a, const PhysicalMemoryEvent* b) {
                     return a->timestamp_ns < b->timestamp_ns;
                   });

  // Step 2: keep the live allocations by address, and the byte counts they add up to.
  std::map<uint64_t, PhysicalMemoryEvent> live;
  auto release = [&](const PhysicalMemoryEvent& allocation) {
    RemoveLive(out.by_memory_kind[allocation.memory_kind], allocation.bytes);
    if (IsDeviceMemoryKind(allocation.memory_kind)) {
      RemoveLive(out.device_memory_by_device[allocation.device], allocation.bytes);
    }
  };
  auto add_point = [&](int64_t timestamp_ns, const std::string& memory_kind) {
    out.timeline.push_back(
        {timestamp_ns, memory_kind, out.by_memory_kind[memory_kind].live_bytes});
  };
  for (const PhysicalMemoryEvent* event : order) {
    if (event->kind == PhysicalMemoryEvent::Kind::kAllocate) {
      if (auto it = live.find(event->address); it != live.end()) {
        release(it->second);
        out.replaced_allocations.push_back(it->second);
        live.erase(it);
      }
      AddLive(out.by_memory_kind[event->memory_kind], event->bytes, event->timestamp_ns);
      if (IsDeviceMemoryKind(event->memory_kind)) {
        AddLive(out.device_memory_by_device[event->device], event->bytes, event->timestamp_ns);
      }
      live.emplace(event->address, *event);
      add_point(event->timestamp_ns, event->memory_kind);
      continue;
    }
    auto it = live.find(event->address);
    if (it == live.end()) {
      out.unmatched_frees.push_back(*event);
      continue;
    }
    release(it->second);
    add_point(event->timestamp_ns, it->second.memory_kind);
    live.erase(it);
  }

  // Step 3: what is left.
  for (const auto& [device, usage] : out.device_memory_by_device) {
    out.peak_device_bytes = std::max(out.peak_device_bytes, usage.peak_bytes);
  }
  for (auto& [address, allocation] : live) out.live_at_end.push_back(std::move(allocation));
  return out;
}

// ---------------------------------------------------------------------------------------
// The tracer.

namespace {

// The running tracer, which CUPTI's callbacks feed. Lock order: g_active_mu, then the
// tracer's mu_.
ABSL_CONST_INIT absl::Mutex g_active_mu(absl::kConstInit);
CuptiMemoryTracer* g_active ABSL_GUARDED_BY(g_active_mu) = nullptr;

// The status Start() returns when CUPTI refuses: FailedPrecondition if the reason is that
// there is no usable device (CUPTI itself says only CUPTI_ERROR_UNKNOWN then), else CUPTI's
// error.
absl::Status ExplainStartFailure(absl::Status cupti_status) {
  absl::StatusOr<int> devices = CudaDeviceCount();
  if (devices.status().code() == absl::StatusCode::kFailedPrecondition) {
    return absl::FailedPreconditionError(
        absl::StrCat(cupti_status.message(), "; ", devices.status().message()));
  }
  return cupti_status;
}

}  // namespace

// CUPTI's buffer callbacks: plain functions that find the running tracer under g_active_mu.
class CuptiBufferCallbacks {
 public:
  // Hands CUPTI a fresh buffer, or none (CUPTI then drops records) if no tracer runs.
  static void CUPTIAPI Requested(uint8_t** buffer, size_t* size, size_t* max_records) {
    *buffer = nullptr;
    *size = 0;
    *max_records = 0;  // as many as fit
    size_t bytes = 0;
    {
      absl::MutexLock lock(&g_active_mu);
      if (g_active == nullptr) return;
      bytes = g_active->options_.buffer_bytes;
    }
    bytes = std::max<size_t>(bytes, kRecordAlignment);
    bytes = (bytes + kRecordAlignment - 1) / kRecordAlignment * kRecordAlignment;
    *buffer = static_cast<uint8_t*>(std::aligned_alloc(kRecordAlignment, bytes));
    if (*buffer != nullptr) *size = bytes;
  }

  // Parses and frees a buffer CUPTI has filled, and gives the events to the running tracer.
  static void CUPTIAPI Completed(CUcontext /*context*/, uint32_t /*stream_id*/, uint8_t* buffer,
                                 size_t /*size*/, size_t valid_bytes) {
    absl::StatusOr<std::vector<PhysicalMemoryEvent>> events =
        ParseActivityBuffer(buffer, valid_bytes);
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped) != CUPTI_SUCCESS) dropped = 0;
    std::free(buffer);
    absl::MutexLock lock(&g_active_mu);
    if (g_active != nullptr) g_active->AddBuffer(std::move(events), dropped);
  }
};

CuptiMemoryTracer::CuptiMemoryTracer(Options options) : options_(options) {}

CuptiMemoryTracer::~CuptiMemoryTracer() {
  bool running = false;
  {
    absl::MutexLock lock(&mu_);
    running = state_ == State::kRunning;
  }
  if (running) Stop().IgnoreError();
  absl::MutexLock lock(&g_active_mu);
  if (g_active == this) g_active = nullptr;
}

absl::Status CuptiMemoryTracer::Start() {
  {
    absl::MutexLock lock(&mu_);
    if (state_ != State::kIdle) {
      return absl::FailedPreconditionError("CuptiMemoryTracer::Start: already started");
    }
    state_ = State::kRunning;  // claims Start(); set back below if it fails
  }
  {
    absl::MutexLock lock(&g_active_mu);
    if (g_active != nullptr) {
      absl::MutexLock self(&mu_);
      state_ = State::kIdle;
      return absl::FailedPreconditionError(
          "CuptiMemoryTracer::Start: another CuptiMemoryTracer is running in this process "
          "(CUPTI has one set of activity buffer callbacks per process)");
    }
    g_active = this;
  }
  absl::Status status = CuptiStatus(
      cuptiActivityRegisterCallbacks(&CuptiBufferCallbacks::Requested,
                                     &CuptiBufferCallbacks::Completed),
      "cuptiActivityRegisterCallbacks");
  if (status.ok()) {
    status = CuptiStatus(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMORY2),
                       "cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMORY2)");
  }
  if (status.ok()) return absl::OkStatus();
  {
    absl::MutexLock lock(&g_active_mu);
    g_active = nullptr;
  }
  {
    absl::MutexLock lock(&mu_);
    state_ = State::kIdle;
  }
  return ExplainStartFailure(status);
}

absl::StatusOr<PhysicalMemoryTrace> CuptiMemoryTracer::Flush() {
  {
    absl::MutexLock lock(&mu_);
    if (state_ != State::kRunning) {
      return absl::FailedPreconditionError("CuptiMemoryTracer::Flush: not running");
    }
  }
  // Not under any lock: CUPTI calls Completed() before this returns, maybe on this thread.
  absl::Status status = CuptiStatus(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED),
                                  "cuptiActivityFlushAll");
  if (!status.ok()) return status;
  return TakeCollected();
}

absl::StatusOr<PhysicalMemoryTrace> CuptiMemoryTracer::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (state_ != State::kRunning) {
      return absl::FailedPreconditionError("CuptiMemoryTracer::Stop: not running");
    }
    state_ = State::kStopped;
  }
  // Not under any lock, as in Flush().
  absl::Status status = CuptiStatus(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMORY2),
                                  "cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMORY2)");
  absl::Status flushed = CuptiStatus(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED),
                                   "cuptiActivityFlushAll");
  if (status.ok()) status = flushed;
  {
    absl::MutexLock lock(&g_active_mu);
    if (g_active == this) g_active = nullptr;
  }
  absl::StatusOr<PhysicalMemoryTrace> trace = TakeCollected();
  if (!status.ok()) return status;
  return trace;
}

void CuptiMemoryTracer::AddBuffer(absl::StatusOr<std::vector<PhysicalMemoryEvent>> events,
                                  uint64_t dropped_records) {
  absl::MutexLock lock(&mu_);
  collected_.dropped_records += dropped_records;
  if (!events.ok()) {
    if (first_error_.ok()) first_error_ = events.status();
    return;
  }
  for (PhysicalMemoryEvent& event : *events) collected_.events.push_back(std::move(event));
}

absl::StatusOr<PhysicalMemoryTrace> CuptiMemoryTracer::TakeCollected() {
  absl::MutexLock lock(&mu_);
  PhysicalMemoryTrace trace = std::move(collected_);
  collected_ = PhysicalMemoryTrace();
  absl::Status error = std::move(first_error_);
  first_error_ = absl::OkStatus();
  if (!error.ok()) return error;
  return trace;
}

// ---------------------------------------------------------------------------------------
// Device memory.

std::string DeviceMemorySample::DebugString() const {
  return absl::StrFormat("cuda:%d used %.1f GiB, free %.1f GiB of %.1f GiB", device,
                         GiB(used_bytes()), GiB(free_bytes), GiB(total_bytes));
}

absl::StatusOr<DeviceMemorySample> SampleDeviceMemory(int device) {
  absl::StatusOr<int> devices = CudaDeviceCount();
  if (!devices.ok()) return devices.status();
  const int count = *devices;
  if (device < 0 || device >= count) {
    return absl::InvalidArgumentError(
        absl::StrFormat("device %d out of range: this machine has %d CUDA devices", device, count));
  }
  int previous = 0;
  absl::Status status = CudaStatus(cudaGetDevice(&previous), "cudaGetDevice");
  if (!status.ok()) return status;
  status = CudaStatus(cudaSetDevice(device), "cudaSetDevice");
  if (!status.ok()) return status;
  DeviceMemorySample sample;
  sample.device = device;
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  status = CudaStatus(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
  absl::Status restored = CudaStatus(cudaSetDevice(previous), "cudaSetDevice, restoring");
  if (!status.ok()) return status;
  if (!restored.ok()) return restored;
  sample.free_bytes = free_bytes;
  sample.total_bytes = total_bytes;
  return sample;
}

}  // namespace headroom::profiler
