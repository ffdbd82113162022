#pragma once
// Runs one host thread per channel (the calling thread takes channel 0) and joins them. The first
// real failure stops the others through the abort flag and is rethrown to the caller.
#include <atomic>
#include <functional>

namespace switchyard::cpu {

void run_channel_workers(int num_channels,
                         const std::function<void(int channel, const std::atomic<bool>& abort)>& fn);

}  // namespace switchyard::cpu
