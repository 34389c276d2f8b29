"""prometheus_client's timing helpers: `metric.time()` (Timer), `gauge.track_inprogress()`
(InprogressTracker) and `counter.count_exceptions()` (ExceptionCounter), each a context manager or a
decorator, and the decorator machinery that keeps the decorated function's exact signature, as the
`decorator` package prometheus_client uses does.

They update their metric through its public methods (inc/dec/set/observe), so they cost what those cost
plus the timer or the context manager protocol.
"""

from __future__ import annotations

import functools
import inspect
from timeit import default_timer
from typing import Any, Callable, Dict

def decorate(func: Callable, caller: Callable) -> Callable:
    """A function with `func`'s exact signature (inspect.signature and getfullargspec alike, as the
    `decorator` package prometheus_client uses gives) whose body is `caller(func, *args, **kwargs)`.
    Callables without a Python signature are wrapped with functools.wraps."""
    try:
        sig = inspect.signature(func, follow_wrapped=False)
    except (TypeError, ValueError):
        sig = None
    if sig is None or not isinstance(func, type(decorate)):
        @functools.wraps(func)
        def plain(*args, **kwargs):
            return caller(func, *args, **kwargs)
        return plain
    # The parameter list without defaults or annotations (those are copied onto the new function below).
    bare = sig.replace(parameters=[p.replace(default=p.empty, annotation=p.empty) for p in sig.parameters.values()],
                       return_annotation=sig.empty)
    call = []
    for p in sig.parameters.values():
        if p.kind == p.VAR_POSITIONAL:
            call.append("*" + p.name)
        elif p.kind == p.KEYWORD_ONLY:
            call.append(f"{p.name}={p.name}")
        elif p.kind == p.VAR_KEYWORD:
            call.append("**" + p.name)
        else:
            call.append(p.name)
    names = set(sig.parameters)
    call_name, func_name = "_call_", "_func_"
    while call_name in names or func_name in names:
        call_name, func_name = call_name + "_", func_name + "_"
    prefix = "async def" if inspect.iscoroutinefunction(func) else "def"
    body = f"return {call_name}({', '.join([func_name] + call)})"
    if prefix == "async def":
        body = "return await " + body[len("return "):]
    source = f"{prefix} {func.__name__ if func.__name__.isidentifier() else 'wrapped'}{bare}:\n    {body}\n"
    namespace: Dict[str, Any] = {call_name: caller, func_name: func}
    exec(compile(source, f"<rankstat decorator of {func.__qualname__}>", "exec"), namespace)
    wrapped = namespace[func.__name__ if func.__name__.isidentifier() else "wrapped"]
    wrapped.__defaults__ = func.__defaults__
    wrapped.__kwdefaults__ = func.__kwdefaults__
    wrapped.__annotations__ = dict(getattr(func, "__annotations__", {}))
    wrapped.__name__ = func.__name__
    wrapped.__qualname__ = func.__qualname__
    wrapped.__doc__ = func.__doc__
    wrapped.__module__ = func.__module__
    wrapped.__dict__.update(func.__dict__)
    wrapped.__wrapped__ = func
    return wrapped



class _BlockOrDecorator:
    """A context manager that is also a decorator: the decorated function runs inside
    `with self._for_one_call():` on every call."""

    def _for_one_call(self) -> Any:
        return self

    def __enter__(self) -> Any:
        return None

    def __exit__(self, typ, value, traceback) -> None:
        pass

    def __call__(self, f):
        def wrapped(func, *args, **kwargs):
            with self._for_one_call():
                return func(*args, **kwargs)
        return decorate(f, wrapped)


class Timer(_BlockOrDecorator):
    """`metric.time()`: a context manager (entering gives the Timer; `t.labels(...)` inside the block picks
    the child the duration goes to) or a decorator (a new Timer per call, so calls may nest or run in
    threads). The duration, never negative, goes to `getattr(metric, callback_name)` at exit."""

    def __init__(self, metric, callback_name: str):
        self._metric = metric
        self._callback_name = callback_name

    def _new_timer(self) -> "Timer":
        return self.__class__(self._metric, self._callback_name)

    _for_one_call = _new_timer

    def __enter__(self) -> "Timer":
        self._start = default_timer()
        return self

    def __exit__(self, typ, value, traceback) -> None:
        duration = max(default_timer() - self._start, 0)
        getattr(self._metric, self._callback_name)(duration)

    def labels(self, *args, **kw) -> None:
        """Points the timer at the child of these label values (inside a `with` block, before it ends)."""
        self._metric = self._metric.labels(*args, **kw)


class InprogressTracker(_BlockOrDecorator):
    """`gauge.track_inprogress()`: +1 on entry, -1 on exit; a context manager or a decorator."""

    def __init__(self, gauge):
        self._gauge = gauge

    def __enter__(self) -> None:
        self._gauge.inc()

    def __exit__(self, typ, value, traceback) -> None:
        self._gauge.dec()


class ExceptionCounter(_BlockOrDecorator):
    """`counter.count_exceptions(exception=Exception)`: +1 when an exception of that type (or tuple of
    types) leaves the block or function; the exception is never swallowed."""

    def __init__(self, counter, exception):
        self._counter = counter
        self._exception = exception

    def __exit__(self, typ, value, traceback) -> None:
        if isinstance(value, self._exception):
            self._counter.inc()  # and the exception goes on
