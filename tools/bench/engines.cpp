#include "engines.hpp"

#include <stdexcept>
#include <string>

namespace switchyard::bench {

EngineSupport engine_support(BenchEngine engine, const BenchOptions& options) {
  switch (engine) {
    case BenchEngine::normal:
      return {true, ""};
    // Both backends. A shape the library refuses with Unsupported is reported as skipped with the
    // library's reason under --engine all (the runner), and main exits 2 with it when it was named.
    case BenchEngine::low_latency:
    case BenchEngine::symmetric:
      return {true, ""};
    case BenchEngine::nccl: {
      std::string why = nccl_unavailable_reason(options);
      return {why.empty(), why};
    }
  }
  return {false, "unknown engine"};
}

bool uses_switchyard_buffer(BenchEngine engine) {
  return engine != BenchEngine::nccl;
}

std::unique_ptr<EngineSession> make_engine_session(BenchEngine engine, const SessionContext& context) {
  switch (engine) {
    case BenchEngine::normal:
      return make_normal_session(context);
    case BenchEngine::low_latency:
      return make_low_latency_session(context);
    case BenchEngine::symmetric:
      return make_symmetric_session(context);
    case BenchEngine::nccl:
      return make_nccl_session(context);
  }
  // NOTES: unreachable with a valid enum value (the switch names every engine).
  throw std::logic_error("switchyard-bench: no session for engine value " +
                         std::to_string(static_cast<int>(engine)));
}

}  // namespace switchyard::bench
