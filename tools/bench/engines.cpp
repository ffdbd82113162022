#include "engines.hpp"

#include "switchyard/errors.hpp"

namespace switchyard::bench {

EngineSupport engine_support(Engine engine, Backend /*backend*/) {
  switch (engine) {
    case Engine::normal:
      return {true, ""};
    // On cuda the library throws Unsupported for now: the runner reports the engine as skipped with
    // the library's reason under --engine all, and main exits 2 with it when it was named.
    case Engine::low_latency:
      return {true, ""};
    // Like low_latency: on cuda the library throws Unsupported for now.
    case Engine::symmetric:
      return {true, ""};
  }
  return {false, "unknown engine"};
}

std::unique_ptr<EngineSession> make_engine_session(Engine engine, const SessionContext& context) {
  switch (engine) {
    case Engine::normal:
      return make_normal_session(context);
    case Engine::low_latency:
      return make_low_latency_session(context);
    case Engine::symmetric:
      return make_symmetric_session(context);
  }
  throw Unsupported(std::string("switchyard-bench: engine ") + engine_name(engine) +
                    " is not implemented yet");
}

}  // namespace switchyard::bench
