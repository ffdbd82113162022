#include "crash_note.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace switchyard::soak {

namespace {

// Written before each case, read only by the handler (which may use nothing but write()).
char note[4096];
size_t note_length = 0;

void write_text(const char* text, size_t length) {
  while (length > 0) {
    const ssize_t written = write(STDERR_FILENO, text, length);
    if (written <= 0) return;
    text += written;
    length -= static_cast<size_t>(written);
  }
}

void on_crash(int signal_number) {
  static const char kHeader[] = "\nsoak: crashed (signal) in ";
  write_text(kHeader, sizeof(kHeader) - 1);
  write_text(note, note_length);
  write_text("\n", 1);
  // The default action ends the process as the signal would have (a core, the status).
  ::signal(signal_number, SIG_DFL);
  ::raise(signal_number);
}

}  // namespace

void install_crash_note() {
  for (int signal_number : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) ::signal(signal_number, on_crash);
}

void set_crash_note(const std::string& text) {
  note_length = std::min(text.size(), sizeof(note));
  std::memcpy(note, text.data(), note_length);
}

}  // namespace switchyard::soak
