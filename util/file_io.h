// Whole-file reads and writes with errors that name the file and what it is.
#ifndef HEADROOM_UTIL_FILE_IO_H_
#define HEADROOM_UTIL_FILE_IO_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace headroom {

// Returns the contents of the regular file at `path`, or NotFound naming `what` ("graph
// file") if it cannot be opened, or InvalidArgument if `path` is a directory or another
// non-regular file (a FIFO or device could block or never end).
absl::StatusOr<std::string> ReadFileContents(const std::string& path, const std::string& what);

// Replaces the file at `path` with `contents`; Unavailable naming `what` if it cannot.
absl::Status WriteFileContents(const std::string& path, const std::string& contents,
                               const std::string& what);

}  // namespace headroom

#endif  // HEADROOM_UTIL_FILE_IO_H_
