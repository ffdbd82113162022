#pragma once
// The one engine interface: an engine is a unit with a dispatch and a combine that take core's
// validated plan (core/engine_plans.hpp). Each backend constructs its engines and registers them in
// its EngineTable (its constructor is the one registration point); core's Buffer calls the engine of
// the table, never a backend entry point per call. docs/ARCHITECTURE.md, "Adding an engine".
#include "common/symmetric_home_rows.hpp"
#include "core/engine_plans.hpp"
#include "switchyard/buffer.hpp"

namespace switchyard::detail {

// One engine on one backend. Calls come from the rank's own thread, one at a time (core serialises a
// Buffer's calls); an engine throws the library's errors (switchyard/errors.hpp) and core decides what
// a failure does to the Buffer.
template <class DispatchPlanT, class DispatchResultT, class CombinePlanT, class CombineResultT>
class EngineUnit {
 public:
  using DispatchPlanType = DispatchPlanT;
  using CombinePlanType = CombinePlanT;

  virtual ~EngineUnit() = default;
  virtual DispatchResultT dispatch(const DispatchPlanT& plan) = 0;
  virtual CombineResultT combine(const CombinePlanT& plan) = 0;
};

// `normal`: the pipelined rank-major engine (DeepEP's normal mode). On one node the `normal` engine,
// across nodes the hierarchical one: a backend registers whichever its topology needs.
using NormalUnit = EngineUnit<DispatchPlan, DispatchResult, CombinePlan, CombineResult>;

// `low_latency`: expert-major, direct puts; a call may return a hook that runs its receive half.
using LowLatencyUnit = EngineUnit<LowLatencyDispatchPlan, LowLatencyDispatchResult, LowLatencyCombinePlan,
                                  LowLatencyCombineResult>;

// `symmetric`: expert-major over the symmetric heap, pull dispatch, push or pull combine.
class SymmetricUnit : public EngineUnit<SymmetricDispatchPlan, LowLatencyDispatchResult, SymmetricCombinePlan,
                                        LowLatencyCombineResult> {
 public:
  // The combine's path on this buffer, push or pull (Config::symmetric_combine, resolved at connect;
  // push before).
  virtual SymmetricCombine combine_path() const = 0;
  // Where the dispatch pulls bf16 rows from, publish or zero_copy (Config::symmetric_dispatch, resolved
  // at connect; publish before).
  virtual SymmetricDispatch dispatch_path() const = 0;
  // Where the expert outputs of the dispatch behind `plan` go home for the combine `plan` describes, the
  // next symmetric call (common/symmetric_home_rows.hpp): for an expert phase that writes them there
  // itself, before that combine runs with plan.rows_at_home. The tables it points at are the handle's.
  virtual common::SymmetricHomeRows home_rows(const SymmetricCombinePlan& plan) = 0;
};

// A backend's engines, one slot per Engine (switchyard/buffer.hpp). Not owning: the backend owns its
// engines and outlives every call. A slot a backend leaves empty makes core refuse that engine's calls
// with Unsupported, naming the engine and the backend.
struct EngineTable {
  NormalUnit* normal = nullptr;
  LowLatencyUnit* low_latency = nullptr;
  SymmetricUnit* symmetric = nullptr;
};

}  // namespace switchyard::detail
