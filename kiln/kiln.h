// kiln/kiln.h -- everything a kiln program needs: #include <kiln/kiln.h>.
#pragma once

#include "autograd/autograd.h"
#include "ir/graph.h"
#include "jit/trace.h"
#include "nn/data.h"
#include "nn/init.h"
#include "nn/layers.h"
#include "nn/loss.h"
#include "nn/module.h"
#include "nn/optim.h"
#include "nn/safetensors.h"
#include "runtime/allocator.h"
#include "runtime/api.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/parallel.h"
#include "runtime/tensor.h"
