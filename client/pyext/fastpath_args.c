/* rankstat._fastpath: the update methods' arguments, parsed with prometheus_client's signatures,
 * conversions and messages (Value and Cell updates). */
#include "fastpath_internal.h"

/* float(obj) with prometheus_client's semantics: ints, floats, bools, numpy scalars (__float__ or
 * __index__); anything else is a TypeError. */
static inline int to_double(PyObject* obj, double* out) {
  if (PyFloat_CheckExact(obj)) {
    *out = PyFloat_AS_DOUBLE(obj);
    return 0;
  }
  if (PyLong_CheckExact(obj)) {
    double d = PyLong_AsDouble(obj);
    if (d == -1.0 && PyErr_Occurred()) return -1;
    *out = d;
    return 0;
  }
  double d = PyFloat_AsDouble(obj);
  if (d == -1.0 && PyErr_Occurred()) return -1;
  *out = d;
  return 0;
}

/* Gauge.set's float(value): prometheus_client's Gauge.set calls float(), so text ("1.5") is accepted. */
static inline int to_double_or_text(PyObject* obj, double* out) {
  if (PyFloat_CheckExact(obj) || PyLong_CheckExact(obj) || !PyUnicode_Check(obj)) return to_double(obj, out);
  PyObject* number = PyFloat_FromString(obj);
  if (number == NULL) return -1;
  *out = PyFloat_AS_DOUBLE(number);
  Py_DECREF(number);
  return 0;
}

/* Parses `(amount[, exemplar])` given positionally or by keyword: `argname` is the name of the number
 * (prometheus_client: `amount`, Gauge.set: `value`), `exemplar` only where `allow_exemplar` (stored in
 * *exemplar, borrowed: validated as prometheus_client validates it, then dropped as its multiprocess
 * mode drops it); `text`: str accepted as float() would (Gauge.set). A missing
 * optional amount leaves *out untouched. */
int rankstat_fp_parse_amount(const char* method, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames,
                             const char* argname, int required, int allow_exemplar, int text, double* out,
                             PyObject** exemplar) {
  PyObject* amount = NULL;
  if (exemplar != NULL) *exemplar = NULL;
  Py_ssize_t max_positional = allow_exemplar ? 2 : 1;
  if (nargs > max_positional) {
    PyErr_Format(PyExc_TypeError, "%s() takes at most %zd positional argument%s (%zd given)", method,
                 max_positional, max_positional == 1 ? "" : "s", nargs);
    return -1;
  }
  if (nargs >= 1) amount = args[0];
  if (nargs >= 2 && exemplar != NULL) *exemplar = args[1];
  if (kwnames != NULL) {
    Py_ssize_t nkw = PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t i = 0; i < nkw; i++) {
      PyObject* key = PyTuple_GET_ITEM(kwnames, i);
      if (PyUnicode_CompareWithASCIIString(key, argname) == 0) {
        if (amount != NULL) {
          PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument '%s'", method, argname);
          return -1;
        }
        amount = args[nargs + i];
      } else if (allow_exemplar && PyUnicode_CompareWithASCIIString(key, "exemplar") == 0) {
        if (nargs >= 2) {
          PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument 'exemplar'", method);
          return -1;
        }
        if (exemplar != NULL) *exemplar = args[nargs + i];
      } else {
        PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%U'", method, key);
        return -1;
      }
    }
  }
  if (amount == NULL) {
    if (required) {
      PyErr_Format(PyExc_TypeError, "%s() missing 1 required positional argument: '%s'", method, argname);
      return -1;
    }
    return 0;
  }
  return text ? to_double_or_text(amount, out) : to_double(amount, out);
}
