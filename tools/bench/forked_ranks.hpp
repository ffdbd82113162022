#pragma once
// Ranks as processes (--ranks-as processes): one forked process per rank, as users deploy (one process
// per GPU, or several under MPS on one GPU). The parent forks before it has touched CUDA, since a
// CUDA context does not survive a fork; each child runs its rank, hands back its outcome as bytes
// through a pipe, and exits without running the parent's destructors.
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "switchyard/group.hpp"

namespace switchyard::bench {

// Runs rank_main(group) in `num_ranks` forked processes and returns what each returned, in rank
// order. A rank that throws marks the group failed (its peers' collectives throw rather than wait)
// and returns describe_failure(the exception) instead; a rank that dies (a signal, an exit without an
// answer) fails the group likewise, and its entry is describe_failure of an Error saying how it died.
// `wait_seconds` bounds every wait of a rank for its peers.
std::vector<std::string> run_forked_ranks(
    int num_ranks, double wait_seconds, const std::function<std::string(Group&)>& rank_main,
    const std::function<std::string(std::exception_ptr)>& describe_failure);

// Runs `work` in one forked process and returns what it returned: for what must touch CUDA while
// the parent must not (the device count, the copy bandwidth) before ranks are forked. Rethrows as
// Error what the child threw or how it died.
std::string run_in_forked_child(const std::function<std::string()>& work);

}  // namespace switchyard::bench
