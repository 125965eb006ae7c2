// examples/digits_data.h -- the handwritten digits scikit-learn ships (1797 8x8 images, as a
// gzipped CSV that Debian's python3-sklearn installs; no Python runs): read by the demo and by
// the tests that train on real data. Needs zlib.
#pragma once

#include <kiln/kiln.h>
#include <zlib.h>

#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace kiln::examples {

inline const char* kDigitsData = "/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz";

/// Images f32[N,1,8,8] scaled to [0, 1] and labels i64[N], from the gzipped CSV: 64 pixel
/// values (0..16) then the label, per line. Throws kiln::Error naming the file.
inline std::pair<Tensor, Tensor> load_digits(const std::string& path = kDigitsData) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) throw Error("digits: cannot open " + path + " (install python3-sklearn)");
  std::string text;
  char buf[1 << 16];
  for (int n; (n = gzread(f, buf, sizeof buf)) > 0;) text.append(buf, static_cast<size_t>(n));
  gzclose(f);
  std::vector<float> pixels;
  std::vector<int64_t> labels;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty()) continue;
    std::istringstream fields(line);
    std::vector<float> row;
    for (std::string v; std::getline(fields, v, ',');) row.push_back(std::stof(v));
    if (row.size() != 65) throw Error("digits: expected 65 values per line in " + path);
    pixels.insert(pixels.end(), row.begin(), row.end() - 1);
    labels.push_back(static_cast<int64_t>(row.back()));
  }
  int64_t n = static_cast<int64_t>(labels.size());
  return {from_vector(pixels, {n, 1, 8, 8}) / 16.0f, from_vector(labels)};
}

}  // namespace kiln::examples
