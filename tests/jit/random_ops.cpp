// tests/jit/random_ops.cpp -- the pointwise ops random programs draw from, with domains kept
// safe (log and sqrt of |x| + c) so most values stay finite.
#include "random_ops.h"

#include <kiln/kiln.h>

#include <cmath>

namespace kiln::test {
namespace {

const NamedOp<Unary> kUnary[] = {
    {"neg", [](const Tensor& x) { return -x; }},
    {"abs", [](const Tensor& x) { return abs(x); }},
    {"sign", [](const Tensor& x) { return sign(x); }},
    {"exp", [](const Tensor& x) { return exp(x); }},
    {"expm1", [](const Tensor& x) { return expm1(x); }},
    {"sin", [](const Tensor& x) { return sin(x); }},
    {"cos", [](const Tensor& x) { return cos(x); }},
    {"tanh", [](const Tensor& x) { return tanh(x); }},
    {"erf", [](const Tensor& x) { return erf(x); }},
    {"sigmoid", [](const Tensor& x) { return sigmoid(x); }},
    {"relu", [](const Tensor& x) { return relu(x); }},
    {"gelu", [](const Tensor& x) { return gelu(x); }},
    {"gelu_tanh", [](const Tensor& x) { return gelu(x, "tanh"); }},
    {"silu", [](const Tensor& x) { return silu(x); }},
    {"floor", [](const Tensor& x) { return floor(x); }},
    {"ceil", [](const Tensor& x) { return ceil(x); }},
    {"round", [](const Tensor& x) { return round(x); }},
    {"log(|x|+0.5)", [](const Tensor& x) { return log(abs(x) + 0.5); }},
    {"sqrt|x|", [](const Tensor& x) { return sqrt(abs(x)); }},
    {"rsqrt(|x|+0.5)", [](const Tensor& x) { return rsqrt(abs(x) + 0.5); }},
    {"1/(|x|+1)", [](const Tensor& x) { return reciprocal(abs(x) + 1); }},
    {"log1p|x|", [](const Tensor& x) { return log1p(abs(x)); }},
    // Casts to integers and back: out of range (u8 of 300, i32 of 1e10, i64 of 1e19) and NaN
    // (sqrt of a negative) included, which saturate or give 0 as in eager mode.
    {"u8(97x)", [](const Tensor& x) { return (x * 97).to(DType::U8).to(x.dtype()); }},
    {"i32(3e9x)", [](const Tensor& x) { return (x * 3e9).to(DType::I32).to(x.dtype()) * 1e-9; }},
    {"i64(1e19x)", [](const Tensor& x) { return (x * 1e19).to(DType::I64).to(x.dtype()) * 1e-18; }},
    {"i32(sqrt x)", [](const Tensor& x) { return sqrt(x * 4).to(DType::I32).to(x.dtype()); }},
};

const NamedOp<Binary> kBinary[] = {
    {"add", [](const Tensor& a, const Tensor& b) { return a + b; }},
    {"sub", [](const Tensor& a, const Tensor& b) { return a - b; }},
    {"mul", [](const Tensor& a, const Tensor& b) { return a * b; }},
    {"div", [](const Tensor& a, const Tensor& b) { return a / b; }},
    {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); }},
    {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); }},
    {"pow(|a|+0.5,b)", [](const Tensor& a, const Tensor& b) { return pow(abs(a) + 0.5, b); }},
    {"(a<=b)*a", [](const Tensor& a, const Tensor& b) { return (a <= b).to(a.dtype()) * a; }},
    {"where(a>b,a,b)", [](const Tensor& a, const Tensor& b) { return where(a > b, a, b); }},
};

const NamedOp<WithNumber> kWithNumber[] = {
    {"x+s", [](const Tensor& x, double s) { return x + s; }},
    {"s-x", [](const Tensor& x, double s) { return s - x; }},
    {"x*s", [](const Tensor& x, double s) { return x * s; }},
    {"x/s", [](const Tensor& x, double s) { return x / s; }},
    {"s/(|x|+1)", [](const Tensor& x, double s) { return s / (abs(x) + 1); }},
    {"x^2", [](const Tensor& x, double) { return pow(x, 2); }},
    {"s^x", [](const Tensor& x, double s) { return pow(std::abs(s) + 0.5, x); }},
    {"maximum(x,s)", [](const Tensor& x, double s) { return maximum(x, s); }},
    {"minimum(x,s)", [](const Tensor& x, double s) { return minimum(x, s); }},
    {"clamp(x,-|s|,|s|)", [](const Tensor& x, double s) { return clamp(x, -std::abs(s), std::abs(s)); }},
    {"where(x>s,x,s)", [](const Tensor& x, double s) { return where(x > s, x, s); }},
    {"where(x<s,-1,x)", [](const Tensor& x, double s) { return where(x < s, -1.0, x); }},
};

}  // namespace

std::span<const NamedOp<Unary>> unary_ops() { return kUnary; }
std::span<const NamedOp<Binary>> binary_ops() { return kBinary; }
std::span<const NamedOp<WithNumber>> number_ops() { return kWithNumber; }

}  // namespace kiln::test
