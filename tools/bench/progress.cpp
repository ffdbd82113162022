#include "progress.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace switchyard::bench {
namespace {

// NOTES: a terminal is redrawn at most this often: more only costs the run time.
constexpr auto kRedrawInterval = std::chrono::milliseconds(100);
constexpr int kBarWidth = 20;

}  // namespace

Progress::Progress() : is_terminal_(isatty(STDERR_FILENO) == 1) {}

Progress::~Progress() {
  clear();
}

void Progress::begin_part(int index, int count) {
  std::lock_guard<std::mutex> lock(mutex_);
  part_ = index;
  parts_ = std::max(count, 1);
  fraction_ = static_cast<double>(part_) / parts_;
}

void Progress::update(const std::string& text) {
  std::lock_guard<std::mutex> lock(mutex_);
  draw(text);
}

void Progress::update(const std::string& text, int done, int total) {
  std::lock_guard<std::mutex> lock(mutex_);
  const double within = total > 0 ? std::clamp(static_cast<double>(done) / total, 0.0, 1.0) : 0.0;
  fraction_ = (part_ + within) / parts_;
  draw(text);
}

void Progress::draw(const std::string& text) {
  if (!is_terminal_) return;
  const auto now = std::chrono::steady_clock::now();
  if (line_length_ > 0 && now - last_draw_ < kRedrawInterval) return;
  last_draw_ = now;
  const int filled = static_cast<int>(fraction_ * kBarWidth + 0.5);
  char percent[8];
  std::snprintf(percent, sizeof(percent), "%3d%%", static_cast<int>(fraction_ * 100 + 0.5));
  const std::string line = "[" + std::string(static_cast<size_t>(filled), '#') +
                           std::string(static_cast<size_t>(kBarWidth - filled), '.') + "] " + percent + "  " +
                           text;
  std::string drawn = "\r" + line;
  if (line.size() < line_length_) drawn += std::string(line_length_ - line.size(), ' ');
  line_length_ = line.size();
  std::fputs(drawn.c_str(), stderr);
  std::fflush(stderr);
}

void Progress::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (is_terminal_ && line_length_ > 0) {
    std::fprintf(stderr, "\r%s\r", std::string(line_length_, ' ').c_str());
    std::fflush(stderr);
  }
  line_length_ = 0;
}

}  // namespace switchyard::bench
