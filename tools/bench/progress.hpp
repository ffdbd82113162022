#pragma once
// Progress on stderr for long runs. On a terminal one line is rewritten in place (with \r); in a log
// a line is written when the stage changes and then at most every few seconds.
#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>

namespace switchyard::bench {

class Progress {
 public:
  Progress();
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // `stage` groups updates ("normal: timing"); `text` is the whole line ("normal: warmup 1/1, iter 3/5").
  void update(const std::string& stage, const std::string& text);
  // Clears the terminal line, so that what follows on stdout starts clean.
  void clear();

 private:
  bool is_terminal_;
  std::mutex mutex_;
  std::string last_stage_;
  size_t line_length_ = 0;
  std::chrono::steady_clock::time_point last_print_;
};

}  // namespace switchyard::bench
