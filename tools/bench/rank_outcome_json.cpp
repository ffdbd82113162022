#include "rank_outcome_json.hpp"

#include <nlohmann/json.hpp>

#include "switchyard/errors.hpp"

namespace switchyard::bench {
namespace {

using Json = nlohmann::json;

template <typename T>
Json optional_json(const std::optional<T>& value) {
  return value ? Json(static_cast<int>(*value)) : Json(nullptr);
}

template <typename T>
std::optional<T> optional_from(const Json& value) {
  if (value.is_null()) return std::nullopt;
  return static_cast<T>(value.get<int>());
}

}  // namespace

std::string encode_outcome(const RankOutcome& outcome) {
  Json out;
  out["dispatch_seconds"] = outcome.dispatch_seconds;
  out["combine_seconds"] = outcome.combine_seconds;
  out["dispatch_host_seconds"] = outcome.dispatch_host_seconds;
  out["combine_host_seconds"] = outcome.combine_host_seconds;
  out["difference_stage"] = static_cast<int>(outcome.difference.stage);
  out["difference"] = outcome.difference.what;
  out["dispatch_send"] = outcome.split_seconds.dispatch_send;
  out["dispatch_recv"] = outcome.split_seconds.dispatch_recv;
  out["combine_send"] = outcome.split_seconds.combine_send;
  out["combine_recv"] = outcome.split_seconds.combine_recv;
  out["graph_dispatch"] = outcome.graph_seconds.dispatch;
  out["graph_combine"] = outcome.graph_seconds.combine;
  out["hook_split_status"] = outcome.hook_split_status;
  out["graph_status"] = outcome.graph_status;
  out["note"] = outcome.note;
  out["symmetric_combine"] = optional_json(outcome.symmetric_combine);
  out["symmetric_dispatch"] = optional_json(outcome.symmetric_dispatch);
  out["checked_iterations"] = outcome.checked_iterations;
  out["input_sets"] = outcome.input_sets;
  out["cache_flush_bytes"] = outcome.cache_flush_bytes;
  out["start_holds"] = outcome.start_holds;
  out["start_holds_missed"] = outcome.start_holds_missed;
  return out.dump();
}

std::string encode_failure(std::exception_ptr failure) {
  Json out;
  try {
    std::rethrow_exception(failure);
  } catch (const InvalidArgument& error) {
    out["failure"] = {{"kind", "invalid_argument"}, {"message", error.what()}};
  } catch (const Unsupported& error) {
    out["failure"] = {{"kind", "unsupported"}, {"message", error.what()}};
  } catch (const UsageError& error) {
    out["failure"] = {{"kind", "usage"}, {"message", error.what()}};
  } catch (const std::exception& error) {
    out["failure"] = {{"kind", "error"}, {"message", error.what()}};
  } catch (...) {
    out["failure"] = {{"kind", "error"}, {"message", "an unknown exception"}};
  }
  return out.dump();
}

RankOutcome decode_outcome(const std::string& bytes) {
  const Json in = Json::parse(bytes);
  if (in.contains("failure")) {
    const std::string kind = in["failure"]["kind"].get<std::string>();
    const std::string message = in["failure"]["message"].get<std::string>();
    if (kind == "invalid_argument") throw InvalidArgument(message);
    if (kind == "unsupported") throw Unsupported(message);
    if (kind == "usage") throw UsageError(message);
    throw Error(message);
  }
  RankOutcome outcome;
  outcome.dispatch_seconds = in["dispatch_seconds"].get<std::vector<double>>();
  outcome.combine_seconds = in["combine_seconds"].get<std::vector<double>>();
  outcome.dispatch_host_seconds = in["dispatch_host_seconds"].get<std::vector<double>>();
  outcome.combine_host_seconds = in["combine_host_seconds"].get<std::vector<double>>();
  outcome.difference.stage = static_cast<Stage>(in["difference_stage"].get<int>());
  outcome.difference.what = in["difference"].get<std::string>();
  outcome.split_seconds.dispatch_send = in["dispatch_send"].get<std::vector<double>>();
  outcome.split_seconds.dispatch_recv = in["dispatch_recv"].get<std::vector<double>>();
  outcome.split_seconds.combine_send = in["combine_send"].get<std::vector<double>>();
  outcome.split_seconds.combine_recv = in["combine_recv"].get<std::vector<double>>();
  outcome.graph_seconds.dispatch = in["graph_dispatch"].get<std::vector<double>>();
  outcome.graph_seconds.combine = in["graph_combine"].get<std::vector<double>>();
  outcome.hook_split_status = in["hook_split_status"].get<std::string>();
  outcome.graph_status = in["graph_status"].get<std::string>();
  outcome.note = in["note"].get<std::string>();
  outcome.symmetric_combine = optional_from<SymmetricCombine>(in["symmetric_combine"]);
  outcome.symmetric_dispatch = optional_from<SymmetricDispatch>(in["symmetric_dispatch"]);
  outcome.checked_iterations = in["checked_iterations"].get<int>();
  outcome.input_sets = in["input_sets"].get<int>();
  outcome.cache_flush_bytes = in["cache_flush_bytes"].get<int64_t>();
  outcome.start_holds = in["start_holds"].get<int64_t>();
  outcome.start_holds_missed = in["start_holds_missed"].get<int64_t>();
  return outcome;
}

}  // namespace switchyard::bench
