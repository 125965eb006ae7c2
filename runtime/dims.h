// runtime/dims.h -- a small vector of int64 for sizes, strides and axes; inline up to 6 entries.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <span>
#include <vector>

namespace kiln {

/// Sizes, strides or a list of axes. Stores up to 6 entries without touching the heap, so the
/// per-op eager path allocates nothing for shapes of ordinary rank.
class Dims {
 public:
  static constexpr size_t kInline = 6;

  Dims() = default;
  // Copied element by element: g++ 12 at -O3 warns (dangling-pointer, maybe-uninitialized)
  // when a memcpy reads the list's backing array in a default member initializer such as
  // `Tensor t = randn({12, 4});`. A false positive (the array lives to the end of the full
  // expression, which the copy is part of), but a user's -Werror build must not meet it.
  Dims(std::initializer_list<int64_t> v) {
    reserve(v.size());
    for (int64_t x : v) data()[size_++] = x;
  }
  Dims(std::span<const int64_t> v) { assign(v.data(), v.size()); }
  Dims(const std::vector<int64_t>& v) { assign(v.data(), v.size()); }
  explicit Dims(size_t n, int64_t fill = 0) {
    resize(n);
    std::fill(begin(), end(), fill);
  }
  Dims(const Dims& o) { assign(o.data(), o.size()); }
  Dims(Dims&& o) noexcept { steal(o); }
  Dims& operator=(const Dims& o) {
    if (this != &o) assign(o.data(), o.size());
    return *this;
  }
  Dims& operator=(Dims&& o) noexcept {
    if (this != &o) {
      release();
      steal(o);
    }
    return *this;
  }
  ~Dims() { release(); }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  int64_t* data() { return heap_ ? heap_ : inline_; }
  const int64_t* data() const { return heap_ ? heap_ : inline_; }
  int64_t* begin() { return data(); }
  int64_t* end() { return data() + size_; }
  const int64_t* begin() const { return data(); }
  const int64_t* end() const { return data() + size_; }
  int64_t& operator[](size_t i) { return data()[i]; }
  int64_t operator[](size_t i) const { return data()[i]; }
  int64_t& back() { return data()[size_ - 1]; }
  int64_t back() const { return data()[size_ - 1]; }
  operator std::span<const int64_t>() const { return {data(), size_}; }
  std::vector<int64_t> vec() const { return {begin(), end()}; }

  void push_back(int64_t v) {
    reserve(size_ + 1);
    data()[size_++] = v;
  }
  void insert(size_t pos, int64_t v) {
    push_back(0);
    int64_t* d = data();
    std::memmove(d + pos + 1, d + pos, (size_ - 1 - pos) * sizeof(int64_t));
    d[pos] = v;
  }
  void erase(size_t pos) {
    int64_t* d = data();
    std::memmove(d + pos, d + pos + 1, (size_ - 1 - pos) * sizeof(int64_t));
    --size_;
  }
  void resize(size_t n, int64_t fill = 0) {
    reserve(n);
    for (size_t i = size_; i < n; ++i) data()[i] = fill;
    size_ = static_cast<uint32_t>(n);
  }
  void clear() { size_ = 0; }

  /// Product of the entries (1 for an empty list).
  int64_t product() const {
    int64_t p = 1;
    for (int64_t v : *this) p *= v;
    return p;
  }

  friend bool operator==(const Dims& a, const Dims& b) {
    return a.size_ == b.size_ && std::equal(a.begin(), a.end(), b.begin());
  }

 private:
  void reserve(size_t n) {
    if (n <= capacity()) return;
    size_t cap = std::max(n, 2 * capacity());
    auto* p = new int64_t[cap];
    std::memcpy(p, data(), size_ * sizeof(int64_t));
    release();
    heap_ = p;
    cap_ = static_cast<uint32_t>(cap);
  }
  size_t capacity() const { return heap_ ? cap_ : kInline; }
  void assign(const int64_t* p, size_t n) {
    size_ = 0;
    reserve(n);
    std::memcpy(data(), p, n * sizeof(int64_t));
    size_ = static_cast<uint32_t>(n);
  }
  void release() {
    delete[] heap_;
    heap_ = nullptr;
    cap_ = 0;
  }
  void steal(Dims& o) {
    size_ = o.size_;
    if (o.heap_) {
      heap_ = o.heap_;
      cap_ = o.cap_;
      o.heap_ = nullptr;
      o.cap_ = 0;
    } else {
      heap_ = nullptr;
      std::memcpy(inline_, o.inline_, size_ * sizeof(int64_t));
    }
    o.size_ = 0;
  }

  int64_t* heap_ = nullptr;
  uint32_t size_ = 0;
  uint32_t cap_ = 0;
  int64_t inline_[kInline];
};

}  // namespace kiln
