#pragma once
// A progress bar on stderr while the bench runs, when stderr is a terminal; nothing at all when it is
// not (a log or a pipe gets only the results on stdout). One line is redrawn in place:
//   [##########..........]  50%  normal: timed iteration 3/10
// The run is split into equal parts, one per engine (begin_part); within a part the runner reports
// how many of its steps are done.
#include <chrono>
#include <mutex>
#include <string>

namespace switchyard::bench {

class Progress {
 public:
  Progress();
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // Part `index` of `count` begins (an engine of those asked for).
  void begin_part(int index, int count);
  // What is happening now, without moving the bar.
  void update(const std::string& text);
  // ... and `done` of the current part's `total` steps are finished.
  void update(const std::string& text, int done, int total);
  // Clears the line, so that what follows on stdout starts clean.
  void clear();

  bool is_terminal() const { return is_terminal_; }

 private:
  void draw(const std::string& text);

  bool is_terminal_;
  std::mutex mutex_;
  int part_ = 0, parts_ = 1;
  double fraction_ = 0;  // of the whole run
  size_t line_length_ = 0;
  std::chrono::steady_clock::time_point last_draw_;
};

}  // namespace switchyard::bench
