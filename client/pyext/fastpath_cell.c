/* rankstat._fastpath.Cell: one bucket or the sum of a histogram or summary child. */
#include "fastpath_internal.h"

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
  if (!PyObject_TypeCheck(child, &rankstat_fp_value_type)) {
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
  if (rankstat_fp_parse_amount("inc", args, nargs, kwnames, "amount", 0, 0, 0, &amount, NULL) < 0)
    return NULL;
  ValueObject* child = self->child;
  if (child == NULL) Py_RETURN_NONE;
  if (self->index >= 0 && !(amount > 0)) Py_RETURN_NONE;
  if (self->index >= 0 && amount >= 18446744073709551616.0) {
    PyErr_SetString(PyExc_OverflowError,
                    isinf(amount) ? "cannot convert float infinity to integer" : "bucket count out of range");
    return NULL;
  }
  if (child->reporter == NULL && child->detached && rankstat_fp_rebind(child) < 0) return NULL;
  if (child->reporter == NULL) Py_RETURN_NONE;
  if (self->index < 0) {
    if (rankstat_fp_fn_add_sum == NULL) return rankstat_fp_unbound("rankstat_histogram_add_sum");
    rankstat_fp_fn_add_sum(child->reporter, child->id, amount);
  } else {
    if (rankstat_fp_fn_bucket_add == NULL) return rankstat_fp_unbound("rankstat_histogram_bucket_add");
    rankstat_fp_fn_bucket_add(child->reporter, child->id, (uint32_t)self->index, (uint64_t)amount);
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

PyTypeObject rankstat_fp_cell_type = {
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
