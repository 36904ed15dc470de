// The pjrt random generator: a (seed, offset) pair per device. Random ops read both as value
// scalars (graph inputs), so reseeding or advancing never recompiles a graph.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/GeneratorImpl.h>

namespace torch_pjrt::hooks {

class PjrtGenerator final : public c10::GeneratorImpl {
 public:
  explicit PjrtGenerator(c10::DeviceIndex device);

  void set_current_seed(uint64_t seed) override;
  uint64_t current_seed() const override { return seed_; }
  uint64_t seed() override;
  void set_offset(uint64_t offset) override { offset_ = offset; }
  uint64_t get_offset() const override { return offset_; }
  void set_state(const c10::TensorImpl& new_state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;
  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }

  // Returns the offset to use for a random op and advances past it.
  uint64_t Advance(uint64_t increment) {
    uint64_t o = offset_;
    offset_ += increment;
    return o;
  }

 private:
  PjrtGenerator* clone_impl() const override;
  uint64_t seed_;
  uint64_t offset_ = 0;
};

const at::Generator& DefaultGenerator(c10::DeviceIndex device);
// Seeds every default generator, including those created later (torch.manual_seed).
void SeedAllGenerators(uint64_t seed);

}  // namespace torch_pjrt::hooks
