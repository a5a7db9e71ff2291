"""A client of the selfimprove outcome intake, standard library only.

An agent that runs outside Go reports each call it makes to a selfimprove
sidecar (``selfimprove serve --dir STATE --create``) and runs under the
config the sidecar serves: the loop decides, verifies and rolls back its
config exactly as for a Go agent. See docs/intake.md.

    from selfimprove_client import Client

    si = Client("http://127.0.0.1:8080", token=os.environ["SELFIMPROVE_TOKEN"])

    def ask(cfg):
        # Honour the config: the model (route), the per-attempt timeout.
        return call_model(model=cfg.route or "gpt-4.1", timeout=cfg.timeout)

    answer = si.call("summarize", ask)   # attempts, backoff, report
    si.flush()                           # at exit: send what is queued

Python 3.8 or later.
"""

import json
import random
import re
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

__all__ = ["Client", "Config", "CallFailed", "IntakeError", "parse_duration"]

_UNITS = {"ns": 1e-9, "us": 1e-6, "\u00b5s": 1e-6, "\u03bcs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|\u00b5s|\u03bcs|ms|s|m|h)")


def parse_duration(s):
    """Seconds in a Go duration string ("1.5s", "1m30s", "250ms"); 0 for "" or "0s"."""
    if not s or s == "0":
        return 0.0
    total, pos = 0.0, 0
    for m in _PART.finditer(s):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if pos != len(s):
        raise ValueError("not a duration: %r" % s)
    return total


class Config:
    """The config in force for an agent, as the sidecar serves it.

    version: the number to report with each call (config_version);
    timeout, backoff, first_token_timeout: seconds (0: none);
    max_attempts: attempts a call may make (at least 1);
    route: the model or endpoint to use ("" : the agent's own choice);
    params: any other settings (a dict of strings).
    """

    def __init__(self, doc):
        self.version = int(doc.get("version", 0))
        self.timeout = parse_duration(doc.get("timeout", ""))
        self.max_attempts = max(1, int(doc.get("max_attempts", 0) or 0))
        self.backoff = parse_duration(doc.get("backoff", ""))
        self.route = doc.get("route", "")
        self.params = dict(doc.get("params") or {})
        self.first_token_timeout = parse_duration(doc.get("first_token_timeout", ""))

    def __repr__(self):
        return "Config(version=%d, timeout=%g, max_attempts=%d, backoff=%g, route=%r, params=%r)" % (
            self.version, self.timeout, self.max_attempts, self.backoff, self.route, self.params)


class CallFailed(Exception):
    """A failure to report with its provider's status, code and Retry-After.

    Raise it (or any exception with ``status``/``code`` attributes, such
    as urllib.error.HTTPError) from the function Client.call runs.
    """

    def __init__(self, message, status=None, code=None, retry_after=None):
        super().__init__(message)
        self.status, self.code, self.retry_after = status, code, retry_after


class IntakeError(Exception):
    """The sidecar refused a request: status and its error body."""

    def __init__(self, status, body):
        super().__init__("selfimprove intake: %s %s" % (status, body))
        self.status, self.body = status, body


_TRANSIENT = {408, 409, 425, 429, 500, 502, 503, 504, 529}


def _status_of(exc):
    for name in ("status", "status_code", "code"):
        v = getattr(exc, name, None)
        if isinstance(v, int) and 100 <= v <= 599:
            return v
    return None


def _code_of(exc):
    v = getattr(exc, "code", None)
    return v if isinstance(v, str) else None


def _retry_after(exc):
    v = getattr(exc, "retry_after", None)
    if v is None:
        headers = getattr(exc, "headers", None)
        v = headers.get("Retry-After") if headers is not None else None
    try:
        return max(0.0, float(v)) if v is not None else 0.0
    except (TypeError, ValueError):
        return 0.0


def _transient(exc):
    status = _status_of(exc)
    if status is not None:
        return status in _TRANSIENT
    return isinstance(exc, (TimeoutError, socket.timeout, ConnectionError, urllib.error.URLError))


class Client:
    """Reports an agent's calls to the sidecar and serves it its config.

    url: the sidecar's admin URL; token: its bearer token (the admin's
    SELFIMPROVE_TOKEN, or the intake's own token); batch_size: outcomes
    sent together (the sidecar takes at most 500); config_ttl: seconds a
    config is used before it is read again (a cheap 304 when unchanged);
    transient_attempts: the fewest attempts a transient failure gets
    whatever max_attempts says, as the Go loop's
    RetryPolicy.TransientAttempts (default 3; 1: off), the extra ones
    waiting at least 0.5 s doubled; sleep and clock are time.sleep and
    time.monotonic, for tests.
    """

    def __init__(self, url, token="", batch_size=50, config_ttl=5.0, request_timeout=5.0,
                 transient_attempts=3, sleep=time.sleep, clock=time.monotonic):
        self.transient_attempts = max(1, transient_attempts)
        self.url = url.rstrip("/")
        self.token = token
        self.batch_size = max(1, min(500, batch_size))
        self.config_ttl = config_ttl
        self.request_timeout = request_timeout
        self.sleep, self.clock = sleep, clock
        self._lock = threading.Lock()
        self._queue = []
        self._configs = {}  # agent -> (Config, etag, read at)

    def _request(self, method, path, body=None, headers=None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if self.token:
            req.add_header("Authorization", "Bearer " + self.token)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        try:
            with urllib.request.urlopen(req, timeout=self.request_timeout) as res:
                return res.status, res.headers, res.read()
        except urllib.error.HTTPError as e:
            return e.code, e.headers, e.read()

    def config(self, agent, refresh=False):
        """The config in force for agent, read again when older than config_ttl."""
        with self._lock:
            cached = self._configs.get(agent)
        if cached and not refresh and self.clock() - cached[2] < self.config_ttl:
            return cached[0]
        headers = {"If-None-Match": cached[1]} if cached else {}
        status, hdrs, body = self._request("GET", "/api/agents/%s/config" % urllib.parse.quote(agent, safe=""), headers=headers)
        if status == 304 and cached:
            cfg, etag = cached[0], cached[1]
        elif status == 200:
            cfg, etag = Config(json.loads(body)["config"]), hdrs.get("ETag", "")
        else:
            raise IntakeError(status, body.decode(errors="replace"))
        with self._lock:
            self._configs[agent] = (cfg, etag, self.clock())
        return cfg

    def report(self, agent, success, duration_ms, config_version, error="", status=None, code=None,
               attempts=1, quality=None, cost=None, canceled=False):
        """Queue one call's outcome; sent when batch_size are queued (or on flush)."""
        o = {"agent": agent, "success": bool(success), "duration_ms": float(duration_ms),
             "config_version": int(config_version), "attempts": int(attempts)}
        if not success:
            if error:
                o["error"] = str(error)[:4096]
            if status:
                o["status"] = int(status)
            if code:
                o["code"] = str(code)[:128]
            if canceled:
                o["canceled"] = True
        if quality is not None:
            o["quality"] = float(quality)
        if cost is not None:
            o["cost"] = float(cost)
        with self._lock:
            self._queue.append(o)
            full = len(self._queue) >= self.batch_size
        if full:
            self.flush()

    def flush(self):
        """Send the queued outcomes; returns the sidecar's answer (or None).

        A config whose version changed is read again at its next use. A
        429 puts the batch back and waits its Retry-After once.
        """
        with self._lock:
            batch, self._queue = self._queue[:500], self._queue[500:]
        if not batch:
            return None
        for attempt in range(2):
            status, hdrs, body = self._request("POST", "/api/outcomes", {"outcomes": batch})
            if status == 429 and attempt == 0:
                self.sleep(float(hdrs.get("Retry-After", "1") or 1))
                continue
            break
        if status != 200:
            if status == 429:
                with self._lock:
                    self._queue[:0] = batch
            raise IntakeError(status, body.decode(errors="replace"))
        answer = json.loads(body)
        with self._lock:
            for a in answer.get("agents", []):
                cached = self._configs.get(a["id"])
                if cached and cached[0].version != a["config_version"]:
                    del self._configs[a["id"]]
        return answer

    def call(self, agent, fn, quality=None, cost=None):
        """Run fn(config) under agent's config and report the call.

        Up to config.max_attempts attempts (at least transient_attempts)
        for a transient failure (a status of 408, 429 or 5xx, a timeout, a
        connection error), with the config's backoff (doubled each
        attempt, with jitter; at least the Retry-After the failure asked
        for). fn must honour
        config.timeout (give it to its HTTP client) and config.route (the
        model). Returns fn's result, or raises its last exception.
        """
        cfg = self.config(agent)
        start, attempts = self.clock(), 0
        while True:
            attempts += 1
            try:
                result = fn(cfg)
            except Exception as exc:  # reported, then raised again
                if attempts < max(cfg.max_attempts, self.transient_attempts) and _transient(exc):
                    base = cfg.backoff if attempts < cfg.max_attempts else max(cfg.backoff, 0.5)
                    d = min(3600.0, base * 2 ** (attempts - 1))
                    self.sleep(max(random.uniform(d / 2, d), _retry_after(exc)))
                    continue
                self.report(agent, False, (self.clock() - start) * 1e3, cfg.version, error=str(exc) or type(exc).__name__,
                            status=_status_of(exc), code=_code_of(exc), attempts=attempts, quality=quality, cost=cost)
                raise
            self.report(agent, True, (self.clock() - start) * 1e3, cfg.version, attempts=attempts, quality=quality, cost=cost)
            return result
