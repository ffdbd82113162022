#pragma once
// Which Buffer made a handle. A Buffer's address is no identity: a new Buffer may be allocated where
// a destroyed one was, and would then accept the old one's handles, which describe another heap
// layout. An id drawn from a process-wide counter is never reused.
#include <cstdint>

namespace switchyard::detail {

using BufferId = uint64_t;

// 0 is never returned: a default-constructed handle (owner 0) matches no Buffer.
constexpr BufferId kNoBuffer = 0;

BufferId next_buffer_id();

}  // namespace switchyard::detail
