// switchyard-soak: random round trips through the public API, every output compared bit for bit
// with the reference, memory measured before and after (README.md beside this file).
#include <iostream>

#include "crash_note.hpp"
#include "json_report.hpp"
#include "memory.hpp"
#include "options.hpp"
#include "soak_run.hpp"

int main(int argc, char** argv) {
  using namespace switchyard::soak;
  SoakOptions options;
  try {
    options = parse_options(argc, argv);
  } catch (const UsageError& error) {
    std::cerr << "error: " << error.what() << "\n";
    return 2;
  }
  if (options.help) {
    std::cout << usage();
    return 0;
  }
  return_large_blocks_on_free();
  install_crash_note();
  try {
    const SoakTotals totals = run_soak(options);
    if (!options.json_path.empty()) write_json(options.json_path, totals, options);
    if (options.self_test_corrupt && !totals.corruption_applied) {
      std::cerr << "--self-test-corrupt: no case had a combined output to corrupt\n";
    }
    std::cout << verdict_line(totals, options) << std::endl;
    return totals.pass(options) ? 0 : 1;
  } catch (const std::exception& error) {
    std::cerr << "error: " << error.what() << "\n";
    std::cout << "soak: error: " << error.what() << ": fail" << std::endl;
    return 1;
  }
}
