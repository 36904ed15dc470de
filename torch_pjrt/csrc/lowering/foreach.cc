// List ops (_foreach_*, what torch's optimizers, grad scaling and clipping call): one node per
// call, one result per list element, each element lowered by the single-tensor op's own
// lowering (LowerCtx::LowerElement). Without them torch decomposes each call into one op per
// tensor, each traced (and shape-inferred) separately: an Adam step on a 100-parameter model is
// ~1000 traced ops instead of ~10.
#include <stdexcept>
#include <string>

#include "lowering/helpers.h"

namespace torch_pjrt::lowering {

namespace {

LowerFn ElementLowering(const LowerCtx& c) {
  int index = FindLowering(c.entry()->foreach_of);
  if (index < 0) throw std::logic_error("no lowering for " + c.entry()->foreach_of);
  return Table()[index].fn;
}

// Every element with the element op's lowering, arguments position for position.
std::vector<Val> LowerForeach(LowerCtx& c) {
  LowerFn fn = ElementLowering(c);
  std::vector<Val> results;
  for (size_t k = 0; k < c.num_outputs(); ++k) results.push_back(c.LowerElement(k, fn)[0]);
  return results;
}

// _foreach_norm.Scalar(self[], ord=2, dtype=None): linalg_vector_norm(self, ord, dim=None,
// keepdim=False, dtype) per element.
std::vector<Val> LowerForeachNorm(LowerCtx& c) {
  LowerFn fn = ElementLowering(c);
  std::vector<Arg> args{c.arg(0), c.arg(1), Arg::None(), Arg::Bool(false), c.is_none(2) ? Arg::None() : c.arg(2)};
  std::vector<Val> results;
  for (size_t k = 0; k < c.num_outputs(); ++k) results.push_back(c.LowerElement(k, fn, &args)[0]);
  return results;
}

// _foreach_copy(self[], src[], non_blocking): each src converted to its self's dtype.
std::vector<Val> LowerCopyElement(LowerCtx& c) { return {Coerce(c.e, c.tensor(1), c.out())}; }

std::vector<Val> LowerForeachCopy(LowerCtx& c) {
  std::vector<Val> results;
  for (size_t k = 0; k < c.num_outputs(); ++k) results.push_back(c.LowerElement(k, LowerCopyElement)[0]);
  return results;
}

}  // namespace

void RegisterForeachOps(Registry& r) {
  auto foreach = [&](const std::string& schema, const std::string& element, LowerFn fn = LowerForeach) {
    if (!r.Has(element)) return static_cast<OpLowering*>(nullptr);  // torch's decomposition runs
    OpLowering& entry = r.Add("_foreach_" + schema, fn);
    entry.foreach_of = element;
    return &entry;
  };
  for (const char* unary : {"abs", "acos", "asin", "atan", "ceil", "cos", "cosh", "erf", "erfc", "exp", "expm1",
                            "floor", "frac", "lgamma", "log", "log10", "log1p", "log2", "neg", "reciprocal",
                            "round", "rsqrt", "sigmoid", "sign", "sin", "sinh", "sqrt", "tan", "tanh", "trunc",
                            "zero", "clone", "max"}) {
    foreach(unary, unary);
  }
  // Binary ops: a list, one Scalar, one value per element, or one tensor for every element.
  for (const char* op : {"add", "sub", "mul", "div"}) {
    for (const char* overload : {".List", ".Scalar", ".ScalarList", ".Tensor"}) {
      foreach(std::string(op) + overload, std::string(op) + ".Tensor");
    }
  }
  for (const char* op : {"clamp_max", "clamp_min", "maximum", "minimum"}) {
    for (const char* overload : {".List", ".Scalar", ".ScalarList"}) foreach(std::string(op) + overload, op);
  }
  for (const char* op : {"addcdiv", "addcmul"}) {
    foreach(std::string(op) + ".Scalar", op);
    foreach(std::string(op) + ".ScalarList", op);
  }
  foreach("lerp.List", "lerp.Tensor");
  foreach("lerp.Scalar", "lerp.Scalar");
  foreach("lerp.ScalarList", "lerp.Scalar");
  foreach("pow.List", "pow.Tensor_Tensor");
  foreach("pow.Scalar", "pow.Tensor_Tensor");  // the exponent is a value: no recompile when it changes
  foreach("pow.ScalarList", "pow.Tensor_Tensor");
  foreach("pow.ScalarAndTensor", "pow.Scalar");
  foreach("mm", "mm");
  // ord chooses the formula (like linalg_vector_norm's own ord): a constant.
  if (OpLowering* norm = foreach("norm.Scalar", "linalg_vector_norm", LowerForeachNorm)) norm->structural_scalars = {1};
  r.Add("_foreach_copy", LowerForeachCopy);
}

}  // namespace torch_pjrt::lowering
