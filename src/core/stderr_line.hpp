#pragma once
// One line to stderr in one write(2): ranks as processes share stderr, and a line written in pieces
// interleaves with a sibling's (glibc's fprintf to the unbuffered stream writes a long line in pieces:
// session 35's 8-process stamp lines were cut mid-number). For the engines' measurement lines (the normal
// phases and stamps, the symmetric stamps), which scripts parse.
#include <unistd.h>

#include <string>

namespace switchyard::detail {

inline void write_stderr_line(const std::string& line) {
  const std::string whole = line.empty() || line.back() != '\n' ? line + "\n" : line;
  size_t written = 0;
  while (written < whole.size()) {
    const ssize_t n = ::write(STDERR_FILENO, whole.data() + written, whole.size() - written);
    if (n <= 0) return;  // nowhere to report it: the line is lost, not the call
    written += static_cast<size_t>(n);
  }
}

}  // namespace switchyard::detail
