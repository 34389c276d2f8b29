/*
 * rankstat._fastpath: the per-call hot path of rankstat's prometheus_client-compatible metric classes.
 *
 * SGLang calls metric objects per request and per streamed chunk: `child.inc()`, `child.set(v)`,
 * `child.observe(v)` and `family.labels(**kw).observe(v)`. Through ctypes each C call costs ~0.7 us and
 * the label handling in Python a few more; here a method call is one CPython method dispatch plus one
 * indirect call into librankstat.so.
 *
 * - bind(lib): takes the addresses of rankstat_counter_add, rankstat_gauge_set, rankstat_gauge_add and
 *   rankstat_histogram_observe from the loaded ctypes CDLL (no link-time dependency on librankstat.so,
 *   so the extension loads whichever library the package found).
 * - Value(reporter_address, series_id, kind): one series (a labelled child). kind 1 counter, 2 gauge,
 *   3 histogram, 4 summary. reporter_address 0 (or None): every update is a no-op.
 *   After a fork: `_detach()` forgets the parent's reporter; the Value's next update first calls
 *   `self._rebind()` (a subclass registers the series in the child's own segment and calls
 *   `_bind(address, id)`; the default makes the Value a no-op); checked only when the reporter is NULL.
 * - Family: `_labelnames` (tuple of str) and `_children` (dict: tuple of str -> child) live in C slots;
 *   `labels(*values, **kw)` has prometheus_client's checks and messages, and calls
 *   `self._new_child(key)` on a miss.
 *
 * This file holds bind(), bound() and the module's initialisation; fastpath_internal.h lists the other
 * files, the threading contract and what they share.
 */
#include "fastpath_internal.h"

/* The process-wide function pointers bind() sets (declared in fastpath_internal.h). */
rankstat_update_fn rankstat_fp_fn_counter_add;
rankstat_update_fn rankstat_fp_fn_gauge_set;
rankstat_update_fn rankstat_fp_fn_gauge_add;
rankstat_update_fn rankstat_fp_fn_histogram_observe;
rankstat_bucket_add_fn rankstat_fp_fn_bucket_add;
rankstat_update_fn rankstat_fp_fn_add_sum;

/* Interned by PyInit__fastpath. */
PyObject* rankstat_fp_str_new_child;
PyObject* rankstat_fp_str_rebind;

/* The address of lib.<name> (a ctypes function pointer), or NULL with no error set if lib lacks it. */
static int function_address(PyObject* ctypes_cast, PyObject* c_void_p, PyObject* lib, const char* name,
                            void** out) {
  *out = NULL;
  PyObject* fn = PyObject_GetAttrString(lib, name);
  if (fn == NULL) {
    if (PyErr_ExceptionMatches(PyExc_AttributeError)) {
      PyErr_Clear();
      return 0;
    }
    return -1;
  }
  PyObject* pointer = PyObject_CallFunctionObjArgs(ctypes_cast, fn, c_void_p, NULL);
  Py_DECREF(fn);
  if (pointer == NULL) return -1;
  PyObject* value = PyObject_GetAttrString(pointer, "value");
  Py_DECREF(pointer);
  if (value == NULL) return -1;
  if (value != Py_None) *out = PyLong_AsVoidPtr(value);
  Py_DECREF(value);
  if (*out == NULL && PyErr_Occurred()) return -1;
  return 0;
}

static PyObject* module_bind(PyObject* module, PyObject* lib) {
  (void)module;
  static const char* names[] = {"rankstat_counter_add",
                                "rankstat_gauge_set",
                                "rankstat_gauge_add",
                                "rankstat_histogram_observe",
                                "rankstat_histogram_bucket_add",
                                "rankstat_histogram_add_sum"};
  enum { NAMES = sizeof names / sizeof names[0] };
  void* addresses[NAMES] = {NULL, NULL, NULL, NULL, NULL, NULL};
  PyObject* ctypes = PyImport_ImportModule("ctypes");
  if (ctypes == NULL) return NULL;
  PyObject* cast = PyObject_GetAttrString(ctypes, "cast");
  PyObject* c_void_p = PyObject_GetAttrString(ctypes, "c_void_p");
  Py_DECREF(ctypes);
  if (cast == NULL || c_void_p == NULL) {
    Py_XDECREF(cast);
    Py_XDECREF(c_void_p);
    return NULL;
  }
  int rc = 0;
  for (size_t i = 0; i < NAMES && rc == 0; i++)
    rc = function_address(cast, c_void_p, lib, names[i], &addresses[i]);
  Py_DECREF(cast);
  Py_DECREF(c_void_p);
  if (rc < 0) return NULL;
  /* rankstat_gauge_add and the histogram-internals functions came later than the others: a library
   * without them still binds (gauge inc/dec, Cell.inc then raise RuntimeError). */
  for (size_t i = 0; i < 4; i++) {
    if (addresses[i] == NULL && i != 2) {
      PyErr_Format(PyExc_AttributeError, "the rankstat library lacks %s: it is older than this package",
                   names[i]);
      return NULL;
    }
  }
  /* ISO C forbids converting between object and function pointers directly; go through uintptr_t. */
  /* NOLINTBEGIN(performance-no-int-to-ptr): dlsym's addresses, converted once, as ISO C allows */
  rankstat_fp_fn_counter_add = (rankstat_update_fn)(uintptr_t)addresses[0];
  rankstat_fp_fn_gauge_set = (rankstat_update_fn)(uintptr_t)addresses[1];
  rankstat_fp_fn_gauge_add = (rankstat_update_fn)(uintptr_t)addresses[2];
  rankstat_fp_fn_histogram_observe = (rankstat_update_fn)(uintptr_t)addresses[3];
  rankstat_fp_fn_bucket_add = (rankstat_bucket_add_fn)(uintptr_t)addresses[4];
  rankstat_fp_fn_add_sum = (rankstat_update_fn)(uintptr_t)addresses[5];
  /* NOLINTEND(performance-no-int-to-ptr) */
  Py_RETURN_NONE;
}

static PyObject* module_bound(PyObject* module, PyObject* unused) {
  (void)module;
  (void)unused;
  PyObject* out = PyList_New(0);
  if (out == NULL) return NULL;
  const struct {
    const char* name;
    int bound;
  } table[] = {{"rankstat_counter_add", rankstat_fp_fn_counter_add != NULL},
               {"rankstat_gauge_set", rankstat_fp_fn_gauge_set != NULL},
               {"rankstat_gauge_add", rankstat_fp_fn_gauge_add != NULL},
               {"rankstat_histogram_observe", rankstat_fp_fn_histogram_observe != NULL},
               {"rankstat_histogram_bucket_add", rankstat_fp_fn_bucket_add != NULL},
               {"rankstat_histogram_add_sum", rankstat_fp_fn_add_sum != NULL}};
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
    if (!table[i].bound) continue;
    PyObject* name = PyUnicode_FromString(table[i].name);
    if (name == NULL || PyList_Append(out, name) < 0) {
      Py_XDECREF(name);
      Py_DECREF(out);
      return NULL;
    }
    Py_DECREF(name);
  }
  return out;
}

static PyMethodDef module_methods[] = {
    {"bind", module_bind, METH_O,
     "bind(lib): take the update functions' addresses from the loaded ctypes CDLL of librankstat.so."},
    {"bound", module_bound, METH_NOARGS, "bound(): the names of the librankstat functions bound so far."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef fastpath_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "rankstat._fastpath",
    .m_doc = "rankstat's per-call hot path (CPython extension); rankstat._slowpath is its pure-Python twin.",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__fastpath(void); /* the module's only exported symbol */
PyMODINIT_FUNC PyInit__fastpath(void) {
  if (PyType_Ready(&rankstat_fp_value_type) < 0 || PyType_Ready(&rankstat_fp_family_type) < 0 ||
      PyType_Ready(&rankstat_fp_cell_type) < 0)
    return NULL;
  rankstat_fp_str_new_child = PyUnicode_InternFromString("_new_child");
  if (rankstat_fp_str_new_child == NULL) return NULL;
  rankstat_fp_str_rebind = PyUnicode_InternFromString("_rebind");
  if (rankstat_fp_str_rebind == NULL) return NULL;
  PyObject* module = PyModule_Create(&fastpath_module);
  if (module == NULL) return NULL;
  if (PyModule_AddObjectRef(module, "Value", (PyObject*)&rankstat_fp_value_type) < 0 ||
      PyModule_AddObjectRef(module, "Family", (PyObject*)&rankstat_fp_family_type) < 0 ||
      PyModule_AddObjectRef(module, "Cell", (PyObject*)&rankstat_fp_cell_type) < 0 ||
      PyModule_AddIntConstant(module, "KIND_COUNTER", KIND_COUNTER) < 0 ||
      PyModule_AddIntConstant(module, "KIND_GAUGE", KIND_GAUGE) < 0 ||
      PyModule_AddIntConstant(module, "KIND_HISTOGRAM", KIND_HISTOGRAM) < 0 ||
      PyModule_AddIntConstant(module, "KIND_SUMMARY", KIND_SUMMARY) < 0) {
    Py_DECREF(module);
    return NULL;
  }
  return module;
}
