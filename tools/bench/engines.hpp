#pragma once
// The engines switchyard-bench knows, which of them exist for a backend, and their sessions.
#include <memory>
#include <string>

#include "engine_session.hpp"

namespace switchyard::bench {

struct EngineSupport {
  bool implemented = false;
  std::string reason;  // why not, when not implemented
};

EngineSupport engine_support(Engine engine, Backend backend);

// Only for an implemented engine.
std::unique_ptr<EngineSession> make_engine_session(Engine engine, const SessionContext& context);
std::unique_ptr<EngineSession> make_normal_session(const SessionContext& context);
std::unique_ptr<EngineSession> make_low_latency_session(const SessionContext& context);
// Same inputs, outputs and reference as low_latency (--ll-tokens).
std::unique_ptr<EngineSession> make_symmetric_session(const SessionContext& context);

// --dump: what the reference says every rank should get from `normal`, under DIR/reference/.
void dump_normal_reference(DumpDirectory& dump, const Problem& problem);
// --dump: the same for `low_latency`, under DIR/reference_low_latency/.
void dump_low_latency_reference(DumpDirectory& dump, const Problem& problem);

}  // namespace switchyard::bench
