"""SGLang's HTTP front-end metrics (http_request_metrics.py) and function timer (func_timer.py).

These families carry only their own labels (endpoint, method, status_code, name), not the engine's.
http_requests_active and routing_keys_active are livesum gauges: each front-end process publishes its own
count and rankstatd sums the live processes, so a dead worker's requests drop out on their own.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from typing import Any, Callable, Dict, Optional, Tuple

from ..reporter import Reporter
from . import catalog as cat


class HttpMetrics:
    """Per-process HTTP request accounting. Call request_started() when a request enters the handler
    and request_finished() with the returned token when its response is complete."""

    def __init__(self, reporter: Reporter):
        self.reporter = reporter
        self._lock = threading.Lock()
        self._ids: Dict[Tuple, int] = {}
        self._active: Dict[Tuple[str, str], int] = {}
        self._keys: Dict[str, int] = {}
        self._routing_id = self._id("gauge", "sglang:routing_keys_active", (), mode="livesum")
        self.reporter.set(self._routing_id, 0)

    def _id(self, kind: str, family: str, labels: Tuple, mode: str = "mostrecent") -> int:
        found = self._ids.get((family, labels))
        if found is None:
            found = self.reporter.register(kind, family, labels, mode=mode, identity_labels=False)
            self._ids[(family, labels)] = found
        return found

    def request_started(self, endpoint: str, method: str, routing_key: Optional[str] = None) -> Tuple:
        labels = (("endpoint", endpoint), ("method", method))
        r = self.reporter
        with self._lock:
            r.add(self._id("counter", "sglang:http_requests_total", labels), 1)
            active = self._active.get(labels, 0) + 1
            self._active[labels] = active
            r.set(self._id("gauge", "sglang:http_requests_active", labels, mode="livesum"), active)
            if routing_key is not None:
                refs = self._keys.get(routing_key, 0)
                self._keys[routing_key] = refs + 1
                if refs == 0:
                    r.set(self._routing_id, len(self._keys))
        return labels, routing_key

    def request_finished(self, token: Tuple, status_code: int) -> None:
        labels, routing_key = token
        endpoint, method = labels[0][1], labels[1][1]
        r = self.reporter
        with self._lock:
            r.add(self._id("counter", "sglang:http_responses_total",
                           (("endpoint", endpoint), ("status_code", str(status_code)), ("method", method))), 1)
            active = max(0, self._active.get(labels, 0) - 1)
            self._active[labels] = active
            r.set(self._id("gauge", "sglang:http_requests_active", labels, mode="livesum"), active)
            if routing_key is not None:
                refs = self._keys.get(routing_key, 0) - 1
                if refs <= 0:
                    self._keys.pop(routing_key, None)
                    r.set(self._routing_id, len(self._keys))
                else:
                    self._keys[routing_key] = refs


class HttpMetricsMiddleware:
    """A pure ASGI middleware (FastAPI / Starlette or any ASGI app) feeding HttpMetrics, the way SGLang's
    HTTP middleware counts: http_requests_total and http_requests_active{endpoint, method} when a request
    comes in, http_responses_total{endpoint, status_code, method} when it ends, routing_keys_active from
    the x-smg-routing-key header. `endpoint_of(scope)` names the endpoint; the default is the path, so
    pass a route-template lookup when paths carry parameters (SGLang matches its route table)."""

    def __init__(self, app, metrics: HttpMetrics, endpoint_of=None, routing_key_header: bytes = b"x-smg-routing-key"):
        self.app = app
        self.metrics = metrics
        self.endpoint_of = endpoint_of or (lambda scope: scope.get("path", ""))
        self.routing_key_header = routing_key_header

    async def __call__(self, scope, receive, send):
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        key = None
        for name, value in scope.get("headers") or ():
            if name.lower() == self.routing_key_header:
                key = value.decode("latin-1")
                break
        token = self.metrics.request_started(self.endpoint_of(scope), scope.get("method", "GET"), key)
        status = {"code": 500}

        async def send_and_note(message):
            if message.get("type") == "http.response.start":
                status["code"] = message.get("status", 500)
            await send(message)

        try:
            await self.app(scope, receive, send_and_note)
        finally:
            self.metrics.request_finished(token, status["code"])


class FuncLatency:
    """An object shaped like SGLang's FUNC_LATENCY histogram (`.labels(name=...).observe(seconds)`),
    writing func_latency_seconds{name} to `reporter`."""

    def __init__(self, reporter: Reporter):
        self.reporter = reporter
        self._ids: Dict[str, int] = {}

    def labels(self, name: str = "", **kw: Any) -> "_FuncChild":
        name = str(kw.get("name", name))
        series = self._ids.get(name)
        if series is None:
            series = self.reporter.register("histogram", "sglang:func_latency_seconds", (("name", name),),
                                            buckets=cat.FUNC_LATENCY, identity_labels=False)
            self._ids[name] = series
        return _FuncChild(self.reporter, series)


class _FuncChild:
    __slots__ = ("_r", "_id")

    def __init__(self, reporter: Reporter, series: int):
        self._r, self._id = reporter, series

    def observe(self, seconds: float) -> None:
        self._r.observe(self._id, seconds)


_func_latency: Optional[Tuple[Reporter, Dict[str, int]]] = None


def enable_func_timer(reporter: Reporter) -> None:
    """Turns on sglang:func_latency_seconds{name} for functions decorated with time_func_latency."""
    global _func_latency
    _func_latency = (reporter, {})


def observe_func_latency(name: str, seconds: float) -> None:
    """One func_latency_seconds{name} sample (when the timer is enabled)."""
    _observe_func(name, seconds)


def _observe_func(name: str, seconds: float) -> None:
    state = _func_latency
    if state is None:
        return
    reporter, ids = state
    series = ids.get(name)
    if series is None:
        series = reporter.register("histogram", "sglang:func_latency_seconds", (("name", name),),
                                   buckets=cat.FUNC_LATENCY, identity_labels=False)
        ids[name] = series
    reporter.observe(series, seconds)


def time_func_latency(func: Optional[Callable] = None, name: Optional[str] = None):
    """Decorator observing a sync or async function's wall time into func_latency_seconds{name}."""

    def wrap(f: Callable) -> Callable:
        label = name or f.__name__
        if asyncio.iscoroutinefunction(f):
            @functools.wraps(f)
            async def async_timed(*args: Any, **kwargs: Any) -> Any:
                if _func_latency is None:
                    return await f(*args, **kwargs)
                start = time.perf_counter()
                try:
                    return await f(*args, **kwargs)
                finally:
                    _observe_func(label, time.perf_counter() - start)
            return async_timed

        @functools.wraps(f)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if _func_latency is None:
                return f(*args, **kwargs)
            start = time.perf_counter()
            try:
                return f(*args, **kwargs)
            finally:
                _observe_func(label, time.perf_counter() - start)
        return timed

    return wrap(func) if func is not None else wrap
