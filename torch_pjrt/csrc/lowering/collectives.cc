// Collectives inside a graph, for plugins that run them across processes (design: "Distributed").
// Each op names the job-wide device ids of its process group in group-rank order: the program
// becomes one replica per group member (Emitter::SetReplicaDevices), and the collective's single
// replica group holds them all. The ATen-level callers (distributed/graph_collectives.cc) flatten
// tensors to 1-d and do AVG's division and PREMUL_SUM's scaling themselves.
//
//   pjrt::all_reduce(Tensor x, str op, int[] devices)       op: sum product min max
//   pjrt::all_gather(Tensor x, int[] devices)                concatenated along dim 0
//   pjrt::reduce_scatter(Tensor x, str op, int[] devices)    replica r keeps block r of dim 0
//   pjrt::broadcast(Tensor x, int root, int[] devices)      replica `root`'s x, bit for bit
#include <functional>
#include <stdexcept>

#include "lowering/algebra.h"
#include "lowering/helpers.h"

namespace torch_pjrt::lowering {

namespace {

// The StableHLO combiner of a c10d reduction name. Compilers' collectives combine with add,
// multiply, minimum and maximum only (XLA:CPU rejects `or`; NCCL has no bitwise reductions), so
// the bitwise ops stay on the host path (graph_collectives.cc) and bools combine as bytes.
std::string_view CombinerOp(const std::string& op) {
  if (op == "sum") return "add";
  if (op == "product") return "multiply";
  if (op == "min") return "minimum";
  if (op == "max") return "maximum";
  throw std::invalid_argument("pjrt: reduction '" + op + "' cannot run as a graph collective");
}

// A reducing collective (`run`: all-reduce or reduce-scatter with a combiner) of reduction `op`
// on `x` of any dtype. Bools travel as bytes: sum and max are a logical or, product and min a
// logical and, as gloo's are. Complex numbers reduce their real and imaginary parts (SUM only).
Val ReduceAnyDtype(Emitter& e, const Val& x, const std::string& op, const char* collective,
                   const std::function<Val(const Val&, std::string_view)>& run) {
  if (x.dtype() == ElementType::kBool) {
    std::string_view combiner = (op == "sum" || op == "max") ? "maximum" : "minimum";
    return e.Convert(run(e.Convert(x, ElementType::kU8), combiner), ElementType::kBool);
  }
  if (IsComplex(x.dtype())) {
    if (op != "sum") {
      throw std::invalid_argument(std::string("pjrt: ") + collective + " of complex tensors supports SUM and AVG only");
    }
    return MakeComplex(e, run(RealPart(e, x), "add"), run(ImagPart(e, x), "add"));
  }
  return run(x, CombinerOp(op));
}

std::vector<Val> LowerAllReduce(LowerCtx& c) {
  c.e.SetReplicaDevices(c.int_list(2));
  return {ReduceAnyDtype(c.e, c.tensor(0), c.string_arg(1), "all_reduce",
                         [&c](const Val& v, std::string_view op) { return c.e.AllReduce(v, op); })};
}

std::vector<Val> LowerAllGather(LowerCtx& c) {
  c.e.SetReplicaDevices(c.int_list(1));
  return {c.e.AllGather(c.tensor(0), 0)};
}

std::vector<Val> LowerReduceScatter(LowerCtx& c) {
  c.e.SetReplicaDevices(c.int_list(2));
  return {ReduceAnyDtype(c.e, c.tensor(0), c.string_arg(1), "reduce_scatter",
                         [&c](const Val& v, std::string_view op) { return c.e.ReduceScatter(v, 0, op); })};
}

// The unsigned integer type as wide as `t` (bools travel as bytes).
ElementType BitsType(ElementType t) {
  switch (t == ElementType::kBool ? 1 : ItemSize(t)) {
    case 1: return ElementType::kU8;
    case 2: return ElementType::kU16;
    case 4: return ElementType::kU32;
    default: return ElementType::kU64;
  }
}

// Every replica but the source contributes zero bits, so an integer sum delivers the source's
// exact bits (-0.0 and NaN payloads included), for every dtype. The source is chosen by the
// program's replica id, so every rank runs the same program.
Val BroadcastBits(Emitter& e, const Val& x, const Val& is_source) {
  if (IsComplex(x.dtype())) {
    return MakeComplex(e, BroadcastBits(e, RealPart(e, x), is_source), BroadcastBits(e, ImagPart(e, x), is_source));
  }
  ElementType bits_type = BitsType(x.dtype());
  TensorType bits{bits_type, x.dims()};
  Val bits_of_x = x.dtype() == ElementType::kBool ? e.Convert(x, bits_type) : e.BitcastConvert(x, bits);
  Val mine = e.Select(e.BroadcastTo(is_source, x.dims()), bits_of_x, e.Full(0, bits));
  Val result = e.AllReduce(mine, "add");
  return x.dtype() == ElementType::kBool ? e.Convert(result, ElementType::kBool) : e.BitcastConvert(result, x.type);
}

std::vector<Val> LowerBroadcast(LowerCtx& c) {
  c.e.SetReplicaDevices(c.int_list(2));
  Val replica = c.e.Raw("stablehlo.replica_id", "tensor<ui32>", TensorType{ElementType::kU32, {}});
  Val is_source = c.e.Compare("EQ", replica, c.e.Scalar(static_cast<double>(c.int_arg(1)), ElementType::kU32));
  return {BroadcastBits(c.e, c.tensor(0), is_source)};
}

}  // namespace

void RegisterCollectiveOps(Registry& r) {
  r.Add("pjrt::all_reduce", LowerAllReduce);
  r.Add("pjrt::all_gather", LowerAllGather);
  r.Add("pjrt::reduce_scatter", LowerReduceScatter);
  r.Add("pjrt::broadcast", LowerBroadcast);
}

}  // namespace torch_pjrt::lowering
