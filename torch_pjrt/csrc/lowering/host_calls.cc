#include "lowering/host_calls.h"

namespace torch_pjrt::lowering {

namespace {

constexpr int64_t kChannelsLastRank = 4;
const Dims kChannelsLastLayout{1, 3, 2, 0};  // [N, C, H, W] stored N, H, W, C (minor-to-major)

bool ActivationsAre4d(const std::vector<HostOperand>& operands) {
  for (const HostOperand& o : operands) {
    if (o.activation) return o.value.rank() == kChannelsLastRank;
  }
  return false;
}

// Row-major: XLA's default layout of a value of `rank` dims.
Dims DefaultLayout(int64_t rank) {
  Dims d;
  for (int64_t i = rank - 1; i >= 0; --i) d.push_back(i);
  return d;
}

}  // namespace

std::vector<Val> CallHostKernel(Emitter& e, const std::string& target, const std::vector<HostOperand>& operands,
                                const std::vector<HostResult>& results, std::string attrs, bool channels_last) {
  channels_last = channels_last && ActivationsAre4d(operands);
  std::vector<Val> args;
  std::vector<Dims> arg_layouts, ret_layouts;
  for (const HostOperand& o : operands) {
    args.push_back(o.value);
    arg_layouts.push_back(channels_last && o.activation ? kChannelsLastLayout : DefaultLayout(o.value.rank()));
  }
  std::vector<TensorType> types;
  for (const HostResult& r : results) {
    types.push_back(r.type);
    ret_layouts.push_back(channels_last && r.activation ? kChannelsLastLayout
                                                        : DefaultLayout(static_cast<int64_t>(r.type.dims.size())));
  }
  // Every layout is pinned, row-major ones too: XLA otherwise gives an unconstrained call's result
  // whatever layout its consumer wants (a channels-last one), which the handler would misread.
  if (channels_last) attrs += ", channels_last = 1 : i64";
  return e.FfiCall(target, args, types, attrs, arg_layouts, ret_layouts);
}

bool ConvPrefersChannelsLast(const TensorType& x, const TensorType& w, const TensorType& y) {
  constexpr int64_t kActivationsPerWeight = 4;
  return NumElements(x.dims) + NumElements(y.dims) >= kActivationsPerWeight * NumElements(w.dims);
}

}  // namespace torch_pjrt::lowering
