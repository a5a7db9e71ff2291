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

    answer = si.call("summarize", ask,               # attempts, backoff, report
                     cost=lambda r: r.usage.cost)    # measured on the answer
    si.flush()                                       # at exit: send what is queued

Reporting never gets in the way of the agent: Client.call always runs the
function and returns its answer (or raises its exception); a sidecar that
is down, slow or refusing costs the agent nothing but the reports the
bounded queue cannot keep, counted in Client.dropped and logged.

Python 3.8 or later.
"""

import atexit
import datetime
import email.utils
import functools
import http.client
import io
import json
import logging
import math
import os
import random
import re
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import weakref

__all__ = ["Client", "Config", "CallFailed", "IntakeError", "parse_duration", "retry_after_seconds"]

_UNITS = {"ns": 1e-9, "us": 1e-6, "\u00b5s": 1e-6, "\u03bcs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|\u00b5s|\u03bcs|ms|s|m|h)")

# The intake's bounds (admin/intake.go, docs/intake.md).
MAX_OUTCOMES = 500          # outcomes in one batch
MAX_ERROR_BYTES = 4096      # an outcome's error text, UTF-8 bytes
MAX_CODE_BYTES = 128        # its error code
MAX_AGENT_BYTES = 1024      # an agent ID
MAX_DURATION_MS = 86400000.0
MAX_ATTEMPTS = 100
MAX_COST = 1e12
MAX_ANSWER_BYTES = 8 << 20  # the most of an answer read (a batch's names 500 agents: 3.1 MB at most)

_log = logging.getLogger("selfimprove_client")


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


def retry_after_seconds(value, cap=60.0):
    """Seconds a Retry-After value asks to wait, in [0, cap].

    value is a number of seconds (a number or its text: "inf" gives cap;
    "nan", a negative or an unreadable value gives 0) or an HTTP-date
    (the seconds until then).
    """
    if value is None or isinstance(value, bool):
        return 0.0
    if isinstance(value, (int, float)):
        s = float(value)
    else:
        text = str(value).strip()
        try:
            s = float(text)
        except ValueError:
            try:
                when = email.utils.parsedate_to_datetime(text)
            except (TypeError, ValueError, IndexError, OverflowError):
                return 0.0
            if when is None:
                return 0.0
            if when.tzinfo is None:
                when = when.replace(tzinfo=datetime.timezone.utc)
            s = (when - datetime.datetime.now(datetime.timezone.utc)).total_seconds()
    if s != s or s <= 0:
        return 0.0
    return min(s, cap)


def _cut(s, limit):
    """s as valid UTF-8 of at most limit bytes, never splitting a character."""
    b = str(s).encode("utf-8", "replace")  # a lone surrogate becomes "?"
    return b[:limit].decode("utf-8", "ignore")


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
    retry_after: seconds, or the header's text (seconds or an HTTP-date).
    """

    def __init__(self, message, status=None, code=None, retry_after=None):
        super().__init__(message)
        self.status, self.code, self.retry_after = status, code, retry_after


class IntakeError(Exception):
    """The sidecar refused a request: status and its error body.

    The client no longer raises it (reporting never raises); it is kept
    for code that catches it.
    """

    def __init__(self, status, body):
        super().__init__("selfimprove intake: %s %s" % (status, body))
        self.status, self.body = status, body


# The statuses of a transient failure, as the Go loop classifies them
# (failure.Classify: 408 timeout, 429 rate limit, 5xx overloaded) and as
# docs/intake.md says: not 409 or 425.
_TRANSIENT = frozenset({408, 429} | set(range(500, 600)))


def _status_of(exc):
    for name in ("status", "status_code", "code"):
        v = getattr(exc, name, None)
        if isinstance(v, int) and not isinstance(v, bool) and 100 <= v <= 599:
            return v
    return None


def _code_of(exc):
    v = getattr(exc, "code", None)
    return v if isinstance(v, str) else None


def _retry_after(exc, cap):
    v = getattr(exc, "retry_after", None)
    if v is None:
        headers = getattr(exc, "headers", None)
        try:
            v = headers.get("Retry-After") if headers is not None else None
        except Exception:  # a headers object of another shape
            v = None
    return retry_after_seconds(v, cap)


def _transient(exc):
    status = _status_of(exc)
    if status is not None:
        return status in _TRANSIENT
    return isinstance(exc, (TimeoutError, socket.timeout, ConnectionError, urllib.error.URLError))


def _userinfo(url):
    """The user and password url holds (http://user:pw@host), or "": they never reach a log."""
    try:
        netloc = urllib.parse.urlsplit(url).netloc
    except ValueError:
        return ""
    return netloc.rsplit("@", 1)[0] if "@" in netloc else ""


def _error_text(exc):
    try:
        return str(exc) or type(exc).__name__
    except Exception:
        return type(exc).__name__


def _read_answer(res, deadline, cut=False):
    """res's body, read by chunks until deadline (time.monotonic) and at
    most MAX_ANSWER_BYTES: a sidecar that trickles its answer, or answers
    more than an intake ever does, raises TimeoutError or ValueError (cut:
    an error's body, its first MAX_ANSWER_BYTES), never holding the call
    nor its memory. Each read waits until deadline at most (_TimedReader)."""
    chunks, n = [], 0
    while n <= MAX_ANSWER_BYTES:
        if time.monotonic() > deadline:
            raise TimeoutError("the answer was not read within request_timeout")
        b = res.read1(65536) if hasattr(res, "read1") else res.read(65536)
        if not b:
            return b"".join(chunks)
        chunks.append(b)
        n += len(b)
    if cut:
        return b"".join(chunks)[:MAX_ANSWER_BYTES]
    raise ValueError("the answer is over %d bytes: not an intake's" % MAX_ANSWER_BYTES)


def _time_left(deadline):
    """Seconds until deadline (time.monotonic); socket.timeout when none are left."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise socket.timeout("no answer within request_timeout")
    return left


class _TimedReader(io.RawIOBase):
    """sock's bytes, each read waiting until deadline at most (not the
    socket's timeout afresh): an answer's status line and headers, read by
    http.client, are bounded by request_timeout as its body is."""

    def __init__(self, sock, deadline):
        super().__init__()
        self._sock, self._raw, self._deadline = sock, sock.makefile("rb", buffering=0), deadline

    def readable(self):
        return True

    def readinto(self, b):
        self._sock.settimeout(_time_left(self._deadline))
        return self._raw.readinto(b)

    def close(self):
        if not self.closed:
            self._raw.close()
        super().close()


class _TimedResponse(http.client.HTTPResponse):
    """An HTTPResponse read through a _TimedReader."""

    def __init__(self, sock, *args, deadline, **kw):
        super().__init__(sock, *args, **kw)
        self.fp.close()  # nothing read from it yet
        self.fp = io.BufferedReader(_TimedReader(sock, deadline))


class _Timed:
    """An HTTP(S)Connection whose connection, request and answer end by
    deadline (time.monotonic), the whole of them, not each read."""

    def __init__(self, *args, deadline, **kw):
        super().__init__(*args, **kw)
        self._deadline = deadline
        self.response_class = functools.partial(_TimedResponse, deadline=deadline)

    def connect(self):
        self.timeout = _time_left(self._deadline)
        super().connect()

    def send(self, data):
        if self.sock is not None:
            self.sock.settimeout(_time_left(self._deadline))
        super().send(data)


class _TimedHTTPConnection(_Timed, http.client.HTTPConnection):
    pass


_TIMED = {http.client.HTTPConnection: _TimedHTTPConnection}
if hasattr(http.client, "HTTPSConnection"):  # Python built with ssl
    class _TimedHTTPSConnection(_Timed, http.client.HTTPSConnection):
        pass
    _TIMED[http.client.HTTPSConnection] = _TimedHTTPSConnection


class _DeadlineOpen:
    """Opens a request whose _deadline is set on a _Timed connection."""

    def do_open(self, http_class, req, **kw):
        deadline = getattr(req, "_deadline", None)
        if deadline is not None and http_class in _TIMED:
            http_class = functools.partial(_TIMED[http_class], deadline=deadline)
        return super().do_open(http_class, req, **kw)


class _HTTPHandler(_DeadlineOpen, urllib.request.HTTPHandler):
    pass


_HANDLERS = [_HTTPHandler]
if hasattr(urllib.request, "HTTPSHandler"):
    class _HTTPSHandler(_DeadlineOpen, urllib.request.HTTPSHandler):
        pass
    _HANDLERS.append(_HTTPSHandler)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Follows no redirect: the token must not travel to another origin."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


_OPENER = urllib.request.build_opener(_NoRedirect, *_HANDLERS)

_INDEX = re.compile(r"^outcomes\[(\d+)\]")


def _unique(pairs):
    """A JSON object's pairs as a dict; ValueError naming a key given twice."""
    doc = {}
    for k, v in pairs:
        if k in doc:
            raise ValueError("the answer has the key %r twice" % _cut(k, 100))
        doc[k] = v
    return doc


def _parse(body):
    """body, an answer of the sidecar, as JSON; ValueError saying what is
    wrong when it is not valid UTF-8 (an encoded surrogate included) or an
    object in it has a key twice (which of the two to believe?)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError("the answer is not valid UTF-8 (%s)" % exc) from None
    return json.loads(text, object_pairs_hook=_unique)


def _field_name(body):
    """The field an intake error names (outcomes[3].x), or ""."""
    try:
        field = _parse(body).get("field", "")
    except (ValueError, AttributeError):
        return ""
    return field if isinstance(field, str) else ""


def _field_index(body):
    """The outcome index an intake error names (outcomes[3].x), or None."""
    m = _INDEX.match(_field_name(body))
    return int(m.group(1)) if m else None


def _without_ids(part):
    """The reports of part without their IDs, encoded again."""
    out = []
    for o, _ in part:
        o = {k: v for k, v in o.items() if k != "id"}
        out.append((o, json.dumps(o, ensure_ascii=False, allow_nan=False).encode("utf-8")))
    return out


def _agent_ref(agent):
    """agent as one escaped path segment: "." and ".." whole, as %2E (path
    cleaning would take them for the directory or its parent)."""
    if agent in (".", ".."):
        return "%2E" * len(agent)
    return urllib.parse.quote(agent, safe="")


def _retry_booked(body, i, n):
    """For a 409 whose body says the loop failed after booking some (retry:
    true), how many it booked (0..n); None for any other 409."""
    try:
        doc = _parse(body)
    except ValueError:
        return None
    if not isinstance(doc, dict) or doc.get("retry") is not True:
        return None
    booked = doc.get("booked", i)
    if isinstance(booked, bool) or not isinstance(booked, int) or not 0 <= booked <= n:
        return i if i is not None and 0 <= i <= n else None
    return booked


class _Budget:
    """The requests a send may still make (None: any number)."""

    def __init__(self, n=None):
        self.n = n

    def left(self):
        return self.n is None or self.n > 0

    def take(self):
        if self.n is None:
            return True
        if self.n <= 0:
            return False
        self.n -= 1
        return True


class _Unavailable(Exception):
    """A send the sidecar did not take: the batch stays queued."""

    def __init__(self, why, wait=None):
        super().__init__(why)
        self.why, self.wait = why, wait


def _flusher(ref, stop, wake, interval):
    """The background sender of a Client, until it is closed or collected."""
    while not stop.is_set():
        wake.wait(interval)
        wake.clear()
        client = ref()
        if client is None or stop.is_set():
            return
        try:
            client._tick()
        except Exception:  # never let the thread die on a bug
            _log.exception("selfimprove: the background send failed")
        del client


def _flush_at_exit(ref):
    """Sends what a Client still queues at exit: one try, no 429 wait."""
    client = ref()
    if client is not None:
        client._stop.set()
        try:
            client._send_pending(wait_429=False)
        except Exception:
            pass


class Client:
    """Reports an agent's calls to the sidecar and serves it its config.

    url: the sidecar's admin URL; token: its bearer token (the admin's
    SELFIMPROVE_TOKEN, or the intake's own token), never sent on a
    redirect (redirects are not followed); batch_size (50): reports sent
    together at the latest (at the next call once that many are queued);
    config_ttl (5.0): seconds a config is used before it is read again (a
    cheap 304 when unchanged); request_timeout (5.0): seconds for one
    request to the sidecar, its connection and its whole answer, headers
    included (at most MAX_ANSWER_BYTES, 8 MiB; an answer not valid UTF-8,
    or with a JSON key twice, is malformed); transient_attempts (3): the fewest attempts a transient
    failure gets whatever max_attempts says, as the Go loop's
    RetryPolicy.TransientAttempts (1: off), the extra ones waiting at
    least 0.5 s doubled; sleep and clock: time.sleep and time.monotonic,
    for tests.

    flush_interval (1.0): seconds a queued report waits at most before a
    background thread sends it (None: no thread; reports then go out at a
    call's start once batch_size are queued or a failure is, and on
    flush()). A failed call's report is sent before the next call reads
    its config, so the loop's decision reaches that call. A call's start
    sends one batch at most (one request), and none while another send
    is in progress: it never waits for the background thread.
    max_queue (10000): reports kept while the sidecar cannot take them;
    over it the oldest are dropped (counted in dropped). max_wait (60.0):
    the cap, in seconds, on any Retry-After honoured, the function's or
    the intake's, as the Go loop's RetryPolicy.MaxWait. retry_max (30.0):
    the longest wait between tries to reach a sidecar that is down (the
    first after 1 s, doubled). max_body_bytes (65536): the bound on one
    request's body, as the intake's MaxBodyBytes. default_config (None:
    version 1, one attempt, no timeout): the config used for an agent
    whose config was never read while the sidecar is down. flush_at_exit
    (True): send what is queued when the interpreter exits (one try).
    logger (None: logging.getLogger("selfimprove_client")): where outages
    and dropped reports are logged, at WARNING.

    Read at any time: offline (the sidecar is unreachable now), outages
    (how many began), booked (reports the sidecar booked), dropped
    (reports dropped: the queue was full, or the sidecar refused them),
    pending (reports queued), last_error, and stats() for all of them.
    """

    def __init__(self, url, token="", batch_size=50, config_ttl=5.0, request_timeout=5.0,
                 transient_attempts=3, sleep=time.sleep, clock=time.monotonic, flush_interval=1.0,
                 max_queue=10000, max_wait=60.0, retry_max=30.0, max_body_bytes=65536,
                 default_config=None, flush_at_exit=True, logger=None):
        self.transient_attempts = max(1, transient_attempts)
        self.url = url.rstrip("/")
        self._secret_url = _userinfo(self.url)  # redacted from the logs and last_error
        self.token = token
        self.batch_size = max(1, min(MAX_OUTCOMES, batch_size))
        self.config_ttl = config_ttl
        self.request_timeout = request_timeout
        self.sleep, self.clock = sleep, clock
        self.flush_interval = None if flush_interval is None else max(0.01, float(flush_interval))
        self.max_queue = max(1, int(max_queue))
        self.max_wait = max(0.0, float(max_wait))
        self.retry_max = max(0.0, float(retry_max))
        self.max_body_bytes = max(1024, int(max_body_bytes))
        if default_config is None:
            default_config = Config({"version": 1})
        elif isinstance(default_config, dict):
            default_config = Config(default_config)
        self.default_config = default_config
        self.log = logger or _log
        self._lock = threading.Lock()       # the queue, the configs, the counters
        self._send_lock = threading.Lock()  # one sender at a time, in order
        self._queue = []                    # (outcome, its JSON bytes)
        self._queued_at = 0.0               # when the oldest queued report was queued
        self._urgent = False                # a failure's report is queued
        self._configs = {}                  # agent -> (Config, etag, read at)
        self._ids = True                    # send each outcome with an ID (False: the sidecar is older)
        self._retry_at = 0.0                # no send (nor config read, offline) before
        self._retry_wait = 0.0
        self._down_since = None
        self._warned = set()
        self.offline = False
        self.outages = 0
        self.booked = 0
        self.dropped = 0
        self.drops = {"queue_full": 0, "refused": 0, "unknown": 0}
        self.last_error = ""
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = None
        if flush_at_exit:
            atexit.register(_flush_at_exit, weakref.ref(self))

    # -- state a caller can read ------------------------------------------

    @property
    def pending(self):
        """Reports queued, not yet booked by the sidecar."""
        with self._lock:
            return len(self._queue)

    def stats(self):
        """The client's counters, as a dict."""
        with self._lock:
            return {"offline": self.offline, "outages": self.outages, "booked": self.booked,
                    "dropped": self.dropped, "drops": dict(self.drops), "pending": len(self._queue),
                    "last_error": self.last_error}

    # -- requests ---------------------------------------------------------

    def _request(self, method, path, body=None, headers=None):
        data = None
        if body is not None:
            data = json.dumps(body, ensure_ascii=False, allow_nan=False).encode("utf-8")
        return self._send_bytes(method, path, data, headers)

    def _send_bytes(self, method, path, data, headers=None):
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if self.token:
            req.add_header("Authorization", "Bearer " + self.token)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        deadline = time.monotonic() + (math.inf if self.request_timeout is None else self.request_timeout)
        if self.request_timeout is not None:
            req._deadline = deadline  # the whole answer, its headers too, by then (_Timed)
        try:
            with _OPENER.open(req, timeout=self.request_timeout) as res:
                return res.status, res.headers, _read_answer(res, deadline)
        except urllib.error.HTTPError as e:
            try:
                body = _read_answer(e, deadline, cut=True)
            except Exception:
                body = b""
            finally:
                e.close()
            return e.code, e.headers, body

    def _shown(self, text):
        """text without the user and password of the sidecar's URL (or the password alone)."""
        if not self._secret_url:
            return text
        text = text.replace(self._secret_url, "<redacted>")
        password = self._secret_url.partition(":")[2]
        return text.replace(password, "<redacted>") if password else text

    def _unavailable(self, why):
        """Notes that the sidecar could not be reached or would not answer."""
        why = self._shown(why)
        now = self.clock()
        with self._lock:
            first = not self.offline
            if first:
                self.offline, self._down_since = True, now
                self.outages += 1
            self.last_error = why
            self._retry_wait = min(self.retry_max, max(1.0, self._retry_wait * 2))
            self._retry_at = now + random.uniform(self._retry_wait / 2, self._retry_wait)
            queued = len(self._queue)
        if first:
            self.log.warning("selfimprove: the sidecar at %s is unavailable (%s): calls run under the last "
                             "config each agent had (or the default config); %d reports queued, kept up to "
                             "%d and sent when it is back", self._shown(self.url), why, queued, self.max_queue)

    def _available(self):
        with self._lock:
            if not self.offline:
                return
            self.offline, self._retry_wait, self._retry_at = False, 0.0, 0.0
            down = self.clock() - self._down_since
            queued, dropped = len(self._queue), self.dropped
        self.log.warning("selfimprove: the sidecar at %s is back after %.1f s; %d reports queued, %d dropped "
                         "in all", self._shown(self.url), down, queued, dropped)

    def _warn_once(self, key, msg, *args):
        with self._lock:
            if key in self._warned:
                return
            self._warned.add(key)
        self.log.warning(msg, *args)

    # -- configs ----------------------------------------------------------

    def _fallback(self, agent):
        with self._lock:
            cached = self._configs.get(agent)
        return cached[0] if cached else self.default_config

    def config(self, agent, refresh=False):
        """The config in force for agent, read again when older than config_ttl.

        Never raises: while the sidecar is unavailable it returns the last
        config read for agent, or default_config (see offline).
        """
        agent = _cut(agent, MAX_AGENT_BYTES + 1)  # as its reports name it: a lone surrogate is "?"
        now = self.clock()
        with self._lock:
            cached = self._configs.get(agent)
            waiting = self.offline and now < self._retry_at
        if cached and not refresh and now - cached[2] < self.config_ttl:
            return cached[0]
        if waiting and not refresh:
            return cached[0] if cached else self.default_config
        headers = {"If-None-Match": cached[1]} if cached else {}
        path = "/api/agents/%s/config" % _agent_ref(agent)
        try:
            status, hdrs, body = self._request("GET", path, headers=headers)
            if status == 304 and cached:
                cfg, etag = cached[0], cached[1]
            elif status == 200:
                cfg, etag = Config(_parse(body)["config"]), hdrs.get("ETag", "")
            elif 400 <= status < 500 and status not in (401, 408, 429):
                # The sidecar answered, and refused this agent (a token
                # scoped to other agents, an ID it refuses): no outage,
                # and no reason to stop reading the other agents' configs.
                self._warn_once(("config", agent, status), "selfimprove: the config of %r is refused (%s %s): "
                                "its calls run under the last config read, or default_config", agent, status,
                                body[:200].decode("utf-8", "replace"))
                return self._fallback(agent)
            else:
                raise _Unavailable("config of %r: %s %s" % (agent, status, body[:200].decode("utf-8", "replace")))
        except Exception as exc:  # down, refusing, or a body we cannot read
            self._unavailable(exc.why if isinstance(exc, _Unavailable) else "%s: %s" % (type(exc).__name__, exc))
            return self._fallback(agent)
        self._available()
        with self._lock:
            self._configs[agent] = (cfg, etag, self.clock())
        return cfg

    # -- reports ----------------------------------------------------------

    def _number(self, name, v, lo, hi):
        """v as a float in [lo, hi], or None (with a warning) when it is not one."""
        if v is None:
            return None
        try:
            f = float(v)
        except (TypeError, ValueError, OverflowError):
            f = float("nan")
        if not (lo <= f <= hi):
            self._warn_once(name, "selfimprove: a %s of %r is not reported: it must be a number in [%g, %g]",
                            name, v, lo, hi)
            return None
        return f

    def _outcome(self, agent, success, duration_ms, config_version, error, status, code, attempts,
                 quality, cost, canceled):
        agent = _cut(agent, MAX_AGENT_BYTES + 1)
        if not agent or len(agent.encode("utf-8")) > MAX_AGENT_BYTES:
            self._warn_once("agent", "selfimprove: a report is dropped: its agent ID must be 1..%d bytes",
                            MAX_AGENT_BYTES)
            return None
        d = self._number("duration_ms", duration_ms, -math.inf, math.inf)
        o = {"agent": agent, "success": bool(success),
             "duration_ms": min(MAX_DURATION_MS, max(0.0, d if d is not None else 0.0)),
             "config_version": max(1, int(config_version or 1)),
             "attempts": min(MAX_ATTEMPTS, max(0, int(attempts or 0)))}
        if self._ids:
            # The intake books an outcome once by its ID: one sent again
            # after its answer was lost (a timeout) is not booked twice.
            o["id"] = os.urandom(12).hex()
        if not success:
            if error:
                o["error"] = _cut(error, MAX_ERROR_BYTES)
            try:
                status = int(status) if status is not None else None
            except (TypeError, ValueError):
                status = None
            if status is not None and 100 <= status <= 599:
                o["status"] = status
            if code:
                o["code"] = _cut(code, MAX_CODE_BYTES)
            if canceled:
                o["canceled"] = True
        q, c = self._number("quality", quality, 0.0, 1.0), self._number("cost", cost, 0.0, MAX_COST)
        if q is not None:
            o["quality"] = q
        if c is not None:
            o["cost"] = c
        return o

    def report(self, agent, success, duration_ms, config_version, error="", status=None, code=None,
               attempts=1, quality=None, cost=None, canceled=False):
        """Queue one call's outcome, to be sent in the background.

        Never raises. Texts are cut to the intake's bounds in UTF-8 bytes
        (error 4,096, code 128) without splitting a character; a quality
        outside [0, 1] or a cost outside [0, 1e12] is left out (with a
        warning) rather than have the sidecar refuse the report.
        """
        try:
            self._report(agent, success, duration_ms, config_version, error, status, code, attempts, quality,
                         cost, canceled)
        except Exception:  # nothing of reporting raises into the caller
            self.log.exception("selfimprove: a report could not be queued")

    def _report(self, agent, success, duration_ms, config_version, error, status, code, attempts, quality,
                cost, canceled):
        try:
            o = self._outcome(agent, success, duration_ms, config_version, error, status, code, attempts,
                              quality, cost, canceled)
            if o is None:
                with self._lock:
                    self.dropped += 1
                    self.drops["refused"] += 1
                return
            data = json.dumps(o, ensure_ascii=False, allow_nan=False).encode("utf-8")
        except Exception:
            self.log.exception("selfimprove: a report could not be made")
            return
        with self._lock:
            if not self._queue:
                self._queued_at = self.clock()
            self._queue.append((o, data))
            over = len(self._queue) - self.max_queue
            if over > 0:
                del self._queue[:over]
            self._urgent = self._urgent or not o["success"]
            # A failure's report is left to the next call's start (sent
            # before it reads its config), or to the thread's next turn.
            wake = len(self._queue) >= self.batch_size
        if over > 0:
            self._drop(over, "queue_full", "the queue is full (max_queue=%d)" % self.max_queue)
        self._start_thread()
        if wake:
            self._wake.set()

    def _drop(self, n, kind, why):
        with self._lock:
            self.dropped += n
            self.drops[kind] += n
            total = self.dropped
        self._warn_once(("drop", kind, self.outages), "selfimprove: %d reports dropped: %s (%d dropped in all; "
                        "see Client.dropped)", n, why, total)

    def _start_thread(self):
        """Starts the background sender unless it runs. Never raises: when
        no thread can be started (the OS refuses one), the reports go out
        at the calls' starts instead (see _due) and on flush()."""
        if self.flush_interval is None or self._stop.is_set():
            return
        try:
            with self._lock:
                if self._thread is not None and self._thread.is_alive():
                    return
                self._thread = threading.Thread(target=_flusher, name="selfimprove-flush", daemon=True,
                                                args=(weakref.ref(self), self._stop, self._wake, self.flush_interval))
                self._thread.start()
        except Exception as exc:  # RuntimeError: can't start new thread
            self._warn_once(("thread", type(exc).__name__), "selfimprove: the background sender cannot start "
                            "(%s: %s): reports are sent at the calls' starts", type(exc).__name__, exc)

    def _tick(self):
        """The background thread's turn: send what is queued, unless waiting."""
        with self._lock:
            go = bool(self._queue) and self.clock() >= self._retry_at
        if go:
            self._send_pending(wait_429=False)

    def _due(self):
        """Whether the next call sends what is queued before it runs."""
        with self._lock:
            if self.clock() < self._retry_at:
                return False
            if self._urgent:
                return True
            if not self._queue:
                return False
            if len(self._queue) >= self.batch_size:
                return True
            if self.flush_interval is None:
                return False
            alive = self._thread is not None and self._thread.is_alive()
            return not alive and self.clock() - self._queued_at >= self.flush_interval

    def flush(self):
        """Send every queued report now; returns the intake's answer or None.

        The answer merges those of the batches sent: {"booked": n,
        "agents": [...]}. A 429 is waited (its Retry-After, at most
        max_wait) and the batch sent again; a config whose version changed
        is read again at its next use. Never raises: what the sidecar
        cannot take now stays queued (see pending and offline).
        """
        try:
            return self._send_pending(wait_429=True)
        except Exception:
            self.log.exception("selfimprove: flush failed")
            return None

    def close(self):
        """Stop the background thread and send what is queued (flush)."""
        self._stop.set()
        self._wake.set()
        return self.flush()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _take(self):
        """Pops the next batch: at most 500 reports and max_body_bytes."""
        n, size = 0, 16
        for _, data in self._queue[:MAX_OUTCOMES]:
            if n and size + len(data) + 1 > self.max_body_bytes:
                break
            n, size = n + 1, size + len(data) + 1
        batch, self._queue = self._queue[:n], self._queue[n:]
        if self._queue:
            self._queued_at = self.clock()
        return batch

    def _send_pending(self, wait_429, posts=None):
        """Sends what is queued, batch by batch and in order, one sender
        at a time. posts: the most requests to make (None: until the queue
        is empty or the sidecar cannot take more); what is left stays
        queued. Returns the merged answer of the batches booked, or None."""
        with self._send_lock:
            return self._drain(wait_429, _Budget(posts))

    def _drain(self, wait_429, budget):
        """_send_pending's work, under _send_lock."""
        merged, waits = None, 0
        while budget.left():
            with self._lock:
                batch = self._take()
                if not batch:
                    self._urgent = False
                    return merged
            try:
                answer, rest = self._deliver(batch, budget)
                merged, waits = self._merge(merged, answer), 0
                if rest:  # out of requests: the rest waits for the next send
                    self._requeue(rest)
                    break
            except _Unavailable as u:
                self._requeue(u.rest)
                if u.wait is None:
                    self._unavailable(u.why)
                    return merged
                waits += 1
                if not wait_429 or waits > 3:
                    with self._lock:
                        self._retry_at = self.clock() + u.wait
                    return merged
                self.sleep(u.wait)
        with self._lock:  # out of requests, reports left: is a failure's among them?
            self._urgent = any(not o["success"] for o, _ in self._queue)
        return merged

    @staticmethod
    def _merge(merged, answer):
        if merged is None:
            return answer
        merged["booked"] += answer["booked"]
        versions = {a["id"]: a for a in merged["agents"]}
        for a in answer["agents"]:
            if a["id"] in versions:
                versions[a["id"]].update(a)
            else:
                merged["agents"].append(a)
        return merged

    def _requeue(self, rest):
        with self._lock:
            self._queue[:0] = rest
            over = len(self._queue) - self.max_queue
            if over > 0:
                del self._queue[:over]
            self._urgent = self._urgent or any(not o["success"] for o, _ in rest)
        if over > 0:
            self._drop(over, "queue_full", "the queue is full (max_queue=%d)" % self.max_queue)

    def _post(self, part):
        body = b'{"outcomes":[' + b",".join(d for _, d in part) + b"]}"
        return self._send_bytes("POST", "/api/outcomes", body)

    def _deliver(self, batch, budget):
        """Posts batch, in parts when the intake refuses some of its reports.

        A 400 (or a 403 or 422 naming an
        outcome) drops the report it names (outcomes[i]) and sends the
        others again; a 400 or 413 naming none halves the part, down to
        single reports; a 409 (the batch was booked up to its outcomes[i])
        drops that one; a 429 naming outcomes[i] sends the first i again
        before it waits; a 409 saying the loop failed after it booked the
        first i (retry) counts those booked and keeps the others queued, as
        for a 5xx. Returns the merged answer and the reports left unsent
        when budget ran out of requests. Raises _Unavailable, with the
        reports not yet booked in rest, when the sidecar is down or answers
        anything else.
        """
        merged, todo = {"booked": 0, "agents": []}, [batch]
        while todo:
            if not budget.take():
                return merged, [x for p in todo for x in p]
            part = todo.pop(0)
            try:
                status, hdrs, body = self._post(part)
            except Exception as exc:
                raise self._rest(_Unavailable("%s: %s" % (type(exc).__name__, exc)), part, todo)
            if status == 200:
                try:
                    answer = _parse(body)
                    answer = {"booked": int(answer.get("booked", len(part))), "agents": list(answer.get("agents", []))}
                except (ValueError, AttributeError, TypeError) as exc:  # booked (a 200): configs read again
                    self._warn_once(("answer", type(exc).__name__), "selfimprove: the intake's answer to a batch "
                                    "is malformed (%s: %s): the batch counts as booked and the configs are read "
                                    "again", type(exc).__name__, exc)
                    answer = {"booked": len(part), "agents": []}
                self._booked(len(part), answer["agents"])
                self._available()
                merged = self._merge(merged, answer)
                continue
            i = _field_index(body)
            if i is not None and not 0 <= i < len(part):
                i = None
            if status == 400 and _field_name(body).endswith("].id") and any("id" in o for o, _ in part):
                # A sidecar older than the outcomes' IDs: send them without.
                if self._ids:
                    self._ids = False
                    self.log.warning("selfimprove: the sidecar at %s books outcomes without IDs (an older "
                                     "version): an outcome sent again after a lost answer may be booked "
                                     "twice", self._shown(self.url))
                todo[:0] = [_without_ids(part)]
                continue
            if status == 409:
                n = _retry_booked(body, i, len(part))
                if n is not None:  # the loop failed after booking the first n: never send those again
                    self._booked(n, [])
                    why = "409 %s" % body[:200].decode("utf-8", "replace")
                    raise self._rest(_Unavailable(why), part[n:], todo)
            if status == 429:
                if i:  # a limit the i-th reached (new agents): the first i fit, send them first
                    todo[:0] = [part[:i], part[i:]]
                    continue
                wait = retry_after_seconds(hdrs.get("Retry-After", "1") or "1", self.max_wait)
                raise self._rest(_Unavailable("429 from the intake", wait), part, todo)
            if status not in (400, 409, 413) and not (status in (403, 422) and i is not None):
                why = "%s %s" % (status, body[:200].decode("utf-8", "replace"))
                raise self._rest(_Unavailable(why), part, todo)
            self._available()
            todo[:0] = self._refused(part, status, body[:300].decode("utf-8", "replace"), i)
        return merged, []

    @staticmethod
    def _rest(u, part, todo):
        u.rest = part + [x for p in todo for x in p]
        return u

    def _refused(self, part, status, text, i):
        """The parts to send again after a 400, 409 or 413, or a 403 or 422
        naming outcomes[i]; drops the bad report."""
        if status == 409:
            if i is None:
                self._drop(len(part), "unknown", "the intake answered 409 without saying which were booked: "
                           "not sent again, not to book them twice (%s)" % text)
                return []
            self._booked(i, [])
            self._drop(1, "refused", "the intake refused one: %s" % text)
            return [part[i + 1:]] if i + 1 < len(part) else []
        if len(part) == 1:
            self._drop(1, "refused", "the intake refused one: %s %s" % (status, text))
            return []
        if status != 413 and i is not None:
            self._drop(1, "refused", "the intake refused one: %s %s" % (status, text))
            return [part[:i] + part[i + 1:]]
        h = len(part) // 2
        return [part[:h], part[h:]]

    def _booked(self, n, agents):
        """Counts n reports booked; a config whose version changed is read
        again at its next use (and kept, to run under while the sidecar
        is unavailable)."""
        stale = float("-inf")
        with self._lock:
            self.booked += n
            for a in agents:
                cached = self._configs.get(a.get("id"))
                if cached and cached[0].version != a.get("config_version"):
                    self._configs[a["id"]] = (cached[0], cached[1], stale)
            if n and not agents:  # booked without an answer: read the configs again
                for k, (cfg, etag, _) in list(self._configs.items()):
                    self._configs[k] = (cfg, etag, stale)

    # -- calls ------------------------------------------------------------

    def _measure(self, name, m, result):
        if not callable(m):
            return m
        try:
            return m(result)
        except Exception as exc:
            self._warn_once(("measure", name), "selfimprove: the %s function raised %s: %s (the call's %s is "
                            "not reported)", name, type(exc).__name__, exc, name)
            return None

    def _before_call(self):
        """Sends what is due before a call runs: one request at most (so
        within about request_timeout), and nothing while another send is in
        progress (the background thread's: fn does not wait for it). What
        is left goes in the background. Never raises."""
        try:
            if not self._due() or not self._send_lock.acquire(blocking=False):
                return
            try:
                self._drain(False, _Budget(1))
            finally:
                self._send_lock.release()
            with self._lock:
                more = bool(self._queue) and self.clock() >= self._retry_at
            if more:
                self._wake.set()
        except Exception:
            self.log.exception("selfimprove: sending reports failed")

    def call(self, agent, fn, quality=None, cost=None):
        """Run fn(config) under agent's config and report the call.

        Up to config.max_attempts attempts (at least transient_attempts)
        for a transient failure (a status of 408, 429 or 5xx, a timeout, a
        connection error), with the config's backoff (doubled each
        attempt, with jitter; at least the Retry-After the failure asked
        for, at most max_wait). fn must honour config.timeout (give it to
        its HTTP client) and config.route (the model). Returns fn's
        result, or raises its last exception: reporting never raises, and
        with the sidecar down fn runs under the last config read (or
        default_config).

        quality and cost: numbers, or functions called with fn's result
        (a cost read from the answer's usage, a grader's score); a
        function is called only when fn succeeded, and one that raises
        or returns None leaves the figure out of the report.
        """
        self._before_call()
        try:
            cfg = self.config(agent)
        except Exception:  # config() does not raise; this is a last guard
            cfg = self._fallback(agent)
        start, attempts = self.clock(), 0
        while True:
            attempts += 1
            try:
                result = fn(cfg)
            except Exception as exc:  # reported, then raised again
                if attempts < max(cfg.max_attempts, self.transient_attempts) and _transient(exc):
                    base = cfg.backoff if attempts < cfg.max_attempts else max(cfg.backoff, 0.5)
                    d = min(3600.0, base * 2 ** min(attempts - 1, 30))
                    self.sleep(max(random.uniform(d / 2, d), _retry_after(exc, self.max_wait)))
                    continue
                self._report_call(agent, cfg, start, attempts, exc, None, quality, cost)
                raise
            self._report_call(agent, cfg, start, attempts, None, result, quality, cost)
            return result

    def _report_call(self, agent, cfg, start, attempts, exc, result, quality, cost):
        """Reports a call of call(): exc, its last exception (None: it
        succeeded with result). Never raises: fn's answer or exception is
        the call's, whatever reporting meets."""
        try:
            if exc is not None:
                self.report(agent, False, (self.clock() - start) * 1e3, cfg.version, error=_error_text(exc),
                            status=_status_of(exc), code=_code_of(exc), attempts=attempts,
                            quality=None if callable(quality) else quality,
                            cost=None if callable(cost) else cost)
            else:
                self.report(agent, True, (self.clock() - start) * 1e3, cfg.version, attempts=attempts,
                            quality=self._measure("quality", quality, result),
                            cost=self._measure("cost", cost, result))
        except Exception:
            self.log.exception("selfimprove: the call could not be reported")
