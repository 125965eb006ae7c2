// tests/ops/op_specs_movement.h -- the Specs of the ops that only move values: the views (reshape,
// permute, slice, expand), and the copies and data movement (copy, to_device, cat, gather,
// index_select, scatter_add, index_add, pad).
#pragma once

#include <cstdint>
#include <vector>

#include "tests/ops/op_specs_common.h"

namespace kiln::test {

// ---- views ----------------------------------------------------------------------------------
/// out[idx] = in[source(idx)] over out_shape: the reference of every op that only moves values.
template <class F> Ref gather_ref(const Ref& in, const Dims& out_shape, F source) {
  Ref o = zeros_ref(out_shape);
  for_each_index(out_shape, [&](const Dims& idx) { o.at(idx) = in.at(source(idx)); });
  return o;
}
template <> struct Spec<OpId::Reshape> {
  static std::vector<DType> dtypes() { return kAllDTypes; }
  static std::vector<Case> cases(DType t) {
    auto ref = [](Dims shape) { return [shape](std::span<const Ref> r) { return Ref{shape, r[0].v, {}}; }; };
    return {{"contiguous",
             {values({4, 6}, t)},
             [](std::span<const Tensor> in) {
               return in[0].reshape({2, -1, 3});
             },
             ref({2, 4, 3})},
            {"transposed",
             {transposed(4, 6, t)},
             [](std::span<const Tensor> in) { return in[0].reshape({-1}); },
             ref({24})}};
  }
};
template <> struct Spec<OpId::Permute> {
  static std::vector<DType> dtypes() { return kAllDTypes; }
  static std::vector<Case> cases(DType t) {
    return {{"rank3",
             {values({2, 3, 4}, t)},
             [](std::span<const Tensor> in) {
               return in[0].permute({2, 0, 1});
             },
             [](std::span<const Ref> r) {
               return gather_ref(r[0], {4, 2, 3}, [](const Dims& i) { return Dims{i[1], i[2], i[0]}; });
             }},
            {"of_a_slice",
             {values({3, 8}, t).slice(1, 1, 8, 3)},
             [](std::span<const Tensor> in) {
               return in[0].permute({1, 0});
             },
             [](std::span<const Ref> r) {
               return gather_ref(r[0], {r[0].shape[1], r[0].shape[0]}, [](const Dims& i) { return Dims{i[1], i[0]}; });
             }}};
  }
};
template <> struct Spec<OpId::Slice> {
  static std::vector<DType> dtypes() { return kAllDTypes; }
  static std::vector<Case> cases(DType t) {
    return {{"step2",
             {values({3, 9}, t)},
             [](std::span<const Tensor> in) { return in[0].slice(1, 1, 8, 2); },
             [](std::span<const Ref> r) {
               return gather_ref(r[0], {3, 4}, [](const Dims& i) { return Dims{i[0], 1 + 2 * i[1]}; });
             }},
            {"of_a_transpose",
             {transposed(6, 4, t)},
             [](std::span<const Tensor> in) { return in[0].slice(0, 2, 5); },
             [](std::span<const Ref> r) {
               return gather_ref(r[0], {3, 4}, [](const Dims& i) { return Dims{i[0] + 2, i[1]}; });
             }}};
  }
};
template <> struct Spec<OpId::Expand> {
  static std::vector<DType> dtypes() { return kAllDTypes; }
  static std::vector<Case> cases(DType t) {
    return {{"new_and_size1_dims",
             {values({3, 1, 4}, t)},
             [](std::span<const Tensor> in) {
               return in[0].expand({2, 3, 5, 4});
             },
             [](std::span<const Ref> r) {
               return Ref{{2, 3, 5, 4}, broadcast_values(r[0].v, r[0].shape, {2, 3, 5, 4}), {}};
             }}};
  }
};

// ---- copies and data movement -----------------------------------------------------------------
inline Ref same_values(std::span<const Ref> r) { return Ref{r[0].shape, r[0].v, {}}; }
template <> struct Spec<OpId::Copy> {
  static std::vector<DType> dtypes() { return kAllDTypes; }
  static std::vector<Case> cases(DType t) {
    return {
        {"transposed", {transposed(5, 7, t)}, [](std::span<const Tensor> in) { return in[0].clone(); }, same_values},
        {"expanded",
         {values({4, 1}, t).expand({4, 6})},
         [](std::span<const Tensor> in) { return in[0].contiguous(); },
         same_values}};
  }
};
template <> struct Spec<OpId::ToDevice> {
  static std::vector<DType> dtypes() { return kAllDTypes; }
  static std::vector<Case> cases(DType t) {
    auto run = [](std::span<const Tensor> in) {
      Attrs a;
      a.device = cpu;
      return apply(OpId::ToDevice, {in[0]}, a);
    };
    return {{"cpu_to_cpu", {values({3, 5}, t)}, run, same_values}, {"view", {transposed(4, 3, t)}, run, same_values}};
  }
};
template <> struct Spec<OpId::Cat> {
  static std::vector<DType> dtypes() { return kAllDTypes; }
  static std::vector<Case> cases(DType t) {
    auto ref = [](int64_t dim) {
      return [dim](std::span<const Ref> r) {
        Dims shape = r[0].shape;
        shape[dim] = 0;
        for (const Ref& x : r) shape[dim] += x.shape[dim];
        Ref o = zeros_ref(shape);
        int64_t base = 0;
        for (const Ref& x : r) {
          for_each_index(x.shape, [&](const Dims& i) {
            Dims j = i;
            j[dim] += base;
            o.at(j) = x.at(i);
          });
          base += x.shape[dim];
        }
        return o;
      };
    };
    return {{"dim1_with_views",
             {values({2, 3}, t), transposed(2, 1, t), values({2, 8}, t).slice(1, 0, 8, 2)},
             [](std::span<const Tensor> in) {
               return cat({in[0], in[1], in[2]}, 1);
             },
             ref(1)},
            {"dim0",
             {values({1, 4}, t), values({3, 4}, t)},
             [](std::span<const Tensor> in) {
               return cat({in[0], in[1]}, 0);
             },
             ref(0)}};
  }
};
template <> struct Spec<OpId::Gather> {
  static std::vector<DType> dtypes() { return kAllDTypes; }
  static std::vector<Case> cases(DType t) {
    return {{"dim1",
             {transposed(4, 5, t), indices({4, 3}, 5)},
             [](std::span<const Tensor> in) { return gather(in[0], 1, in[1]); },
             [](std::span<const Ref> r) {
               return gather_ref(r[0], r[1].shape, [&](const Dims& i) { return Dims{i[0], int64_t(r[1].at(i))}; });
             }},
            {"dim0",
             {values({5, 3}, t), indices({2, 3}, 5)},
             [](std::span<const Tensor> in) { return gather(in[0], 0, in[1]); },
             [](std::span<const Ref> r) {
               return gather_ref(r[0], r[1].shape, [&](const Dims& i) { return Dims{int64_t(r[1].at(i)), i[1]}; });
             }}};
  }
};
template <> struct Spec<OpId::IndexSelect> {
  static std::vector<DType> dtypes() { return kAllDTypes; }
  static std::vector<Case> cases(DType t) {
    return {
        {"dim0_repeats",
         {values({5, 4}, t), indices({7}, 5)},
         [](std::span<const Tensor> in) { return index_select(in[0], 0, in[1]); },
         [](std::span<const Ref> r) {
           return gather_ref(r[0], {7, 4}, [&](const Dims& i) { return Dims{int64_t(r[1].v[size_t(i[0])]), i[1]}; });
         }},
        {"dim1_view",
         {transposed(3, 6, t), indices({4}, 6)},
         [](std::span<const Tensor> in) { return index_select(in[0], 1, in[1]); },
         [](std::span<const Ref> r) {
           return gather_ref(r[0], {3, 4}, [&](const Dims& i) { return Dims{i[0], int64_t(r[1].v[size_t(i[1])])}; });
         }}};
  }
};
template <> struct Spec<OpId::ScatterAdd> {
  static std::vector<DType> dtypes() { return kAllDTypes; }
  static std::vector<Case> cases(DType t) {
    auto ref = [](std::span<const Ref> r) {
      Ref o = r[0];
      for_each_index(r[1].shape, [&](const Dims& i) { o.at({i[0], int64_t(r[1].at(i))}) += r[2].at(i); });
      return o;
    };
    return {{"dim1_repeats",
             {values({4, 5}, t), indices({4, 6}, 5), values({4, 6}, t)},
             [](std::span<const Tensor> in) { return scatter_add(in[0], 1, in[1], in[2]); },
             ref},
            {"views",
             {transposed(4, 5, t), indices({4, 2}, 5), transposed(4, 2, t)},
             [](std::span<const Tensor> in) { return scatter_add(in[0], 1, in[1], in[2]); },
             ref}};
  }
};
template <> struct Spec<OpId::IndexAdd> {
  static std::vector<DType> dtypes() { return kAllDTypes; }
  static std::vector<Case> cases(DType t) {
    auto ref = [](std::span<const Ref> r) {
      Ref o = r[0];
      for_each_index(r[2].shape, [&](const Dims& i) { o.at({int64_t(r[1].v[size_t(i[0])]), i[1]}) += r[2].at(i); });
      return o;
    };
    return {{"dim0_repeats",
             {values({5, 4}, t), indices({7}, 5), values({7, 4}, t)},
             [](std::span<const Tensor> in) { return index_add(in[0], 0, in[1], in[2]); },
             ref},
            {"views",
             {transposed(5, 3, t), indices({2}, 5), transposed(2, 3, t)},
             [](std::span<const Tensor> in) { return index_add(in[0], 0, in[1], in[2]); },
             ref}};
  }
};
template <> struct Spec<OpId::Pad> {
  static std::vector<DType> dtypes() { return kAllDTypes; }
  static std::vector<Case> cases(DType t) {
    // pads: (before, after) of the last dim, then of the one before.
    auto ref = [](Dims pads, double value) {
      return [=](std::span<const Ref> r) {
        Dims shape = r[0].shape;
        size_t rank = shape.size();
        for (size_t k = 0; 2 * k < pads.size(); ++k) shape[rank - 1 - k] += pads[2 * k] + pads[2 * k + 1];
        Ref o = zeros_ref(shape);
        for (double& v : o.v) v = value;
        for_each_index(r[0].shape, [&](const Dims& i) {
          Dims j = i;
          for (size_t k = 0; 2 * k < pads.size(); ++k) j[rank - 1 - k] += pads[2 * k];
          o.at(j) = r[0].at(i);
        });
        return o;
      };
    };
    return {{"two_dims",
             {values({3, 4}, t)},
             [](std::span<const Tensor> in) {
               return pad(in[0], {1, 2, 2, 0}, 1);
             },
             ref({1, 2, 2, 0}, 1)},
            {"last_dim_of_a_view",
             {transposed(3, 5, t)},
             [](std::span<const Tensor> in) {
               return pad(in[0], {0, 3});
             },
             ref({0, 3}, 0)}};
  }
};

}  // namespace kiln::test
