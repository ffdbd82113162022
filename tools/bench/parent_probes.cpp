#include "parent_probes.hpp"

#include <nlohmann/json.hpp>

#include "cache_flush.hpp"
#include "devices.hpp"
#include "forked_ranks.hpp"

namespace switchyard::bench {
namespace {

// The parent must keep CUDA untouched: the ranks will be forked processes on cuda.
bool forks_cuda_ranks(const BenchOptions& options) {
  return options.backend == Backend::cuda && options.ranks_as == RanksAs::processes;
}

nlohmann::json to_json(const CopyBandwidth& copy) {
  nlohmann::json out = {
      {"bytes_per_second", copy.bytes_per_second}, {"devices", copy.devices}, {"method", copy.method}};
  if (copy.peer) {
    out["peer"] = {{"pair", copy.peer->pair_bytes_per_second},
                   {"all_pairs", copy.peer->all_pairs_bytes_per_second},
                   {"devices", copy.peer->devices},
                   {"method", copy.peer->method}};
  }
  return out;
}

CopyBandwidth copy_from_json(const nlohmann::json& in) {
  CopyBandwidth copy;
  copy.bytes_per_second = in["bytes_per_second"].get<double>();
  copy.devices = in["devices"].get<int>();
  copy.method = in["method"].get<std::string>();
  if (in.contains("peer")) {
    PeerCopyBandwidth peer;
    peer.pair_bytes_per_second = in["peer"]["pair"].get<double>();
    peer.all_pairs_bytes_per_second = in["peer"]["all_pairs"].get<double>();
    peer.devices = in["peer"]["devices"].get<int>();
    peer.method = in["peer"]["method"].get<std::string>();
    copy.peer = peer;
  }
  return copy;
}

}  // namespace

CudaPresence probe_cuda() {
#if defined(SWITCHYARD_WITH_CUDA)
  const nlohmann::json answer = nlohmann::json::parse(run_in_forked_child([] {
    const bool available = cuda_available();
    return nlohmann::json{{"available", available}, {"devices", available ? visible_cuda_devices() : 0}}
        .dump();
  }));
  return {answer["available"].get<bool>(), answer["devices"].get<int>()};
#else
  return {false, 0};
#endif
}

CopyBandwidth copy_bandwidth_for(const BenchOptions& options) {
  if (!forks_cuda_ranks(options)) return measure_copy_bandwidth(options);
  return copy_from_json(nlohmann::json::parse(
      run_in_forked_child([&] { return to_json(measure_copy_bandwidth(options)).dump(); })));
}

std::string cache_flush_rule_for(const BenchOptions& options) {
  if (!options.cache_flush)
    return "not evicted (--cache-flush off): each call finds what the previous one left";
  if (!forks_cuda_ranks(options)) return cache_flush_rule(options.backend);
  return run_in_forked_child([&] { return cache_flush_rule(options.backend); });
}

}  // namespace switchyard::bench
