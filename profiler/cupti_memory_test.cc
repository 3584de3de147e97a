#include "profiler/cupti_memory.h"

#include <cuda_runtime.h>
#include <cupti.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace headroom::profiler {
namespace {

using Kind = PhysicalMemoryEvent::Kind;

// ---------------------------------------------------------------------------------------
// A CUPTI activity buffer built from real CUPTI record structs, as CUPTI lays them out:
// contiguous, each starting 8-byte aligned.
class ActivityBufferBuilder {
 public:
  // Appends a CUPTI_ACTIVITY_KIND_MEMORY2 record.
  ActivityBufferBuilder& Memory(CUpti_ActivityMemoryOperationType op, uint64_t address,
                                uint64_t bytes, CUpti_ActivityMemoryKind memory_kind,
                                uint64_t timestamp, uint32_t device = 0) {
    CUpti_ActivityMemory4 record;
    std::memset(&record, 0, sizeof(record));
    record.kind = CUPTI_ACTIVITY_KIND_MEMORY2;
    record.memoryOperationType = op;
    record.memoryKind = memory_kind;
    record.address = address;
    record.bytes = bytes;
    record.timestamp = timestamp;
    record.deviceId = device;
    record.contextId = 1;
    record.streamId = CUPTI_INVALID_STREAM_ID;
    return Append(record);
  }
  ActivityBufferBuilder& Alloc(uint64_t address, uint64_t bytes, uint64_t timestamp,
                               CUpti_ActivityMemoryKind kind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE) {
    return Memory(CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION, address, bytes, kind,
                  timestamp);
  }
  ActivityBufferBuilder& Free(uint64_t address, uint64_t bytes, uint64_t timestamp,
                              CUpti_ActivityMemoryKind kind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE) {
    return Memory(CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE, address, bytes, kind, timestamp);
  }
  // Appends a memcpy record (CUpti_ActivityMemcpy6), which the parser must step over.
  ActivityBufferBuilder& Memcpy(uint64_t bytes) {
    CUpti_ActivityMemcpy6 record;
    std::memset(&record, 0, sizeof(record));
    record.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
    record.bytes = bytes;
    return Append(record);
  }
  // Appends a kernel record (CUpti_ActivityKernel10), another kind to step over.
  ActivityBufferBuilder& Kernel() {
    CUpti_ActivityKernel10 record;
    std::memset(&record, 0, sizeof(record));
    record.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
    return Append(record);
  }
  // Appends any record struct (or raw bytes) as is.
  template <typename Record>
  ActivityBufferBuilder& Append(const Record& record) {
    static_assert(sizeof(Record) % 8 == 0);
    const size_t offset = bytes_.size();
    bytes_.resize(offset + sizeof(Record));
    std::memcpy(bytes_.data() + offset, &record, sizeof(Record));
    record_ends_.push_back(bytes_.size());
    return *this;
  }

  // The buffer, 8-byte aligned.
  const uint8_t* data() {
    aligned_.assign((bytes_.size() + 7) / 8, 0);
    std::memcpy(aligned_.data(), bytes_.data(), bytes_.size());
    return reinterpret_cast<const uint8_t*>(aligned_.data());
  }
  size_t size() const { return bytes_.size(); }
  // The byte offset where each record ends: the valid sizes that hold only whole records.
  const std::vector<size_t>& record_ends() const { return record_ends_; }

 private:
  std::vector<uint8_t> bytes_;
  std::vector<uint64_t> aligned_;
  std::vector<size_t> record_ends_;
};

std::string Describe(const std::vector<PhysicalMemoryEvent>& events) {
  std::string out;
  for (const PhysicalMemoryEvent& e : events) absl::StrAppend(&out, "  ", e.DebugString(), "\n");
  return out;
}

// ---------------------------------------------------------------------------------------
// ParseActivityBuffer.

TEST(ParseActivityBufferTest, ReadsMemoryRecordsAndSkipsOtherKinds) {
  // +device 0x1000 (256 B), memcpy, -device 0x1000, kernel, +pinned 0x2000 (512 B)
  ActivityBufferBuilder buffer;
  buffer.Alloc(0x1000, 256, 10)
      .Memcpy(4096)
      .Free(0x1000, 256, 20)
      .Kernel()
      .Alloc(0x2000, 512, 30, CUPTI_ACTIVITY_MEMORY_KIND_PINNED);
  absl::StatusOr<std::vector<PhysicalMemoryEvent>> events =
      ParseActivityBuffer(buffer.data(), buffer.size());
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_EQ(events->size(), 3u) << Describe(*events);
  const PhysicalMemoryEvent& a = (*events)[0];
  const PhysicalMemoryEvent& f = (*events)[1];
  const PhysicalMemoryEvent& p = (*events)[2];
  EXPECT_EQ(a.kind, Kind::kAllocate);
  EXPECT_EQ(a.address, 0x1000u);
  EXPECT_EQ(a.bytes, 256u);
  EXPECT_EQ(a.timestamp_ns, 10);
  EXPECT_EQ(a.memory_kind, "device");
  EXPECT_EQ(f.kind, Kind::kFree);
  EXPECT_EQ(f.address, 0x1000u);
  EXPECT_EQ(f.bytes, 256u);
  EXPECT_EQ(f.timestamp_ns, 20);
  EXPECT_EQ(p.kind, Kind::kAllocate);
  EXPECT_EQ(p.address, 0x2000u);
  EXPECT_EQ(p.bytes, 512u);
  EXPECT_EQ(p.memory_kind, "pinned");
}

TEST(ParseActivityBufferTest, CopiesEveryField) {
  static const char kName[] = "weights";
  static const char kSource[] = "libcudnn_engines.so";
  CUpti_ActivityMemory4 record;
  std::memset(&record, 0, sizeof(record));
  record.kind = CUPTI_ACTIVITY_KIND_MEMORY2;
  record.memoryOperationType = CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION;
  record.memoryKind = CUPTI_ACTIVITY_MEMORY_KIND_MANAGED;
  record.correlationId = 77;
  record.address = 0x7f0000001000;
  record.bytes = uint64_t{3} << 30;
  record.timestamp = 1234567890123;
  record.PC = 0xabc;
  record.processId = 4242;
  record.deviceId = 3;
  record.contextId = 5;
  record.streamId = 13;
  record.name = kName;
  record.isAsync = 1;
  record.source = kSource;
  ActivityBufferBuilder buffer;
  buffer.Append(record);
  absl::StatusOr<std::vector<PhysicalMemoryEvent>> events =
      ParseActivityBuffer(buffer.data(), buffer.size());
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_EQ(events->size(), 1u);

  PhysicalMemoryEvent expected;
  expected.kind = Kind::kAllocate;
  expected.address = 0x7f0000001000;
  expected.bytes = uint64_t{3} << 30;
  expected.timestamp_ns = 1234567890123;
  expected.device = 3;
  expected.context = 5;
  expected.stream = 13;
  expected.process_id = 4242;
  expected.correlation_id = 77;
  expected.memory_kind = "managed";
  expected.is_async = true;
  expected.pc = 0xabc;
  expected.name = "weights";
  expected.source = "libcudnn_engines.so";
  EXPECT_EQ((*events)[0], expected) << "expected " << expected.DebugString() << "\nactual   "
                                    << (*events)[0].DebugString();
  EXPECT_EQ((*events)[0].name, "weights");  // operator== covers it; this names the field
  EXPECT_EQ((*events)[0].source, "libcudnn_engines.so");
}

TEST(ParseActivityBufferTest, NamesMemoryKinds) {
  EXPECT_EQ(CuptiMemoryKindName(CUPTI_ACTIVITY_MEMORY_KIND_UNKNOWN), "unknown");
  EXPECT_EQ(CuptiMemoryKindName(CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE), "pageable");
  EXPECT_EQ(CuptiMemoryKindName(CUPTI_ACTIVITY_MEMORY_KIND_PINNED), "pinned");
  EXPECT_EQ(CuptiMemoryKindName(CUPTI_ACTIVITY_MEMORY_KIND_DEVICE), "device");
  EXPECT_EQ(CuptiMemoryKindName(CUPTI_ACTIVITY_MEMORY_KIND_ARRAY), "array");
  EXPECT_EQ(CuptiMemoryKindName(CUPTI_ACTIVITY_MEMORY_KIND_MANAGED), "managed");
  EXPECT_EQ(CuptiMemoryKindName(CUPTI_ACTIVITY_MEMORY_KIND_DEVICE_STATIC), "device_static");
  EXPECT_EQ(CuptiMemoryKindName(CUPTI_ACTIVITY_MEMORY_KIND_MANAGED_STATIC), "managed_static");
  EXPECT_EQ(CuptiMemoryKindName(42), "kind_42");

  ActivityBufferBuilder buffer;
  buffer.Alloc(0x1000, 8, 1, static_cast<CUpti_ActivityMemoryKind>(42));
  absl::StatusOr<std::vector<PhysicalMemoryEvent>> events =
      ParseActivityBuffer(buffer.data(), buffer.size());
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_EQ(events->size(), 1u);
  EXPECT_EQ((*events)[0].memory_kind, "kind_42");
}

TEST(ParseActivityBufferTest, EmptyBufferHasNoEvents) {
  absl::StatusOr<std::vector<PhysicalMemoryEvent>> events = ParseActivityBuffer(nullptr, 0);
  ASSERT_TRUE(events.ok()) << events.status();
  EXPECT_TRUE(events->empty());
  // Only other kinds: no events, no error.
  ActivityBufferBuilder buffer;
  buffer.Memcpy(1).Kernel();
  events = ParseActivityBuffer(buffer.data(), buffer.size());
  ASSERT_TRUE(events.ok()) << events.status();
  EXPECT_TRUE(events->empty());
}

// Property: a valid size that ends on a record boundary parses to the memory records before
// it; any other valid size, including one inside the first record, is reported as DataLoss.
TEST(ParseActivityBufferTest, EveryTruncationIsReported) {
  // +0x1000, memcpy, -0x1000, kernel, +0x2000, memcpy
  ActivityBufferBuilder buffer;
  buffer.Alloc(0x1000, 256, 10)
      .Memcpy(64)
      .Free(0x1000, 256, 20)
      .Kernel()
      .Alloc(0x2000, 512, 30)
      .Memcpy(64);
  const std::vector<size_t> memory_records_before = {1, 1, 2, 2, 3, 3};  // per record end
  const uint8_t* data = buffer.data();
  size_t boundaries = 0;
  for (size_t valid = 1; valid <= buffer.size(); ++valid) {
    SCOPED_TRACE(absl::StrCat("valid_bytes ", valid, " of ", buffer.size()));
    absl::StatusOr<std::vector<PhysicalMemoryEvent>> events = ParseActivityBuffer(data, valid);
    const auto end = std::find(buffer.record_ends().begin(), buffer.record_ends().end(), valid);
    if (end == buffer.record_ends().end()) {
      EXPECT_EQ(events.status().code(), absl::StatusCode::kDataLoss)
          << (events.ok() ? Describe(*events) : events.status().ToString());
      continue;
    }
    ++boundaries;
    ASSERT_TRUE(events.ok()) << events.status();
    EXPECT_EQ(events->size(), memory_records_before[end - buffer.record_ends().begin()])
        << Describe(*events);
  }
  EXPECT_EQ(boundaries, memory_records_before.size());
}

TEST(ParseActivityBufferTest, TruncationMessageNamesTheBytes) {
  ActivityBufferBuilder buffer;
  buffer.Alloc(0x1000, 256, 10).Alloc(0x2000, 256, 20);
  absl::StatusOr<std::vector<PhysicalMemoryEvent>> events =
      ParseActivityBuffer(buffer.data(), buffer.size() - 8);
  ASSERT_EQ(events.status().code(), absl::StatusCode::kDataLoss) << events.status();
  EXPECT_NE(events.status().message().find("truncated"), std::string::npos) << events.status();
  EXPECT_NE(events.status().message().find("120 of its 248 valid bytes"), std::string::npos)
      << events.status();
}

TEST(ParseActivityBufferTest, InvalidKindIsDataLoss) {
  // +0x1000, then a zeroed record (kind CUPTI_ACTIVITY_KIND_INVALID).
  ActivityBufferBuilder buffer;
  CUpti_ActivityMemory4 zeroed;
  std::memset(&zeroed, 0, sizeof(zeroed));
  buffer.Alloc(0x1000, 256, 10).Append(zeroed);
  absl::StatusOr<std::vector<PhysicalMemoryEvent>> events =
      ParseActivityBuffer(buffer.data(), buffer.size());
  EXPECT_EQ(events.status().code(), absl::StatusCode::kDataLoss) << events.status();
  EXPECT_NE(events.status().message().find("CUPTI_ERROR_INVALID_KIND"), std::string::npos)
      << events.status();
}

TEST(ParseActivityBufferTest, InvalidMemoryOperationIsDataLoss) {
  ActivityBufferBuilder buffer;
  buffer.Alloc(0x1000, 256, 10)
      .Memory(CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_INVALID, 0x2000, 8,
              CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, 20);
  absl::StatusOr<std::vector<PhysicalMemoryEvent>> events =
      ParseActivityBuffer(buffer.data(), buffer.size());
  EXPECT_EQ(events.status().code(), absl::StatusCode::kDataLoss) << events.status();
  EXPECT_NE(events.status().message().find("record at byte 128 has memoryOperationType 0"),
            std::string::npos)
      << events.status();
}

TEST(ParseActivityBufferTest, RejectsNullAndMisalignedBuffers) {
  EXPECT_EQ(ParseActivityBuffer(nullptr, 128).status().code(),
            absl::StatusCode::kInvalidArgument);
  ActivityBufferBuilder buffer;
  buffer.Alloc(0x1000, 256, 10);
  std::vector<uint64_t> storage(buffer.size() / 8 + 1, 0);
  uint8_t* misaligned = reinterpret_cast<uint8_t*>(storage.data()) + 4;
  std::memcpy(misaligned, buffer.data(), buffer.size());
  EXPECT_EQ(ParseActivityBuffer(misaligned, buffer.size()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// ---------------------------------------------------------------------------------------
// AccountPhysicalMemory.

PhysicalMemoryEvent Event(Kind kind, int64_t t, uint64_t address, uint64_t bytes,
                          const std::string& memory_kind = "device", uint32_t device = 0) {
  PhysicalMemoryEvent e;
  e.kind = kind;
  e.timestamp_ns = t;
  e.address = address;
  e.bytes = bytes;
  e.memory_kind = memory_kind;
  e.device = device;
  return e;
}
PhysicalMemoryEvent Alloc(int64_t t, uint64_t address, uint64_t bytes,
                          const std::string& memory_kind = "device", uint32_t device = 0) {
  return Event(Kind::kAllocate, t, address, bytes, memory_kind, device);
}
PhysicalMemoryEvent Free(int64_t t, uint64_t address, uint64_t bytes,
                         const std::string& memory_kind = "device", uint32_t device = 0) {
  return Event(Kind::kFree, t, address, bytes, memory_kind, device);
}

// Checks what must hold for any accounting: the timeline's highest point of each kind is the
// kind's peak, its last point the kind's live bytes, and the live allocations add up to them.
void ExpectConsistent(const PhysicalMemoryAccounting& acc) {
  SCOPED_TRACE(acc.DebugString());
  std::map<std::string, uint64_t> timeline_peak, timeline_last, live_sum;
  for (const LiveBytesPoint& p : acc.timeline) {
    timeline_peak[p.memory_kind] = std::max(timeline_peak[p.memory_kind], p.live_bytes);
    timeline_last[p.memory_kind] = p.live_bytes;
  }
  for (const PhysicalMemoryEvent& e : acc.live_at_end) live_sum[e.memory_kind] += e.bytes;
  std::map<uint32_t, uint64_t> device_live_sum;
  for (const PhysicalMemoryEvent& e : acc.live_at_end) {
    if (IsDeviceMemoryKind(e.memory_kind)) device_live_sum[e.device] += e.bytes;
  }
  for (const auto& [kind, usage] : acc.by_memory_kind) {
    EXPECT_EQ(usage.peak_bytes, timeline_peak[kind]) << kind;
    EXPECT_EQ(usage.live_bytes, timeline_last[kind]) << kind;
    EXPECT_EQ(usage.live_bytes, live_sum[kind]) << kind;
  }
  uint64_t peak = 0;
  for (const auto& [device, usage] : acc.device_memory_by_device) {
    EXPECT_EQ(usage.live_bytes, device_live_sum[device]) << "cuda:" << device;
    peak = std::max(peak, usage.peak_bytes);
  }
  EXPECT_EQ(acc.peak_device_bytes, peak);
}

TEST(AccountPhysicalMemoryTest, PeaksLiveAndUnmatched) {
  // t=10 +A dev0 100   t=20 +B dev0 50   t=30 +P pinned 1000   t=40 -A
  // t=50 +C dev1 300   t=60 -X (never allocated)   t=70 +D dev0 80   t=80 -P
  // Given out of order: accounting sorts by timestamp.
  const std::vector<PhysicalMemoryEvent> events = {
      Alloc(50, 0x3000, 300, "device", 1), Alloc(10, 0x1000, 100), Alloc(20, 0x2000, 50),
      Alloc(30, 0x9000, 1000, "pinned"),   Free(40, 0x1000, 100),  Free(60, 0x7777, 64),
      Alloc(70, 0x4000, 80),               Free(80, 0x9000, 1000, "pinned"),
  };
  const PhysicalMemoryAccounting acc = AccountPhysicalMemory(events);
  SCOPED_TRACE(acc.DebugString());
  ExpectConsistent(acc);

  // "device", all devices: 100, 150, 50, 350, 430.
  const MemoryUsage& device = acc.by_memory_kind.at("device");
  EXPECT_EQ(device.peak_bytes, 430u);
  EXPECT_EQ(device.peak_timestamp_ns, 70);
  EXPECT_EQ(device.live_bytes, 430u);
  EXPECT_EQ(device.allocations, 4u);
  EXPECT_EQ(device.frees, 1u);
  const MemoryUsage& pinned = acc.by_memory_kind.at("pinned");
  EXPECT_EQ(pinned.peak_bytes, 1000u);
  EXPECT_EQ(pinned.peak_timestamp_ns, 30);
  EXPECT_EQ(pinned.live_bytes, 0u);

  // Device 0: 100, 150, 50, 130. Device 1: 300. Pinned memory is on no device's count.
  ASSERT_EQ(acc.device_memory_by_device.size(), 2u);
  EXPECT_EQ(acc.device_memory_by_device.at(0).peak_bytes, 150u);
  EXPECT_EQ(acc.device_memory_by_device.at(0).peak_timestamp_ns, 20);
  EXPECT_EQ(acc.device_memory_by_device.at(0).live_bytes, 130u);
  EXPECT_EQ(acc.device_memory_by_device.at(1).peak_bytes, 300u);
  EXPECT_EQ(acc.peak_device_bytes, 300u);

  std::vector<uint64_t> live_addresses;
  for (const PhysicalMemoryEvent& e : acc.live_at_end) live_addresses.push_back(e.address);
  EXPECT_EQ(live_addresses, (std::vector<uint64_t>{0x2000, 0x3000, 0x4000}));
  ASSERT_EQ(acc.unmatched_frees.size(), 1u);
  EXPECT_EQ(acc.unmatched_frees[0].address, 0x7777u);
  EXPECT_TRUE(acc.replaced_allocations.empty());

  // One point per event but the unmatched free, in time order.
  std::vector<std::string> timeline;
  for (const LiveBytesPoint& p : acc.timeline) {
    timeline.push_back(absl::StrCat(p.timestamp_ns, ":", p.memory_kind, "=", p.live_bytes));
  }
  EXPECT_EQ(timeline, (std::vector<std::string>{"10:device=100", "20:device=150",
                                                 "30:pinned=1000", "40:device=50",
                                                 "50:device=350", "70:device=430",
                                                 "80:pinned=0"}));
}

TEST(AccountPhysicalMemoryTest, FreeReleasesTheAllocationsBytes) {
  // +A 100 at t=1, -A whose record says 0 bytes and "unknown" kind: frees A's 100 device bytes.
  const std::vector<PhysicalMemoryEvent> events = {Alloc(1, 0x1000, 100),
                                                   Free(2, 0x1000, 0, "unknown")};
  const PhysicalMemoryAccounting acc = AccountPhysicalMemory(events);
  ExpectConsistent(acc);
  EXPECT_EQ(acc.by_memory_kind.at("device").live_bytes, 0u);
  EXPECT_EQ(acc.by_memory_kind.count("unknown"), 0u);
  EXPECT_EQ(acc.device_memory_by_device.at(0).live_bytes, 0u);
  EXPECT_TRUE(acc.live_at_end.empty());
  EXPECT_TRUE(acc.unmatched_frees.empty());
}

TEST(AccountPhysicalMemoryTest, AllocationOverLiveAddressReplacesIt) {
  // +A 100, +A' 40 at the same address (A's free was missed), -A'.
  const std::vector<PhysicalMemoryEvent> events = {Alloc(1, 0x1000, 100), Alloc(2, 0x1000, 40),
                                                   Free(3, 0x1000, 40)};
  const PhysicalMemoryAccounting acc = AccountPhysicalMemory(events);
  ExpectConsistent(acc);
  ASSERT_EQ(acc.replaced_allocations.size(), 1u);
  EXPECT_EQ(acc.replaced_allocations[0].bytes, 100u);
  EXPECT_EQ(acc.by_memory_kind.at("device").peak_bytes, 100u);
  EXPECT_EQ(acc.by_memory_kind.at("device").live_bytes, 0u);
  EXPECT_TRUE(acc.unmatched_frees.empty());
}

TEST(AccountPhysicalMemoryTest, EqualTimestampsKeepTheirOrder) {
  // Free then re-allocate at one timestamp: the peak stays 100, not 200.
  const std::vector<PhysicalMemoryEvent> events = {Alloc(1, 0x1000, 100), Free(5, 0x1000, 100),
                                                   Alloc(5, 0x2000, 100)};
  const PhysicalMemoryAccounting acc = AccountPhysicalMemory(events);
  ExpectConsistent(acc);
  EXPECT_EQ(acc.peak_device_bytes, 100u);
  EXPECT_EQ(acc.by_memory_kind.at("device").live_bytes, 100u);
}

TEST(AccountPhysicalMemoryTest, ParsedBufferRoundTrip) {
  // The parser's output feeds the accounting: +0x1000 256, memcpy, +0x2000 64, -0x1000.
  ActivityBufferBuilder buffer;
  buffer.Alloc(0x1000, 256, 10).Memcpy(8).Alloc(0x2000, 64, 20).Free(0x1000, 256, 30);
  absl::StatusOr<std::vector<PhysicalMemoryEvent>> events =
      ParseActivityBuffer(buffer.data(), buffer.size());
  ASSERT_TRUE(events.ok()) << events.status();
  const PhysicalMemoryAccounting acc = AccountPhysicalMemory(*events);
  ExpectConsistent(acc);
  EXPECT_EQ(acc.peak_device_bytes, 320u);
  ASSERT_EQ(acc.live_at_end.size(), 1u);
  EXPECT_EQ(acc.live_at_end[0].address, 0x2000u);
}

// ---------------------------------------------------------------------------------------
// CuptiMemoryTracer and SampleDeviceMemory.

// The records of one allocation the test made, found by its address. On a release CUPTI
// is sure to fill only the operation, the address and the timestamp: the size and memory
// kind of CUpti_ActivityMemory4 describe what was allocated and may be left 0 on releases,
// so releases are matched to allocations by address, as AccountPhysicalMemory does.
struct TracedAllocation {
  std::vector<PhysicalMemoryEvent> allocations;
  std::vector<PhysicalMemoryEvent> releases;
};

// Returns the records at each of `addresses` (every one present, maybe with none).
std::map<uint64_t, TracedAllocation> ByAddress(const std::vector<PhysicalMemoryEvent>& events,
                                               const std::set<uint64_t>& addresses) {
  std::map<uint64_t, TracedAllocation> by_address;
  for (uint64_t address : addresses) by_address[address];
  for (const PhysicalMemoryEvent& e : events) {
    auto it = by_address.find(e.address);
    if (it == by_address.end()) continue;
    (e.kind == Kind::kAllocate ? it->second.allocations : it->second.releases).push_back(e);
  }
  return by_address;
}

// Returns "" when `t` is one cudaMalloc of `bytes` of device memory (CUPTI may report the
// driver's rounding, up to 2 MiB more) and one release, no earlier than the allocation;
// else what is wrong. Nothing is asked of the release's size or kind.
std::string CheckAllocationAndRelease(const TracedAllocation& t, uint64_t bytes) {
  if (t.allocations.size() != 1 || t.releases.size() != 1) {
    return absl::StrCat(t.allocations.size(), " allocation and ", t.releases.size(),
                        " release records, not one each");
  }
  const PhysicalMemoryEvent& alloc = t.allocations[0];
  const PhysicalMemoryEvent& release = t.releases[0];
  std::string problems;
  if (alloc.memory_kind != "device") {
    absl::StrAppend(&problems, "allocation of kind ", alloc.memory_kind, "; ");
  }
  if (alloc.bytes < bytes || alloc.bytes > bytes + (uint64_t{2} << 20)) {
    absl::StrAppend(&problems, "allocation of ", alloc.bytes, " bytes for ", bytes, "; ");
  }
  if (release.timestamp_ns < alloc.timestamp_ns) {
    absl::StrAppend(&problems, "release at ", release.timestamp_ns, " ns before its allocation at ",
                    alloc.timestamp_ns, " ns; ");
  }
  return problems;
}

TEST(TracedAllocationTest, ReleasesPairByAddressWhateverTheirSizeAndKind) {
  // +A 3 MiB, +B 5 MiB, -B and -A with size 0 and kind "unknown", +C (not asked about).
  const std::vector<PhysicalMemoryEvent> events = {
      Alloc(10, 0xa000, 3 << 20), Alloc(20, 0xb000, 5 << 20), Free(30, 0xb000, 0, "unknown"),
      Free(40, 0xa000, 0, "unknown"), Alloc(50, 0xc000, 64)};
  const std::map<uint64_t, TracedAllocation> traced = ByAddress(events, {0xa000, 0xb000, 0xd000});
  ASSERT_EQ(traced.size(), 3u);
  EXPECT_EQ(CheckAllocationAndRelease(traced.at(0xa000), 3 << 20), "");
  EXPECT_EQ(CheckAllocationAndRelease(traced.at(0xb000), 5 << 20), "");
  EXPECT_EQ(traced.at(0xa000).releases[0].timestamp_ns, 40);
  // What it catches: no records, a wrong size, a release before its allocation, a wrong kind.
  EXPECT_THAT(CheckAllocationAndRelease(traced.at(0xd000), 64),
              ::testing::HasSubstr("0 allocation and 0 release records"));
  EXPECT_THAT(CheckAllocationAndRelease(traced.at(0xa000), 6 << 20),
              ::testing::HasSubstr("allocation of 3145728 bytes for 6291456"));
  TracedAllocation early = traced.at(0xa000);
  early.releases[0].timestamp_ns = 5;
  EXPECT_THAT(CheckAllocationAndRelease(early, 3 << 20),
              ::testing::HasSubstr("release at 5 ns before its allocation at 10 ns"));
  TracedAllocation pinned = traced.at(0xb000);
  pinned.allocations[0].memory_kind = "pinned";
  EXPECT_THAT(CheckAllocationAndRelease(pinned, 5 << 20),
              ::testing::HasSubstr("allocation of kind pinned"));
}

// Returns whether the CUDA runtime sees a device; the reason in `why` if not.
bool HasCudaDevice(std::string* why) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    *why = cudaGetErrorString(err);
    return false;
  }
  if (count == 0) *why = "no devices";
  return count > 0;
}

TEST(CuptiMemoryTracerTest, StartFailsCleanlyWithoutDevice) {
  std::string why;
  if (HasCudaDevice(&why)) GTEST_SKIP() << "has a CUDA device; TracesCudaMallocAndFree covers it";
  CuptiMemoryTracer tracer;
  absl::Status status = tracer.Start();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_NE(status.message().find("cuptiActivityEnable"), std::string::npos) << status;
  EXPECT_NE(status.message().find("no usable CUDA device"), std::string::npos) << status;
  EXPECT_EQ(tracer.Stop().status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(tracer.Flush().status().code(), absl::StatusCode::kFailedPrecondition);
  // The failed Start left neither this tracer nor the process-wide slot taken.
  EXPECT_NE(tracer.Start().message().find("no usable CUDA device"), std::string::npos);
  CuptiMemoryTracer other;
  EXPECT_NE(other.Start().message().find("no usable CUDA device"), std::string::npos);
}

TEST(CuptiMemoryTracerTest, SampleDeviceMemoryWithoutDevice) {
  std::string why;
  if (HasCudaDevice(&why)) GTEST_SKIP() << "has a CUDA device; SamplesDeviceMemory covers it";
  absl::StatusOr<DeviceMemorySample> sample = SampleDeviceMemory(0);
  EXPECT_EQ(sample.status().code(), absl::StatusCode::kFailedPrecondition) << sample.status();
  EXPECT_NE(sample.status().message().find(why), std::string::npos) << sample.status();
}

TEST(CuptiMemoryTracerTest, TracesCudaMallocAndFree) {
  std::string why;
  if (!HasCudaDevice(&why)) GTEST_SKIP() << "no CUDA device: " << why;
  // Two buffers of different sizes, freed in the other order: each release must pair with
  // its own allocation by address.
  constexpr uint64_t kBytesA = uint64_t{3} << 20, kBytesB = uint64_t{5} << 20;
  CuptiMemoryTracer tracer;
  ASSERT_TRUE(tracer.Start().ok());
  CuptiMemoryTracer second;
  EXPECT_EQ(second.Start().code(), absl::StatusCode::kFailedPrecondition);
  void* a = nullptr;
  void* b = nullptr;
  ASSERT_EQ(cudaMalloc(&a, kBytesA), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&b, kBytesB), cudaSuccess);
  ASSERT_EQ(cudaFree(b), cudaSuccess);
  ASSERT_EQ(cudaFree(a), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  absl::StatusOr<PhysicalMemoryTrace> trace = tracer.Stop();
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_EQ(trace->dropped_records, 0u);
  const uint64_t address_a = reinterpret_cast<uintptr_t>(a);
  const uint64_t address_b = reinterpret_cast<uintptr_t>(b);
  const std::map<uint64_t, TracedAllocation> traced =
      ByAddress(trace->events, {address_a, address_b});
  EXPECT_EQ(CheckAllocationAndRelease(traced.at(address_a), kBytesA), "")
      << "a: " << Describe(trace->events);
  EXPECT_EQ(CheckAllocationAndRelease(traced.at(address_b), kBytesB), "")
      << "b: " << Describe(trace->events);

  // The accounting pairs them the same way: neither is live at the end, no release is
  // unmatched, and both were live at once.
  const PhysicalMemoryAccounting acc = AccountPhysicalMemory(trace->events);
  for (const PhysicalMemoryEvent& e : acc.live_at_end) {
    EXPECT_NE(e.address, address_a) << acc.DebugString();
    EXPECT_NE(e.address, address_b) << acc.DebugString();
  }
  for (const PhysicalMemoryEvent& e : acc.unmatched_frees) {
    EXPECT_NE(e.address, address_a) << acc.DebugString();
    EXPECT_NE(e.address, address_b) << acc.DebugString();
  }
  EXPECT_GE(acc.peak_device_bytes, kBytesA + kBytesB) << acc.DebugString();
  EXPECT_EQ(tracer.Stop().status().code(), absl::StatusCode::kFailedPrecondition);
  // Once the first has stopped, another tracer may run.
  EXPECT_TRUE(second.Start().ok());
  EXPECT_TRUE(second.Stop().ok());
}

TEST(CuptiMemoryTracerTest, SamplesDeviceMemory) {
  std::string why;
  if (!HasCudaDevice(&why)) GTEST_SKIP() << "no CUDA device: " << why;
  absl::StatusOr<DeviceMemorySample> sample = SampleDeviceMemory(0);
  ASSERT_TRUE(sample.ok()) << sample.status();
  EXPECT_GT(sample->total_bytes, 0u) << sample->DebugString();
  EXPECT_LE(sample->free_bytes, sample->total_bytes) << sample->DebugString();
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  EXPECT_EQ(SampleDeviceMemory(count).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SampleDeviceMemory(-1).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace headroom::profiler
