#pragma once
// The engines switchyard-bench knows, which of them can run with the chosen options, and their
// sessions.
#include <memory>
#include <string>

#include "engine_session.hpp"

namespace switchyard::bench {

struct EngineSupport {
  bool runs_here = false;  // with these options: backend, build, ranks and devices
  std::string reason;      // why not, when it does not
};

// Whether `engine` can run with these options (backend, build, rank-to-device map), and why not.
EngineSupport engine_support(BenchEngine engine, const BenchOptions& options);

// Engines on a switchyard Buffer (all but nccl): the runner makes one per rank for them.
bool uses_switchyard_buffer(BenchEngine engine);

// Only for an engine that runs here (engine_support).
std::unique_ptr<EngineSession> make_engine_session(BenchEngine engine, const SessionContext& context);
std::unique_ptr<EngineSession> make_normal_session(const SessionContext& context);
std::unique_ptr<EngineSession> make_low_latency_session(const SessionContext& context);
// Same inputs, outputs and reference as low_latency (--ll-tokens).
std::unique_ptr<EngineSession> make_symmetric_session(const SessionContext& context);
// The NCCL baseline: normal's inputs, reference and checks (nccl_session.cpp).
std::unique_ptr<EngineSession> make_nccl_session(const SessionContext& context);

// nccl: why it cannot run with these options (empty when it can): the backend, the build, or ranks
// sharing a GPU (nccl_session.cpp).
std::string nccl_unavailable_reason(const BenchOptions& options);
// nccl: what NCCL reads from the environment, set once before any rank thread starts.
void prepare_nccl_environment();

// --dump: what the reference says every rank should get from `normal` (and nccl), under
// DIR/reference/.
void dump_normal_reference(DumpDirectory& dump, const Problem& problem);
// --dump: the same for an expert-major engine's reference `ll`, under DIR/<group>/
// (reference_low_latency; reference_symmetric when the symmetric engine ran another shape).
void dump_low_latency_reference(DumpDirectory& dump, const LowLatencyReference& ll, const std::string& group);

}  // namespace switchyard::bench
