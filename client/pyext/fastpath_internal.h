/*
 * What the files of rankstat._fastpath share (the module itself is described in fastpath_module.c):
 *
 * - fastpath_args.c: the update methods' argument parsing (prometheus_client's signatures and messages).
 * - fastpath_value.c: the Value type (one series; inc/dec/set/observe; fork detach and re-bind).
 * - fastpath_family.c: the Family type (label names, children, labels()).
 * - fastpath_cell.c: the Cell type (one bucket or the sum of a histogram child).
 * - fastpath_module.c: bind(lib), bound() and the module's initialisation.
 *
 * Everything declared here is shared between those files only: the module is built with hidden visibility
 * (client/pyext/CMakeLists.txt), so PyInit__fastpath stays its only exported symbol, and the shared names
 * carry the rankstat_fp_ prefix.
 *
 * The GIL is held across every call into librankstat: a reporter is single-writer, and the GIL is what
 * serialises the Python threads of one rank. The library's update calls never block.
 *
 * The function pointers are process-wide statics: one librankstat per process, single-phase module
 * initialisation (no subinterpreter support).
 */
#ifndef RANKSTAT_FASTPATH_INTERNAL_H
#define RANKSTAT_FASTPATH_INTERNAL_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <stdint.h>

/* The series kinds are the C ABI's (RANKSTAT_KIND_*): defined once, in the header every binding reads. */
#include "rankstat/rankstat.h"

typedef int (*rankstat_update_fn)(void* reporter, uint32_t id, double value);

/* Set by bind() (fastpath_module.c); NULL until then, or when the library lacks the function. */
extern rankstat_update_fn rankstat_fp_fn_counter_add;
extern rankstat_update_fn rankstat_fp_fn_gauge_set;
extern rankstat_update_fn rankstat_fp_fn_gauge_add;
extern rankstat_update_fn rankstat_fp_fn_histogram_observe;
/* A histogram child's internals as SGLang's older call sites write them (`child._buckets[i].inc(n)`,
 * `child._sum.inc(v)`): optional in bind() (a Cell raises RuntimeError when its function is missing). */
typedef int (*rankstat_bucket_add_fn)(void* reporter, uint32_t id, uint32_t bucket, uint64_t count);
extern rankstat_bucket_add_fn rankstat_fp_fn_bucket_add;
extern rankstat_update_fn rankstat_fp_fn_add_sum;

enum {
  KIND_COUNTER = RANKSTAT_KIND_COUNTER,
  KIND_GAUGE = RANKSTAT_KIND_GAUGE,
  KIND_HISTOGRAM = RANKSTAT_KIND_HISTOGRAM,
  KIND_SUMMARY = RANKSTAT_KIND_SUMMARY
};

/* Interned at module initialisation (fastpath_module.c). */
extern PyObject* rankstat_fp_str_new_child; /* "_new_child" */
extern PyObject* rankstat_fp_str_rebind;    /* "_rebind" */

/* ---- types ------------------------------------------------------------------------------------ */

typedef struct {
  PyObject_HEAD void* reporter; /* rankstat_reporter*; NULL: updates are no-ops */
  uint32_t id;
  int kind;
  int detached; /* the process forked since the Value was bound: the next update calls self._rebind() */
} ValueObject;

/* A Family is a Value too (prometheus_client's metric objects are both the family and, once labelled or
 * when unlabelled, the series): the fields below follow the Value's. */
typedef struct {
  ValueObject value;
  PyObject* labelnames;  /* tuple of str */
  PyObject* children;    /* dict: tuple of str -> child */
  PyObject* labelvalues; /* tuple of str: empty on a family, the child's values on a labelled child */
} FamilyObject;

extern PyTypeObject rankstat_fp_value_type;  /* fastpath_value.c */
extern PyTypeObject rankstat_fp_family_type; /* fastpath_family.c */
extern PyTypeObject rankstat_fp_cell_type;   /* fastpath_cell.c */

/* ---- shared helpers --------------------------------------------------------------------------- */

/* fastpath_args.c: parses `(amount[, exemplar])` given positionally or by keyword (see there). */
int rankstat_fp_parse_amount(const char* method, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames,
                             const char* argname, int required, int allow_exemplar, int text, double* out,
                             PyObject** exemplar);

/* fastpath_value.c: the RuntimeError of an update whose librankstat function bind() did not find; NULL. */
PyObject* rankstat_fp_unbound(const char* function);

/* fastpath_value.c: a detached Value's self._rebind() (see there). 0, or -1 with an exception set. */
int rankstat_fp_rebind(ValueObject* self);

#endif /* RANKSTAT_FASTPATH_INTERNAL_H */
