#pragma once
// What a rank of the CUDA low_latency engine checks in the mode tests that the one-node and the
// across-nodes suites both run: back-to-back calls on both halves, and CUDA graph replays with new
// routing. Mismatches with the reference go to `failures`, each naming the rank.
#include <cuda_runtime.h>

#include <functional>
#include <vector>

#include "support/expert_major_cases.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/group.hpp"

namespace switchyard::testing::expert_major {

// `rounds` rounds of two dispatches (`first`'s inputs, then `second`'s), then their combines in the
// other order, with no synchronisation between ranks: consecutive calls alternate the buffer's
// halves and must not race. `after_each_round`, where given, runs after every round (on this rank's
// thread, with the stream idle).
void check_back_to_back_calls(const Case& c, const Expected& first, const Expected& second, int rounds,
                              int rank, Buffer& buffer, cudaStream_t stream, Failures& failures,
                              const std::function<void()>& after_each_round = {});

// Dispatch and combine captured once in CUDA graphs, then replayed with the inputs of every one of
// `rounds` (new routing too). The dispatch graph is replayed once or twice per round, so the halves
// each graph uses change between replays: the call sequence must advance on the device.
// With HandleAfterCapture::dropped the captured dispatch's handle is let go once both graphs are made,
// and fresh device allocations filled with 0xFF then take whatever memory was freed, so that replays
// reading a freed table see garbage (and compute-sanitizer sees a freed address).
enum class HandleAfterCapture { kept, dropped };
void check_graph_replays(const Case& c, const std::vector<Expected>& rounds, Group& group, Buffer& buffer,
                         cudaStream_t stream, Failures& failures,
                         HandleAfterCapture handle_after_capture = HandleAfterCapture::kept);

}  // namespace switchyard::testing::expert_major
