# Runs switchyard-soak with --self-test-corrupt (one output bit flipped after the engine wrote it)
# and passes only if the run fails for that mismatch: exit status 1, a verdict of exactly one
# mismatch and no errors, and the mismatch printed with the command that replays its case.
#   cmake -DSOAK=<path to switchyard-soak> -P expect_caught.cmake
execute_process(
  COMMAND ${SOAK} --backend cpu --round-trips 40 --seed 7 --self-test-corrupt
  RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${err}${out}")
if(NOT status EQUAL 1)
  message(FATAL_ERROR "expected exit status 1 (a failed run), got '${status}'")
endif()
if(NOT out MATCHES "soak: [0-9]+ round trips, 1 mismatches, 0 errors, [^\n]*: fail")
  message(FATAL_ERROR "expected a verdict of one mismatch and no errors, got: ${out}")
endif()
if(NOT err MATCHES "replay: switchyard-soak --backend cpu --replay 0x[0-9a-f]+")
  message(FATAL_ERROR "expected the mismatch printed with its replay command")
endif()
