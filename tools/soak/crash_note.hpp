#pragma once
// A soak that crashes (a signal in the library or in a kernel's host side) still names its case:
// the case under way is kept in a static buffer, and a handler for SIGSEGV, SIGBUS, SIGFPE, SIGILL
// and SIGABRT writes it with its replay command to stderr before the signal ends the process.
#include <string>

namespace switchyard::soak {

// Installs the handlers (once, at start).
void install_crash_note();
// The case now running: its text, e.g. "case 0x... (...)\n  replay: switchyard-soak ...".
void set_crash_note(const std::string& text);

}  // namespace switchyard::soak
