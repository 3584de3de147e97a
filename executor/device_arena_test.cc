#include "executor/device_arena.h"

#include <cstdlib>

#include "gtest/gtest.h"

namespace headroom::executor {
namespace {

class HeapBuffer : public Buffer {
 public:
  explicit HeapBuffer(uint64_t bytes) : data_(std::malloc(bytes)), bytes_(bytes) {}
  ~HeapBuffer() override { std::free(data_); }
  void* data() const override { return data_; }
  uint64_t bytes() const override { return bytes_; }

 private:
  void* data_;
  uint64_t bytes_;
};

DeviceArena MakeArena(uint64_t bytes) { return DeviceArena(std::make_unique<HeapBuffer>(bytes)); }

TEST(DeviceArenaTest, PlacesBuffersAtTheirOffsetsAndMeasuresTheHighWaterMark) {
  DeviceArena arena = MakeArena(1024);
  // +0 [0,256) +1 [256,768) -0 +2 [0,256) -1 -2
  void* a = arena.Allocate(0, 0, 256, "a").value();
  void* b = arena.Allocate(1, 256, 512, "b").value();
  EXPECT_EQ(static_cast<char*>(b) - static_cast<char*>(a), 256);
  EXPECT_EQ(arena.live_bytes(), 768u);
  ASSERT_TRUE(arena.Free(0).ok());
  ASSERT_TRUE(arena.Allocate(2, 0, 256, "c").ok());
  ASSERT_TRUE(arena.Free(1).ok());
  ASSERT_TRUE(arena.Free(2).ok());
  EXPECT_EQ(arena.high_water_bytes(), 768u);
  EXPECT_EQ(arena.peak_live_bytes(), 768u);
  EXPECT_EQ(arena.live_bytes(), 0u);
}

TEST(DeviceArenaTest, PastCapacityIsOutOfMemory) {
  DeviceArena arena = MakeArena(1024);
  absl::StatusOr<void*> r = arena.Allocate(0, 768, 512, "big");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(r.status().message().find("'big'"), absl::string_view::npos) << r.status();
}

TEST(DeviceArenaTest, OverlappingLiveBuffersAreABug) {
  DeviceArena arena = MakeArena(1024);
  ASSERT_TRUE(arena.Allocate(0, 256, 256, "a").ok());
  EXPECT_EQ(arena.Allocate(1, 384, 256, "b").status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(arena.Allocate(2, 0, 512, "c").status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(arena.Allocate(0, 768, 64, "a again").status().code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(arena.Allocate(3, 512, 256, "adjacent").ok());
  EXPECT_EQ(arena.Free(9).code(), absl::StatusCode::kInternal);
}

TEST(DeviceArenaTest, ResetPeaksKeepsWhatIsLive) {
  DeviceArena arena = MakeArena(1024);
  ASSERT_TRUE(arena.Allocate(0, 0, 128, "persistent").ok());
  ASSERT_TRUE(arena.Allocate(1, 512, 256, "activation").ok());
  ASSERT_TRUE(arena.Free(1).ok());
  arena.ResetPeaks();
  EXPECT_EQ(arena.high_water_bytes(), 128u);
  EXPECT_EQ(arena.peak_live_bytes(), 128u);
}

}  // namespace
}  // namespace headroom::executor
