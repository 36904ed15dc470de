#include "lowering/host_calls.h"

namespace torch_pjrt::lowering {

namespace {

constexpr int64_t kChannelsLastRank = 4;
const Dims kToChannelsLast{0, 2, 3, 1};
const Dims kToChannelsFirst{0, 3, 1, 2};

TensorType ChannelsLastType(const TensorType& t) {
  TensorType out{t.dtype, {}};
  for (int64_t d : kToChannelsLast) out.dims.push_back(t.dims[d]);
  return out;
}

bool ActivationsAre4d(const std::vector<HostOperand>& operands) {
  for (const HostOperand& o : operands) {
    if (o.activation) return o.value.rank() == kChannelsLastRank;
  }
  return false;
}

}  // namespace

std::vector<Val> CallHostKernel(Emitter& e, const std::string& target, const std::vector<HostOperand>& operands,
                                const std::vector<HostResult>& results, std::string attrs, bool channels_last) {
  channels_last = channels_last && ActivationsAre4d(operands);
  std::vector<Val> args;
  for (const HostOperand& o : operands) {
    args.push_back(channels_last && o.activation ? e.Transpose(o.value, kToChannelsLast) : o.value);
  }
  std::vector<TensorType> types;
  for (const HostResult& r : results) types.push_back(channels_last && r.activation ? ChannelsLastType(r.type) : r.type);
  if (channels_last) attrs += ", channels_last = 1 : i64";
  std::vector<Val> out = e.FfiCall(target, args, types, attrs);
  for (size_t i = 0; i < out.size(); ++i) {
    if (channels_last && results[i].activation) out[i] = e.Transpose(out[i], kToChannelsFirst);
  }
  return out;
}

bool ConvPrefersChannelsLast(const TensorType& x, const TensorType& w, const TensorType& y) {
  constexpr int64_t kActivationsPerWeight = 4;
  return NumElements(x.dims) + NumElements(y.dims) >= kActivationsPerWeight * NumElements(w.dims);
}

}  // namespace torch_pjrt::lowering
