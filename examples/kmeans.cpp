// examples/kmeans.cpp -- k-means clustering written with eager kiln ops: broadcasting,
// matmul, reductions, argmin, one_hot. Clusters 200k points drawn from 8 Gaussian blobs in
// 16 dimensions and reports how well the clusters recover the blobs.
#include <kiln/kiln.h>

#include <chrono>
#include <cstdio>

using namespace kiln;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Squared distances [n, k] between rows of x [n, d] and centers [k, d].
Tensor squared_distances(const Tensor& x, const Tensor& centers) {
  Tensor x2 = sum(x * x, {1}, true);                     // [n, 1]
  Tensor c2 = sum(centers * centers, {1}).unsqueeze(0);  // [1, k]
  return x2 - 2.0 * matmul(x, centers.t()) + c2;
}

}  // namespace

int main() {
  const int64_t n = 200000, d = 16, k = 8, iters = 20;
  manual_seed(7);
  Tensor true_centers = randn({k, d}) * 4.0;
  Tensor labels = randint(0, k, {n});
  Tensor x = index_select(true_centers, 0, labels) + randn({n, d});
  std::printf("kiln k-means: %lld points, %lld dims, %lld clusters, %d threads\n", (long long)n, (long long)d,
              (long long)k, num_threads());

  // k-means++-style start: first center at random, the rest far from the chosen ones.
  Tensor centers = x.narrow(0, randint(0, n, {1}).item<int64_t>(), 1);
  for (int64_t c = 1; c < k; ++c) {
    Tensor dist = amin(squared_distances(x, centers), {1});
    centers = cat({centers, x.narrow(0, argmax(dist).item<int64_t>(), 1)});
  }

  auto t0 = std::chrono::steady_clock::now();
  Tensor assign;
  for (int64_t it = 0; it < iters; ++it) {
    Tensor dist = squared_distances(x, centers);
    assign = argmin(dist, 1);
    Tensor onehot = one_hot(assign, k).to(f32);     // [n, k]
    Tensor counts = sum(onehot, {0}).unsqueeze(1);  // [k, 1]
    centers = matmul(onehot.t(), x) / maximum(counts, 1.0);
    double inertia = sum(amin(dist, {1})).item<double>() / double(n);
    std::printf("iter %2lld  mean squared distance %.4f\n", (long long)it, inertia);
  }
  double elapsed = seconds_since(t0);

  // Purity: each found cluster votes for its most common true blob.
  Tensor table = matmul(one_hot(assign, k).to(f32).t(), one_hot(labels, k).to(f32));  // [k, k]
  double purity = sum(amax(table, {1})).item<double>() / double(n);
  std::printf("purity %.4f  (1.0 = every cluster is one blob)\n", purity);
  std::printf("time per iteration %.2f ms, total %.2f s\n", 1000 * elapsed / iters, elapsed);
  std::printf("peak CPU memory in use: %.1f MiB\n", cpu_allocator().stats().peak_in_use / 1048576.0);
  return purity > 0.9 ? 0 : 1;
}
