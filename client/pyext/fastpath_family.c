/* rankstat._fastpath.Family: a metric family's label names and children, and its labels(). */
#include "fastpath_internal.h"

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

/* `_labelnames` and `_labelvalues` alike, one getter and one setter told apart by the getset closure: read
 * back as a tuple (an empty one before __init__ set it), set from any iterable (list, dict_keys, tuple)
 * stored as a tuple. Only the names are checked for str here: labels() makes every value str before it
 * builds a child. */
typedef struct {
  const char* attribute;
  int names; /* 1: `_labelnames` (items must be str), 0: `_labelvalues` */
} LabelTuple;

static LabelTuple label_names_tuple = {"_labelnames", 1};
static LabelTuple label_values_tuple = {"_labelvalues", 0};

static PyObject** label_tuple_slot(FamilyObject* self, const LabelTuple* which) {
  return which->names ? &self->labelnames : &self->labelvalues;
}

static PyObject* family_get_label_tuple(FamilyObject* self, void* closure) {
  PyObject* held = *label_tuple_slot(self, (const LabelTuple*)closure);
  if (held == NULL) return PyTuple_New(0);
  return Py_NewRef(held);
}

static int family_set_label_tuple(FamilyObject* self, PyObject* value, void* closure) {
  const LabelTuple* which = (const LabelTuple*)closure;
  if (value == NULL) {
    PyErr_Format(PyExc_TypeError, "cannot delete %s", which->attribute);
    return -1;
  }
  PyObject* items = PySequence_Tuple(value);
  if (items == NULL) return -1;
  for (Py_ssize_t i = 0; which->names && i < PyTuple_GET_SIZE(items); i++) {
    PyObject* name = PyTuple_GET_ITEM(items, i);
    if (!PyUnicode_Check(name)) {
      PyErr_Format(PyExc_TypeError, "label names must be str, not %.100s", Py_TYPE(name)->tp_name);
      Py_DECREF(items);
      return -1;
    }
  }
  Py_XSETREF(*label_tuple_slot(self, which), items);
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
    PyObject* child = PyObject_CallMethodOneArg((PyObject*)self, rankstat_fp_str_new_child, key);
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
    {"_labelnames", (getter)family_get_label_tuple, (setter)family_set_label_tuple, "tuple of label names",
     &label_names_tuple},
    {"_children", (getter)family_get_children, (setter)family_set_children,
     "dict: tuple of label values -> child", NULL},
    {"_labelvalues", (getter)family_get_label_tuple, (setter)family_set_label_tuple,
     "tuple of label values: empty on a family, set on a labelled child", &label_values_tuple},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject rankstat_fp_family_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "rankstat._fastpath.Family",
    .tp_basicsize = sizeof(FamilyObject),
    .tp_dealloc = (destructor)family_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc =
        "Family: a metric family's label names and children, with a C labels(); a Value too (the "
        "series of an unlabelled family or of a labelled child).",
    .tp_base = &rankstat_fp_value_type,
    .tp_traverse = (traverseproc)family_traverse,
    .tp_clear = (inquiry)family_clear,
    .tp_methods = family_methods,
    .tp_getset = family_getset,
    .tp_init = family_init,
    .tp_new = family_new,
};
