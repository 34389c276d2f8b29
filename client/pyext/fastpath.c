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
 * The GIL is held across every call into librankstat: a reporter is single-writer, and the GIL is what
 * serialises the Python threads of one rank. The library's update calls never block.
 *
 * The function pointers are process-wide statics: one librankstat per process, single-phase module
 * initialisation (no subinterpreter support).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <stdint.h>

/* The series kinds are the C ABI's (RANKSTAT_KIND_*): defined once, in the header every binding reads. */
#include "rankstat/rankstat.h"

typedef int (*rankstat_update_fn)(void* reporter, uint32_t id, double value);

static rankstat_update_fn fn_counter_add;
static rankstat_update_fn fn_gauge_set;
static rankstat_update_fn fn_gauge_add;
static rankstat_update_fn fn_histogram_observe;
/* A histogram child's internals as SGLang's older call sites write them (`child._buckets[i].inc(n)`,
 * `child._sum.inc(v)`): optional in bind() (a Cell raises RuntimeError when its function is missing). */
typedef int (*rankstat_bucket_add_fn)(void* reporter, uint32_t id, uint32_t bucket, uint64_t count);
static rankstat_bucket_add_fn fn_bucket_add;
static rankstat_update_fn fn_add_sum;

enum {
  KIND_COUNTER = RANKSTAT_KIND_COUNTER,
  KIND_GAUGE = RANKSTAT_KIND_GAUGE,
  KIND_HISTOGRAM = RANKSTAT_KIND_HISTOGRAM,
  KIND_SUMMARY = RANKSTAT_KIND_SUMMARY
};

static const char* kind_name(int kind) {
  switch (kind) {
    case KIND_COUNTER:
      return "counter";
    case KIND_GAUGE:
      return "gauge";
    case KIND_HISTOGRAM:
      return "histogram";
    case KIND_SUMMARY:
      return "summary";
    default:
      return "uninitialised";
  }
}

static PyObject* str_new_child; /* interned "_new_child" */
static PyObject* str_rebind;    /* interned "_rebind" */

/* ---- argument helpers ------------------------------------------------------------------------- */

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
static int parse_amount(const char* method, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames,
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

/* ---- Value ------------------------------------------------------------------------------------ */

typedef struct {
  PyObject_HEAD void* reporter; /* rankstat_reporter*; NULL: updates are no-ops */
  uint32_t id;
  int kind;
  int detached; /* the process forked since the Value was bound: the next update calls self._rebind() */
} ValueObject;

static PyObject* wrong_kind(ValueObject* self, const char* method) {
  PyErr_Format(PyExc_AttributeError, "%s() is not available on a %s series", method, kind_name(self->kind));
  return NULL;
}

static PyObject* unbound(const char* function) {
  PyErr_Format(PyExc_RuntimeError,
               "rankstat._fastpath: %s is not bound (call bind(lib) with a librankstat that has it)",
               function);
  return NULL;
}

static int value_init(ValueObject* self, PyObject* args, PyObject* kwds) {
  static char* keywords[] = {"reporter_address", "series_id", "kind", NULL};
  PyObject* address;
  unsigned long long id;
  int kind;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "OKi:Value", keywords, &address, &id, &kind)) return -1;
  void* reporter = NULL;
  if (address != Py_None) {
    reporter = PyLong_AsVoidPtr(address);
    if (reporter == NULL && PyErr_Occurred()) return -1;
  }
  if (id > UINT32_MAX) {
    PyErr_SetString(PyExc_ValueError, "series_id must fit in 32 bits");
    return -1;
  }
  if (kind < KIND_COUNTER || kind > KIND_SUMMARY) {
    PyErr_Format(PyExc_ValueError,
                 "kind must be 1 (counter), 2 (gauge), 3 (histogram) or 4 (summary), not %d", kind);
    return -1;
  }
  self->reporter = reporter;
  self->id = (uint32_t)id;
  self->kind = kind;
  self->detached = 0;
  return 0;
}

/* A Family is a Value too (prometheus_client's metric objects are both the family and, once labelled or
 * when unlabelled, the series): the fields below follow the Value's. */
typedef struct {
  ValueObject value;
  PyObject* labelnames;  /* tuple of str */
  PyObject* children;    /* dict: tuple of str -> child */
  PyObject* labelvalues; /* tuple of str: empty on a family, the child's values on a labelled child */
} FamilyObject;

static PyTypeObject FamilyType;

/* A labelled family that is not itself a child: prometheus_client refuses its updates ("not observable"). */
static int is_labelled_parent(ValueObject* self) {
  if (!PyObject_TypeCheck((PyObject*)self, &FamilyType)) return 0;
  FamilyObject* family = (FamilyObject*)self;
  return family->labelnames != NULL && PyTuple_GET_SIZE(family->labelnames) > 0 &&
         (family->labelvalues == NULL || PyTuple_GET_SIZE(family->labelvalues) == 0);
}

/* A detached Value (reporter NULL, detached set: its process forked since it was bound, and the reporter it
 * had is the parent's) asks its owner to bind it in this process before its first update, as
 * prometheus_client's values re-bind to the child's own file when they see a new pid. */
static int rebind(ValueObject* self) {
  PyObject* result = PyObject_CallMethodNoArgs((PyObject*)self, str_rebind);
  if (result == NULL) return -1;
  Py_DECREF(result);
  return 0;
}

/* Only reached with a NULL reporter, which a bound Value's update tests anyway: a detached Value re-binds,
 * a labelled parent refuses with prometheus_client's message, anything else is a no-op. -1 on error. */
static int unbound_update(ValueObject* self) {
  if (self->detached) return rebind(self);
  if (is_labelled_parent(self)) {
    PyErr_Format(PyExc_ValueError, "%s metric is missing label values", kind_name(self->kind));
    return -1;
  }
  return 0;
}

/* prometheus_client validates a truthy exemplar (label names, at most 128 characters in all) after the
 * update, then drops it in multiprocess mode. The rule lives in one place, rankstat._slowpath. */
static PyObject* exemplar_validator;

static int check_exemplar(PyObject* exemplar) {
  if (exemplar == NULL || exemplar == Py_None) return 0;
  int truth = PyObject_IsTrue(exemplar);
  if (truth <= 0) return truth;
  if (exemplar_validator == NULL) {
    PyObject* module = PyImport_ImportModule("rankstat._slowpath");
    if (module == NULL) return -1;
    exemplar_validator = PyObject_GetAttrString(module, "validate_exemplar");
    Py_DECREF(module);
    if (exemplar_validator == NULL) return -1;
  }
  PyObject* result = PyObject_CallOneArg(exemplar_validator, exemplar);
  if (result == NULL) return -1;
  Py_DECREF(result);
  return 0;
}

static void value_dealloc(ValueObject* self) {
  Py_TYPE(self)->tp_free((PyObject*)self);
}

static PyObject* value_inc(ValueObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  double amount = 1.0;
  if (self->kind == KIND_COUNTER) {
    PyObject* exemplar = NULL;
    if (self->reporter == NULL && unbound_update(self) < 0) return NULL;
    if (parse_amount("inc", args, nargs, kwnames, "amount", 0, 1, 0, &amount, &exemplar) < 0) return NULL;
    /* NaN passes, as in prometheus_client (NaN < 0 is false): the total becomes NaN. */
    if (amount < 0) {
      PyErr_SetString(PyExc_ValueError, "Counters can only be incremented by non-negative amounts.");
      return NULL;
    }
    if (self->reporter != NULL) {
      if (fn_counter_add == NULL) return unbound("rankstat_counter_add");
      fn_counter_add(self->reporter, self->id, amount);
    }
    if (check_exemplar(exemplar) < 0) return NULL;
    Py_RETURN_NONE;
  }
  if (self->kind == KIND_GAUGE) {
    if (self->reporter == NULL && unbound_update(self) < 0) return NULL;
    if (parse_amount("inc", args, nargs, kwnames, "amount", 0, 0, 0, &amount, NULL) < 0) return NULL;
    if (self->reporter != NULL) {
      if (fn_gauge_add == NULL) return unbound("rankstat_gauge_add");
      fn_gauge_add(self->reporter, self->id, amount);
    }
    Py_RETURN_NONE;
  }
  return wrong_kind(self, "inc");
}

static PyObject* value_dec(ValueObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  if (self->kind != KIND_GAUGE) return wrong_kind(self, "dec");
  double amount = 1.0;
  if (self->reporter == NULL && unbound_update(self) < 0) return NULL;
  if (parse_amount("dec", args, nargs, kwnames, "amount", 0, 0, 0, &amount, NULL) < 0) return NULL;
  if (self->reporter != NULL) {
    if (fn_gauge_add == NULL) return unbound("rankstat_gauge_add");
    fn_gauge_add(self->reporter, self->id, -amount);
  }
  Py_RETURN_NONE;
}

static PyObject* value_set(ValueObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  if (self->kind != KIND_GAUGE) return wrong_kind(self, "set");
  double value = 0.0;
  if (self->reporter == NULL && unbound_update(self) < 0) return NULL;
  if (parse_amount("set", args, nargs, kwnames, "value", 1, 0, 1, &value, NULL) < 0) return NULL;
  if (self->reporter != NULL) {
    if (fn_gauge_set == NULL) return unbound("rankstat_gauge_set");
    fn_gauge_set(self->reporter, self->id, value);
  }
  Py_RETURN_NONE;
}

static PyObject* value_observe(ValueObject* self, PyObject* const* args, Py_ssize_t nargs,
                               PyObject* kwnames) {
  if (self->kind != KIND_HISTOGRAM && self->kind != KIND_SUMMARY) return wrong_kind(self, "observe");
  double amount = 0.0;
  PyObject* exemplar = NULL;
  if (self->reporter == NULL && unbound_update(self) < 0) return NULL;
  /* Histogram.observe(amount, exemplar=None); Summary.observe(amount) takes no exemplar. */
  if (parse_amount("observe", args, nargs, kwnames, "amount", 1, self->kind == KIND_HISTOGRAM, 0, &amount,
                   &exemplar) < 0)
    return NULL;
  if (self->reporter != NULL) {
    if (fn_histogram_observe == NULL) return unbound("rankstat_histogram_observe");
    fn_histogram_observe(self->reporter, self->id, amount);
  }
  /* prometheus_client checks the exemplar of an observation that found its bucket: never NaN's. */
  if (amount == amount && check_exemplar(exemplar) < 0) return NULL;
  Py_RETURN_NONE;
}

static PyObject* value_get_address(ValueObject* self, void* closure) {
  (void)closure;
  return PyLong_FromVoidPtr(self->reporter);
}

/* An address from Python: an int or None (NULL). 0 with *out set, or -1. */
static int parse_address(PyObject* value, void** out) {
  *out = NULL;
  if (value == Py_None) return 0;
  *out = PyLong_AsVoidPtr(value);
  return *out == NULL && PyErr_Occurred() ? -1 : 0;
}

/* Writable so a binding can turn a child into a no-op (0) when its reporter closes; a Value given an
 * address is no longer detached. */
static int value_set_address(ValueObject* self, PyObject* value, void* closure) {
  (void)closure;
  if (value == NULL) {
    PyErr_SetString(PyExc_TypeError, "cannot delete _reporter_address");
    return -1;
  }
  void* reporter = NULL;
  if (parse_address(value, &reporter) < 0) return -1;
  self->reporter = reporter;
  self->detached = 0;
  return 0;
}

static PyObject* value_get_detached(ValueObject* self, void* closure) {
  (void)closure;
  return PyBool_FromLong(self->detached);
}

/* _detach(): in a forked child, the reporter this Value holds is the parent's; it is forgotten (never
 * written or read again here) and the next update calls self._rebind() first. */
static PyObject* value_detach(ValueObject* self, PyObject* unused) {
  (void)unused;
  self->reporter = NULL;
  self->detached = 1;
  Py_RETURN_NONE;
}

/* _bind(reporter_address, series_id[, kind]): the series this Value writes from now on (address 0 or None:
 * a no-op); what _rebind() calls once the series is registered in this process's segment, and what a
 * family calls to become a series of its kind (a Family starts without one). */
static PyObject* value_bind(ValueObject* self, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2 && nargs != 3) {
    PyErr_Format(PyExc_TypeError, "_bind() takes 2 or 3 arguments (%zd given)", nargs);
    return NULL;
  }
  void* reporter = NULL;
  if (parse_address(args[0], &reporter) < 0) return NULL;
  PyObject* number = PyNumber_Index(args[1]);
  if (number == NULL) return NULL;
  int overflow = 0;
  const long long id = PyLong_AsLongLongAndOverflow(number, &overflow);
  Py_DECREF(number);
  if (id == -1 && PyErr_Occurred()) return NULL;
  if (overflow != 0 || id < 0 || id > (long long)UINT32_MAX) {
    PyErr_SetString(PyExc_ValueError, "series_id must fit in 32 bits");
    return NULL;
  }
  int kind = self->kind;
  if (nargs == 3) {
    const long k = PyLong_AsLong(args[2]);
    if (k == -1 && PyErr_Occurred()) return NULL;
    if (k < KIND_COUNTER || k > KIND_SUMMARY) {
      PyErr_Format(PyExc_ValueError,
                   "kind must be 1 (counter), 2 (gauge), 3 (histogram) or 4 (summary), not %ld", k);
      return NULL;
    }
    kind = (int)k;
  }
  self->reporter = reporter;
  self->id = (uint32_t)id;
  self->kind = kind;
  self->detached = 0;
  Py_RETURN_NONE;
}

/* The default _rebind(): nothing to bind to, so the Value becomes a no-op. Subclasses override it. */
static PyObject* value_default_rebind(ValueObject* self, PyObject* unused) {
  (void)unused;
  self->detached = 0;
  Py_RETURN_NONE;
}

static PyObject* value_get_id(ValueObject* self, void* closure) {
  (void)closure;
  return PyLong_FromUnsignedLong(self->id);
}

static PyObject* value_get_kind(ValueObject* self, void* closure) {
  (void)closure;
  return PyLong_FromLong(self->kind);
}

static PyObject* value_repr(ValueObject* self) {
  return PyUnicode_FromFormat("<%s %s series %u%s>", Py_TYPE(self)->tp_name, kind_name(self->kind),
                              (unsigned)self->id,
                              self->detached           ? " (detached)"
                              : self->reporter == NULL ? " (no-op)"
                                                       : "");
}

static PyMethodDef value_methods[] = {
    {"inc", (PyCFunction)(void (*)(void))value_inc, METH_FASTCALL | METH_KEYWORDS,
     "inc(amount=1): a counter's total or a gauge's value plus amount (counters: amount >= 0)."},
    {"dec", (PyCFunction)(void (*)(void))value_dec, METH_FASTCALL | METH_KEYWORDS,
     "dec(amount=1): a gauge's value minus amount."},
    {"set", (PyCFunction)(void (*)(void))value_set, METH_FASTCALL | METH_KEYWORDS,
     "set(value): a gauge's value."},
    {"observe", (PyCFunction)(void (*)(void))value_observe, METH_FASTCALL | METH_KEYWORDS,
     "observe(amount): one sample of a histogram or summary."},
    {"_detach", (PyCFunction)(void (*)(void))value_detach, METH_NOARGS,
     "_detach(): after a fork, forget the parent's reporter; the next update calls _rebind() first."},
    {"_bind", (PyCFunction)(void (*)(void))value_bind, METH_FASTCALL,
     "_bind(reporter_address, series_id[, kind]): write this series from now on (address 0: a no-op)."},
    {"_rebind", (PyCFunction)(void (*)(void))value_default_rebind, METH_NOARGS,
     "_rebind(): called before the first update of a detached Value; subclasses call _bind(). The default "
     "makes it a no-op."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef value_getset[] = {
    {"_reporter_address", (getter)value_get_address, (setter)value_set_address,
     "address of the rankstat_reporter (0: updates are no-ops)", NULL},
    {"_series_id", (getter)value_get_id, NULL, "the series id from registration", NULL},
    {"_kind", (getter)value_get_kind, NULL, "1 counter, 2 gauge, 3 histogram, 4 summary", NULL},
    {"_detached", (getter)value_get_detached, NULL, "True between _detach() and the next bind", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject ValueType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "rankstat._fastpath.Value",
    .tp_basicsize = sizeof(ValueObject),
    .tp_dealloc = (destructor)value_dealloc,
    .tp_repr = (reprfunc)value_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Value(reporter_address, series_id, kind): one series of a rankstat segment.",
    .tp_methods = value_methods,
    .tp_getset = value_getset,
    .tp_init = (initproc)value_init,
    .tp_new = PyType_GenericNew,
};

/* ---- Family ----------------------------------------------------------------------------------- */

static PyObject* family_new(PyTypeObject* type, PyObject* args, PyObject* kwds) {
  (void)args;
  (void)kwds;
  FamilyObject* self = (FamilyObject*)type->tp_alloc(type, 0);
  if (self == NULL) return NULL;
  self->labelnames = PyTuple_New(0);
  self->children = PyDict_New();
  self->labelvalues = PyTuple_New(0);
  if (self->labelnames == NULL || self->children == NULL || self->labelvalues == NULL) {
    Py_DECREF(self);
    return NULL;
  }
  return (PyObject*)self;
}

/* Accepts any arguments: the Python subclass's __init__ has prometheus_client's constructor. */
static int family_init(PyObject* self, PyObject* args, PyObject* kwds) {
  (void)self;
  (void)args;
  (void)kwds;
  return 0;
}

static int family_traverse(FamilyObject* self, visitproc visit, void* arg) {
  Py_VISIT(self->labelnames);
  Py_VISIT(self->children);
  Py_VISIT(self->labelvalues);
  return 0;
}

static int family_clear(FamilyObject* self) {
  Py_CLEAR(self->labelnames);
  Py_CLEAR(self->children);
  Py_CLEAR(self->labelvalues);
  return 0;
}

static void family_dealloc(FamilyObject* self) {
  PyObject_GC_UnTrack(self);
  family_clear(self);
  Py_TYPE(self)->tp_free((PyObject*)self);
}

static PyObject* family_get_labelnames(FamilyObject* self, void* closure) {
  (void)closure;
  if (self->labelnames == NULL) return PyTuple_New(0);
  return Py_NewRef(self->labelnames);
}

static int family_set_labelnames(FamilyObject* self, PyObject* value, void* closure) {
  (void)closure;
  if (value == NULL) {
    PyErr_SetString(PyExc_TypeError, "cannot delete _labelnames");
    return -1;
  }
  PyObject* names = PySequence_Tuple(value); /* any iterable: list, dict_keys, tuple */
  if (names == NULL) return -1;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(names); i++) {
    PyObject* name = PyTuple_GET_ITEM(names, i);
    if (!PyUnicode_Check(name)) {
      PyErr_Format(PyExc_TypeError, "label names must be str, not %.100s", Py_TYPE(name)->tp_name);
      Py_DECREF(names);
      return -1;
    }
  }
  Py_XSETREF(self->labelnames, names);
  return 0;
}

static PyObject* family_get_children(FamilyObject* self, void* closure) {
  (void)closure;
  if (self->children == NULL) {
    self->children = PyDict_New();
    if (self->children == NULL) return NULL;
  }
  return Py_NewRef(self->children);
}

static int family_set_children(FamilyObject* self, PyObject* value, void* closure) {
  (void)closure;
  if (value == NULL) {
    PyErr_SetString(PyExc_TypeError, "cannot delete _children");
    return -1;
  }
  if (!PyDict_Check(value)) {
    PyErr_Format(PyExc_TypeError, "_children must be a dict, not %.100s", Py_TYPE(value)->tp_name);
    return -1;
  }
  Py_XSETREF(self->children, Py_NewRef(value));
  return 0;
}

static PyObject* family_get_labelvalues(FamilyObject* self, void* closure) {
  (void)closure;
  if (self->labelvalues == NULL) return PyTuple_New(0);
  return Py_NewRef(self->labelvalues);
}

static int family_set_labelvalues(FamilyObject* self, PyObject* value, void* closure) {
  (void)closure;
  if (value == NULL) {
    PyErr_SetString(PyExc_TypeError, "cannot delete _labelvalues");
    return -1;
  }
  PyObject* values = PySequence_Tuple(value);
  if (values == NULL) return -1;
  Py_XSETREF(self->labelvalues, values);
  return 0;
}

/* prometheus_client's refusal of labels() on a child: "<metric> already has labels set ({...}); can not
 * chain calls to .labels()". */
static PyObject* already_labelled(FamilyObject* self) {
  PyObject* set = PyDict_New();
  if (set == NULL) return NULL;
  Py_ssize_t n = PyTuple_GET_SIZE(self->labelnames);
  if (PyTuple_GET_SIZE(self->labelvalues) < n) n = PyTuple_GET_SIZE(self->labelvalues);
  for (Py_ssize_t i = 0; i < n; i++) {
    if (PyDict_SetItem(set, PyTuple_GET_ITEM(self->labelnames, i), PyTuple_GET_ITEM(self->labelvalues, i)) <
        0) {
      Py_DECREF(set);
      return NULL;
    }
  }
  PyErr_Format(PyExc_ValueError, "%S already has labels set (%R); can not chain calls to .labels()",
               (PyObject*)self, set);
  Py_DECREF(set);
  return NULL;
}

/* Index of `name` in kwnames, trying position `hint` first (callers usually pass the labels in the
 * family's order) and pointer identity before string equality (label names are usually interned). Keyword
 * names that are equal but not the same object (built at run time, decoded from JSON) are compared at the
 * hint first, then only where the cached hashes agree: no quadratic string comparisons. */
static Py_ssize_t find_keyword(PyObject* kwnames, Py_ssize_t nkw, PyObject* name, Py_ssize_t hint) {
  if (hint < nkw && PyTuple_GET_ITEM(kwnames, hint) == name) return hint;
  for (Py_ssize_t j = 0; j < nkw; j++) {
    if (PyTuple_GET_ITEM(kwnames, j) == name) return j;
  }
  const Py_hash_t want = PyObject_Hash(name); /* cached in the str after the first time */
  if (want == -1) return -2;
  for (Py_ssize_t k = 0; k < nkw; k++) {
    const Py_ssize_t j = (hint + k) % nkw;
    PyObject* key = PyTuple_GET_ITEM(kwnames, j);
    const Py_hash_t have = PyObject_Hash(key);
    if (have == -1) return -2;
    if (have != want) continue;
    int eq = PyUnicode_Compare(key, name);
    if (eq == 0) return j;
    if (eq == -1 && PyErr_Occurred()) return -2;
  }
  return -1;
}

/* str(value) for a label value. Small non-negative ints (ranks, counts: `tp_rank=0`) come from a table
 * built once, so the key's strings need neither an allocation nor a new hash. */
enum { SMALL_INT_TEXTS = 256 };
static PyObject* small_int_texts[SMALL_INT_TEXTS];

static PyObject* label_text(PyObject* value) {
  if (PyUnicode_CheckExact(value)) return Py_NewRef(value);
  if (PyLong_CheckExact(value)) {
    int overflow = 0;
    const long v = PyLong_AsLongAndOverflow(value, &overflow);
    if (overflow == 0 && v >= 0 && v < SMALL_INT_TEXTS) {
      PyObject* text = small_int_texts[v];
      if (text == NULL) {
        text = PyObject_Str(value);
        if (text == NULL) return NULL;
        PyUnicode_InternInPlace(&text);
        small_int_texts[v] = text; /* the table keeps one reference for the life of the process */
      }
      return Py_NewRef(text);
    }
    if (v == -1 && PyErr_Occurred()) PyErr_Clear();
  }
  return PyObject_Str(value);
}

static PyObject* family_labels(FamilyObject* self, PyObject* const* args, Py_ssize_t nargs,
                               PyObject* kwnames) {
  PyObject* names = self->labelnames;
  Py_ssize_t n = names == NULL ? 0 : PyTuple_GET_SIZE(names);
  Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
  if (n == 0) {
    PyErr_Format(PyExc_ValueError, "No label names were set when constructing %S", (PyObject*)self);
    return NULL;
  }
  if (self->labelvalues != NULL && PyTuple_GET_SIZE(self->labelvalues) > 0) return already_labelled(self);
  if (nargs > 0 && nkw > 0) {
    PyErr_SetString(PyExc_ValueError, "Can't pass both *args and **kwargs");
    return NULL;
  }
  PyObject* key = PyTuple_New(n);
  if (key == NULL) return NULL;
  if (nkw > 0) {
    if (nkw != n) {
      PyErr_SetString(PyExc_ValueError, "Incorrect label names");
      goto fail;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
      Py_ssize_t j = find_keyword(kwnames, nkw, PyTuple_GET_ITEM(names, i), i);
      if (j == -2) goto fail;
      if (j < 0) {
        PyErr_SetString(PyExc_ValueError, "Incorrect label names");
        goto fail;
      }
      PyObject* text = label_text(args[j]);
      if (text == NULL) goto fail;
      PyTuple_SET_ITEM(key, i, text);
    }
  } else {
    if (nargs != n) {
      PyErr_SetString(PyExc_ValueError, "Incorrect label count");
      goto fail;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
      PyObject* text = label_text(args[i]);
      if (text == NULL) goto fail;
      PyTuple_SET_ITEM(key, i, text);
    }
  }
  if (self->children != NULL) {
    PyObject* child = PyDict_GetItemWithError(self->children, key); /* borrowed */
    if (child != NULL) {
      Py_INCREF(child);
      Py_DECREF(key);
      return child;
    }
    if (PyErr_Occurred()) goto fail;
  }
  {
    PyObject* child = PyObject_CallMethodOneArg((PyObject*)self, str_new_child, key);
    Py_DECREF(key);
    return child;
  }
fail:
  Py_DECREF(key);
  return NULL;
}

static PyObject* family_default_new_child(PyObject* self, PyObject* key) {
  (void)key;
  PyErr_Format(PyExc_NotImplementedError, "%.100s must define _new_child(label_values)",
               Py_TYPE(self)->tp_name);
  return NULL;
}

static PyMethodDef family_methods[] = {
    {"labels", (PyCFunction)(void (*)(void))family_labels, METH_FASTCALL | METH_KEYWORDS,
     "labels(*values, **kw): the child for these label values (prometheus_client's checks); on a miss, "
     "self._new_child(key) with key the tuple of str values in _labelnames order."},
    {"_new_child", family_default_new_child, METH_O, "Subclasses register the series and store the child."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef family_getset[] = {
    {"_labelnames", (getter)family_get_labelnames, (setter)family_set_labelnames, "tuple of label names",
     NULL},
    {"_children", (getter)family_get_children, (setter)family_set_children,
     "dict: tuple of label values -> child", NULL},
    {"_labelvalues", (getter)family_get_labelvalues, (setter)family_set_labelvalues,
     "tuple of label values: empty on a family, set on a labelled child", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject FamilyType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "rankstat._fastpath.Family",
    .tp_basicsize = sizeof(FamilyObject),
    .tp_dealloc = (destructor)family_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc =
        "Family: a metric family's label names and children, with a C labels(); a Value too (the "
        "series of an unlabelled family or of a labelled child).",
    .tp_base = &ValueType,
    .tp_traverse = (traverseproc)family_traverse,
    .tp_clear = (inquiry)family_clear,
    .tp_methods = family_methods,
    .tp_getset = family_getset,
    .tp_init = family_init,
    .tp_new = family_new,
};

/* ---- Cell ------------------------------------------------------------------------------------- */

/* One bucket (index >= 0) or the sum (index -1) of a histogram or summary series, as prometheus_client's
 * `child._buckets[i]` and `child._sum`: SGLang's older inter-token-latency code adds n tokens' worth of
 * observations with `child._buckets[i].inc(n)` and `child._sum.inc(v)`. Cell.inc is one C call into
 * librankstat; reads (`get()`, `_value`) are the Python subclass's. A Cell holds its child and reads the
 * child's reporter and id at every call, so it follows the child through a fork's re-binding. */
typedef struct {
  PyObject_HEAD ValueObject* child; /* strong reference */
  Py_ssize_t index;                 /* bucket index; -1: the sum */
} CellObject;

static int cell_init(CellObject* self, PyObject* args, PyObject* kwds) {
  static char* keywords[] = {"child", "index", NULL};
  PyObject* child;
  Py_ssize_t index;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "On:Cell", keywords, &child, &index)) return -1;
  if (!PyObject_TypeCheck(child, &ValueType)) {
    PyErr_Format(PyExc_TypeError, "Cell() needs a Value, not %.100s", Py_TYPE(child)->tp_name);
    return -1;
  }
  if (index < -1 || index > (Py_ssize_t)UINT32_MAX) {
    PyErr_SetString(PyExc_ValueError, "index must be -1 (the sum) or a bucket index");
    return -1;
  }
  Py_XSETREF(self->child, (ValueObject*)Py_NewRef(child));
  self->index = index;
  return 0;
}

static int cell_traverse(CellObject* self, visitproc visit, void* arg) {
  Py_VISIT(self->child);
  return 0;
}

static int cell_clear(CellObject* self) {
  Py_CLEAR(self->child);
  return 0;
}

static void cell_dealloc(CellObject* self) {
  PyObject_GC_UnTrack(self);
  cell_clear(self);
  Py_TYPE(self)->tp_free((PyObject*)self);
}

/* inc(amount=1): a bucket's count plus amount (a number; truncated to a whole count, ignored unless > 0,
 * OverflowError when infinite or >= 2**64), or the sum plus amount. A detached child re-binds first; a
 * child without a reporter makes it a no-op. */
static PyObject* cell_inc(CellObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  double amount = 1.0;
  if (parse_amount("inc", args, nargs, kwnames, "amount", 0, 0, 0, &amount, NULL) < 0) return NULL;
  ValueObject* child = self->child;
  if (child == NULL) Py_RETURN_NONE;
  if (self->index >= 0 && !(amount > 0)) Py_RETURN_NONE;
  if (self->index >= 0 && amount >= 18446744073709551616.0) {
    PyErr_SetString(PyExc_OverflowError,
                    isinf(amount) ? "cannot convert float infinity to integer" : "bucket count out of range");
    return NULL;
  }
  if (child->reporter == NULL && child->detached && rebind(child) < 0) return NULL;
  if (child->reporter == NULL) Py_RETURN_NONE;
  if (self->index < 0) {
    if (fn_add_sum == NULL) return unbound("rankstat_histogram_add_sum");
    fn_add_sum(child->reporter, child->id, amount);
  } else {
    if (fn_bucket_add == NULL) return unbound("rankstat_histogram_bucket_add");
    fn_bucket_add(child->reporter, child->id, (uint32_t)self->index, (uint64_t)amount);
  }
  Py_RETURN_NONE;
}

static PyObject* cell_get_child(CellObject* self, void* closure) {
  (void)closure;
  if (self->child == NULL) Py_RETURN_NONE;
  return Py_NewRef((PyObject*)self->child);
}

static PyObject* cell_get_index(CellObject* self, void* closure) {
  (void)closure;
  return PyLong_FromSsize_t(self->index);
}

static PyMethodDef cell_methods[] = {
    {"inc", (PyCFunction)(void (*)(void))cell_inc, METH_FASTCALL | METH_KEYWORDS,
     "inc(amount=1): the bucket's count (whole, > 0) or the sum plus amount."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef cell_getset[] = {
    {"_child", (getter)cell_get_child, NULL, "the series this cell belongs to", NULL},
    {"_index", (getter)cell_get_index, NULL, "bucket index; -1: the sum", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject CellType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "rankstat._fastpath.Cell",
    .tp_basicsize = sizeof(CellObject),
    .tp_dealloc = (destructor)cell_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc =
        "Cell(child, index): one bucket (index >= 0) or the sum (index -1) of a histogram or summary "
        "series, with a C inc().",
    .tp_traverse = (traverseproc)cell_traverse,
    .tp_clear = (inquiry)cell_clear,
    .tp_methods = cell_methods,
    .tp_getset = cell_getset,
    .tp_init = (initproc)cell_init,
    .tp_new = PyType_GenericNew,
};

/* ---- module ----------------------------------------------------------------------------------- */

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
  fn_counter_add = (rankstat_update_fn)(uintptr_t)addresses[0];
  fn_gauge_set = (rankstat_update_fn)(uintptr_t)addresses[1];
  fn_gauge_add = (rankstat_update_fn)(uintptr_t)addresses[2];
  fn_histogram_observe = (rankstat_update_fn)(uintptr_t)addresses[3];
  fn_bucket_add = (rankstat_bucket_add_fn)(uintptr_t)addresses[4];
  fn_add_sum = (rankstat_update_fn)(uintptr_t)addresses[5];
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
  } table[] = {{"rankstat_counter_add", fn_counter_add != NULL},
               {"rankstat_gauge_set", fn_gauge_set != NULL},
               {"rankstat_gauge_add", fn_gauge_add != NULL},
               {"rankstat_histogram_observe", fn_histogram_observe != NULL},
               {"rankstat_histogram_bucket_add", fn_bucket_add != NULL},
               {"rankstat_histogram_add_sum", fn_add_sum != NULL}};
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
  if (PyType_Ready(&ValueType) < 0 || PyType_Ready(&FamilyType) < 0 || PyType_Ready(&CellType) < 0)
    return NULL;
  str_new_child = PyUnicode_InternFromString("_new_child");
  if (str_new_child == NULL) return NULL;
  str_rebind = PyUnicode_InternFromString("_rebind");
  if (str_rebind == NULL) return NULL;
  PyObject* module = PyModule_Create(&fastpath_module);
  if (module == NULL) return NULL;
  if (PyModule_AddObjectRef(module, "Value", (PyObject*)&ValueType) < 0 ||
      PyModule_AddObjectRef(module, "Family", (PyObject*)&FamilyType) < 0 ||
      PyModule_AddObjectRef(module, "Cell", (PyObject*)&CellType) < 0 ||
      PyModule_AddIntConstant(module, "KIND_COUNTER", KIND_COUNTER) < 0 ||
      PyModule_AddIntConstant(module, "KIND_GAUGE", KIND_GAUGE) < 0 ||
      PyModule_AddIntConstant(module, "KIND_HISTOGRAM", KIND_HISTOGRAM) < 0 ||
      PyModule_AddIntConstant(module, "KIND_SUMMARY", KIND_SUMMARY) < 0) {
    Py_DECREF(module);
    return NULL;
  }
  return module;
}
