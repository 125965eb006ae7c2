// codegen/cuda/pool.cpp -- the pooling kernels' CUDA C (see pool.h).
#include "codegen/cuda/pool.h"

#include <fmt/format.h>

#include "codegen/cuda/emit.h"
#include "runtime/check.h"

namespace kiln::codegen {
namespace {

struct Types {
  const char* mem;      // as stored
  const char* compute;  // as computed (f16 and bf16 widen to f32)
  const char* load;     // a format for a load expression from a pointer expression
  const char* store;    // a format for the stored form of a compute value
  const char* nan;
};

Types types_of(DType t) {
  switch (t) {
    case DType::F32: return {"float", "float", "{}", "{}", "kiln_f32(0x7fc00000u)"};
    case DType::F64: return {"double", "double", "{}", "{}", "kiln_f64(0x7ff8000000000000ull)"};
    case DType::F16: return {"unsigned short", "float", "kiln_h2f({})", "kiln_f2h({})", "kiln_f32(0x7fc00000u)"};
    case DType::BF16: return {"unsigned short", "float", "kiln_bf2f({})", "kiln_f2bf({})", "kiln_f32(0x7fc00000u)"};
    default: break;
  }
  throw Error(fmt::format("codegen: pools take float dtypes, not {}", dtype_name(t)));
}

// The window helpers, as runtime/ops/pool.cpp's Geometry::at, window_max and window_argmax.
std::string helpers(const Types& t) {
  return fmt::format(R"(
struct Geometry {{ long long planes, h, w, oh, ow, kh, kw, sh, sw, ph, pw, count_include_pad; }};
struct Planes {{ long long inner, outer_st, inner_st, row_st, col_st; }};
struct Window {{ long long y0, y1, x0, x1, count; }};

__device__ __forceinline__ Window window_at(const Geometry& g, long long oy, long long ox) {{
  long long ys = oy * g.sh - g.ph, xs = ox * g.sw - g.pw;
  Window win;
  win.y0 = ys > 0 ? ys : 0;
  win.y1 = ys + g.kh < g.h ? ys + g.kh : g.h;
  win.x0 = xs > 0 ? xs : 0;
  win.x1 = xs + g.kw < g.w ? xs + g.kw : g.w;
  if (g.count_include_pad) {{
    long long ye = ys + g.kh < g.h + g.ph ? ys + g.kh : g.h + g.ph;
    long long xe = xs + g.kw < g.w + g.pw ? xs + g.kw : g.w + g.pw;
    win.count = (ye - ys) * (xe - xs);
  }} else {{
    win.count = (win.y1 - win.y0) * (win.x1 - win.x0);
  }}
  return win;
}}

__device__ __forceinline__ const {0}* plane_of(const {0}* base, const Planes& v, long long p) {{
  return base + p / v.inner * v.outer_st + p % v.inner * v.inner_st;
}}

// The window's largest element, NaN when it holds one.
__device__ __forceinline__ {1} window_max(const {0}* plane, const Planes& v, const Window& win) {{
  {1} best = {2};
  bool nan = false;
  for (long long y = win.y0; y < win.y1; ++y)
    for (long long x = win.x0; x < win.x1; ++x) {{
      {1} c = {3};
      best = c > best ? c : best;
      nan = nan || c != c;
    }}
  return nan ? {4} : best;
}}

// Position (y * w + x) of the window's first largest element; the first NaN wins.
__device__ __forceinline__ long long window_argmax(const {0}* plane, const Planes& v, const Window& win, long long w) {{
  {1} best = {2};
  long long arg = win.y0 * w + win.x0;
  bool nan = false;
  for (long long y = win.y0; y < win.y1; ++y)
    for (long long x = win.x0; x < win.x1; ++x) {{
      {1} c = {3};
      bool more = c > best;
      best = more ? c : best;
      arg = more ? y * w + x : arg;
      nan = nan || c != c;
    }}
  if (nan)
    for (long long y = win.y0; y < win.y1; ++y)
      for (long long x = win.x0; x < win.x1; ++x) {{
        {1} c = {3};
        if (c != c) return y * w + x;
      }}
  return arg;
}}
)",
                     t.mem, t.compute,
                     fmt::format(fmt::runtime(t.load), "plane[win.y0 * v.row_st + win.x0 * v.col_st]"),
                     fmt::format(fmt::runtime(t.load), "plane[y * v.row_st + x * v.col_st]"), t.nan);
}

}  // namespace

std::string cuda_pool_kernel(CudaPool kind, DType dtype) {
  Types t = types_of(dtype);
  std::string body;
  switch (kind) {
    case CudaPool::Max:
      body = fmt::format("(({}*)a.out)[i] = {};", t.mem,
                         fmt::format(fmt::runtime(t.store), "window_max(plane, a.x_planes, win)"));
      break;
    case CudaPool::Indices: body = "((long long*)a.out)[i] = window_argmax(plane, a.x_planes, win, a.g.w);"; break;
    case CudaPool::Avg:
      body = fmt::format(
          R"({0} acc = 0;
    for (long long y = win.y0; y < win.y1; ++y)
      for (long long x = win.x0; x < win.x1; ++x) acc += {1};
    (({2}*)a.out)[i] = {3};)",
          t.compute, fmt::format(fmt::runtime(t.load), "plane[y * a.x_planes.row_st + x * a.x_planes.col_st]"), t.mem,
          fmt::format(fmt::runtime(t.store), fmt::format("acc / ({})(win.count > 1 ? win.count : 1)", t.compute)));
      break;
  }
  return cuda_prelude() + helpers(t) +
         fmt::format(R"(
struct Args {{
  Geometry g;
  Planes x_planes;
  const void* x; void* out;
}};

extern "C" __global__ __launch_bounds__({0}) void kiln_kernel(const Args a) {{
  const long long total = a.g.planes * a.g.oh * a.g.ow;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {{
    long long ox = i % a.g.ow, oy = (i / a.g.ow) % a.g.oh, p = i / (a.g.ow * a.g.oh);
    const {1}* plane = plane_of((const {1}*)a.x, a.x_planes, p);
    Window win = window_at(a.g, oy, ox);
    {2}
  }}
}}
)",
                     kCudaBlock, t.mem, body);
}

std::string cuda_pool_backward_kernel(CudaPool kind, DType dtype) {
  KILN_CHECK(kind != CudaPool::Indices, "codegen: max_pool2d_indices has no backward kernel");
  Types t = types_of(dtype);
  std::string add = kind == CudaPool::Max ? "if (window_argmax(xp, a.x_planes, win, a.g.w) == y * a.g.w + x) acc += g;"
                                          : fmt::format("acc += g / ({})(win.count > 1 ? win.count : 1);", t.compute);
  return cuda_prelude() + helpers(t) +
         fmt::format(R"(
struct Args {{
  Geometry g;
  Planes g_planes, x_planes;
  const void* grad; const void* x; void* out;
}};

// A thread per input element: the windows that hold it, in the CPU's window order.
extern "C" __global__ __launch_bounds__({0}) void kiln_kernel(const Args a) {{
  const long long total = a.g.planes * a.g.h * a.g.w;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {{
    long long x = i % a.g.w, y = (i / a.g.w) % a.g.h, p = i / (a.g.w * a.g.h);
    const {1}* gp = plane_of((const {1}*)a.grad, a.g_planes, p);
    const {1}* xp = plane_of((const {1}*)a.x, a.x_planes, p);
    long long ny = y + a.g.ph - a.g.kh + 1, nx = x + a.g.pw - a.g.kw + 1;
    long long oy0 = ny <= 0 ? 0 : (ny + a.g.sh - 1) / a.g.sh, ox0 = nx <= 0 ? 0 : (nx + a.g.sw - 1) / a.g.sw;
    long long oy1 = (y + a.g.ph) / a.g.sh, ox1 = (x + a.g.pw) / a.g.sw;
    if (oy1 > a.g.oh - 1) oy1 = a.g.oh - 1;
    if (ox1 > a.g.ow - 1) ox1 = a.g.ow - 1;
    {2} acc = 0;
    for (long long oy = oy0; oy <= oy1; ++oy)
      for (long long ox = ox0; ox <= ox1; ++ox) {{
        Window win = window_at(a.g, oy, ox);
        {2} g = {3};
        {4}
      }}
    (({1}*)a.out)[i] = {5};
  }}
}}
)",
                     kCudaBlock, t.mem, t.compute,
                     fmt::format(fmt::runtime(t.load), "gp[oy * a.g_planes.row_st + ox * a.g_planes.col_st]"), add,
                     fmt::format(fmt::runtime(t.store), "acc"));
}

}  // namespace kiln::codegen
