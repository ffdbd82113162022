#include "engines.hpp"

#include "switchyard/errors.hpp"

namespace switchyard::bench {

EngineSupport engine_support(Engine engine, Backend /*backend*/) {
  switch (engine) {
    case Engine::normal:
      return {true, ""};
    case Engine::low_latency:
      return {false, "not implemented yet: switchyard has no low_latency dispatch/combine API"};
    case Engine::symmetric:
      return {false, "not implemented yet: switchyard has no symmetric dispatch/combine API"};
  }
  return {false, "unknown engine"};
}

std::unique_ptr<EngineSession> make_engine_session(Engine engine, const SessionContext& context) {
  switch (engine) {
    case Engine::normal:
      return make_normal_session(context);
    case Engine::low_latency:
    case Engine::symmetric:
      break;
  }
  throw Unsupported(std::string("switchyard-bench: engine ") + engine_name(engine) +
                    " is not implemented yet");
}

}  // namespace switchyard::bench
