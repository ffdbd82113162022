#pragma once
// Which combine path (Config::symmetric_combine) and dispatch source (Config::symmetric_dispatch) the
// `symmetric` engine takes on a buffer: decided
// once at connect by each backend from what it knows then, so that every rank decides alike.
#include <string>

#include "switchyard/config.hpp"

namespace switchyard::detail {

// `pull_possible`: every rank of the buffer can read every peer's y through a plain pointer (threads of
// this process, on one device for CUDA). `heap_output`: the buffer has heap-resident expert outputs
// (BufferSizing::symmetric_heap_output_rows_per_expert), which every rank reaches: forcing pull is then
// accepted anywhere, and every combine must pass them (check_pull_reaches_y); auto still pushes there.
// `needs` says what pull needs on this backend, `found` what the buffer has; both go into the error when
// pull is forced where it cannot work (Unsupported, naming config.symmetric_combine). Returns push or
// pull, never automatic.
SymmetricCombine resolve_symmetric_combine(SymmetricCombine requested, bool pull_possible, bool heap_output,
                                           const std::string& needs, const std::string& found);

// The same for the dispatch: `zero_copy_possible` when every rank can read every peer's x through a
// plain pointer. Unsupported names config.symmetric_dispatch. Returns publish or zero_copy.
SymmetricDispatch resolve_symmetric_dispatch(SymmetricDispatch requested, bool zero_copy_possible,
                                             const std::string& needs, const std::string& found);

}  // namespace switchyard::detail
