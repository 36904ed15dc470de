// Float32 math that XLA:CPU would compute with a call into libm per element, computed instead in
// float64 arithmetic that it vectorizes (TargetOptions::fast_transcendentals false): atan2 and
// the inverse trigonometric functions, pow, and fmod (exact). Each takes and returns float32 values; the result
// is the float64 value rounded once, within about half an ulp of the exact one. Special values
// (NaN, infinities, signed zeros) follow C99, as CPU eager's kernels do; subnormal arguments read
// as zeros of their sign, as the device's arithmetic reads them.
#pragma once

#include <functional>

#include "lowering/emitter.h"

namespace torch_pjrt::lowering::float_math {

// Whether `x` (an operand of the op to compute) takes these forms: float32, at least
// kMinElements elements, on a compiler without fast transcendentals. Smaller tensors keep the
// compiler's op, whose scalar calls cost less than the longer program there.
constexpr int64_t kMinElements = 1024;
bool Applies(const Emitter& e, const Val& x);

// `computed(e)` where no element of the boolean `beyond` is set, else `by_compiler(e)` (the
// compiler's own op) for the whole tensor: the branches of a stablehlo.if, for arguments the
// arithmetic forms do not cover. The compiler's branch ends in an optimization barrier: without
// it XLA's conditional simplifier turned an if of two elementwise branches into a select of
// both, which ran the scalar calls on every element again.
Val ComputedUnlessAny(Emitter& e, const Val& beyond, const std::function<Val(Emitter&)>& by_compiler,
                      const std::function<Val(Emitter&)>& computed);

Val Atan2(Emitter& e, const Val& y, const Val& x);
Val Atan(Emitter& e, const Val& x);
Val Asin(Emitter& e, const Val& x);
Val Acos(Emitter& e, const Val& x);
Val Pow(Emitter& e, const Val& x, const Val& y);
// C's fmod (stablehlo.remainder), exact: the sign of a, NaN for b = 0 or infinite a, a for
// infinite b. A tensor holding a quotient of 2^26 or more takes the compiler's op (a
// stablehlo.if over the whole tensor).
Val Fmod(Emitter& e, const Val& a, const Val& b);

}  // namespace torch_pjrt::lowering::float_math
