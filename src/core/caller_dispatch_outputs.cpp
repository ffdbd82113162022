#include "core/caller_dispatch_outputs.hpp"

#include <string>

#include "common/normal_protocol.hpp"
#include "core/validation.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::detail {

namespace {

// One output the call makes: its dtype and columns, and whether the call makes it at all.
struct OutputShape {
  const char* name;
  TensorView DispatchOutputs::*field;
  TensorView DispatchArgs::*given;
  DType dtype;
  int64_t cols;
  const char* cols_are;
  bool made;
};

void expect_rows(const TensorView& tensor, const std::string& name, int64_t rows) {
  if (tensor.shape[0] != rows) {
    throw InvalidArgument(name + ": expected " + std::to_string(rows) + " rows (tokens received), got " +
                          tensor.describe());
  }
}

}  // namespace

DispatchOutputs caller_dispatch_outputs(const DispatchPlan& plan, int64_t rows, Device device,
                                        int device_index) {
  const DispatchArgs& args = plan.args;
  const OutputShape shapes[] = {
      {"recv_x", &DispatchOutputs::recv_x, &DispatchArgs::out_recv_x, plan.dtype, plan.hidden, "hidden",
       true},
      {"recv_x_scales", &DispatchOutputs::recv_x_scales, &DispatchArgs::out_recv_x_scales, DType::f32,
       plan.hidden / common::kScaleBlock, "hidden / 128", plan.has_scales},
      {"recv_topk_idx", &DispatchOutputs::recv_topk_idx, &DispatchArgs::out_recv_topk_idx, DType::i64,
       plan.topk, "k", plan.topk > 0},
      {"recv_topk_weights", &DispatchOutputs::recv_topk_weights, &DispatchArgs::out_recv_topk_weights,
       DType::f32, plan.topk, "k", plan.has_weights},
  };
  DispatchOutputs outputs;
  if (!args.allocate_outputs) {
    // The plan checked their dtypes, columns and device; only their rows wait for the count exchange.
    for (const OutputShape& shape : shapes) {
      const TensorView& given = args.*shape.given;
      if (given.defined()) expect_rows(given, std::string("out_") + shape.name, rows);
      outputs.*shape.field = given;
    }
    return outputs;
  }
  outputs = args.allocate_outputs(rows);
  for (const OutputShape& shape : shapes) {
    const TensorView& made = outputs.*shape.field;
    const std::string name = std::string("allocate_outputs: ") + shape.name;
    if (!shape.made) {
      expect_undefined(made, name.c_str(), "this dispatch makes no such output");
      continue;
    }
    if (!made.defined()) continue;  // the library's to allocate
    expect_tensor(made, name.c_str(), shape.dtype, 2, device);
    expect_dim(made, name.c_str(), 1, shape.cols, shape.cols_are);
    expect_rows(made, name, rows);
    if (device == Device::cuda && made.device_index != device_index) {
      throw InvalidArgument(name + ": expected a tensor on cuda:" + std::to_string(device_index) +
                            " (the Buffer's device), got one on cuda:" + std::to_string(made.device_index));
    }
  }
  return outputs;
}

}  // namespace switchyard::detail
