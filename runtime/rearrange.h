// runtime/rearrange.h -- masking, reordering and tiling: tril, triu, masked_fill, flip, roll,
// repeat, split and chunk (runtime/rearrange.cpp), composites of primitive ops with torch's
// names and semantics.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/tensor.h"

namespace kiln {

/// The lower (tril) or upper (triu) triangle of the last two dims, the rest zero: entries with
/// column - row <= diagonal (tril) or >= diagonal (triu), as torch.tril and torch.triu.
Tensor tril(const Tensor& x, int64_t diagonal = 0);
Tensor triu(const Tensor& x, int64_t diagonal = 0);
/// x with `value` where the bool `mask` (broadcast to x's shape) is true; x's dtype.
Tensor masked_fill(const Tensor& x, const Tensor& mask, Scalar value);
Tensor masked_fill(const Tensor& x, const Tensor& mask, const Tensor& value);  // 0-d value
/// x reversed along each of `dims` (a copy, as torch.flip).
Tensor flip(const Tensor& x, const Dims& dims);
/// Elements shifted by shifts[i] along dims[i], wrapping around; with no dims, over the
/// flattened tensor (one shift), as torch.roll.
Tensor roll(const Tensor& x, const Dims& shifts, const Dims& dims = {});
/// x tiled repeats[i] times along each dim; leading repeats add dims (torch.Tensor.repeat).
Tensor repeat(const Tensor& x, const Dims& repeats);
/// Views of x along `dim`: pieces of split_size (the last may be smaller), or of the given
/// sizes, which must sum to the dim's size (torch.split).
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& split_sizes, int64_t dim = 0);
/// `chunks` views of ceil(size / chunks) along dim, the last smaller; fewer when the size is
/// smaller (torch.chunk).
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);

}  // namespace kiln
