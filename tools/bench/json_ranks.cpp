#include "json_ranks.hpp"

#include <exception>
#include <string>

#include "forked_ranks.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::bench {

std::vector<nlohmann::json> run_json_ranks(int num_ranks, bool as_processes, double wait_seconds,
                                           const std::function<std::string(Group&)>& rank_main) {
  std::vector<std::string> answers(static_cast<size_t>(num_ranks));
  if (as_processes) {
    answers =
        run_forked_ranks(num_ranks, wait_seconds, rank_main, [](std::exception_ptr failure) -> std::string {
          try {
            std::rethrow_exception(failure);
          } catch (const std::exception& error) {
            return nlohmann::json{{"error", error.what()}}.dump();
          }
        });
  } else {
    // A thread's exception reaches the caller through run_ranks itself.
    run_ranks(num_ranks,
              [&](Group& group) { answers[static_cast<size_t>(group.rank())] = rank_main(group); });
  }
  std::vector<nlohmann::json> ranks;
  for (const std::string& answer : answers) {
    ranks.push_back(nlohmann::json::parse(answer));
    if (ranks.back().contains("error"))
      throw Error("a rank failed: " + ranks.back()["error"].get<std::string>());
  }
  return ranks;
}

}  // namespace switchyard::bench
