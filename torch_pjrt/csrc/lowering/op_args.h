// The arguments of a traced op, as the lowering functions see them: one Arg per schema argument,
// in schema order. Tensors refer to the node's inputs; lists live in a per-node pool of int64s.
// This is the contract between the graph (which records ops) and the lowerings (which emit them).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "common/dtype.h"
#include "common/small_vec.h"

namespace torch_pjrt::lowering {

// What a check made when the graph runs asks of the values it reads (docs/design.md, "Index
// bounds"; pjrt::index_checks packs one rule per check). NaN fails every floating rule.
enum class CheckRule : int64_t {
  kRange = 0,             // integers in [lo, hi) (indices, class targets, counts)
  kUnitInterval = 1,      // in [0, 1] (binary_cross_entropy's inputs, bernoulli's p)
  kNonzero = 2,           // not zero (an integer division's divisor)
  kNonNegative = 3,       // >= 0 (normal's std)
  kFiniteNonNegative = 4, // finite and >= 0 (multinomial's probabilities)
  kPositiveRowSums = 5,   // every row (the last dimension) sums to more than 0 (multinomial's)
  kCountAtMost = 6,       // at most `hi` values are nonzero (masked_scatter's mask: source's length)
  kFinite = 7,            // neither infinite nor NaN (histc's input when its range comes from the data)
};

enum class ArgKind : uint8_t {
  kNone,        // None, or an absent optional
  kTensor,      // payload: input index
  kTensorList,  // pool[start, start+len): input index, or -1 for a None element
  kInt,
  kDouble,
  kBool,
  kString,      // payload: interned string id
  kIntList,     // pool[start, start+len)
  kDoubleList,  // pool holds the bit patterns
  kScalarType,  // payload: ElementType
  kComplex,     // pool[start], pool[start+1]: bit patterns of real and imaginary parts
  kValueList,   // Scalar[]: pool[start, start+len) are inputs, 0-d value scalars (Python numbers)
};

struct Arg {
  ArgKind kind = ArgKind::kNone;
  uint32_t start = 0;
  uint32_t len = 0;
  int64_t payload = 0;

  static Arg None() { return Arg{}; }
  static Arg Int(int64_t v) { return Arg{ArgKind::kInt, 0, 0, v}; }
  static Arg Bool(bool v) { return Arg{ArgKind::kBool, 0, 0, v ? 1 : 0}; }
  static Arg Double(double v) {
    int64_t bits;
    std::memcpy(&bits, &v, sizeof(bits));
    return Arg{ArgKind::kDouble, 0, 0, bits};
  }
  static Arg Tensor(int input) { return Arg{ArgKind::kTensor, 0, 0, input}; }
  static Arg Type(ElementType t) { return Arg{ArgKind::kScalarType, 0, 0, static_cast<int64_t>(t)}; }

  double as_double() const {
    if (kind == ArgKind::kInt || kind == ArgKind::kBool) return static_cast<double>(payload);
    double v;
    std::memcpy(&v, &payload, sizeof(v));
    return v;
  }
  bool operator==(const Arg& o) const {
    return kind == o.kind && start == o.start && len == o.len && payload == o.payload;
  }
};

using ArgList = SmallVec<Arg, 8>;
using ArgPool = SmallVec<int64_t, 8>;

// Interned strings (rounding modes, gelu approximations, reduction names): a node stores only the
// id, so hashing and copying stay cheap.
int64_t InternString(std::string_view s);
const std::string& InternedString(int64_t id);

}  // namespace torch_pjrt::lowering
