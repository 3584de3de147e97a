// Checks the shared dropout mask: its hash is util/split_mix.h's, its integer comparison is
// the double comparison it replaced, fixed (seed, index) draws keep their values, and the
// CPU backend's Dropout writes exactly this mask. (The CUDA backend's test compares its
// mask with the same functions.)
#include "executor/dropout_mask.h"

#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "executor/backend.h"
#include "executor/cpu/cpu_backend.h"
#include "graph/op_registry.h"
#include "gtest/gtest.h"
#include "util/split_mix.h"

namespace headroom::executor {
namespace {

// The draw as the CPU backend computed it before the mask moved here.
bool KeepsByDouble(uint64_t stream, int64_t i, double rate) {
  const uint64_t h = SplitMix64(stream + static_cast<uint64_t>(i) * 0x9e3779b97f4a7c15ULL);
  return static_cast<double>(h >> 11) * 0x1.0p-53 >= rate;
}

// Returns the first `n` draws of (seed, rate) as '1' (kept) and '0'.
std::string MaskString(uint64_t seed, double rate, int n) {
  const uint64_t stream = DropoutStream(seed);
  const uint64_t threshold = DropoutKeepThreshold(rate);
  std::string s;
  for (int i = 0; i < n; ++i) s += DropoutKeeps(stream, i, threshold) ? '1' : '0';
  return s;
}

// SplitMix64's published first output for seed 0 (Vigna's reference splitmix64.c: the state
// advances by the golden gamma before mixing), which the masks hash with.
TEST(DropoutMaskTest, HashIsSplitMix64) { EXPECT_EQ(SplitMix64(0), 0xe220a8397b1dcdafULL); }

TEST(DropoutMaskTest, IntegerThresholdEqualsDoubleComparison) {
  std::mt19937_64 rng(2);
  // Rates on and next to 53-bit boundaries, where a rounding slip would show.
  std::vector<double> rates = {0.0, 0x1.0p-53, 0.1,      0.25,
                               0.5, 0.9,       0.999999, std::nextafter(1.0, 0.0)};
  for (int k = 0; k < 50; ++k) {
    const double r = static_cast<double>(rng() >> 11) * 0x1.0p-53;
    rates.push_back(r);
    rates.push_back(std::nextafter(r, 1.0));
    rates.push_back(std::nextafter(r, 0.0) > 0 ? std::nextafter(r, 0.0) : 0.0);
  }
  for (double rate : rates) {
    SCOPED_TRACE(rate);
    const uint64_t threshold = DropoutKeepThreshold(rate);
    ASSERT_LE(threshold, uint64_t{1} << 53);
    const uint64_t stream = DropoutStream(rng());
    for (int64_t i = 0; i < 2000; ++i) {
      ASSERT_EQ(DropoutKeeps(stream, i, threshold), KeepsByDouble(stream, i, rate)) << i;
    }
    // A draw exactly at the threshold is kept, one below is not (as draw * 2^-53 >= rate).
    if (threshold > 0) {
      EXPECT_GE(static_cast<double>(threshold) * 0x1.0p-53, rate);
      EXPECT_LT(static_cast<double>(threshold - 1) * 0x1.0p-53, rate);
    }
  }
}

TEST(DropoutMaskTest, FixedDrawsKeepTheirValues) {
  // Golden: computed with the double comparison above (and independently in Python).
  EXPECT_EQ(MaskString(1234, 0.25, 64),
            "1101101011010111011111111101101111101111111111111111111011111111");
  EXPECT_EQ(MaskString(0, 0.5, 64),
            "1101101001000110111011111100000000111000101110000010101000101100");
  EXPECT_EQ(MaskString(9223372036854775813ULL, 0.1, 64),
            "1111111111111101111111111111111111101111101111011111111111011111");
  EXPECT_EQ(DropoutScale(0.25), 1.0f / 0.75f);
}

graph::Attrs DropoutAttrs(double rate) {
  const graph::OpSchema* schema = graph::FindOp("Dropout");
  EXPECT_NE(schema, nullptr);
  std::map<std::string, proto::AttrValue> values;
  if (schema != nullptr) {
    for (const graph::AttrSpec& spec : schema->attrs) {
      if (!spec.required) values[spec.name] = spec.default_value;
    }
  }
  values["rate"].set_f(rate);
  return graph::Attrs(std::move(values));
}

TEST(DropoutMaskTest, CpuBackendWritesThisMask) {
  std::unique_ptr<Backend> cpu = cpu::CreateCpuBackend();
  const int64_t n = 100003;  // Past the CPU's parallel threshold, and odd.
  for (const auto& [seed, rate] :
       std::vector<std::pair<uint64_t, double>>{{42, 0.3}, {7, 0.1}, {uint64_t{1} << 40, 0.5}}) {
    SCOPED_TRACE(seed);
    const graph::Attrs attrs = DropoutAttrs(rate);
    auto arena = cpu->AllocateDevice(n * (2 * sizeof(float) + 1));
    ASSERT_TRUE(arena.ok()) << arena.status();
    char* base = static_cast<char*>((*arena)->data());
    std::vector<float> x(n);
    for (int64_t i = 0; i < n; ++i) x[i] = 0.001f * static_cast<float>(i % 1000) - 0.5f;
    ASSERT_TRUE(cpu->Upload(base, x.data(), n * sizeof(float)).ok());
    ForwardArgs fwd;
    fwd.op = "Dropout";
    fwd.attrs = &attrs;
    fwd.seed = seed;
    fwd.training = true;
    fwd.inputs = {TensorView{base, {n}, proto::DTYPE_FLOAT32}};
    fwd.outputs = {TensorView{base + n * sizeof(float), {n}, proto::DTYPE_FLOAT32}};
    fwd.saved = {TensorView{base + 2 * n * sizeof(float), {n}, proto::DTYPE_BOOL}};
    absl::Status status = cpu->Forward(fwd);
    ASSERT_TRUE(status.ok()) << status;
    std::vector<float> y(n);
    std::vector<uint8_t> mask(n);
    ASSERT_TRUE(cpu->Download(y.data(), fwd.outputs[0].data, n * sizeof(float)).ok());
    ASSERT_TRUE(cpu->Download(mask.data(), fwd.saved[0].data, n).ok());
    const uint64_t stream = DropoutStream(seed);
    const uint64_t threshold = DropoutKeepThreshold(rate);
    const float scale = DropoutScale(rate);
    int64_t kept = 0;
    for (int64_t i = 0; i < n; ++i) {
      const bool keep = DropoutKeeps(stream, i, threshold);
      ASSERT_EQ(mask[i], keep ? 1 : 0) << i;
      ASSERT_EQ(y[i], keep ? x[i] * scale : 0.0f) << i;
      kept += keep;
    }
    EXPECT_NEAR(static_cast<double>(kept) / n, 1 - rate, 0.01);
  }
}

}  // namespace
}  // namespace headroom::executor
