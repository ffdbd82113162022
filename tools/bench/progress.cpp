#include "progress.hpp"

#include <unistd.h>

namespace switchyard::bench {
namespace {

// NOTES: a terminal is redrawn at most this often; a log gets a line at most this often per stage.
constexpr auto kTerminalInterval = std::chrono::milliseconds(100);
constexpr auto kLogInterval = std::chrono::seconds(5);

}  // namespace

Progress::Progress() : is_terminal_(isatty(STDERR_FILENO) == 1) {}

Progress::~Progress() {
  clear();
}

void Progress::update(const std::string& stage, const std::string& text) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto now = std::chrono::steady_clock::now();
  bool new_stage = stage != last_stage_;
  auto interval = is_terminal_ ? std::chrono::steady_clock::duration(kTerminalInterval)
                               : std::chrono::steady_clock::duration(kLogInterval);
  if (!new_stage && now - last_print_ < interval) return;
  last_stage_ = stage;
  last_print_ = now;
  if (is_terminal_) {
    std::string line = "\r" + text;
    if (text.size() < line_length_) line += std::string(line_length_ - text.size(), ' ');
    line_length_ = text.size();
    std::fputs(line.c_str(), stderr);
  } else {
    std::fprintf(stderr, "%s\n", text.c_str());
  }
  std::fflush(stderr);
}

void Progress::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (is_terminal_ && line_length_ > 0) {
    std::fprintf(stderr, "\r%s\r", std::string(line_length_, ' ').c_str());
    std::fflush(stderr);
  }
  line_length_ = 0;
  last_stage_.clear();
}

}  // namespace switchyard::bench
