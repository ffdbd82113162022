#pragma once
// Order statistics of timings.
#include <algorithm>
#include <cmath>
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

// The p-th percentile (0 < p <= 100) by the nearest-rank method: the ceil(p / 100 * n)-th smallest
// value, so with fewer than 100 values the p99 is the largest; 0 for none.
inline double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(values.size())));
  rank = std::min(std::max<size_t>(rank, 1), values.size());
  return values[rank - 1];
}

}  // namespace switchyard::bench
