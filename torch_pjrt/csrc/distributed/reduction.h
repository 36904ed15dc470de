// The c10d reductions every backend path shares: AVG and PREMUL_SUM as a SUM with scaling.
#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

namespace torch_pjrt::distributed {

// gloo and XLA's collectives reduce with SUM, PRODUCT, MIN, MAX and the bitwise ops. AVG and
// PREMUL_SUM (what DDP, FSDP and DTensor ask of NCCL) run as a SUM with the scaling done around
// it, on the host copies or in the graph, so they work on every plugin. Integer averages
// truncate, as NCCL's do.
class Reduction {
 public:
  Reduction(const c10d::ReduceOp& op, int group_size) : group_size_(group_size) {
    if (op == c10d::ReduceOp::AVG || op == c10d::ReduceOp::PREMUL_SUM) {
      average_ = op == c10d::ReduceOp::AVG;
      if (op == c10d::ReduceOp::PREMUL_SUM) {
        const auto* factor = dynamic_cast<const c10d::PreMulSumSupplement*>(op.supplement_.get());
        TORCH_CHECK(factor != nullptr, "ReduceOp.PREMUL_SUM needs a factor (use "
                    "torch.distributed._make_nccl_premul_sum(factor))");
        factor_ = factor->tensor_factor.defined() ? factor->tensor_factor.to(at::kCPU)
                                                  : at::scalar_tensor(factor->double_factor);
      }
      op_ = c10d::ReduceOp::SUM;
    } else {
      op_ = op;
    }
  }
  // The reduction the collective itself runs.
  c10d::ReduceOp op() const { return op_; }
  // PREMUL_SUM's factor applied to the inputs: in place when the collective overwrites them
  // anyway, otherwise on new tensors (a CPU input is the caller's tensor).
  void ScaleInputs(std::vector<at::Tensor>& host, bool in_place) const {
    if (!factor_.defined()) return;
    for (auto& t : host) {
      auto factor = factor_.to(t.device(), t.scalar_type());
      if (in_place) t.mul_(factor); else t = t.mul(factor);
    }
  }
  // AVG's division of the outputs by the group size.
  void FinishOutputs(std::vector<at::Tensor>& host) const {
    if (!average_) return;
    for (auto& t : host) {
      if (at::isIntegralType(t.scalar_type(), /*includeBool=*/true)) {
        t.div_(group_size_, "trunc");
      } else {
        t.div_(group_size_);
      }
    }
  }

 private:
  int group_size_;
  c10d::ReduceOp op_;
  at::Tensor factor_;
  bool average_ = false;
};

}  // namespace torch_pjrt::distributed
