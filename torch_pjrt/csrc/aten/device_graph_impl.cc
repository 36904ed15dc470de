#include "aten/device_graph_impl.h"

#include <ATen/Context.h>
#include <ATen/core/GraphImplInterface.h>

#include <memory>
#include <mutex>
#include <string>
#include <tuple>

#include "aten/captured_call.h"
#include "aten/lazy_tensor.h"
#include "aten/torch_errors.h"
#include "graph/device_graph.h"

namespace torch_pjrt::aten {

namespace {

void SetRandomOffset(int device, uint64_t offset) {
  at::Generator gen = DefaultGenerator(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_offset(offset);
}

// One torch.accelerator.Graph. Memory pools and capture modes do not apply: PJRT owns the
// buffers, and a capture refuses every sync on its device whatever the mode.
class PjrtGraphImpl final : public at::GraphImplInterface {
 public:
  explicit PjrtGraphImpl(const at::GraphImplArgs&) {}

  void capture_begin(at::MempoolId_t, at::GraphCaptureMode) override {
    TORCH_CHECK(!graph_ && !capturing_, "pjrt: this graph was already captured; call reset() before "
                "capturing again");
    device_ = CurrentDevice();
    std::tie(seed_, rng_begin_) = TakeRandomOffsets(device_, 0);
    WithTorchErrors([&] { graph::BeginDeviceGraphCapture(device_, seed_, rng_begin_); });
    capturing_ = true;
  }

  void capture_end() override {
    TORCH_CHECK(capturing_, "pjrt: capture_end() without capture_begin()");
    capturing_ = false;
    uint64_t rng_end = TakeRandomOffsets(device_, 0).second;
    // The capture ran nothing as far as the program can tell: replays start drawing where it did.
    SetRandomOffset(device_, rng_begin_);
    graph_ = WithTorchErrors([&] { return graph::EndDeviceGraphCapture(device_, rng_end); });
  }

  void instantiate() override {}  // capture_end compiled the program

  void replay() override {
    TORCH_CHECK(graph_, "pjrt: replay() needs a captured graph (capture_begin() ... capture_end() first)");
    auto [seed, offset] = TakeRandomOffsets(device_, graph_->rng_increment);
    WithTorchErrors([&] { graph::ReplayDeviceGraph(*graph_, seed, offset); });
  }

  void reset() override { graph_.reset(); }

  at::MempoolId_t pool() const override { return {0, 0}; }

  void enable_debug_mode() override {}

  void debug_dump(const std::string&) override {
    TORCH_CHECK(false, "pjrt: debug_dump is not supported; set TORCH_PJRT_DUMP_DIR=<dir> before the capture "
                "to write its program's StableHLO there");
  }

 private:
  int device_ = 0;
  bool capturing_ = false;
  uint64_t seed_ = 0, rng_begin_ = 0;
  std::shared_ptr<graph::DeviceGraph> graph_;
};

}  // namespace

void RegisterGraphImpl() {
  std::string name = c10::DeviceTypeName(c10::DeviceType::PrivateUse1, /*lower_case=*/false);
  if (at::GraphImplRegistry()->Has(name)) return;
  at::GraphImplRegistry()->Register(name, [](at::GraphImplArgs args) -> std::unique_ptr<at::GraphImplInterface> {
    return std::make_unique<PjrtGraphImpl>(args);
  });
}

}  // namespace torch_pjrt::aten
