#pragma once
// The calling thread's current CUDA device, put back after switchyard has used the thread. The
// library selects a CUDA Buffer's device (cudaSetDevice) in its constructor, destructor and every
// call; torch, cupy and the caller expect their own current device to stay as it was (as a
// torch.cuda.device guard leaves it).
namespace switchyard::python {

class CallerDevice {
 public:
  // `cuda`: whether the Buffer is on the CUDA backend; CPU Buffers never touch the current device.
  explicit CallerDevice(bool cuda) : cuda_(cuda) { save(); }
  ~CallerDevice() { restore(); }
  CallerDevice(const CallerDevice&) = delete;
  CallerDevice& operator=(const CallerDevice&) = delete;

  void save();
  // Back to the saved device when it changed; no-op when nothing was saved.
  void restore();

 private:
  bool cuda_;
  int saved_ = -1;
};

}  // namespace switchyard::python
