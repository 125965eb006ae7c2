// benchmarks/torch_threads.h -- LibTorch runs on as many threads as kiln (the machine's cores
// unless KILN_NUM_THREADS says otherwise; LibTorch's own default is the same count).
#pragma once

#include <torch/torch.h>

#include <kiln/kiln.h>

extern "C" void openblas_set_num_threads(int);

namespace kiln::bench {

// For LibTorch's own loops and for the OpenBLAS both link (kiln keeps OpenBLAS single-threaded
// inside its own chunks, so the setting is restored when the case ends).
struct SameThreads {
  SameThreads() {
    torch::set_num_threads(kiln::num_threads());
    openblas_set_num_threads(kiln::num_threads());
  }
  ~SameThreads() { openblas_set_num_threads(1); }
};

}  // namespace kiln::bench
