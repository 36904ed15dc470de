#include "aten/meta_overrides.h"

#include "aten/meta_guards.h"

#include <ATen/TensorIterator.h>
#include <ATen/ops/convolution.h>
#include <ATen/ops/convolution_backward.h>
#include <ATen/ops/_upsample_bicubic2d_aa.h>
#include <ATen/ops/_upsample_bilinear2d_aa.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/native_layer_norm.h>
#include <ATen/ops/result_type.h>
#include <ATen/ops/upsample_bicubic2d.h>
#include <ATen/ops/upsample_bilinear2d.h>

#include <array>
#include <unordered_map>

namespace torch_pjrt::aten {

namespace {

// The memory format of torch's CPU convolution output: channels-last when the input or the weight
// is (oneDNN's and thnn's rule); for 3-d convolutions only where oneDNN runs them (not float64,
// which takes the slow path).
at::MemoryFormat CpuConvolutionFormat(const at::Tensor& x, const at::Tensor& w) {
  auto either_is = [&](at::MemoryFormat f) { return x.suggest_memory_format() == f || w.suggest_memory_format() == f; };
  if (x.dim() == 4 && either_is(at::MemoryFormat::ChannelsLast)) return at::MemoryFormat::ChannelsLast;
  if (x.dim() == 5 && x.scalar_type() != at::kDouble && either_is(at::MemoryFormat::ChannelsLast3d)) {
    return at::MemoryFormat::ChannelsLast3d;
  }
  return at::MemoryFormat::Contiguous;
}

// convolution_overrideable(input, weight, bias?, stride, padding, dilation, transposed,
// output_padding, groups): aten::convolution's shapes, with the CPU kernels' output strides
// (aten::convolution's Meta kernel always answers contiguous).
void ConvolutionMeta(c10::ArrayRef<c10::IValue> a, torch::jit::Stack* results) {
  const at::Tensor& x = a[0].toTensor();
  const at::Tensor& w = a[1].toTensor();
  at::Tensor y = at::convolution(x, w, a[2].toOptional<at::Tensor>(), a[3].toIntVector(), a[4].toIntVector(),
                                 a[5].toIntVector(), a[6].toBool(), a[7].toIntVector(), a[8].toInt());
  results->push_back(y.contiguous(CpuConvolutionFormat(x, w)));
}

void ConvolutionBackwardMeta(c10::ArrayRef<c10::IValue> a, torch::jit::Stack* results) {
  // convolution_backward_overrideable(grad_output, input, weight, stride, padding, dilation,
  //   transposed, output_padding, groups, output_mask) == convolution_backward with bias_sizes.
  const at::Tensor& w = a[2].toTensor();
  int64_t bias = a[6].toBool() ? w.size(1) * a[8].toInt() : w.size(0);
  auto mask = a[9].to<std::array<bool, 3>>();
  auto r = at::convolution_backward(a[0].toTensor(), a[1].toTensor(), w, std::vector<int64_t>{bias},
                                    a[3].toIntVector(), a[4].toIntVector(), a[5].toIntVector(),
                                    a[6].toBool(), a[7].toIntVector(), a[8].toInt(), mask);
  results->push_back(std::get<0>(r));
  results->push_back(std::get<1>(r));
  results->push_back(std::get<2>(r));
}

at::Tensor MetaLike(const at::Tensor& t, c10::IntArrayRef sizes) {
  return at::empty(sizes, t.options().device(c10::kMeta));
}

// _thnn_fused_gru_cell(input_gates, hidden_gates, hx, ...) -> (hy, workspace [N, 5H])
void GruCellMeta(c10::ArrayRef<c10::IValue> a, torch::jit::Stack* results) {
  const at::Tensor& hx = a[2].toTensor();
  results->push_back(MetaLike(hx, hx.sizes()));
  results->push_back(MetaLike(hx, {hx.size(0), 5 * hx.size(1)}));
}

// _thnn_fused_gru_cell_backward(grad_hy, workspace, has_bias) -> 5 tensors
void GruCellBackwardMeta(c10::ArrayRef<c10::IValue> a, torch::jit::Stack* results) {
  const at::Tensor& g = a[0].toTensor();
  int64_t n = g.size(0), h = g.size(1);
  results->push_back(MetaLike(g, {n, 3 * h}));
  results->push_back(MetaLike(g, {n, 3 * h}));
  results->push_back(MetaLike(g, {n, h}));
  bool has_bias = a[2].toBool();
  results->push_back(has_bias ? MetaLike(g, {3 * h}) : at::Tensor());
  results->push_back(has_bias ? MetaLike(g, {3 * h}) : at::Tensor());
}

// _thnn_fused_lstm_cell(input_gates, hidden_gates, cx, ...) -> (hy, cy, workspace [N, 4H]).
// torch's own meta function fails when the biases are None.
void LstmCellMeta(c10::ArrayRef<c10::IValue> a, torch::jit::Stack* results) {
  const at::Tensor& cx = a[2].toTensor();
  results->push_back(MetaLike(cx, cx.sizes()));
  results->push_back(MetaLike(cx, cx.sizes()));
  results->push_back(MetaLike(cx, {cx.size(0), 4 * cx.size(1)}));
}

// _thnn_fused_lstm_cell_backward_impl(grad_hy?, grad_cy?, cx, cy, workspace, has_bias)
void LstmCellBackwardMeta(c10::ArrayRef<c10::IValue> a, torch::jit::Stack* results) {
  const at::Tensor& cx = a[2].toTensor();
  results->push_back(MetaLike(cx, {cx.size(0), 4 * cx.size(1)}));
  results->push_back(MetaLike(cx, cx.sizes()));
  results->push_back(a[5].toBool() ? MetaLike(cx, {4 * cx.size(1)}) : at::Tensor());
}

// Fused optimizer steps without a Meta kernel (_fused_sgd, _fused_adagrad): they return their
// first `kLists` list arguments updated, element for element.
template <int kLists>
void UpdatedListsMeta(c10::ArrayRef<c10::IValue> a, torch::jit::Stack* results) {
  for (int i = 0; i < kLists; ++i) {
    c10::List<at::Tensor> list;
    for (const at::Tensor& t : a[i].toTensorList()) list.push_back(at::empty_like(t));
    results->push_back(list);
  }
}

// __lshift__.Scalar / __rshift__.Scalar(self, other): torch's Meta kernel rejects a bool self,
// which its CPU kernel shifts as the promoted integer type (True << 3 is 8, int64).
void ShiftScalarMeta(c10::ArrayRef<c10::IValue> a, torch::jit::Stack* results) {
  const at::Tensor& self = a[0].toTensor();
  at::ScalarType t = at::result_type(self, a[1].toScalar());
  TORCH_CHECK(at::isIntegralType(t, /*includeBool=*/false), "shift: Expected input tensor to have an integral dtype. Got ",
              self.scalar_type());
  results->push_back(at::empty_like(self, self.options().dtype(t)));
}

// hardtanh_backward(grad_output, self, min, max), hardswish_backward(grad_output, self): CPU's
// kernels are TensorIterator binary ops over (grad_output, self), which lay the result out after
// grad_output where the two differ; torch's Python Meta kernels (torch.where) follow self.
void BinaryIteratorMeta(c10::ArrayRef<c10::IValue> a, torch::jit::Stack* results) {
  at::Tensor out;
  auto iter = at::TensorIterator::borrowing_binary_op(out, a[0].toTensor(), a[1].toTensor());
  results->push_back(iter.output());
}

// huber_loss(self, target, reduction, delta): CPU's kernel writes into a tensor like self, so the
// loss has self's dtype (float32 for a float64 target), where torch's Meta kernel promotes.
constexpr char kHuberLoss[] = "aten::huber_loss", kHuberLossBackward[] = "aten::huber_loss_backward",
               kSmoothL1LossBackward[] = "aten::smooth_l1_loss_backward",
               kMseLossBackward[] = "aten::mse_loss_backward", kLogSigmoidForward[] = "aten::log_sigmoid_forward",
               kLogSigmoidBackward[] = "aten::log_sigmoid_backward";

void HuberLossMeta(c10::ArrayRef<c10::IValue> a, torch::jit::Stack* results) {
  RunOwnMeta(kHuberLoss, "", a, results);
  (*results)[0] = (*results)[0].toTensor().to(a[0].toTensor().scalar_type());
}

// huber_loss_backward, smooth_l1_loss_backward, mse_loss_backward and log_sigmoid_forward: CPU's
// kernels return contiguous results whatever self's layout; torch's Meta kernels follow self.
template <const char* kName>
void ContiguousResultsMeta(c10::ArrayRef<c10::IValue> a, torch::jit::Stack* results) {
  RunOwnMeta(kName, "", a, results);
  for (c10::IValue& r : *results) {
    if (r.isTensor()) r = r.toTensor().contiguous();
  }
}

// log_sigmoid_backward(grad_output, self, buffer): CPU's kernel writes into empty_like(grad_output)
// (a TensorIterator keeps a given output's layout); torch's Meta kernel follows self.
void LogSigmoidBackwardMeta(c10::ArrayRef<c10::IValue> a, torch::jit::Stack* results) {
  RunOwnMeta(kLogSigmoidBackward, "", a, results);
  (*results)[0] = at::empty_like(a[0].toTensor(), (*results)[0].toTensor().options());
}

// Backward ops without a Meta kernel in torch whose gradient has self's shape and dtype (self is
// argument 1): fractional_max_pool3d_backward(grad_output, self, ...),
// multi_margin_loss_backward(grad_output, self, target, ...),
// multilabel_margin_loss_backward(grad_output, self, target, reduction, is_target).
void GradientLikeSelfMeta(c10::ArrayRef<c10::IValue> a, torch::jit::Stack* results) {
  const at::Tensor& self = a[1].toTensor();
  results->push_back(MetaLike(self, self.sizes()));
}

// multilabel_margin_loss_forward(self, target, reduction) -> (output, is_target): torch's Meta
// kernel gives a 1-d input's unreduced loss the shape [1]; the CPU kernel returns a 0-d loss
// whenever the target has at most one dim. CPU's shape checks.
void MultilabelMarginLossMeta(c10::ArrayRef<c10::IValue> a, torch::jit::Stack* results) {
  const at::Tensor& self = a[0].toTensor();
  const at::Tensor& target = a[1].toTensor();
  int64_t dims = self.dim();
  bool valid = (dims == 2 && self.size(1) != 0) || (dims == 1 && self.size(0) != 0) || dims == 0;
  TORCH_CHECK(valid, "Expected non-empty vector or matrix with optional 0-dim batch size, but got: ", self.sizes());
  int64_t frames = dims == 2 ? self.size(0) : 1, classes = dims == 0 ? 1 : self.size(-1);
  bool consistent = dims <= 1 ? target.dim() <= 1 && target.numel() == classes
                              : target.dim() == 2 && target.size(0) == frames && target.size(1) == classes;
  TORCH_CHECK(consistent, "inconsistent size ", target.sizes(), " for argument #2 'target'");
  bool scalar = a[2].toInt() != 0 || target.dim() <= 1;
  results->push_back(scalar ? MetaLike(self, {}) : MetaLike(self, {frames}));
  results->push_back(MetaLike(self, target.sizes()));
}

// The dtype of normalization statistics on the CPU: float when a half or bfloat16 input meets
// float32 parameters (torch's is_mixed_type), else the input's. torch's Meta kernels follow CUDA
// (always float), so these overrides give pjrt the CPU's results.
c10::ScalarType StatsType(const at::Tensor& input, c10::ArrayRef<c10::IValue> params) {
  if (!at::isReducedFloatingType(input.scalar_type())) return input.scalar_type();
  for (const c10::IValue& p : params) {
    if (p.isTensor() && p.toTensor().defined() && p.toTensor().scalar_type() == c10::kFloat) return c10::kFloat;
  }
  return input.scalar_type();
}

at::Tensor MetaStats(const at::Tensor& input, c10::IntArrayRef sizes, c10::ScalarType type) {
  return at::empty(sizes, input.options().dtype(type).device(c10::kMeta));
}

// Batch norms (input, weight?, bias?, [running_mean?, running_var?,] training, momentum, eps) ->
// (output, save_mean, save_invstd): the CPU kernel returns the statistics in StatsType, and
// empty in evaluation. kStats: whether the running statistics are arguments; kTraining: the
// training flag's position (-1: always training).
template <bool kStats, int kTraining>
void BatchNormMeta(c10::ArrayRef<c10::IValue> a, torch::jit::Stack* results) {
  const at::Tensor& input = a[0].toTensor();
  TORCH_CHECK(input.dim() >= 2, "batch_norm: expected at least 2 dims (N, C, ...), got ", input.dim());
  bool training = kTraining < 0 || a[kTraining].toBool();
  c10::ScalarType type = StatsType(input, a.slice(1, kStats ? 4 : 2));
  int64_t channels = training ? input.size(1) : 0;
  results->push_back(at::empty_like(input, input.suggest_memory_format()));
  results->push_back(MetaStats(input, {channels}, type));
  results->push_back(MetaStats(input, {channels}, type));
}

// _batch_norm_with_update(input, weight?, bias?, running_mean, running_var, momentum, eps) ->
// (output, save_mean, save_invstd, reserve [0] uint8): a training batch norm (torch's own Meta
// kernel also fails without a weight: its backend selection rejects None).
void BatchNormWithUpdateMeta(c10::ArrayRef<c10::IValue> a, torch::jit::Stack* results) {
  BatchNormMeta<true, -1>(a, results);
  results->push_back(at::empty({0}, a[0].toTensor().options().dtype(c10::kByte).device(c10::kMeta)));
}

// native_layer_norm(input, normalized_shape, weight?, bias?, eps) -> (output, mean, rstd):
// statistics of shape [leading dims, 1...] in StatsType, as on the CPU.
void LayerNormMeta(c10::ArrayRef<c10::IValue> a, torch::jit::Stack* results) {
  const at::Tensor& input = a[0].toTensor();
  auto [out, mean, rstd] = at::native_layer_norm(input, a[1].toIntVector(), a[2].toOptional<at::Tensor>(),
                                                 a[3].toOptional<at::Tensor>(), a[4].toDouble());
  c10::ScalarType type = StatsType(input, a.slice(2, 2));
  results->push_back(out);
  results->push_back(MetaStats(input, mean.sizes(), type));
  results->push_back(MetaStats(input, rstd.sizes(), type));
}

// geqrf(self) -> (a, tau [..., min(m, n)]), with CPU's checks.
void GeqrfMeta(c10::ArrayRef<c10::IValue> a, torch::jit::Stack* results) {
  const at::Tensor& self = a[0].toTensor();
  TORCH_CHECK(self.dim() >= 2, "torch.geqrf: input must have at least 2 dimensions.");
  TORCH_CHECK(at::isFloatingType(self.scalar_type()) || at::isComplexType(self.scalar_type()),
              "torch.geqrf: Expected a floating point or complex tensor as input. Got ", self.scalar_type());
  std::vector<int64_t> tau(self.sizes().begin(), self.sizes().end() - 1);
  tau.back() = std::min(self.size(-2), self.size(-1));
  results->push_back(MetaLike(self, self.sizes()));
  results->push_back(MetaLike(self, tau));
}

// upsample_bilinear2d / upsample_bicubic2d / their _aa forms (self, output_size, align_corners,
// scales_h, scales_w): torch's uint8 kernels compute with int16 fixed-point weights (an AVX2 path
// and a generic one), which the lowering does not reproduce; uint8 inputs take the CPU path.
template <at::Tensor (*Op)(const at::Tensor&, at::IntArrayRef, bool, std::optional<double>, std::optional<double>)>
void Upsample2dMeta(c10::ArrayRef<c10::IValue> a, torch::jit::Stack* results) {
  const at::Tensor& self = a[0].toTensor();
  TORCH_CHECK(self.scalar_type() != at::kByte, "uint8 interpolation runs on the CPU");
  results->push_back(Op(self, a[1].toIntVector(), a[2].toBool(), a[3].toOptional<double>(), a[4].toOptional<double>()));
}

}  // namespace

MetaOverride FindMetaOverride(const std::string& name) {
  if (MetaOverride guard = FindMetaGuard(name)) return guard;
  static const auto* table = new std::unordered_map<std::string, MetaOverride>{
      {"aten::_thnn_fused_lstm_cell", &LstmCellMeta},
      {"aten::_thnn_fused_lstm_cell_backward_impl", &LstmCellBackwardMeta},
      {"aten::convolution_overrideable", &ConvolutionMeta},
      {"aten::convolution_backward_overrideable", &ConvolutionBackwardMeta},
      {"aten::_thnn_fused_gru_cell", &GruCellMeta},
      {"aten::_thnn_fused_gru_cell_backward", &GruCellBackwardMeta},
      {"aten::_fused_sgd", &UpdatedListsMeta<3>},
      {"aten::_fused_sgd.tensor_lr", &UpdatedListsMeta<3>},
      {"aten::_fused_adagrad", &UpdatedListsMeta<4>},
      {"aten::__lshift__.Scalar", &ShiftScalarMeta},
      {"aten::__rshift__.Scalar", &ShiftScalarMeta},
      {"aten::hardtanh_backward", &BinaryIteratorMeta},
      {"aten::huber_loss", &HuberLossMeta},
      {"aten::huber_loss_backward", &ContiguousResultsMeta<kHuberLossBackward>},
      {"aten::smooth_l1_loss_backward", &ContiguousResultsMeta<kSmoothL1LossBackward>},
      {"aten::mse_loss_backward", &ContiguousResultsMeta<kMseLossBackward>},
      {"aten::hardswish_backward", &BinaryIteratorMeta},
      {"aten::log_sigmoid_forward", &ContiguousResultsMeta<kLogSigmoidForward>},
      {"aten::log_sigmoid_backward", &LogSigmoidBackwardMeta},
      {"aten::fractional_max_pool3d_backward", &GradientLikeSelfMeta},
      {"aten::multi_margin_loss_backward", &GradientLikeSelfMeta},
      {"aten::multilabel_margin_loss_backward", &GradientLikeSelfMeta},
      {"aten::geqrf", &GeqrfMeta},
      {"aten::_batch_norm_with_update", &BatchNormWithUpdateMeta},
      {"aten::native_batch_norm", &BatchNormMeta<true, 5>},
      {"aten::_native_batch_norm_legit", &BatchNormMeta<true, 5>},
      {"aten::_native_batch_norm_legit.no_stats", &BatchNormMeta<false, 3>},
      {"aten::native_layer_norm", &LayerNormMeta},
      {"aten::multilabel_margin_loss_forward", &MultilabelMarginLossMeta},
      {"aten::upsample_bilinear2d", &Upsample2dMeta<&at::upsample_bilinear2d>},
      {"aten::upsample_bicubic2d", &Upsample2dMeta<&at::upsample_bicubic2d>},
      {"aten::_upsample_bilinear2d_aa", &Upsample2dMeta<&at::_upsample_bilinear2d_aa>},
      {"aten::_upsample_bicubic2d_aa", &Upsample2dMeta<&at::_upsample_bicubic2d_aa>},
  };
  auto it = table->find(name);
  return it == table->end() ? nullptr : it->second;
}

}  // namespace torch_pjrt::aten
