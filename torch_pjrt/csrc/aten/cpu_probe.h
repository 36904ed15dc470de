#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <optional>
#include <string>

#include "aten/op_signature.h"

namespace torch_pjrt::aten {

// An error CPU eager raises, kept to be raised again (a fresh exception each time: torch adds
// context to the exceptions it passes through).
struct CpuRefusal {
  bool not_implemented;  // NotImplementedError; otherwise RuntimeError
  std::string message;
  [[noreturn]] void Raise() const;
};

// The error CPU eager raises for the dtypes of `args`, if any.
//
// Meta kernels check shapes but not which dtypes a backend implements: CPU eager raises
// NotImplementedError for `abs` of bool or `bitwise_and` of floats, and RuntimeError when an
// in-place or out= result cannot hold the result type, while the Meta kernel accepts both and a
// lowering would compute some value. So, once per memoized Meta result, the op runs on the CPU on
// small stand-ins (same dtypes, each dimension cut to at most 1, zeros), and a dtype refusal is
// kept and rethrown on every matching call. Only dtype refusals count: any other probe error may
// come from the stand-in shapes, so it is ignored. Ops that draw random numbers or whose probe
// would be large (sizes taken from integer arguments) are not probed.
std::optional<CpuRefusal> CpuDtypeRefusal(const OpSignature& sig, c10::ArrayRef<c10::IValue> args);

// The error CPU eager raises for how the tensors an in-place or out= call writes overlap the ones
// it reads (or themselves), if any. CPU kernels differ here (TensorIterator ops refuse partial
// overlap, mm does not; cumsum_ refuses writing into an expanded tensor, index_put_ does not), so
// when a written tensor overlaps itself or partly overlaps an input, the call runs on the CPU on
// zeros laid out like the pjrt storages (same sizes, strides, offsets and sharing) and an
// "unsupported operation" refusal is raised. Not memoized: aliasing is not in the Meta cache key.
// A written tensor passed again as an input (index_put_ of its own values) is refused by some ops
// (torch's assert_no_overlap) and accepted by others (x.add_(x)); that verdict is kept per op and
// argument. Cheap when nothing overlaps; storages beyond a size limit are not probed.
std::optional<CpuRefusal> CpuOverlapRefusal(const OpSignature& sig, c10::ArrayRef<c10::IValue> args);

// copy_'s overlap checks (TensorIterator's, which copy_ into a pjrt tensor does not reach): the
// destination must not overlap itself (an expanded tensor) nor partly overlap the source.
void CheckCopyOverlap(const at::Tensor& dst, const at::Tensor& src);

// torch's assert_no_overlap, which kernels outside the lowering table make themselves (the out=
// variants of masked_select and nonzero): `written` must not share an element with `input`.
void CheckNoOverlap(const at::Tensor& written, const at::Tensor& input);

// The error CPU eager raises when a Python number does not fit the dtype it is converted to
// (`int8_tensor.masked_fill(mask, 1000)`: "value cannot be converted to type int8_t without
// overflow"), if any. Only when a number lies outside an integer argument's range does the call run
// on the stand-ins (per call: numbers are values, not part of the Meta cache key).
std::optional<CpuRefusal> CpuScalarRangeRefusal(const OpSignature& sig, c10::ArrayRef<c10::IValue> args);

// The error CPU eager raises for a random op's numbers (uniform_'s from > to, random_'s from >= to,
// bernoulli_'s p outside [0, 1], multinomial's n_sample <= 0) or dtypes, if any: CPU's kernels
// check them before drawing, torch's Meta kernels do not. The op runs on the stand-ins with a
// generator of its own (the CPU's default generator does not advance). Calls that passed are
// remembered by op, dtypes and numbers, so dropout's constant p is probed once.
std::optional<CpuRefusal> CpuRandomArgRefusal(const OpSignature& sig, c10::ArrayRef<c10::IValue> args);

}  // namespace torch_pjrt::aten
