// A downstream user's program: includes the installed header, links kiln::kiln.
#include <kiln/kiln.h>

#include <iostream>

int main() {
  using namespace kiln;
  Tensor x = arange(6).reshape({2, 3}).to(f32);
  Tensor y = matmul(x, x.t()) + 1.0;
  std::cout << y << "\n";
  // [[0,1,2],[3,4,5]] @ its transpose = [[5,14],[14,50]]; plus one.
  bool ok = y.to_vector<float>() == std::vector<float>{6, 15, 15, 51};
  std::cout << (ok ? "downstream ok" : "downstream WRONG") << "\n";
  return ok ? 0 : 1;
}
