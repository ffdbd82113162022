#pragma once
#include <cuda_runtime.h>

#include <optional>

// The GPU of a stream that is being captured into a graph. The runtime's cudaStreamGetDevice and
// cudaStreamGetId are refused on a capturing stream by the drivers in use (and the refusal invalidates the
// capture), so the device is read from the stream's context through the driver API instead: the context's
// lookup and a push, device query and pop of it are host-side bookkeeping that capture allows.
namespace switchyard::cuda {

// The device of capturing `stream`, or nothing where the driver cannot say (a stream of a green context,
// a driver without the entry points): the caller then leaves the stream unchecked, as before, rather than
// refuse a capture it cannot judge.
std::optional<int> capturing_stream_device(cudaStream_t stream);

// Looks the driver's entry points up now (once per process), so that the first captured call does not do
// it inside the caller's capture: called where a Buffer is made.
void prepare_capturing_stream_checks();

}  // namespace switchyard::cuda
