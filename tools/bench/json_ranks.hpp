#pragma once
// Ranks that each answer with a JSON document: the tools that time ranks as threads or as forked
// processes (switchyard-moe-bench, switchyard-peer-probe) share this runner.
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "switchyard/group.hpp"

namespace switchyard::bench {

// Runs rank_main(group) (a JSON document's text) in `num_ranks` threads of this process or, with
// `as_processes`, in forked processes (forked_ranks.hpp; `wait_seconds` bounds a rank's waits for its peers),
// and returns every rank's answer in rank order. A rank that fails (an exception, or a forked rank that dies)
// makes this throw Error naming what it said.
std::vector<nlohmann::json> run_json_ranks(int num_ranks, bool as_processes, double wait_seconds,
                                           const std::function<std::string(Group&)>& rank_main);

}  // namespace switchyard::bench
