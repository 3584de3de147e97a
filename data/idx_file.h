// IDX files, the format of MNIST and Fashion-MNIST (yann.lecun.com/exdb/mnist): a 4-byte
// magic (two zero bytes, a type code, the number of dimensions), one big-endian uint32 per
// dimension, then the elements in row-major order. Read plain or gzip-compressed (zlib
// detects which).
//
// Limits: unsigned-byte elements only (type 0x08, what every MNIST-like set uses); at most 4
// dimensions; at most 2 GiB of elements. Every violation is InvalidArgument naming the file
// and what is wrong; a missing file is NotFound.
//
// Thread-safe: no state.
#ifndef HEADROOM_DATA_IDX_FILE_H_
#define HEADROOM_DATA_IDX_FILE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace headroom::data {

struct IdxArray {
  std::vector<int64_t> dims;   // e.g. {60000, 28, 28} for images, {60000} for labels
  std::vector<uint8_t> bytes;  // row-major, product(dims) of them

  // Returns the number of elements of one item (the product of every dim but the first).
  int64_t item_elements() const;
};

// Returns the array in the IDX file at `path` (gzip-compressed or not).
absl::StatusOr<IdxArray> ReadIdxFile(const std::string& path);

// Returns the bytes of an IDX file holding `array` (uncompressed): for tests and tools.
std::string EncodeIdx(const IdxArray& array);

}  // namespace headroom::data

#endif  // HEADROOM_DATA_IDX_FILE_H_
