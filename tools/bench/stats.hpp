#pragma once
// Order statistics of timings.
#include <algorithm>
#include <vector>

namespace switchyard::bench {

// The median; the mean of the two middle values for an even count; 0 for none.
inline double median(std::vector<double> values) {
  if (values.empty()) return 0;
  size_t middle = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + middle, values.end());
  double upper = values[middle];
  if (values.size() % 2 == 1) return upper;
  double lower = *std::max_element(values.begin(), values.begin() + middle);
  return (lower + upper) / 2;
}

}  // namespace switchyard::bench
