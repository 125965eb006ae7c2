// examples/generate.cpp -- serves a saved byte-level GPT (examples/models/train_model gpt
// --save): loads the module, which takes tokens [B,T] at any B and T, and writes text one byte
// at a time, each step feeding the last `context` bytes (the length grows 1, 2, ... up to the
// context, then stays) and sampling the next from the softmax of the last position's logits.
//
//   generate MODULE.kiln [--prompt TEXT] [--bytes N] [--temperature X] [--seed S]
//
// The context is the module's position table's length (parameter wpe.weight). Errors are
// printed and the program exits with status 1.
#include <kiln/kiln.h>

#include <cstdio>
#include <string>
#include <vector>

using namespace kiln;

namespace {

int run(int argc, char** argv) {
  std::string path, prompt = "\n";
  int64_t bytes = 200;
  double temperature = 0.8;
  uint64_t seed = 0;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw Error(s + " needs a value");
      return argv[++i];
    };
    if (s == "--prompt") prompt = value();
    else if (s == "--bytes") bytes = std::stoll(value());
    else if (s == "--temperature") temperature = std::stod(value());
    else if (s == "--seed") seed = std::stoull(value());
    else if (path.empty() && !s.starts_with("-")) path = s;
    else throw Error("unknown argument '" + s + "'");
  }
  if (path.empty() || prompt.empty() || !(temperature > 0))
    throw Error("usage: generate MODULE.kiln [--prompt TEXT] [--bytes N] [--temperature X > 0] [--seed S]");
  manual_seed(seed);
  jit::LoadedFunction gpt = jit::load(path);
  int64_t context = gpt.parameter("wpe.weight").shape()[0];
  std::vector<int64_t> tokens;
  for (char c : prompt) tokens.push_back(static_cast<unsigned char>(c));
  std::fputs(prompt.c_str(), stdout);
  NoGradGuard no_grad;
  for (int64_t i = 0; i < bytes; ++i) {
    int64_t t = std::min<int64_t>(static_cast<int64_t>(tokens.size()), context);
    std::vector<int64_t> window(tokens.end() - t, tokens.end());
    Tensor logits = gpt(from_vector<int64_t>(window, {1, t}));  // [1, t, 256]
    Tensor probs = softmax(logits.select(1, t - 1) / temperature, -1);
    int64_t next = multinomial(probs, 1).item<int64_t>();
    tokens.push_back(next);
    std::fputc(static_cast<int>(next), stdout);
  }
  std::fputc('\n', stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "generate: %s\n", e.what());
    return 1;
  }
}
