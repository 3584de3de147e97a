// The median of a sample: what benchmarks and profiles report instead of the mean, which one
// slow step would drag.
#ifndef HEADROOM_UTIL_MEDIAN_H_
#define HEADROOM_UTIL_MEDIAN_H_

#include <algorithm>
#include <vector>

namespace headroom {

// Returns the median of `values` (the mean of the middle two for an even count), or 0 for
// none.
inline double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  const size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + mid, values.end());
  const double upper = values[mid];
  if (values.size() % 2 == 1) return upper;
  const double lower = *std::max_element(values.begin(), values.begin() + mid);
  return (lower + upper) / 2;
}

}  // namespace headroom

#endif  // HEADROOM_UTIL_MEDIAN_H_
