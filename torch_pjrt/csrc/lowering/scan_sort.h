// Building blocks shared by the sorting, scan and scatter-reduction lowerings (sorting.cc,
// scans.cc, scatter_reduce.cc): an associative scan, torch's sort order, gathers along a dim.
#pragma once

#include <functional>
#include <utility>
#include <vector>

#include "lowering/helpers.h"

namespace torch_pjrt::lowering {

// Elementwise combination of two tuples of equal-shaped tensors; `earlier` holds the elements
// that come first along the scanned dimension.
using ScanCombine = std::function<std::vector<Val>(Emitter&, const std::vector<Val>& earlier,
                                                   const std::vector<Val>& later)>;

// Inclusive scan of the tuple `xs` along `dim` with an associative `combine`: log2(n) levels of
// strided slices (work O(n)), where a reduce_window prefix would cost O(n^2) on XLA:CPU.
// `reverse` scans from the end (suffix scan).
std::vector<Val> AssociativeScan(Emitter& e, std::vector<Val> xs, int64_t dim,
                                 const ScanCombine& combine, bool reverse = false);

// Inclusive cumulative sum along `dim` in x's own type.
Val CumulativeSum(Emitter& e, const Val& x, int64_t dim, bool reverse = false);

// torch's sort order: `a` strictly before `b`. NaN sorts as the largest value, -0.0 equals 0.0.
Val SortsBefore(Emitter& e, const Val& a, const Val& b, bool descending);

// Stable sort along `dim` in torch's order: (values, int64 indices into the unsorted input).
std::pair<Val, Val> SortWithIndices(Emitter& e, const Val& x, int64_t dim, bool descending);

// Gathers 1-D `table` at int64 positions `index` (any shape): table[index].
Val GatherFlat(Emitter& e, const Val& table, const Val& index);

// NaN test (false for non-floating types).
Val IsNan(Emitter& e, const Val& x);

}  // namespace torch_pjrt::lowering
