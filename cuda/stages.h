// cuda/stages.h -- private to cuda/group.cpp: what a fused group's CUDA launch may do
// with its reductions. A group whose outputs are its reductions' results (and full outputs that
// read none) may cut its columns into parts, each writing partial results (codegen/cuda/
// launch.h). A group whose outputs read its reductions' results (batch norm's normalization
// reads its mean and variance) runs, when it has too few rows to fill the device, as stages
// cut at its reduction levels: stage k computes the level-k reductions (reading the earlier
// ones) and the full outputs of level k - 1, so every stage may be cut into parts; a last
// stage computes the full outputs that read the last level, and one more the reduced-shape
// outputs that are not reductions themselves. The stages read the group's inputs as often as
// its one kernel's passes do.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "ir/graph.h"

namespace kiln::cuda::stages {

/// Per output of `body`: the reduction that combines its partial results, or nullopt for a
/// full output (each part writes its own columns). Empty when the columns may not be cut: an
/// op reads a reduction's result, a reduced-shape output is not a reduction, or partial results
/// in f16 or bf16 would round twice.
std::vector<std::optional<OpId>> cut_outputs(const ir::Graph& body);

/// Where a stage's operand lives.
struct Place {
  enum Kind : uint8_t { Input, Output, Temp } kind = Input;
  size_t index = 0;  // the group's input or output, or a temporary
};

struct Stage {
  ir::Node group;                    // a fused node whose body is the stage
  std::vector<Place> reads, writes;  // per input and output of its body
};

struct Stages {
  std::vector<Stage> stages;
  std::vector<TensorType> temps;  // contiguous, on the group's device
};

/// `body` cut at its reduction levels. Empty when it has none, or an output repeats.
Stages by_level(const ir::Graph& body);

}  // namespace kiln::cuda::stages
