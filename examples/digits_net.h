// examples/digits_net.h -- the digits demo's network, shared by the demo (train_digits.cpp),
// the jit's golden traces and the benchmarks: 8x8 images, conv 3x3 1->16, relu, pool 2,
// conv 3x3 16->32, relu, pool 2, linear 128->10.
#pragma once

#include <kiln/kiln.h>

namespace kiln::examples {

struct DigitsNet : nn::Module {
  nn::Conv2d conv1{1, 16, {3, 3}, {.padding = {1, 1}}};
  nn::Conv2d conv2{16, 32, {3, 3}, {.padding = {1, 1}}};
  nn::Linear fc{32 * 2 * 2, 10};
  DigitsNet() {
    register_module("conv1", conv1);
    register_module("conv2", conv2);
    register_module("fc", fc);
  }
  Tensor operator()(const Tensor& x) {
    Tensor h = max_pool2d(relu(conv1(x)), {2, 2});  // [N, 16, 4, 4]
    h = max_pool2d(relu(conv2(h)), {2, 2});         // [N, 32, 2, 2]
    return fc(h.flatten(1));
  }
};

}  // namespace kiln::examples
