"""The metric API contract, case by case: what prometheus_client does in multiprocess mode, and rankstat
doing the same through a real rankstatd, with the C extension and with its pure-Python twin.

Each case below is one sentence and a few lines of code written against a module `M` (prometheus_client or
rankstat) and a unique-name helper `n()`. The same code runs in three processes:

- prometheus_client (Debian's, PROMETHEUS_MULTIPROC_DIR in a temporary directory), whose exposition is
  then read through its MultiProcessCollector;
- rankstat with rankstat._fastpath, and rankstat with RANKSTAT_NO_FASTPATH=1 (rankstat._slowpath), each
  writing into the shm directory of its own rankstatd, which serves the exposition.

What is compared, per case: the exception (type and message), the warnings (category and message), the
value the code leaves in `result`, and, for the families the case names, the samples of the exposition in
the order they are served (pid label values masked). Where the installed prometheus_client (0.16)
predates the behaviour of the current release (0.25: mostrecent gauges, Counter.reset, the multiprocess
warnings of remove()/clear()), the case states 0.25's outcome itself (`current=`). Where rankstat differs on
purpose, the case states rankstat's outcome (`ours=`) and docs/semantics.md has the row saying why."""

import importlib.util
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))

# --- the cases ---------------------------------------------------------------------------------------
# (sentence, code, options). Options:
#   expose: family names (without the n() prefix) whose exposition is compared after all cases ran;
#   message: "exact" (default) or "type" (0.16 and 0.25 word it differently; the type is the contract);
#   current: the outcome of prometheus_client 0.25 where the installed 0.16 predates it
#            ({"error": [type, message] or None, "warnings": [[category, message]], "result": ...});
#   ours: rankstat's deliberate outcome, with a row in docs/semantics.md.

CASES = [
    # names and constructor arguments
    ("a counter named with _total names its family without the suffix",
     "result = M.Counter(n('requests_total'), 'h')._name", {}),
    ("namespace, subsystem and name are joined with underscores and the unit appended",
     "result = M.Gauge(n('size'), 'h', namespace='ns', subsystem='sub', unit='bytes')._name", {}),
    ("a unit already at the end of the name is not appended twice",
     "result = M.Gauge(n('size_bytes'), 'h', unit='bytes')._name", {}),
    ("a counter loses _total before its unit is appended",
     "result = M.Counter(n('moved_total'), 'h', unit='bytes')._name", {}),
    # Names: prometheus_client 0.25 accepts any UTF-8 text as a metric or label name (label names starting
    # with __ stay reserved); the installed 0.16 refuses what is not classic, so these cases state 0.25's
    # outcome (`current`). Its UTF-8 check is name.encode('utf-8'): a lone surrogate fails with the codec's
    # UnicodeEncodeError, a ValueError. rankstat refuses two names 0.25 takes but cannot serve: an empty
    # label name and a NUL in a name (`ours`, docs/semantics.md). PROMETHEUS_LEGACY_NAME_VALIDATION=true
    # brings the classic rules back (test_utf8_names.py).
    ("a metric name outside the classic set is accepted: any UTF-8 text",
     "M.Counter(n('') + 'my.metric-1/\u00e9', 'h').inc()", {"current": {"error": None}}),
    ("a metric name that is not UTF-8 text (a lone surrogate) is refused with UnicodeEncodeError, a ValueError",
     "M.Counter(n('') + 'a\ud800', 'h')",
     {"current": {"error": ["UnicodeEncodeError", None]}}),
    ("a metric name holding a NUL is refused with ValueError",
     "M.Counter(n('a\\x00b'), 'h')", {"ours": {"error": ["ValueError", None]}}),
    ("an empty metric name is refused with ValueError",
     "M.Counter('', 'h')", {"message": "type"}),
    ("the documentation argument is required",
     "M.Counter(n('nodoc'))", {"message": "type"}),
    ("label names outside the classic set are accepted: any UTF-8 text but __...",
     "M.Counter(n('c'), 'h', ['http.method', 'a-b', '1st']).labels('GET', 'x', 'y').inc()",
     {"current": {"error": None}}),
    ("a label name that is not UTF-8 text (a lone surrogate) is refused with UnicodeEncodeError, a ValueError",
     "M.Counter(n('c'), 'h', ['a\ud800'])", {"current": {"error": ["UnicodeEncodeError", None]}}),
    ("an empty label name is refused naming it",
     "M.Counter(n('c'), 'h', [''])", {"ours": {"error": ["ValueError", "Invalid label metric name: "]}}),
    ("a label name holding a NUL is refused naming it",
     "M.Counter(n('c'), 'h', ['a\\x00b'])", {"ours": {"error": ["ValueError", "Invalid label metric name: a\x00b"]}}),
    ("a label name starting with __ is reserved",
     "M.Gauge(n('g'), 'h', ['__a'])", {}),
    ("le is reserved on a histogram",
     "M.Histogram(n('h'), 'h', ['le'])", {}),
    ("quantile is reserved on a summary",
     "M.Summary(n('s'), 'h', ['quantile'])", {}),
    ("le and quantile are ordinary label names elsewhere",
     "M.Counter(n('c'), 'h', ['le']).labels('1').inc(); M.Gauge(n('g'), 'h', ['quantile']).labels('x').set(2)",
     {"expose": ["c", "g"]}),
    ("buckets out of order are refused",
     "M.Histogram(n('h'), 'h', buckets=[2, 1])", {}),
    ("fewer than two buckets (with +Inf) are refused",
     "M.Histogram(n('h'), 'h', buckets=[float('inf')])", {}),
    ("no buckets at all are refused",
     "M.Histogram(n('h'), 'h', buckets=[])", {}),
    ("+Inf is appended to the buckets and text bounds are converted",
     "result = M.Histogram(n('h'), 'h', buckets=['0.5', 1])._upper_bounds", {}),
    ("an unknown multiprocess mode is refused",
     "M.Gauge(n('g'), 'h', multiprocess_mode='newest')", {}),
    ("mostrecent is a multiprocess mode",
     "M.Gauge(n('g'), 'h', multiprocess_mode='mostrecent').set(4)",
     {"current": {"error": None}}),

    # labels()
    ("labels() with too few values is refused",
     "M.Counter(n('c'), 'h', ['a', 'b']).labels('1')", {}),
    ("labels() with the wrong names is refused",
     "M.Counter(n('c'), 'h', ['a', 'b']).labels(a='1', c='2')", {}),
    ("labels() with positional and keyword values together is refused",
     "M.Counter(n('c'), 'h', ['a', 'b']).labels('1', b='2')", {}),
    ("labels() on a metric without label names is refused naming the metric",
     "M.Counter(n('c'), 'h').labels()", {}),
    ("labels() on a child is refused with ValueError naming its labels",
     "M.Counter(n('c'), 'h', ['a']).labels('1').labels('2')", {}),
    ("label values are converted with str() and keyword order does not matter",
     "c = M.Counter(n('c'), 'h', ['a', 'b']); c.labels(1, None).inc(); c.labels(b=None, a=1).inc(2); "
     "result = c.labels('1', 'None') is c.labels(a=1, b=None)", {"expose": ["c"]}),
    ("a subclass's children are instances of the subclass, built by its own constructor",
     "class Sub(M.Counter):\n"
     "    def __init__(self, *args, **kwargs):\n"
     "        super().__init__(*args, **kwargs)\n"
     "        self.context = 'kept'\n"
     "child = Sub(n('c'), 'h', ['a']).labels('x')\n"
     "result = [type(child).__name__, isinstance(child, Sub), child.context]", {}),
    ("a labelled counter cannot be incremented without labels",
     "M.Counter(n('c'), 'h', ['a']).inc()", {}),
    ("a labelled gauge cannot be set without labels",
     "M.Gauge(n('g'), 'h', ['a']).set(1)", {}),
    ("a labelled histogram cannot observe without labels",
     "M.Histogram(n('h'), 'h', ['a']).observe(1)", {}),
    ("a labelled summary cannot observe without labels",
     "M.Summary(n('s'), 'h', ['a']).observe(1)", {}),
    ("count_exceptions() on a labelled counter without labels is refused",
     "M.Counter(n('c'), 'h', ['a']).count_exceptions()", {}),
    ("track_inprogress() on a labelled gauge without labels is refused",
     "M.Gauge(n('g'), 'h', ['a']).track_inprogress()", {}),
    ("the methods a type lacks are absent",
     "c, g, h = M.Counter(n('c'), 'h'), M.Gauge(n('g'), 'h'), M.Histogram(n('h'), 'h')\n"
     "result = [hasattr(c, m) for m in ('inc', 'dec', 'set', 'observe')] + "
     "[hasattr(g, m) for m in ('inc', 'dec', 'set', 'observe')] + "
     "[hasattr(h, m) for m in ('inc', 'set', 'observe', 'time')]", {}),

    # values and their limits
    ("a negative counter increment is refused with prometheus_client's message",
     "M.Counter(n('c'), 'h').inc(-1)", {}),
    ("minus infinity is a negative increment",
     "M.Counter(n('c'), 'h').inc(float('-inf'))", {}),
    ("a counter takes NaN and its total becomes NaN",
     "c = M.Counter(n('c'), 'h'); c.inc(2); c.inc(float('nan')); result = math.isnan(c._value.get())",
     {"expose": ["c"]}),
    ("a counter takes +Inf",
     "c = M.Counter(n('c'), 'h'); c.inc(float('inf')); result = c._value.get()", {"expose": ["c"]}),
    ("a counter increment given as text is a TypeError",
     "M.Counter(n('c'), 'h').inc('1')", {"message": "type"}),
    ("a gauge takes numbers as text in set()",
     "g = M.Gauge(n('g'), 'h', multiprocess_mode='max'); g.set('2.5'); result = g._value.get()", {"expose": ["g"]}),
    ("a gauge refuses text that is not a number",
     "M.Gauge(n('g'), 'h').set('many')", {"message": "type"}),
    ("gauge inc, dec and set_to_current_time move the value",
     "g = M.Gauge(n('g'), 'h', multiprocess_mode='livesum'); g.inc(5); g.dec(2); result = g._value.get(); "
     "t = M.Gauge(n('t'), 'h', multiprocess_mode='max'); t.set_to_current_time(); "
     "result = [result, abs(t._value.get() - time.time()) < 60]", {"expose": ["g"]}),
    ("a histogram observation of NaN adds to the sum and to no bucket",
     "h = M.Histogram(n('h'), 'h', buckets=[1, 2]); h.observe(1.5); h.observe(float('nan'))", {"expose": ["h"]}),
    ("a histogram observation of +Inf lands in the +Inf bucket",
     "h = M.Histogram(n('h'), 'h', buckets=[1]); h.observe(float('inf')); h.observe(0.5)", {"expose": ["h"]}),
    ("a histogram observation of -Inf lands in the lowest bucket",
     "h = M.Histogram(n('h'), 'h', buckets=[1]); h.observe(float('-inf'))", {"expose": ["h"]}),
    ("two label sets of a histogram are served in prometheus_client's sample order",
     "h = M.Histogram(n('h'), 'h', ['route'], buckets=[0.1, 1]); h.labels('a').observe(0.05); "
     "h.labels('b').observe(0.5); h.labels('b').observe(3)", {"expose": ["h"]}),
    ("a summary serves its count and sum per label set",
     "s = M.Summary(n('s'), 'h', ['a']); s.labels('x').observe(2); s.labels('x').observe(3); s.labels('y')",
     {"expose": ["s"]}),
    ("a gauge in mode all is served per process with a pid label",
     "M.Gauge(n('g'), 'h', ['a'], multiprocess_mode='all').labels('x').set(7)", {"expose": ["g"]}),
    ("a pid label on a counter is served as given",
     "M.Counter(n('c'), 'h', ['pid']).labels('worker-1').inc(3)", {"expose": ["c"]}),
    ("a pid label on a gauge is refused at the call",
     "M.Gauge(n('g'), 'h', ['pid'], multiprocess_mode='sum')",
     {"ours": {"error": ["ValueError", None]}}),
    # prometheus_client takes the value and then fails every scrape of its registry (the text cannot be
    # encoded), so its run of the case stops before labelling; rankstat raises at the labels() that would
    # create the child, naming the label (docs/semantics.md). A known child costs no check.
    ("a label value that is not UTF-8 text (a lone surrogate) is refused at labels(), naming the label",
     "c = M.Counter(n('c'), 'h', ['path']); c.labels('ok').inc()\n"
     "if M.__name__ != 'prometheus_client':\n"
     "    try:\n"
     "        c.labels('\\ud800')\n"
     "    except UnicodeEncodeError as e:\n"
     "        assert isinstance(e, ValueError) and \"label 'path'\" in str(e), str(e)\n"
     "        assert c.labels('ok') is c.labels(path='ok')\n"
     "        raise",
     {"ours": {"error": ["UnicodeEncodeError", None]}}),

    # exemplars
    ("an exemplar with a reserved label name is refused after the increment",
     "c = M.Counter(n('c'), 'h')\n"
     "try:\n    c.inc(1, exemplar={'__a': 'x'})\nfinally:\n    result = c._value.get()", {}),
    ("an exemplar label name outside the classic set is accepted",
     "c = M.Counter(n('c'), 'h')\nc.inc(1, exemplar={'trace.id': 'x'})\nresult = c._value.get()",
     {"current": {"error": None, "result": 1.0}}),
    ("an exemplar of more than 128 characters is refused",
     "M.Counter(n('c'), 'h').inc(1, exemplar={'trace_id': 'x' * 121})", {"message": "type"}),
    ("an exemplar of exactly 128 characters is accepted",
     "M.Counter(n('c'), 'h').inc(1, exemplar={'trace_id': 'x' * 120})", {}),
    ("an exemplar of None or {} is no exemplar",
     "c = M.Counter(n('c'), 'h'); c.inc(1, exemplar=None); c.inc(1, exemplar={}); result = c._value.get()", {}),
    ("a histogram exemplar is checked too",
     "M.Histogram(n('h'), 'h').observe(1, exemplar={'__r': 'x'})", {}),
    ("a histogram exemplar on NaN is not checked (no bucket takes it)",
     "M.Histogram(n('h'), 'h').observe(float('nan'), exemplar={'__r': 'x'})", {}),
    ("a gauge takes no exemplar",
     "M.Gauge(n('g'), 'h').inc(1, exemplar={'a': 'b'})", {"message": "type"}),
    ("a summary takes no exemplar",
     "M.Summary(n('s'), 'h').observe(1, exemplar={'a': 'b'})", {"message": "type"}),

    # timers, trackers, decorators
    ("time() as a context manager gives the timer, whose labels() picks the child",
     "h = M.Histogram(n('h'), 'h', ['a'], buckets=[100])\n"
     "with h.time() as t:\n    t.labels('x')\n"
     "result = h.labels('x')._buckets[0].get()", {}),
    ("a summary's time() observes once per block",
     "s = M.Summary(n('s'), 'h')\nwith s.time():\n    pass\nresult = s._count.get()", {}),
    ("a gauge's time() sets the duration",
     "g = M.Gauge(n('g'), 'h', multiprocess_mode='max')\nwith g.time():\n    pass\n"
     "result = 0 <= g._value.get() < 10", {}),
    ("a labelled gauge's time() without labels fails at the end of the block",
     "g = M.Gauge(n('g'), 'h', ['a'])\nwith g.time():\n    pass", {}),
    ("decorated functions keep their signature and run timed",
     "def f(a, b=2, *rest, c, d=4, **kw) -> int:\n    'doc'\n    return a + b + c\n"
     "h = M.Histogram(n('h'), 'h', buckets=[100]); s = M.Summary(n('s'), 'h'); "
     "g = M.Gauge(n('g'), 'h', multiprocess_mode='max'); c = M.Counter(n('c'), 'h'); "
     "p = M.Gauge(n('p'), 'h', multiprocess_mode='livesum')\n"
     "fs = [h.time()(f), s.time()(f), g.time()(f), c.count_exceptions()(f), p.track_inprogress()(f)]\n"
     "result = [[str(inspect.signature(x)), inspect.getfullargspec(x) == inspect.getfullargspec(f), x.__name__, "
     "x.__doc__, x(1, c=3)] for x in fs] + [h._buckets[0].get(), s._count.get()]", {}),
    ("positional-only parameters survive decoration",
     "def f(a, /, b):\n    return a - b\n"
     "w = M.Histogram(n('h'), 'h').time()(f)\nresult = [str(inspect.signature(w)), w(5, 2)]\n"
     "w(a=5, b=2)", {"message": "type"}),
    ("count_exceptions counts the exception and lets it through",
     "c = M.Counter(n('c'), 'h')\n"
     "try:\n    with c.count_exceptions(KeyError):\n        raise KeyError('k')\nexcept KeyError:\n    pass\n"
     "with c.count_exceptions(KeyError):\n    pass\n"
     "try:\n    with c.count_exceptions((ValueError, KeyError)):\n        raise ValueError()\nexcept ValueError:\n"
     "    pass\nresult = c._value.get()", {"expose": ["c"]}),
    ("track_inprogress goes up inside the block and back after it",
     "g = M.Gauge(n('g'), 'h', multiprocess_mode='livesum')\n"
     "with g.track_inprogress():\n    inside = g._value.get()\nresult = [inside, g._value.get()]", {}),
    ("set_function is accepted and multiprocess mode keeps serving the last value set",
     "g = M.Gauge(n('g'), 'h', multiprocess_mode='max'); g.set(3); g.set_function(lambda: 11)",
     {"expose": ["g"]}),
    ("a mostrecent gauge refuses inc",
     "M.Gauge(n('g'), 'h', multiprocess_mode='mostrecent').inc()",
     {"current": {"error": ["RuntimeError", "inc must not be used with the mostrecent mode"]}}),
    ("a livemostrecent gauge refuses dec",
     "M.Gauge(n('g'), 'h', ['a'], multiprocess_mode='livemostrecent').labels('x').dec()",
     {"current": {"error": ["RuntimeError", "dec must not be used with the mostrecent mode"]}}),

    # reset, remove, clear
    ("reset() brings this process's counter back to 0",
     "c = M.Counter(n('c'), 'h', ['a']); c.labels('x').inc(5); c.labels('x').reset(); c.labels('x').inc(2); "
     "result = c.labels('x')._value.get()",
     {"current": {"error": None, "result": 2.0}}),
    ("remove() warns in multiprocess mode and the value stays served",
     "c = M.Counter(n('c'), 'h', ['a']); c.labels('x').inc(4); c.remove('x')", {
         "expose": ["c"],
         "current": {"error": None, "warnings": [
             ["UserWarning", "Removal of labels has not been implemented in multi-process mode yet."]]}}),
    ("remove() of label values never set is no error",
     "c = M.Counter(n('c'), 'h', ['a']); c.remove('never')", {
         "current": {"error": None, "warnings": [
             ["UserWarning", "Removal of labels has not been implemented in multi-process mode yet."]]}}),
    ("remove() with the wrong number of values is refused after the warning",
     "M.Counter(n('c'), 'h', ['a', 'b']).remove('x')", {
         "current": {"error": ["ValueError", "Incorrect label count (expected 2, got ('x',))"], "warnings": [
             ["UserWarning", "Removal of labels has not been implemented in multi-process mode yet."]]}}),
    ("clear() warns in multiprocess mode and a label set used again continues its value",
     "c = M.Counter(n('c'), 'h', ['a']); c.labels('x').inc(4); c.clear(); c.labels('x').inc(1)", {
         "expose": ["c"],
         "current": {"error": None, "warnings": [
             ["UserWarning", "Clearing labels has not been implemented in multi-process mode yet"]]}}),

    # registries
    ("a second metric of the same name in the default registry is a duplicate",
     "M.Counter(n('dup'), 'h'); M.Counter(n('dup'), 'h')", {"message": "prefix"}),
    ("a gauge named like a counter's _total sample is a duplicate",
     "M.Counter(n('dup'), 'h'); M.Gauge(n('dup_total'), 'h')", {}),
    ("a gauge named like a histogram's _bucket sample is a duplicate",
     "M.Histogram(n('dup'), 'h'); M.Gauge(n('dup_bucket'), 'h')", {}),
    ("a counter named like a summary's _count sample is a duplicate",
     "M.Summary(n('dup'), 'h'); M.Counter(n('dup_count'), 'h')", {"message": "prefix"}),
    ("registry=None registers nothing, so a second construction is no duplicate",
     "M.Counter(n('twice'), 'h', registry=None).inc(1); M.Counter(n('twice'), 'h', registry=None).inc(2)",
     {"expose": ["twice"]}),
    ("a second declaration that disagrees with the first is refused even outside a registry",
     "M.Counter(n('clash'), 'h', registry=None); M.Gauge(n('clash_total'), 'h', registry=None)",
     {"ours": {"error": ["ValueError", None]}}),
    ("the same declaration again outside a registry is no conflict, whatever its labels",
     "M.Gauge(n('same'), 'h', ['a'], registry=None, multiprocess_mode='max').labels('x').set(1); "
     "M.Gauge(n('same'), 'h', ['a'], registry=None, multiprocess_mode='max').labels('x').set(5)",
     {"expose": ["same"]}),
    ("a CollectorRegistry of the caller's refuses a duplicate too",
     "r = CollectorRegistry(); M.Gauge(n('g'), 'h', registry=r); M.Gauge(n('g'), 'h', registry=r)", {}),
    ("an unregistered metric can be built again and continues its series",
     "c = M.Counter(n('again'), 'h'); c.inc(2); REGISTRY.unregister(c); M.Counter(n('again'), 'h').inc(3)",
     {"expose": ["again"]}),
    ("a registry of the caller's reads this process's values through collect()",
     "r = CollectorRegistry(); c = M.Counter(n('c'), 'h', ['a'], registry=r); c.labels('x').inc(3); "
     "h = M.Histogram(n('h'), 'h', buckets=[1], registry=r); h.observe(0.5); h.observe(2); "
     "g = M.Gauge(n('g'), 'h', registry=r); g.set(4); s = M.Summary(n('s'), 'h', registry=r); s.observe(7); "
     "f = M.Gauge(n('f'), 'h', registry=r); f.set_function(lambda: 9)\n"
     "result = [r.get_sample_value(n('c_total'), {'a': 'x'}), r.get_sample_value(n('h_bucket'), {'le': '1.0'}), "
     "r.get_sample_value(n('h_count')), r.get_sample_value(n('h_sum')), r.get_sample_value(n('g')), "
     "r.get_sample_value(n('s_sum')), r.get_sample_value(n('s_count')), r.get_sample_value(n('f')), "
     "r.get_sample_value(n('c_created'), {'a': 'x'}) > 0, sorted(c._metrics)]", {}),
    ("labelled children never register on their own",
     "c = M.Counter(n('c'), 'h', ['a']); c.labels('x'); c.labels('y'); "
     "result = sorted(REGISTRY._collector_to_names[c])", {}),
]

# --- running the cases in one process ----------------------------------------------------------------

WORKER = r"""
import inspect, json, math, os, sys, time, traceback, warnings
sys.path.insert(0, HERE)
import test_contract
impl = sys.argv[1]
if impl == "prometheus_client":
    import prometheus_client as M
else:
    import rankstat as M
    from rankstat import _accel
    print("FAST", _accel.FAST, flush=True)
from prometheus_client import CollectorRegistry, REGISTRY
out = {}
for index, (sentence, code, options) in enumerate(test_contract.CASES):
    names = {}
    def n(stem, index=index):
        return f"k{index}_{stem}"
    scope = dict(M=M, n=n, math=math, time=time, inspect=inspect, CollectorRegistry=CollectorRegistry,
                 REGISTRY=REGISTRY)
    error = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            exec(compile(code, f"<case {index}>", "exec"), scope)
        except Exception as e:
            error = [type(e).__name__, str(e)]
    found = [[w.category.__name__, str(w.message)] for w in caught
             if not issubclass(w.category, (DeprecationWarning, ResourceWarning))]
    result = scope.get("result")
    out[index] = {"error": error, "warnings": found, "result": test_contract.plain(result)}
exposition = ""
if impl == "prometheus_client":
    from prometheus_client import CollectorRegistry as Fresh, generate_latest
    from prometheus_client.multiprocess import MultiProcessCollector
    fresh = Fresh()
    MultiProcessCollector(fresh)
    exposition = generate_latest(fresh).decode()
print("OUT " + json.dumps({"cases": out, "exposition": exposition}), flush=True)
if impl != "prometheus_client":
    sys.stdin.read()  # stays alive (its live gauges served) until the test closes stdin
""".replace("HERE", repr(HERE))


def plain(value):
    """A JSON-comparable form of a case's result (NaN as a string: it is equal to itself here)."""
    if isinstance(value, float):
        return "NaN" if math.isnan(value) else value
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, (str, int, bool)) or value is None:
        return value
    return repr(value)


def family_samples(text: str, family: str):
    """The samples of one family in the order served, as (name, labels, value) with the pid label's value
    masked (a process id differs between runs) and values as text ("NaN", "+Inf" compare as they read)."""
    out = []
    pattern = re.compile(r'^(' + re.escape(family) + r'(?:_total|_bucket|_count|_sum)?)(\{.*\})?\s+(\S+)$')
    for line in text.splitlines():
        m = pattern.match(line)
        if not m:
            continue
        labels = re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', m.group(2) or "")
        labels = sorted((k, "PID" if k == "pid" else v) for k, v in labels)
        value = float(m.group(3))
        out.append((m.group(1), labels, "NaN" if math.isnan(value) else value))
    return out


def _run(impl: str, env: dict, keep_alive: bool = False):
    proc = subprocess.Popen([sys.executable, "-c", WORKER, impl], env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    fast = None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if line.startswith("FAST "):
            fast = line.split()[1] == "True"
        elif line.startswith("OUT "):
            data = json.loads(line[4:])
            if not keep_alive:
                proc.communicate(timeout=30)
            return proc, fast, data
    proc.kill()
    _, err = proc.communicate()
    raise AssertionError(f"{impl} worker gave no result:\n{err}")


# --- the tests ---------------------------------------------------------------------------------------

HAVE_PROMETHEUS_CLIENT = importlib.util.find_spec("prometheus_client") is not None

REFERENCE = {}


def reference():
    """prometheus_client's outcomes and exposition, computed once for both paths."""
    if not REFERENCE:
        multiproc = tempfile.mkdtemp(prefix="rankstat-contract-pc-")
        env = dict(os.environ, PROMETHEUS_MULTIPROC_DIR=multiproc)
        try:
            _, _, data = _run("prometheus_client", env)
        finally:
            for f in os.listdir(multiproc):
                os.unlink(os.path.join(multiproc, f))
            os.rmdir(multiproc)
        REFERENCE.update(data)
    return REFERENCE


class Contract:
    """The cases against one implementation of rankstat's hot path; subclasses set NO_FASTPATH."""

    NO_FASTPATH = "0"

    @classmethod
    def setUpClass(cls):
        if not HAVE_PROMETHEUS_CLIENT:
            raise unittest.SkipTest("prometheus_client is not importable: there is no reference to compare with")
        if not os.environ.get("RANKSTAT_DAEMON"):
            raise unittest.SkipTest("needs RANKSTAT_DAEMON (set by CTest)")
        from daemon_harness import Daemon, TempDir
        if cls.NO_FASTPATH == "0":
            from rankstat import _accel
            if _accel.fastpath_module() is None:
                raise unittest.SkipTest("the C extension is not built: " + str(_accel.FASTPATH_ERROR))
        cls.reference = reference()
        cls.shm = TempDir("rankstat-contract-shm")
        cls.files = TempDir("rankstat-contract-files")
        cls.daemon = Daemon(cls.shm.path, cls.files.path)
        env = dict(os.environ, RANKSTAT_SHM_DIR=cls.shm.path, RANKSTAT_NO_FASTPATH=cls.NO_FASTPATH,
                   RANKSTAT_INSTANCE="contract")
        env.pop("PROMETHEUS_MULTIPROC_DIR", None)
        env.pop("prometheus_multiproc_dir", None)
        try:
            cls.proc, cls.fast, data = _run("rankstat", env, keep_alive=True)
        except BaseException:
            cls.daemon.child.kill()
            raise
        cls.ours = data["cases"]
        cls.exposition = cls._settled_scrape()

    @classmethod
    def _settled_scrape(cls):
        # The daemon drains the segment on its scan interval: wait until two scrapes in a row agree and
        # every compared family is there.
        wanted = [f"k{i}_{f}" for i, (_, _, o) in enumerate(CASES) for f in o.get("expose", ())
                  if "ours" not in o]
        last, deadline = None, time.monotonic() + 20
        while time.monotonic() < deadline:
            text = cls.daemon.scrape()
            if text == last and all(family_samples(text, f) for f in wanted):
                return text
            last = text
            time.sleep(0.3)
        return last or ""

    @classmethod
    def tearDownClass(cls):
        proc = getattr(cls, "proc", None)
        if proc is not None:
            proc.stdin.close()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            proc.stdout.close()
            proc.stderr.close()
        if getattr(cls, "daemon", None) is not None:
            cls.daemon.stop()
        for d in ("shm", "files"):
            if getattr(cls, d, None) is not None:
                getattr(cls, d).cleanup()

    def test_the_implementation_under_test_is_the_one_running(self):
        self.assertEqual(self.fast, self.NO_FASTPATH == "0")

    def test_every_case_behaves_as_prometheus_client(self):
        for index, (sentence, code, options) in enumerate(CASES):
            with self.subTest(case=sentence):
                theirs = dict(self.reference["cases"][str(index)])
                theirs.update(options.get("current", {}))
                theirs.update(options.get("ours", {}))
                ours = self.ours[str(index)]
                want_error, got_error = theirs["error"], ours["error"]
                if want_error is None or got_error is None:
                    self.assertEqual(got_error, want_error)
                else:
                    self.assertEqual(got_error[0], want_error[0], got_error)
                    how = options.get("message", "exact")
                    if want_error[1] is not None and how == "exact":
                        self.assertEqual(got_error[1], want_error[1])
                    elif want_error[1] is not None and how == "prefix":
                        self.assertEqual(got_error[1].split(":")[0], want_error[1].split(":")[0])
                self.assertEqual(ours["warnings"], theirs.get("warnings", []))
                if "ours" not in options:
                    self.assertEqual(ours["result"], theirs["result"])

    def test_every_exposed_family_is_served_as_prometheus_client_serves_it(self):
        for index, (sentence, code, options) in enumerate(CASES):
            for family in options.get("expose", ()):
                name = f"k{index}_{family}"
                with self.subTest(case=sentence, family=name):
                    want = family_samples(self.reference["exposition"], name)
                    got = family_samples(self.exposition, name)
                    self.assertTrue(want, f"prometheus_client served no {name}")
                    self.assertEqual(got, want, "\n" + "\n".join(
                        l for l in self.exposition.splitlines() if name in l))


    def test_a_construction_refused_as_a_duplicate_declares_nothing_served(self):
        # prometheus_client serves the refused gauge's zero (its value exists before register() refuses
        # it); rankstat checks the registry first (docs/semantics.md, differences on purpose).
        index = next(i for i, (sentence, _, _) in enumerate(CASES) if sentence.startswith("a gauge named like a counter"))
        self.assertEqual(self.ours[str(index)]["error"][0], "ValueError")
        types = [line for line in self.exposition.splitlines() if line.startswith(f"# TYPE k{index}_dup")]
        self.assertEqual(types, [f"# TYPE k{index}_dup_total counter"])


class WithTheCExtension(Contract, unittest.TestCase):
    NO_FASTPATH = "0"


class WithThePurePythonTwin(Contract, unittest.TestCase):
    NO_FASTPATH = "1"


if __name__ == "__main__":
    unittest.main()
