// A new NumPy array that owns its buffer from the start (so nothing leaks if
// a later step throws), and the buffer to fill. Shared by the extension's
// modules.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstddef>
#include <initializer_list>

namespace gearjax {

template <typename T>
struct NewArray {
  explicit NewArray(std::initializer_list<size_t> shape) {
    size_t n = 1;
    for (size_t d : shape) n *= d;
    data = new T[n > 0 ? n : 1];
    nanobind::capsule owner(data, [](void* p) noexcept { delete[] static_cast<T*>(p); });
    array = nanobind::ndarray<nanobind::numpy, T>(data, shape.size(), shape.begin(), owner);
  }
  T* data;
  nanobind::ndarray<nanobind::numpy, T> array;
};

}  // namespace gearjax
