// bfloat16 <-> float32 conversion on the host: the upper 16 bits of a float32 (sign, the
// 8 exponent bits, 7 mantissa bits). Widening is exact; narrowing rounds to nearest, ties
// to even, as oneDNN, PyTorch and the AVX-512 BF16 instructions do. NaN stays NaN (quiet),
// infinities stay infinite and a finite float beyond bfloat16's largest finite value
// rounds to infinity, as IEEE rounding does. Thread-safe (pure functions).
#ifndef HEADROOM_UTIL_BFLOAT16_H_
#define HEADROOM_UTIL_BFLOAT16_H_

#include <cstdint>
#include <cstring>

namespace headroom {

// Returns the float32 value of the bfloat16 bits `b` (exact).
inline float BFloat16ToFloat(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// Returns the bfloat16 bits nearest to `f` (ties to even); a NaN gives a quiet NaN of the
// same sign.
inline uint16_t FloatToBFloat16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);  // NaN: keep it NaN, quiet.
  }
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

}  // namespace headroom

#endif  // HEADROOM_UTIL_BFLOAT16_H_
