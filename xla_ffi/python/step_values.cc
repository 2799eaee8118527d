// One step of Python values to the columns' bytes (see step_values.h).
#include "python/step_values.h"

#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>

namespace gearjax {
namespace {

// Stores an integer as the column's integer type; false if it does not fit.
bool StoreInteger(long long value, const StepFormat& f, uint8_t* dst) {
  auto store = [&](auto typed) {
    using T = decltype(typed);
    if (value < static_cast<long long>(std::numeric_limits<T>::min()) ||
        (value > 0 && static_cast<unsigned long long>(value) >
                          static_cast<unsigned long long>(std::numeric_limits<T>::max()))) {
      return false;
    }
    const T v = static_cast<T>(value);
    std::memcpy(dst, &v, sizeof(T));
    return true;
  };
  if (f.kind == 'i') {
    switch (f.itemsize) {
      case 1: return store(int8_t{});
      case 2: return store(int16_t{});
      case 4: return store(int32_t{});
      case 8: return store(int64_t{});
    }
  } else if (f.kind == 'u') {
    switch (f.itemsize) {
      case 1: return store(uint8_t{});
      case 2: return store(uint16_t{});
      case 4: return store(uint32_t{});
      case 8: return store(uint64_t{});
    }
  }
  return false;
}

// Stores a double as a float32 or float64 column value; false for float16
// (no exact conversion here) and for finite values beyond float32's range
// (NumPy would store inf with a warning: the general path does that).
bool StoreFloat(double value, const StepFormat& f, uint8_t* dst) {
  if (f.kind != 'f') return false;
  if (f.itemsize == 8) {
    std::memcpy(dst, &value, 8);
    return true;
  }
  if (f.itemsize == 4) {
    if (std::isfinite(value) && std::fabs(value) > FLT_MAX) return false;
    const float v = static_cast<float>(value);
    std::memcpy(dst, &v, 4);
    return true;
  }
  return false;
}

// Whether `value` is a NumPy array or scalar (numpy.ndarray, numpy.generic:
// the types looked up once). Only these are taken as buffers: bytes,
// bytearray, memoryview, array.array and JAX arrays expose the buffer
// protocol too, and the general path decides for them (NumPy reads bytes as
// strings, say), so both paths take the same values.
bool IsNumpyValue(PyObject* value) {
  static PyObject* ndarray = nullptr;
  static PyObject* generic = nullptr;
  if (ndarray == nullptr || generic == nullptr) {
    PyObject* numpy = PyImport_ImportModule("numpy");
    if (numpy != nullptr) {
      ndarray = PyObject_GetAttrString(numpy, "ndarray");  // kept for the process
      generic = PyObject_GetAttrString(numpy, "generic");
      Py_DECREF(numpy);
    }
    if (ndarray == nullptr || generic == nullptr || !PyType_Check(ndarray) ||
        !PyType_Check(generic)) {
      PyErr_Clear();
      Py_CLEAR(ndarray);
      Py_CLEAR(generic);
      return false;
    }
  }
  return PyObject_TypeCheck(value, reinterpret_cast<PyTypeObject*>(ndarray)) ||
         PyObject_TypeCheck(value, reinterpret_cast<PyTypeObject*>(generic));
}

// A Python number into a scalar column (step shape ()), as NumPy converts it
// under cast_to_column's rules: bool into any of bool/int/float; int into int
// (in range) or float; float into float. Anything else, and any column of
// another shape (the general path refuses a number for a (1,) column):
// false.
bool ConvertNumber(PyObject* value, const StepFormat& f, uint8_t* dst) {
  if (!f.shape.empty()) return false;
  if (PyBool_Check(value)) {
    const bool b = value == Py_True;
    if (f.kind == 'b') {
      *dst = b ? 1 : 0;
      return true;
    }
    return f.kind == 'f' ? StoreFloat(b ? 1.0 : 0.0, f, dst) : StoreInteger(b, f, dst);
  }
  if (PyLong_Check(value)) {
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (overflow != 0 || (v == -1 && PyErr_Occurred())) {
      PyErr_Clear();
      return false;
    }
    return f.kind == 'f' ? StoreFloat(static_cast<double>(v), f, dst) : StoreInteger(v, f, dst);
  }
  if (PyFloat_Check(value)) return StoreFloat(PyFloat_AS_DOUBLE(value), f, dst);
  return false;
}

// The kind of a buffer's struct format ('?', 'b', 'H', 'f', ... with an
// optional native or little-endian byte-order mark); 0 for anything else.
char KindOfFormat(const char* format) {
  if (format == nullptr) return 'u';  // plain bytes
  if (*format == '@' || *format == '=' || *format == '<') ++format;
  if (format[0] == '\0' || format[1] != '\0') return 0;
  switch (format[0]) {
    case '?': return 'b';
    case 'b': case 'h': case 'i': case 'l': case 'q': return 'i';
    case 'B': case 'H': case 'I': case 'L': case 'Q': return 'u';
    case 'e': case 'f': case 'd': return 'f';
  }
  return 0;
}

// A scalar buffer's value as a Python number would hold it: integers (up to
// 2**63 - 1) and float32/float64 values, stored under ConvertNumber's rules.
bool ConvertScalarBuffer(const Py_buffer& view, char kind, const StepFormat& f, uint8_t* dst) {
  if (!f.shape.empty()) return false;
  if (kind == 'i' || kind == 'u') {
    long long v = 0;
    if (kind == 'i') {
      switch (view.itemsize) {
        case 1: v = *static_cast<const int8_t*>(view.buf); break;
        case 2: v = *static_cast<const int16_t*>(view.buf); break;
        case 4: v = *static_cast<const int32_t*>(view.buf); break;
        case 8: v = *static_cast<const int64_t*>(view.buf); break;
        default: return false;
      }
    } else {
      uint64_t u = 0;
      switch (view.itemsize) {
        case 1: u = *static_cast<const uint8_t*>(view.buf); break;
        case 2: u = *static_cast<const uint16_t*>(view.buf); break;
        case 4: u = *static_cast<const uint32_t*>(view.buf); break;
        case 8: u = *static_cast<const uint64_t*>(view.buf); break;
        default: return false;
      }
      if (u > static_cast<uint64_t>(std::numeric_limits<long long>::max())) return false;
      v = static_cast<long long>(u);
    }
    return f.kind == 'f' ? StoreFloat(static_cast<double>(v), f, dst) : StoreInteger(v, f, dst);
  }
  if (kind == 'f' && (view.itemsize == 4 || view.itemsize == 8)) {
    const double v = view.itemsize == 8 ? *static_cast<const double*>(view.buf)
                                        : *static_cast<const float*>(view.buf);
    return StoreFloat(v, f, dst);
  }
  return false;
}

// A NumPy array or scalar: of exactly the column's dtype and shape, copied; or
// a scalar (NumPy integer or float scalar, 0-d array) of another width, into
// a scalar column, converted as a Python number would be.
bool ConvertBuffer(PyObject* value, const StepFormat& f, uint8_t* dst) {
  if (!IsNumpyValue(value) || !PyObject_CheckBuffer(value)) return false;
  Py_buffer view;
  if (PyObject_GetBuffer(value, &view, PyBUF_RECORDS_RO) != 0) {
    PyErr_Clear();
    return false;
  }
  const char kind = KindOfFormat(view.format);
  bool ok = PyBuffer_IsContiguous(&view, 'C');
  if (ok && kind == f.kind && view.itemsize == f.itemsize &&
      view.ndim == static_cast<int>(f.shape.size()) && view.len == f.bytes()) {
    for (int d = 0; ok && d < view.ndim; ++d) ok = view.shape[d] == f.shape[d];
    if (ok) std::memcpy(dst, view.buf, static_cast<size_t>(view.len));
  } else {
    ok = ok && view.ndim == 0 && ConvertScalarBuffer(view, kind, f, dst);
  }
  PyBuffer_Release(&view);
  return ok;
}

}  // namespace

bool ConvertStep(nanobind::handle step, const std::vector<StepColumn>& columns,
                 std::vector<uint8_t>& out) {
  PyObject* dict = step.ptr();
  if (!PyDict_CheckExact(dict) || PyDict_GET_SIZE(dict) != static_cast<Py_ssize_t>(columns.size())) {
    return false;
  }
  int64_t total = 0;
  for (const StepColumn& c : columns) {
    if (c.format.kind == 0) return false;
    total += c.format.bytes();
  }
  out.resize(static_cast<size_t>(total));
  uint8_t* dst = out.data();
  for (const StepColumn& c : columns) {
    PyObject* value = PyDict_GetItemWithError(dict, c.name.ptr());  // borrowed
    if (value == nullptr) {
      PyErr_Clear();
      return false;
    }
    if (!ConvertNumber(value, c.format, dst) && !ConvertBuffer(value, c.format, dst)) return false;
    dst += c.format.bytes();
  }
  return true;
}

}  // namespace gearjax
