#pragma once
// A fault for the smoke test to prove that every timed iteration is checked: with
// SWITCHYARD_BENCH_FORGET_TIMED_ITERATION=N, rank 0 poisons its outputs again right after timed
// iteration N (counting from 1), as if that timed call had written nothing. The check after that
// iteration must then fail the engine and name it. Unset (as always outside the test): no fault.
namespace switchyard::bench {

// N, or 0 when the variable is unset or not a positive integer.
int forgotten_timed_iteration();

}  // namespace switchyard::bench
