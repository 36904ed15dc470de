// A vector of trivially copyable elements that stores up to N of them inline. Shapes, strides and
// node inputs are almost always tiny; keeping them inline keeps tracing free of heap traffic.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <new>
#include <type_traits>

namespace torch_pjrt {

template <class T, size_t N>
class SmallVec {
  static_assert(std::is_trivially_copyable_v<T>, "SmallVec holds trivially copyable types only");

 public:
  SmallVec() = default;
  SmallVec(std::initializer_list<T> items) { assign(items.begin(), items.end()); }
  template <class It>
  SmallVec(It first, It last) {
    assign(first, last);
  }
  SmallVec(size_t n, const T& value) { resize(n, value); }
  SmallVec(const SmallVec& other) { assign(other.begin(), other.end()); }
  SmallVec(SmallVec&& other) noexcept { steal(other); }
  SmallVec& operator=(const SmallVec& other) {
    if (this != &other) assign(other.begin(), other.end());
    return *this;
  }
  SmallVec& operator=(SmallVec&& other) noexcept {
    if (this != &other) {
      release();
      steal(other);
    }
    return *this;
  }
  ~SmallVec() { release(); }

  template <class It>
  void assign(It first, It last) {
    size_ = 0;
    reserve(static_cast<size_t>(last - first));
    for (; first != last; ++first) data_[size_++] = *first;
  }
  void reserve(size_t n) {
    if (n <= capacity_) return;
    size_t cap = capacity_ * 2 > n ? capacity_ * 2 : n;
    T* heap = static_cast<T*>(std::malloc(cap * sizeof(T)));
    if (heap == nullptr) throw std::bad_alloc();
    if (size_) std::memcpy(static_cast<void*>(heap), data_, size_ * sizeof(T));
    if (data_ != inline_data()) std::free(data_);
    data_ = heap;
    capacity_ = cap;
  }
  void push_back(const T& v) {
    if (size_ == capacity_) {
      T copy = v;  // `v` may live inside this vector
      reserve(size_ + 1);
      data_[size_++] = copy;
      return;
    }
    data_[size_++] = v;
  }
  void pop_back() { --size_; }
  void resize(size_t n, const T& value = T()) {
    reserve(n);
    for (size_t i = size_; i < n; ++i) data_[i] = value;
    size_ = n;
  }
  void clear() { size_ = 0; }
  void erase_at(size_t i) {
    for (size_t j = i + 1; j < size_; ++j) data_[j - 1] = data_[j];
    --size_;
  }
  void insert_at(size_t i, const T& v) {
    T copy = v;
    reserve(size_ + 1);
    for (size_t j = size_; j > i; --j) data_[j] = data_[j - 1];
    data_[i] = copy;
    ++size_;
  }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T* data() { return data_; }
  const T* data() const { return data_; }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }
  T& back() { return data_[size_ - 1]; }
  const T& back() const { return data_[size_ - 1]; }
  T* begin() { return data_; }
  T* end() { return data_ + size_; }
  const T* begin() const { return data_; }
  const T* end() const { return data_ + size_; }

  bool operator==(const SmallVec& o) const {
    if (size_ != o.size_) return false;
    for (size_t i = 0; i < size_; ++i) {
      if (!(data_[i] == o.data_[i])) return false;
    }
    return true;
  }
  bool operator!=(const SmallVec& o) const { return !(*this == o); }

 private:
  T* inline_data() { return reinterpret_cast<T*>(inline_); }
  void release() {
    if (data_ != inline_data()) std::free(data_);
    data_ = inline_data();
    capacity_ = N;
    size_ = 0;
  }
  void steal(SmallVec& other) {
    if (other.data_ == other.inline_data()) {
      data_ = inline_data();
      capacity_ = N;
      size_ = other.size_;
      std::memcpy(static_cast<void*>(data_), other.data_, size_ * sizeof(T));
    } else {
      data_ = other.data_;
      capacity_ = other.capacity_;
      size_ = other.size_;
      other.data_ = other.inline_data();
      other.capacity_ = N;
    }
    other.size_ = 0;
  }

  alignas(T) unsigned char inline_[N * sizeof(T)];
  T* data_ = inline_data();
  size_t size_ = 0;
  size_t capacity_ = N;
};

using Dims = SmallVec<int64_t, 6>;

inline int64_t NumElements(const Dims& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

// Whether `strides` (in elements) are row-major for `sizes`; dims of size 1 may have any stride.
inline bool IsContiguous(const Dims& sizes, const Dims& strides) {
  int64_t expected = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    if (sizes[i] == 1) continue;
    if (strides[i] != expected) return false;
    expected *= sizes[i];
  }
  return true;
}

}  // namespace torch_pjrt
