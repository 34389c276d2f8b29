/* rankstat._fastpath.Value: one series of a rankstat segment (a labelled child, or an unlabelled
 * family); its updates are one call into librankstat each. */
#include "fastpath_internal.h"

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

static PyObject* wrong_kind(ValueObject* self, const char* method) {
  PyErr_Format(PyExc_AttributeError, "%s() is not available on a %s series", method, kind_name(self->kind));
  return NULL;
}

PyObject* rankstat_fp_unbound(const char* function) {
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

/* A labelled family that is not itself a child: prometheus_client refuses its updates ("not observable"). */
static int is_labelled_parent(ValueObject* self) {
  if (!PyObject_TypeCheck((PyObject*)self, &rankstat_fp_family_type)) return 0;
  FamilyObject* family = (FamilyObject*)self;
  return family->labelnames != NULL && PyTuple_GET_SIZE(family->labelnames) > 0 &&
         (family->labelvalues == NULL || PyTuple_GET_SIZE(family->labelvalues) == 0);
}

/* A detached Value (reporter NULL, detached set: its process forked since it was bound, and the reporter it
 * had is the parent's) asks its owner to bind it in this process before its first update, as
 * prometheus_client's values re-bind to the child's own file when they see a new pid. */
int rankstat_fp_rebind(ValueObject* self) {
  PyObject* result = PyObject_CallMethodNoArgs((PyObject*)self, rankstat_fp_str_rebind);
  if (result == NULL) return -1;
  Py_DECREF(result);
  return 0;
}

/* Only reached with a NULL reporter, which a bound Value's update tests anyway: a detached Value re-binds,
 * a labelled parent refuses with prometheus_client's message, anything else is a no-op. -1 on error. */
static int unbound_update(ValueObject* self) {
  if (self->detached) return rankstat_fp_rebind(self);
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
    if (rankstat_fp_parse_amount("inc", args, nargs, kwnames, "amount", 0, 1, 0, &amount, &exemplar) < 0)
      return NULL;
    /* NaN passes, as in prometheus_client (NaN < 0 is false): the total becomes NaN. */
    if (amount < 0) {
      PyErr_SetString(PyExc_ValueError, "Counters can only be incremented by non-negative amounts.");
      return NULL;
    }
    if (self->reporter != NULL) {
      if (rankstat_fp_fn_counter_add == NULL) return rankstat_fp_unbound("rankstat_counter_add");
      rankstat_fp_fn_counter_add(self->reporter, self->id, amount);
    }
    if (check_exemplar(exemplar) < 0) return NULL;
    Py_RETURN_NONE;
  }
  if (self->kind == KIND_GAUGE) {
    if (self->reporter == NULL && unbound_update(self) < 0) return NULL;
    if (rankstat_fp_parse_amount("inc", args, nargs, kwnames, "amount", 0, 0, 0, &amount, NULL) < 0)
      return NULL;
    if (self->reporter != NULL) {
      if (rankstat_fp_fn_gauge_add == NULL) return rankstat_fp_unbound("rankstat_gauge_add");
      rankstat_fp_fn_gauge_add(self->reporter, self->id, amount);
    }
    Py_RETURN_NONE;
  }
  return wrong_kind(self, "inc");
}

static PyObject* value_dec(ValueObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  if (self->kind != KIND_GAUGE) return wrong_kind(self, "dec");
  double amount = 1.0;
  if (self->reporter == NULL && unbound_update(self) < 0) return NULL;
  if (rankstat_fp_parse_amount("dec", args, nargs, kwnames, "amount", 0, 0, 0, &amount, NULL) < 0)
    return NULL;
  if (self->reporter != NULL) {
    if (rankstat_fp_fn_gauge_add == NULL) return rankstat_fp_unbound("rankstat_gauge_add");
    rankstat_fp_fn_gauge_add(self->reporter, self->id, -amount);
  }
  Py_RETURN_NONE;
}

static PyObject* value_set(ValueObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  if (self->kind != KIND_GAUGE) return wrong_kind(self, "set");
  double value = 0.0;
  if (self->reporter == NULL && unbound_update(self) < 0) return NULL;
  if (rankstat_fp_parse_amount("set", args, nargs, kwnames, "value", 1, 0, 1, &value, NULL) < 0) return NULL;
  if (self->reporter != NULL) {
    if (rankstat_fp_fn_gauge_set == NULL) return rankstat_fp_unbound("rankstat_gauge_set");
    rankstat_fp_fn_gauge_set(self->reporter, self->id, value);
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
  if (rankstat_fp_parse_amount("observe", args, nargs, kwnames, "amount", 1, self->kind == KIND_HISTOGRAM, 0,
                               &amount, &exemplar) < 0)
    return NULL;
  if (self->reporter != NULL) {
    if (rankstat_fp_fn_histogram_observe == NULL) return rankstat_fp_unbound("rankstat_histogram_observe");
    rankstat_fp_fn_histogram_observe(self->reporter, self->id, amount);
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

PyTypeObject rankstat_fp_value_type = {
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
