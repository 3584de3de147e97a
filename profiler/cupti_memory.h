// Physical GPU memory as CUPTI sees it: every allocation and release the CUDA driver makes
// for this process (the executor's cudaMalloc'd arena and cudaMallocHost'd pinned memory,
// cuDNN/cuBLAS workspaces, anything a library allocates behind our back), read through
// CUPTI's activity API as CUPTI_ACTIVITY_KIND_MEMORY2 records (CUpti_ActivityMemory4).
//
// Three layers, so that everything but the tracer is testable without a GPU:
//   ParseActivityBuffer     one completed CUPTI activity buffer -> PhysicalMemoryEvents (pure);
//   AccountPhysicalMemory   events -> live bytes over time, peaks, leaks, unmatched frees (pure);
//   CuptiMemoryTracer       registers with CUPTI, collects and parses buffers (needs a GPU).
// SampleDeviceMemory reads the driver's own used/free figure (cudaMemGetInfo), which also
// counts other processes and the CUDA context itself; comparing it, CUPTI's total, and the
// executor's arena plus workspaces shows where memory went.
//
// Parsing walks the buffer with CUPTI's own iterator, cuptiActivityGetNextRecord. It needs no
// driver and no device (checked with CUDA 13's libcupti on a machine with neither), so it
// knows the size of every record kind of the linked libcupti, and records of other kinds are
// stepped over. CUPTI's iterator silently stops before a trailing partial record; the parser
// detects that itself (see ParseActivityBuffer).
#ifndef HEADROOM_PROFILER_CUPTI_MEMORY_H_
#define HEADROOM_PROFILER_CUPTI_MEMORY_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"

namespace headroom::profiler {

// One CUPTI memory record: the driver allocated or released `bytes` at `address`.
struct PhysicalMemoryEvent {
  enum class Kind { kAllocate, kFree };

  // CUPTI's value for `stream` when the operation is not stream-ordered, and for `context`
  // when there is none (CUPTI_INVALID_STREAM_ID, CUPTI_INVALID_CONTEXT_ID).
  static constexpr uint32_t kNoId = 0xFFFFFFFFu;

  Kind kind = Kind::kAllocate;
  uint64_t address = 0;        // virtual address (unified: unique across devices and host)
  uint64_t bytes = 0;          // size of the allocation, on release records too
  int64_t timestamp_ns = 0;    // CUPTI's clock (cuptiGetTimestamp), not std::chrono's
  uint32_t device = 0;         // CUPTI device id (the CUDA ordinal)
  uint32_t context = kNoId;    // CUPTI context id
  uint32_t stream = kNoId;     // CUPTI stream id; kNoId unless stream-ordered (async)
  uint32_t process_id = 0;
  uint32_t correlation_id = 0; // matches the driver/runtime API record of the call
  // "unknown", "pageable", "pinned", "device", "array", "managed", "device_static",
  // "managed_static", or "kind_<n>" for a value this code does not know.
  std::string memory_kind;
  bool is_async = false;       // cudaMallocAsync / cudaFreeAsync (memory from a pool)
  uint64_t pc = 0;             // program counter of the call, when CUPTI records it
  std::string name;            // variable name for static memory, else empty
  std::string source;          // shared object the request came from, when CUPTI knows

  // Returns e.g. "+device 1048576 B at 0x7f0000000000 dev 0 stream - t=123456 ns".
  std::string DebugString() const;
};

bool operator==(const PhysicalMemoryEvent& a, const PhysicalMemoryEvent& b);

// Returns the name PhysicalMemoryEvent::memory_kind uses for a CUpti_ActivityMemoryKind value.
std::string CuptiMemoryKindName(uint32_t cupti_memory_kind);

// Returns whether memory of this kind (a CuptiMemoryKindName) occupies device memory:
// "device", "device_static" and "array". Managed memory migrates and is not counted.
bool IsDeviceMemoryKind(const std::string& memory_kind);

// Returns the CUPTI_ACTIVITY_KIND_MEMORY2 records of one completed activity buffer, in buffer
// order, skipping records of every other kind. `buffer` holds `valid_bytes` of contiguous
// records, as CUPTI hands them to its buffer-completed callback.
//
// Returns InvalidArgument if `buffer` is null while valid_bytes > 0, or not 8-byte aligned
// (CUPTI's record alignment); DataLoss, naming the byte offset, if a record has an invalid kind
// or memory operation, or if the buffer ends inside a record (CUPTI's iterator alone would
// silently drop it: the parser checks that the last record ends exactly at valid_bytes, with
// the record size that CUPTI's iterator itself steps by).
//
// The records' `name` and `source` fields are pointers to strings CUPTI owns; they are copied
// when not null, so a hand-built buffer must leave them null or point them at C strings.
// Thread-safe: touches no CUPTI state, and needs no driver or device.
absl::StatusOr<std::vector<PhysicalMemoryEvent>> ParseActivityBuffer(const uint8_t* buffer,
                                                                     size_t valid_bytes);

// Bytes of one memory kind, or of one device's device memory, through a sequence of events.
struct MemoryUsage {
  uint64_t live_bytes = 0;         // at the end
  uint64_t peak_bytes = 0;         // most live at once
  int64_t peak_timestamp_ns = 0;   // when the peak was first reached
  uint64_t allocations = 0;
  uint64_t frees = 0;              // matched frees only

  std::string DebugString() const;
};

// Live bytes of one memory kind (all devices together) just after one event.
struct LiveBytesPoint {
  int64_t timestamp_ns = 0;
  std::string memory_kind;
  uint64_t live_bytes = 0;
};

// What a sequence of PhysicalMemoryEvents adds up to; built by AccountPhysicalMemory.
struct PhysicalMemoryAccounting {
  std::map<std::string, MemoryUsage> by_memory_kind;  // all devices together
  // Device memory (IsDeviceMemoryKind) per device: what to compare with the executor's arena
  // plus workspaces on that device.
  std::map<uint32_t, MemoryUsage> device_memory_by_device;
  uint64_t peak_device_bytes = 0;  // the largest peak in device_memory_by_device
  std::vector<LiveBytesPoint> timeline;  // one point per matched or allocating event
  std::vector<PhysicalMemoryEvent> live_at_end;      // allocations never freed, by address
  // Frees of addresses not live: allocated before tracing began, or the allocation record was
  // dropped. They change no byte count.
  std::vector<PhysicalMemoryEvent> unmatched_frees;
  // Allocations at an address that was still live: the earlier allocation's free record is
  // missing, so it is taken as freed when the new one arrives. Holds the earlier allocations.
  std::vector<PhysicalMemoryEvent> replaced_allocations;

  // Returns a few lines: peaks per kind and device, counts of leaks and unmatched frees.
  std::string DebugString() const;
};

// Returns the accounting of `events`, taken in timestamp order (stable: events with equal
// timestamps keep their given order). A free matches the live allocation at its address and
// frees that allocation's bytes, kind and device whatever the free record says.
PhysicalMemoryAccounting AccountPhysicalMemory(absl::Span<const PhysicalMemoryEvent> events);

// What a tracer collected.
struct PhysicalMemoryTrace {
  std::vector<PhysicalMemoryEvent> events;  // in the order CUPTI delivered them
  // Records CUPTI dropped for want of buffer space (cuptiActivityGetNumDroppedRecords), summed
  // over the buffers delivered. Nonzero means the accounting has holes.
  uint64_t dropped_records = 0;
};

// Collects CUPTI_ACTIVITY_KIND_MEMORY2 records for the whole process.
//
// Phases: construct, `Start()` once, then any number of `Flush()` calls (each returns the
// events delivered since the last), then `Stop()` (returns the rest). Allocations made before
// Start() are not seen: their frees show up as unmatched, so start before the executor
// allocates. The destructor stops a running tracer and drops what it held.
//
// Limits: CUPTI has one pair of buffer callbacks per process, so only one tracer may run at a
// time (Start() on a second returns FailedPrecondition), and it must not share the process with
// another CUPTI activity client (Nsight Systems, a framework's profiler): whoever registers
// last receives the buffers. Start() needs a CUDA device; without one it returns an error, and
// the tracer may be started again later.
//
// Ownership: the tracer owns the activity buffers it hands to CUPTI and frees each one after
// parsing it. Thread-safety: all methods may be called from any thread; CUPTI delivers buffers
// on its own thread, and events are collected under `mu_`.
class CuptiMemoryTracer {
 public:
  struct Options {
    // Size of each activity buffer handed to CUPTI; 1 MiB holds 8192 memory records. CUPTI
    // drops records (see PhysicalMemoryTrace::dropped_records) if buffers run out. Rounded up
    // to a multiple of 8. Default 1 MiB.
    size_t buffer_bytes = size_t{1} << 20;
  };

  CuptiMemoryTracer() : CuptiMemoryTracer(Options()) {}
  explicit CuptiMemoryTracer(Options options);
  CuptiMemoryTracer(const CuptiMemoryTracer&) = delete;
  CuptiMemoryTracer& operator=(const CuptiMemoryTracer&) = delete;
  ~CuptiMemoryTracer();

  // Returns OK once CUPTI records memory activity for this process. Returns
  // FailedPrecondition if this tracer already started or another one is running, or (saying
  // "no usable CUDA device") if there is no usable CUDA device; else CUPTI's error as
  // util/cuda_status.h maps it.
  absl::Status Start();

  // Returns the events CUPTI delivered since Start() or the last Flush(), after asking CUPTI
  // to hand over every buffer it holds (cuptiActivityFlushAll, forced). Keeps tracing.
  // Returns FailedPrecondition unless running; the first parse error of any buffer, if any.
  absl::StatusOr<PhysicalMemoryTrace> Flush();

  // Stops recording and returns the events not yet returned by Flush(). Returns
  // FailedPrecondition unless running; CUPTI's error or the first parse error otherwise
  // (the tracer is stopped either way).
  absl::StatusOr<PhysicalMemoryTrace> Stop();

 private:
  enum class State { kIdle, kRunning, kStopped };

  friend class CuptiBufferCallbacks;  // cupti_memory.cc: CUPTI's callbacks reach in here

  // Adds one parsed buffer (or its parse error) and the dropped-record count CUPTI reported.
  void AddBuffer(absl::StatusOr<std::vector<PhysicalMemoryEvent>> events,
                 uint64_t dropped_records);
  // Returns what was collected and clears it.
  absl::StatusOr<PhysicalMemoryTrace> TakeCollected();

  const Options options_;
  absl::Mutex mu_;
  State state_ ABSL_GUARDED_BY(mu_) = State::kIdle;
  PhysicalMemoryTrace collected_ ABSL_GUARDED_BY(mu_);
  absl::Status first_error_ ABSL_GUARDED_BY(mu_);  // first parse error since the last take
};

// The driver's view of one device's memory.
struct DeviceMemorySample {
  int device = 0;
  uint64_t free_bytes = 0;
  uint64_t total_bytes = 0;

  // Returns total minus free: this process, its CUDA context, and every other process.
  uint64_t used_bytes() const { return total_bytes - free_bytes; }
  // Returns e.g. "cuda:0 used 1.2 GiB, free 78.0 GiB of 79.2 GiB".
  std::string DebugString() const;
};

// Returns cudaMemGetInfo for `device`. Creates the device's primary context if the process
// has none (a few hundred MiB of device memory); restores the calling thread's current device.
// Returns FailedPrecondition (with cudaGetErrorString's text) where there is no usable device
// or driver, InvalidArgument if `device` is out of range, other CUDA errors as
// util/cuda_status.h maps them.
absl::StatusOr<DeviceMemorySample> SampleDeviceMemory(int device);

}  // namespace headroom::profiler

#endif  // HEADROOM_PROFILER_CUPTI_MEMORY_H_
