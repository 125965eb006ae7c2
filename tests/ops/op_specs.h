// tests/ops/op_specs.h -- the reference of every op in ops.def, in double precision: one
// Spec<OpId::X> per op. The generated suite (tests/every_op) instantiates Spec for every line
// of ops.def, so an op listed there without a Spec here fails to build.
//
// A pointwise op's Spec is its scalar reference and the domain its operands are drawn from;
// the suite makes the shapes, broadcasts, views and dtypes. Any other op's Spec lists the
// dtypes it accepts and builds its own cases: inputs, the call, and the reference on the
// inputs' values.
#pragma once

// The Specs live by op family in the headers below; this one includes them all, so that a
// test sees every Spec.
#include "tests/ops/op_specs_attention.h"    // attention and its backward
#include "tests/ops/op_specs_cast.h"         // cast
#include "tests/ops/op_specs_collective.h"   // all_reduce
#include "tests/ops/op_specs_common.h"       // Spec, Ref, Case and the input makers
#include "tests/ops/op_specs_creation.h"     // iota, numel, rand, randn
#include "tests/ops/op_specs_matmul_conv.h"  // matmul, addmm, conv2d and its gradients
#include "tests/ops/op_specs_movement.h"     // views, copies and data movement
#include "tests/ops/op_specs_pointwise.h"    // the pointwise ops
#include "tests/ops/op_specs_pools.h"        // max_pool2d, avg_pool2d and their backwards
#include "tests/ops/op_specs_reductions.h"   // sum, prod, amax, amin, argmax, argmin
#include "tests/ops/op_specs_registered.h"   // registered (a test op registered there)
#include "tests/ops/op_specs_rnn.h"          // rnn and its backward
#include "tests/ops/op_specs_scans.h"        // cumsum, argsort, topk
