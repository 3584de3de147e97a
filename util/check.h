// CHECK for broken internal invariants (never for user input: that gets an absl::Status).
// Debian's abseil predates absl/log, so Headroom carries this small version.
#ifndef HEADROOM_UTIL_CHECK_H_
#define HEADROOM_UTIL_CHECK_H_

#include <cstdlib>
#include <iostream>
#include <sstream>

namespace headroom::internal {

// Collects a failure message and aborts when destroyed.
class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* condition) {
    stream_ << file << ":" << line << ": CHECK failed: " << condition << ": ";
  }
  [[noreturn]] ~CheckFailure() {
    std::cerr << stream_.str() << std::endl;
    std::abort();
  }
  std::ostream& stream() { return stream_; }

 private:
  std::ostringstream stream_;
};

}  // namespace headroom::internal

// Aborts with file, line, condition and any streamed message when `condition` is false.
#define CHECK(condition) \
  if (condition) {       \
  } else                 \
    ::headroom::internal::CheckFailure(__FILE__, __LINE__, #condition).stream()

#endif  // HEADROOM_UTIL_CHECK_H_
