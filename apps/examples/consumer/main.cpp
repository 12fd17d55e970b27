// A minimal application using the installed vitpe: runs one linear layer and prints it.
#include <vitpe/vitpe.h>

#include <cstdio>

int main() {
  using namespace vitpe;
  Tensor x = Tensor::from({1, 2}, {1.0f, 2.0f});
  Tensor w = Tensor::from({1, 2}, {3.0f, 4.0f});
  Tensor b = Tensor::from({1}, {0.5f});
  Tensor y = Tensor::empty({1, 1});
  linear_forward(y, x, w, b);
  std::printf("vitpe consumer: y = %.2f (expected 11.50)\n", y.at(0));
  return y.at(0) == 11.5f ? 0 : 1;
}
