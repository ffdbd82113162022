#pragma once
// Whether an error message names a rank: "rank 3", or one of a list "rank(s) 1, 3" (the library's
// timeout messages use both forms).
#include <cctype>
#include <string>

namespace switchyard::testing {

inline bool message_names_rank(const std::string& message, int rank) {
  for (const std::string prefix : {"rank ", "rank(s) "}) {
    for (size_t at = message.find(prefix); at != std::string::npos; at = message.find(prefix, at + 1)) {
      // The number right after the prefix, then any more of a ", "-separated list.
      size_t next = at + prefix.size();
      while (next < message.size() && std::isdigit(static_cast<unsigned char>(message[next]))) {
        size_t end = next;
        while (end < message.size() && std::isdigit(static_cast<unsigned char>(message[end]))) ++end;
        if (std::stoi(message.substr(next, end - next)) == rank) return true;
        if (message.compare(end, 2, ", ") != 0) break;
        next = end + 2;
      }
    }
  }
  return false;
}

}  // namespace switchyard::testing
