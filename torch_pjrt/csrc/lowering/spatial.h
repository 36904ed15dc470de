// Pieces shared by the spatial lowerings (padding.cc, pooling.cc, upsample.cc, sampling.cc):
// constant arrays, selections along one dim with indices known at lowering time, and "taps":
// per-output lists of (input index, weight) along one dim, the separable building block of
// interpolation and adaptive pooling. All shapes are static, so index and weight tables are
// computed here on the host exactly as torch's CPU kernels compute them and embedded as constants.
// Selections are gathers (or slices/broadcasts when the pattern allows), never dense matmuls with
// 0/1 matrices: a matmul would turn one inf into NaNs across the whole row (0 * inf), where the
// CPU kernels only touch each output's own taps.
#pragma once

#include <vector>

#include "lowering/helpers.h"

namespace torch_pjrt::lowering::spatial {

// 1-D constants.
Val ConstInts(Emitter& e, const std::vector<int64_t>& v, ElementType t = ElementType::kS64);
Val ConstFloats(Emitter& e, const std::vector<double>& v, ElementType t);
Val ConstBools(Emitter& e, const std::vector<bool>& v);

// x[..., idx[o], ...] along `dim` (indices in range, known now).
Val TakeAlong(Emitter& e, const Val& x, int64_t dim, const std::vector<int64_t>& idx);

// Broadcasts a 1-D vector along `dim` of `dims`.
Val AlongDim(Emitter& e, const Val& v, const Dims& dims, int64_t dim);

// Per output position o < out: sum over t of weight[t][o] * x[idx[t][o]] (taps with valid[t][o]
// false contribute nothing, not even 0 * x). Summed in tap order, as the CPU kernels do.
struct Taps {
  int64_t in = 0, out = 0;
  std::vector<std::vector<int64_t>> idx;  // [T][out]
  std::vector<std::vector<double>> w;     // [T][out]; empty: all weights are 1
  std::vector<std::vector<bool>> valid;   // [T][out]; empty: all valid
  void Add(const std::vector<int64_t>& i, const std::vector<double>& wt = {},
           const std::vector<bool>& v = {});
};

// Applies `taps` along `dim` of x (computing in x's type, which the caller chose).
Val ApplyTaps(Emitter& e, const Val& x, int64_t dim, const Taps& taps);

// The transposed taps (for backward passes): per input position, the (output, weight) pairs that
// read it, in output order.
Taps Transpose(const Taps& taps);

// Spatial dims of a [N, C, *spatial] or [C, *spatial] value: the trailing `n`.
inline int64_t FirstSpatial(const Val& x, int64_t n) { return x.rank() - n; }

// Repeats a per-spatial-dim list given with a single value.
Dims ExpandList(const Dims& d, size_t n, int64_t fill);

}  // namespace torch_pjrt::lowering::spatial
