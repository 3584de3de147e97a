// IDX files, the format of MNIST and Fashion-MNIST (yann.lecun.com/exdb/mnist): a 4-byte
// magic (two zero bytes, a type code, the number of dimensions), one big-endian uint32 per
// dimension, then the elements in row-major order. Read plain or gzip-compressed (zlib
// detects which).
//
// Limits: unsigned-byte (type 0x08, what every MNIST-like set uses) or float32 (type 0x0D,
// big-endian in the file) elements; at most 4 dimensions; at most 2^31 elements. Every violation is
// InvalidArgument naming the file and what is wrong; a missing file is NotFound.
//
// Thread-safe: no state.
#ifndef HEADROOM_DATA_IDX_FILE_H_
#define HEADROOM_DATA_IDX_FILE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace headroom::data {

// The element types read.
inline constexpr uint8_t kIdxUnsignedByte = 0x08;
inline constexpr uint8_t kIdxFloat = 0x0D;

struct IdxArray {
  uint8_t type = kIdxUnsignedByte;  // kIdxUnsignedByte or kIdxFloat
  std::vector<int64_t> dims;        // e.g. {60000, 28, 28} for images, {60000} for labels
  // The elements, row-major, in host order: product(dims) bytes, or floats.
  std::vector<uint8_t> bytes;

  int64_t element_bytes() const { return type == kIdxFloat ? 4 : 1; }
  int64_t num_elements() const;

  // Returns the number of elements of one item (the product of every dim but the first).
  int64_t item_elements() const;
};

// Returns the array in the IDX file at `path` (gzip-compressed or not).
absl::StatusOr<IdxArray> ReadIdxFile(const std::string& path);

// Returns the type and dimensions of the IDX file at `path` without its elements (which
// are neither read nor checked: ReadIdxFile's errors about them come only from reading it).
absl::StatusOr<IdxArray> ReadIdxHeader(const std::string& path);

// Returns the bytes of an IDX file holding `array` (uncompressed): for tests and tools.
std::string EncodeIdx(const IdxArray& array);

}  // namespace headroom::data

#endif  // HEADROOM_DATA_IDX_FILE_H_
