// Byte sizes as people write them: "6GiB", "512 MiB", "1.5GB", "4096".
#ifndef HEADROOM_UTIL_BYTE_SIZE_H_
#define HEADROOM_UTIL_BYTE_SIZE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace headroom {

// Returns the bytes `text` names: a number (decimals allowed) and an optional unit, B, KB,
// MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024), in any case, with K,
// M, G, T meaning the binary units. InvalidArgument, quoting `text`, for anything else: no
// number, a negative or non-finite one, an unknown unit, or more than 2^64 - 1 bytes.
absl::StatusOr<uint64_t> ParseByteSize(absl::string_view text);

}  // namespace headroom

#endif  // HEADROOM_UTIL_BYTE_SIZE_H_
