// For tests: reading one value back from the metrics' text exposition.
#ifndef HEADROOM_PROFILER_METRICS_TESTING_H_
#define HEADROOM_PROFILER_METRICS_TESTING_H_

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace headroom::profiler {

// Returns the value of the exposition line that starts with `series` (its name and labels,
// as written: `headroom_jobs{state="running"}`); a test failure and -1 when there is none.
inline double ExpositionValue(const std::string& exposition, const std::string& series) {
  for (absl::string_view line : absl::StrSplit(exposition, '\n')) {
    if (!absl::StartsWith(line, series + " ")) continue;
    double value = 0;
    if (absl::SimpleAtod(line.substr(series.size() + 1), &value)) return value;
  }
  ADD_FAILURE() << "no series " << series << " in\n" << exposition;
  return -1;
}

}  // namespace headroom::profiler

#endif  // HEADROOM_PROFILER_METRICS_TESTING_H_
