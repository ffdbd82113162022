#pragma once
// An expert-major round trip on the GPU whose caller lets go of its dispatch outputs before the
// combine: the dispatch writes into the caller's out_* tensors, which are then overwritten with other
// routing (nothing sent anywhere) and freed stream-ordered, the pool's next allocations filled with that
// routing too. The combine must still route as the dispatch did: the handle keeps its own copies of
// layout_range and src_info. Mismatches go to `failures`, each naming the rank.
#include <cuda_runtime.h>

#include "support/expert_major_cases.hpp"
#include "switchyard/buffer.hpp"

namespace switchyard::testing::expert_major {

// `engine`: low_latency or symmetric; `hook`: the low_latency hook split (the dispatch's receive half
// runs in the hook, before the outputs are let go).
void check_combine_after_the_callers_outputs_were_freed(Engine engine, const Case& c,
                                                        const Expected& expected, bool hook, int rank,
                                                        Buffer& buffer, cudaStream_t stream,
                                                        Failures& failures);

}  // namespace switchyard::testing::expert_major
