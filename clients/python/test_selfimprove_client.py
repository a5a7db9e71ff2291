"""Unit tests of selfimprove_client against fake intakes (http.server).

    python3 -m unittest -v test_selfimprove_client    # in clients/python

cmd/selfimprove's TestPythonClientUnit runs them with the real python3;
the tests against the real sidecar are there too (sidecar_client_test.go).
Standard library only, Python 3.8+.
"""

import email.utils
import http.server
import json
import logging
import os
import socket
import sys
import threading
import time
import unittest
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import selfimprove_client as sc  # noqa: E402


class Intake:
    """A fake sidecar: answers with respond(method, path, headers, body) -> (status, headers, body),
    or closes the connection without an answer when respond returns None."""

    def __init__(self, respond=None):
        self.requests = []  # (method, path, headers, body)
        self.respond = respond or self.default
        self.configs = {}   # agent -> version
        self.booked = []    # the outcomes answered 200, in order
        intake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _serve(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                intake.requests.append((self.command, self.path, dict(self.headers), body))
                answer = intake.respond(self.command, self.path, self.headers, body)
                if answer is None:  # the answer is lost: the connection closes without one
                    self.close_connection = True
                    return
                status, headers, out = answer
                self.send_response(status)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            do_GET = do_POST = _serve

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True)
        self.thread.start()

    def default(self, method, path, headers, body):
        if method == "GET" and path.startswith("/api/agents/"):
            agent = urllib.parse.unquote(path.split("/")[3])
            cfg = {"version": self.configs.get(agent, 1), "max_attempts": 1}
            return 200, {"ETag": '"v%d"' % cfg["version"]}, json.dumps({"config": cfg}).encode()
        if method == "POST" and path == "/api/outcomes":
            outs = json.loads(body)["outcomes"]
            self.booked.extend(outs)
            agents = [{"id": a, "config_version": self.configs.get(a, 1)} for a in {o["agent"] for o in outs}]
            return 200, {}, json.dumps({"booked": len(outs), "agents": agents}).encode()
        return 404, {}, b'{"error": "no such path"}'

    def posted(self):
        """The outcomes POSTed, in order."""
        return [o for m, p, _, b in self.requests if m == "POST" for o in json.loads(b)["outcomes"]]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def closed_port_url():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return "http://127.0.0.1:%d" % port


def client(url, **kw):
    kw.setdefault("flush_interval", None)
    kw.setdefault("flush_at_exit", False)
    kw.setdefault("sleep", lambda s: None)
    return sc.Client(url, token="tok", **kw)


class Base(unittest.TestCase):
    def intake(self, respond=None):
        i = Intake(respond)
        self.addCleanup(i.close)
        return i


class TestAnswersNeverLost(Base):
    """Finding 1: the function always runs and its answer always returns."""

    def test_sidecar_down(self):
        c = client(closed_port_url())
        seen = []
        with self.assertLogs("selfimprove_client", "WARNING") as logs:
            for i in range(20):
                self.assertEqual(c.call("a", lambda cfg, i=i: seen.append(cfg.version) or i), i)
            with self.assertRaises(KeyError):  # fn's own exception, not the intake's
                c.call("a", lambda cfg: {}["x"])
            self.assertIsNone(c.flush())
        self.assertEqual(seen, [1] * 20, "the default config, version 1")
        self.assertTrue(c.offline)
        self.assertEqual(c.outages, 1)
        self.assertEqual(c.pending, 21)
        self.assertEqual(c.dropped, 0)
        unavailable = [r for r in logs.output if "unavailable" in r]
        self.assertEqual(len(unavailable), 1, "one warning per outage: %s" % logs.output)

    def test_batch_fill_never_raises(self):
        def refuse(method, path, headers, body):
            if method == "POST":
                return 401, {}, b'{"error": "bad token"}'
            return intake.default(method, path, headers, body)
        intake = self.intake(refuse)
        c = client(intake.url, batch_size=2)
        with self.assertLogs("selfimprove_client", "WARNING"):
            got = [c.call("a", lambda cfg, i=i: i) for i in range(5)]
        self.assertEqual(got, list(range(5)))
        self.assertEqual((c.pending, c.dropped, c.booked), (5, 0, 0), "kept for later, not dropped")

    def test_last_config_while_down(self):
        intake = self.intake()
        intake.configs["a"] = 3
        c = client(intake.url, config_ttl=0)
        self.assertEqual(c.call("a", lambda cfg: cfg.version), 3)
        intake.close()
        with self.assertLogs("selfimprove_client", "WARNING"):
            self.assertEqual(c.call("a", lambda cfg: cfg.version), 3)
        self.assertTrue(c.offline)

    def test_one_agent_refused_is_no_outage(self):
        """A config refused for one agent (403: a token scoped to others)
        neither puts the client offline nor keeps the other agents on a
        stale config. Before, every agent ran on its default config until
        the outage's back-off ended."""
        def respond(method, path, headers, body):
            if path.startswith("/api/agents/summarize/"):
                return 403, {}, b'{"error": "the token may not act for this agent", "field": "agent"}'
            return intake.default(method, path, headers, body)
        intake = self.intake(respond)
        intake.configs["py-ok"] = 2
        c = client(intake.url, config_ttl=0)
        with self.assertLogs("selfimprove_client", "WARNING"):
            self.assertEqual(c.call("summarize", lambda cfg: cfg.version), c.default_config.version)
        self.assertFalse(c.offline)
        self.assertEqual(c.call("py-ok", lambda cfg: cfg.version), 2)

    def test_dot_agents_escaped(self):
        """The agents "." and ".." are asked for as %2E, one path segment
        each (path cleaning would answer with a redirect)."""
        intake = self.intake()
        c = client(intake.url)
        c.config(".")
        c.config("..")
        paths = [p for m, p, _, _ in intake.requests if m == "GET"]
        self.assertEqual(paths, ["/api/agents/%2E/config", "/api/agents/%2E%2E/config"])

    def test_agent_with_a_lone_surrogate(self):
        """An agent ID with a lone surrogate (a name decoded with
        surrogateescape, as os.fsdecode does) is read and reported as the
        same agent, with "?" for the surrogate. Before, config() raised
        UnicodeEncodeError (it never raises, says its doc) and asked
        nothing, while the reports went to "py-?"."""
        intake = self.intake()
        intake.configs["py-?"] = 2
        c = client(intake.url)
        self.assertEqual(c.config("py-\udcff").version, 2)
        self.assertEqual(c.call("py-\udcff", lambda cfg: cfg.version), 2)
        c.flush()
        self.assertEqual([p for m, p, _, _ in intake.requests if m == "GET"], ["/api/agents/py-%3F/config"])
        self.assertEqual([o["agent"] for o in intake.booked], ["py-?"])

    def test_last_config_after_a_change_while_down(self):
        intake = self.intake()
        intake.configs["a"] = 3
        c = client(intake.url)
        self.assertEqual(c.call("a", lambda cfg: cfg.version), 3)
        intake.configs["a"] = 4  # the batch's answer says v4: v3 is read again at its next use
        c.flush()
        intake.close()
        with self.assertLogs("selfimprove_client", "WARNING"):
            self.assertEqual(c.call("a", lambda cfg: cfg.version), 3, "the last config read, not the default")

    def test_queue_bound(self):
        c = client(closed_port_url(), max_queue=5)
        with self.assertLogs("selfimprove_client", "WARNING") as logs:
            for i in range(12):
                c.call("a", lambda cfg: "ok")
        self.assertEqual((c.pending, c.dropped, c.drops["queue_full"]), (5, 7, 7))
        self.assertEqual(len([r for r in logs.output if "dropped" in r]), 1, logs.output)

    def test_recovers(self):
        url = closed_port_url()
        c = client(url)
        with self.assertLogs("selfimprove_client", "WARNING"):
            for i in range(3):
                c.call("a", lambda cfg: "ok")
        intake = self.intake()
        c.url = intake.url  # the sidecar is back (here, at another port)
        with self.assertLogs("selfimprove_client", "WARNING") as logs:
            c.flush()
        self.assertIn("back", logs.output[0])
        self.assertEqual((c.offline, c.pending, c.booked, len(intake.posted())), (False, 0, 3, 3))

    def test_background_thread_sends(self):
        intake = self.intake()
        c = client(intake.url, flush_interval=0.05)
        c.call("a", lambda cfg: "ok")  # a success: not urgent, left to the thread
        deadline = time.monotonic() + 20
        while not intake.posted() and time.monotonic() < deadline:
            time.sleep(0.01)
        self.assertEqual(len(intake.posted()), 1)
        c.close()


class TestTexts(Base):
    """Finding 6: texts are cut in UTF-8 bytes, never splitting a character."""

    def test_cut(self):
        for ch, want in (("\u00e9", 4096), ("\u20ac", 4095), ("\U0001F600", 4096), ("a", 3000)):
            o = client("http://x")._outcome("a", False, 1, 1, ch * 3000, None, ch * 100, 1, None, None, False)
            b = o["error"].encode("utf-8")
            self.assertEqual(len(b), want, ch)
            self.assertLessEqual(len(o["code"].encode("utf-8")), 128)
        o = client("http://x")._outcome("a", False, 1, 1, "bad \udcff surrogate", None, None, 1, None, None, False)
        o["error"].encode("utf-8")  # valid

    def test_bad_entry_books_others(self):
        for named in (True, False):  # the field names the index, or not
            def check(method, path, headers, body, named=named):
                if method == "POST":
                    outs = json.loads(body)["outcomes"]
                    for i, o in enumerate(outs):
                        if o["config_version"] > 5:
                            field = "outcomes[%d].config_version" % i if named else "config_version"
                            return 400, {}, json.dumps({"error": "never had it", "field": field}).encode()
                return intake.default(method, path, headers, body)
            intake = self.intake(check)
            c = client(intake.url)
            for v in (1, 99, 1, 1, 7, 1):
                c.report("a", True, 10, v)
            with self.assertLogs("selfimprove_client", "WARNING"):
                c.flush()
            self.assertEqual((c.booked, c.dropped, c.drops["refused"], c.pending), (4, 2, 2, 0), named)
            self.assertEqual([o["config_version"] for o in intake.posted() if o["config_version"] == 1][-4:], [1] * 4)

    def test_body_bound(self):
        intake = self.intake()
        c = client(intake.url, batch_size=500)
        for i in range(60):
            c.report("a", False, 10, 1, error="\u20ac" * 2000)  # ~6 KB each
        c.flush()
        self.assertEqual(c.booked, 60)
        for m, _, _, b in intake.requests:
            self.assertLessEqual(len(b), 65536)

    def test_403_and_429_naming_an_outcome(self):
        def limits(method, path, headers, body):
            if method == "POST":
                outs, new = json.loads(body)["outcomes"], set()
                for i, o in enumerate(outs):
                    if o["agent"] == "forbidden":
                        return 403, {}, json.dumps({"error": "not that agent", "field": "outcomes[%d].agent" % i}).encode()
                    new.add(o["agent"])
                    if len(new) > 2:  # at most 2 new agents a batch
                        return 429, {"Retry-After": "60"}, json.dumps({"error": "smaller batches",
                                                                      "field": "outcomes[%d].agent" % i}).encode()
            return intake.default(method, path, headers, body)
        intake = self.intake(limits)
        waits = []
        c = client(intake.url, sleep=waits.append)
        for agent in ("n1", "n2", "forbidden", "n3", "n4", "n5"):
            c.report(agent, True, 10, 1)
        with self.assertLogs("selfimprove_client", "WARNING"):
            c.flush()
        self.assertEqual((c.booked, c.dropped, c.pending, waits), (5, 1, 0, []))
        self.assertEqual([o["agent"] for o in intake.booked], ["n1", "n2", "n3", "n4", "n5"])

    def test_403_naming_no_outcome_keeps_them(self):
        intake = self.intake(lambda m, p, h, b: (403, {}, b'{"error": "no agent allowed", "field": "outcomes"}'))
        c = client(intake.url)
        for i in range(3):
            c.report("a", True, 10, 1)
        with self.assertLogs("selfimprove_client", "WARNING"):
            c.flush()
        self.assertEqual((c.booked, c.dropped, c.pending, c.offline), (0, 0, 3, True))

    def test_409_books_up_to_the_index(self):
        def conflict(method, path, headers, body):
            if method == "POST" and len(json.loads(body)["outcomes"]) == 4:
                return 409, {}, b'{"error": "the 2 outcomes before it were booked", "field": "outcomes[2].config_version"}'
            return intake.default(method, path, headers, body)
        intake = self.intake(conflict)
        c = client(intake.url)
        for i in range(4):
            c.report("a", True, 10, 1)
        with self.assertLogs("selfimprove_client", "WARNING"):
            c.flush()
        self.assertEqual((c.booked, c.dropped, c.pending), (3, 1, 0))


class TestRedirect(Base):
    """Finding 11: the token never goes to another origin."""

    def test_no_token_after_redirect(self):
        other = self.intake()

        def redirect(method, path, headers, body):
            return 302, {"Location": other.url + path}, b""
        intake = self.intake(redirect)
        c = client(intake.url)
        with self.assertLogs("selfimprove_client", "WARNING"):
            self.assertEqual(c.call("a", lambda cfg: "answer"), "answer")
            c.flush()
        self.assertGreater(len(intake.requests), 0)
        leaked = [r for r in other.requests if "Authorization" in r[2]]
        self.assertEqual(leaked, [], "the token went to another origin")
        self.assertEqual(c.pending, 1)


class TestTransientStatuses(Base):
    """A function's failure is retried for the statuses docs/intake.md names, as the Go loop
    classifies them: 408, 429 and every 5xx; not 409 or 425."""

    def test_statuses_retried_as_documented(self):
        for status, retried in ((408, True), (429, True), (500, True), (501, True), (505, True), (529, True),
                                (599, True), (409, False), (425, False), (400, False), (404, False)):
            c = client("http://x", sleep=lambda s: None)
            c.config = lambda agent, refresh=False: sc.Config({"version": 1, "max_attempts": 2})
            n = {"i": 0}

            def fn(cfg):
                n["i"] += 1
                if n["i"] == 1:
                    raise sc.CallFailed(str(status), status=status)
                return "ok"
            try:
                c.call("a", fn)
            except sc.CallFailed:
                pass
            self.assertEqual(n["i"], 2 if retried else 1, "status %d: %d attempts" % (status, n["i"]))


class TestRetryAfter(Base):
    """Finding 12: Retry-After is capped at max_wait (60 s by default)."""

    def test_function_retry_after(self):
        date = email.utils.formatdate(time.time() + 86400, usegmt=True)
        past = "Wed, 21 Oct 2015 07:28:00 GMT"
        for v, lo, hi in ((86400, 60, 60), ("inf", 60, 60), (float("inf"), 60, 60), ("nan", 0, 1),
                          (-5, 0, 1), ("-inf", 0, 1), (date, 60, 60), (past, 0, 1), ("soon", 0, 1), ("1e999", 60, 60)):
            waits = []
            c = client("http://x", sleep=waits.append)
            c.config = lambda agent, refresh=False: sc.Config({"version": 1, "max_attempts": 2})
            n = {"i": 0}

            def fn(cfg):
                n["i"] += 1
                if n["i"] == 1:
                    raise sc.CallFailed("429", status=429, retry_after=v)
                return "ok"
            self.assertEqual(c.call("a", fn), "ok")
            self.assertEqual(len(waits), 1)
            self.assertTrue(lo <= waits[0] <= hi, "Retry-After %r waited %r" % (v, waits[0]))

    def test_intake_retry_after(self):
        for v in ("86400", "inf", "nan", "-3"):
            answered = []

            def limited(method, path, headers, body, v=v):
                if method == "POST" and not answered:
                    answered.append(1)
                    return 429, {"Retry-After": v}, b'{"error": "over the rate"}'
                return intake.default(method, path, headers, body)
            intake = self.intake(limited)
            waits = []
            c = client(intake.url, sleep=waits.append)
            c.report("a", True, 1, 1)
            c.flush()
            self.assertEqual(c.booked, 1)
            self.assertTrue(len(waits) == 1 and 0 <= waits[0] <= 60, (v, waits))


class TestMeasures(Base):
    """Finding 13: quality and cost may be functions of the answer."""

    def test_callables(self):
        intake = self.intake()
        c = client(intake.url)
        got = c.call("a", lambda cfg: {"text": "hi", "cost": 0.02}, quality=lambda r: 0.9, cost=lambda r: r["cost"])
        self.assertEqual(got["text"], "hi")
        with self.assertLogs("selfimprove_client", "WARNING"):
            got = c.call("a", lambda cfg: "x", quality=lambda r: 1 / 0, cost=lambda r: 0.5)
            self.assertEqual(got, "x")
            self.assertEqual(c.call("a", lambda cfg: "y", quality=1.5, cost=float("nan")), "y")
        with self.assertRaises(ValueError):
            c.call("a", lambda cfg: int("x"), quality=lambda r: 0.1, cost=0.3)
        c.flush()
        outs = intake.posted()
        self.assertEqual([(o.get("quality"), o.get("cost")) for o in outs],
                         [(0.9, 0.02), (None, 0.5), (None, None), (None, 0.3)])


class TestEarlyFlush(Base):
    """Finding 16: a failure's report goes out before the next call runs."""

    def test_failure_sent_before_next_call(self):
        intake = self.intake()
        c = client(intake.url)  # batch_size 50, no thread
        order = []

        def fail(cfg):
            order.append(("run", cfg.version))
            raise sc.CallFailed("bad request", status=400)
        with self.assertRaises(sc.CallFailed):
            c.call("a", fail)
        intake.configs["a"] = 2  # the loop decided on that report
        orig = intake.respond

        def note(method, path, headers, body):
            if method == "POST":
                order.append(("post", len(json.loads(body)["outcomes"])))
            return orig(method, path, headers, body)
        intake.respond = note
        self.assertEqual(c.call("a", lambda cfg: order.append(("run", cfg.version)) or "ok"), "ok")
        self.assertEqual(order, [("run", 1), ("post", 1), ("run", 2)])


class TestPartialBatch(Base):
    """A batch the loop booked in part is never booked twice."""

    def test_409_retry_sends_only_the_unbooked(self):
        """The intake answers 409 {"booked": 2, "retry": true} when the
        loop failed (its store, its closing) after booking the first 2 of
        4. Before, the loop's failure was a 500 after the first were
        booked, and the client sent the whole batch again: each try booked
        them once more. Now the client counts the 2 booked, keeps the
        other 2 queued as after a 5xx, and sends only those."""
        answered = []

        def partial(method, path, headers, body):
            if method == "POST" and not answered:
                answered.append(1)
                intake.booked.extend(json.loads(body)["outcomes"][:2])
                return 409, {}, json.dumps({"error": "the loop could not book outcomes[2]", "field": "outcomes[2]",
                                            "status": 409, "booked": 2, "retry": True}).encode()
            return intake.default(method, path, headers, body)
        intake = self.intake(partial)
        c = client(intake.url)
        for v in (1, 2, 3, 4):
            c.report("a", True, v, 1)
        with self.assertLogs("selfimprove_client", "WARNING"):
            c.flush()
            self.assertEqual((c.booked, c.pending, c.dropped, c.offline), (2, 2, 0, True))
            c.flush()
        self.assertEqual((c.booked, c.pending, c.dropped, c.offline), (4, 0, 0, False))
        self.assertEqual([o["duration_ms"] for o in intake.booked], [1, 2, 3, 4], "each booked once, in order")


class TestOutcomeIDs(Base):
    """Each report carries an ID, kept when it is sent again, so that the
    intake books it once even when its answer was lost."""

    def test_ids_kept_when_sent_again(self):
        """The first POST's answer never comes (the connection drops after
        the intake read it); the reports are sent again with the same IDs."""
        lost = []

        def lose(method, path, headers, body):
            if method == "POST" and not lost:
                lost.append(json.loads(body)["outcomes"])
                return None
            return intake.default(method, path, headers, body)
        intake = self.intake(lose)
        c = client(intake.url)
        for v in (1, 2, 3):
            c.report("a", True, v, 1)
        with self.assertLogs("selfimprove_client", "WARNING"):
            c.flush()
            self.assertEqual((c.booked, c.pending), (0, 3))
            c._retry_at = 0.0  # the retry's wait, passed
            c.flush()
        self.assertEqual((c.booked, c.pending, c.dropped), (3, 0, 0))
        ids = [o["id"] for o in lost[0]]
        self.assertEqual(len(set(ids)), 3, "an ID of its own for each report: %s" % ids)
        self.assertEqual([o["id"] for o in intake.booked], ids, "the same IDs the second time")

    def test_older_sidecar_without_ids(self):
        """A sidecar that knows no outcome IDs refuses the field (400
        naming outcomes[0].id): the client sends the reports again without
        IDs, and every later report too, dropping none."""
        def old(method, path, headers, body):
            if method == "POST":
                outs = json.loads(body)["outcomes"]
                for i, o in enumerate(outs):
                    if "id" in o:
                        f = "outcomes[%d].id" % i
                        return 400, {}, json.dumps({"error": 'unknown field "%s"' % f, "field": f, "status": 400}).encode()
            return intake.default(method, path, headers, body)
        intake = self.intake(old)
        c = client(intake.url)
        c.report("a", True, 1, 1)
        c.report("a", True, 2, 1)
        with self.assertLogs("selfimprove_client", "WARNING") as logs:
            c.flush()
        c.report("a", True, 3, 1)
        c.flush()
        self.assertEqual((c.booked, c.pending, c.dropped), (3, 0, 0))
        self.assertEqual([o["duration_ms"] for o in intake.booked], [1, 2, 3])
        self.assertEqual(len(logs.output), 1, logs.output)


class TestCallStart(Base):
    """docs/intake.md: a call's start may send the queue "within
    request_timeout"; the rest goes in the background."""

    def test_call_start_sends_one_batch(self):
        """4,000 reports queued (after an outage): before, the next call's
        start sent them all (8 POSTs) before fn ran. Now it sends one
        batch, and fn runs."""
        intake = self.intake()
        c = client(intake.url)  # no thread: the rest goes at the next calls' starts, or on flush()
        for _ in range(4000):
            c.report("a", True, 5, 1)
        posts = lambda: sum(1 for r in intake.requests if r[0] == "POST")  # noqa: E731
        before = []
        self.assertEqual(c.call("a", lambda cfg: before.append(posts()) or "ok"), "ok")
        self.assertEqual(before, [1], "POSTs made before fn ran")
        self.assertGreater(c.pending, 3000)
        c.flush()
        self.assertEqual((c.pending, c.booked, c.dropped), (0, 4001, 0))

    def test_call_start_does_not_wait_on_a_background_send(self):
        """A send in progress (the background thread's, here a flush on
        another thread) whose POST the sidecar holds: before, the call
        waited for it to end; now fn runs at once, and its report goes
        with a later send."""
        held, answered, release = threading.Event(), threading.Event(), threading.Event()

        def hold(method, path, headers, body):
            if method == "POST" and not held.is_set():
                held.set()
                release.wait(30)  # a safety net: the test releases it
                answered.set()
            return intake.default(method, path, headers, body)
        intake = self.intake(hold)
        c = client(intake.url, request_timeout=60)
        c.report("a", True, 5, 1)
        sender = threading.Thread(target=c.flush)
        sender.start()
        self.assertTrue(held.wait(30))
        c.report("a", False, 5, 1, error="boom")  # a failure's report: due at the next call's start
        seen = []
        self.assertEqual(c.call("a", lambda cfg: seen.append(answered.is_set()) or "ok"), "ok")
        release.set()
        sender.join()
        self.assertEqual(seen, [False], "fn ran only after the send in progress ended")
        c.flush()
        self.assertEqual((c.pending, c.booked), (0, 3))


class TestReportingNeverRaises(Base):
    """docs/intake.md: reporting never raises into the call."""

    def test_thread_start_refused(self):
        """The OS refuses a new thread (a pids limit: RuntimeError "can't
        start new thread"): before, call() raised it after fn had run, and
        fn's answer was lost. Now call() returns the answer, fn's own
        exception stays fn's, and the reports stay queued, sent at the
        calls' starts or on flush()."""
        c = client(closed_port_url(), flush_interval=1.0)
        orig = threading.Thread.start

        def refuse(self):
            raise RuntimeError("can't start new thread")
        threading.Thread.start = refuse
        try:
            with self.assertLogs("selfimprove_client", "WARNING") as logs:
                self.assertEqual(c.call("a", lambda cfg: "answer"), "answer")
                with self.assertRaises(KeyError):
                    c.call("a", lambda cfg: {}["x"])
        finally:
            threading.Thread.start = orig
            c._stop.set()
        self.assertEqual((c.pending, c.dropped), (2, 0))
        self.assertTrue(any("cannot start" in r for r in logs.output), logs.output)
        intake = self.intake()
        c.url = intake.url
        with self.assertLogs("selfimprove_client", "WARNING"):  # the sidecar is back
            c.flush()
        self.assertEqual((c.pending, c.booked), (0, 2))


quiet = logging.getLogger("selfimprove_client.test_quiet")
quiet.propagate = False
quiet.addHandler(logging.NullHandler())


class StreamingIntake:
    """A sidecar (or whatever answers at its URL) that writes a 200 answer
    of `size` bytes in chunks of `chunk` bytes, `gap` seconds apart, and
    counts what it wrote before the client hung up."""

    def __init__(self, size, chunk, gap):
        self.written = 0
        intake = self
        head = b'{"config": {"version": 2}}'

        class Handler(http.server.BaseHTTPRequestHandler):
            def _serve(self):
                self.send_response(200)
                self.send_header("Content-Length", str(size))
                self.end_headers()
                body = head + b" " * (size - len(head))
                try:
                    for i in range(0, size, chunk):
                        self.wfile.write(body[i:i + chunk])
                        self.wfile.flush()
                        intake.written += len(body[i:i + chunk])
                        time.sleep(gap)
                except OSError:  # the client hung up
                    pass

            do_GET = do_POST = _serve

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class TestURLCredentialsNotLogged(Base):
    """A sidecar URL with a user and password (http://user:pw@host) never shows them in the log
    or in last_error; before, the unavailable warning printed the URL whole."""

    def test_password_redacted(self):
        lg = logging.getLogger("selfimprove_client.url_test")
        c = client("http://bob:s3cretpw@127.0.0.1:1", logger=lg, request_timeout=0.5)
        with self.assertLogs(lg, "WARNING") as logs:
            self.assertEqual(c.call("a", lambda cfg: "x"), "x")
        text = "\n".join(logs.output) + c.last_error
        self.assertNotIn("s3cretpw", text)
        self.assertIn("<redacted>", text)


class TestAnswersBounded(Base):
    """docs/intake.md: a call's start makes one request, within
    request_timeout; a sidecar that trickles its answer, or answers with
    more than an intake ever says, never holds the agent's call nor its
    memory. Before, request_timeout bounded each socket read, not the
    answer: a config answer trickled a byte every 0.1 s held config()
    (and so call()) for as long as the sender liked, and a 200 of
    hundreds of MiB was read whole into memory."""

    def stream(self, size, chunk, gap):
        s = StreamingIntake(size, chunk, gap)
        self.addCleanup(s.close)
        return s

    def test_trickled_answer_cut_at_request_timeout(self):
        s = self.stream(200, 1, 0.05)  # 10 s to send it all
        c = client(s.url, request_timeout=0.5, logger=quiet)
        start = time.monotonic()
        cfg = c.call("a", lambda cfg: cfg)
        took = time.monotonic() - start
        self.assertLess(took, 2.0, "the call waited %.1f s on a trickled config answer" % took)
        self.assertEqual(cfg.version, c.default_config.version, "an answer not read in time is an outage")
        self.assertTrue(c.offline)

    def test_huge_answer_not_read_whole(self):
        s = self.stream(256 << 20, 1 << 20, 0)
        c = client(s.url, request_timeout=5.0, logger=quiet)
        cfg = c.config("a")
        self.assertEqual(cfg.version, c.default_config.version, "an answer over the bound is not taken")
        self.assertLess(s.written, 64 << 20, "the client read %d MiB of one answer" % (s.written >> 20))
        self.assertTrue(c.offline)


class SlowHeadersIntake:
    """Whatever answers at the sidecar's URL, reading the request and then
    sending a 200's status line and headers one byte every `gap` seconds,
    until the client hangs up or the test ends."""

    def __init__(self, gap):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.url = "http://127.0.0.1:%d" % self.sock.getsockname()[1]
        self.done = threading.Event()
        self.gap = gap
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.done.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:  # closed
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Slow: " + b"x" * 200 + b"\r\n"
        with conn:
            try:
                conn.recv(65536)  # the request (a GET: its headers only)
                for i in range(len(head)):
                    if self.done.wait(self.gap):
                        return
                    conn.sendall(head[i:i + 1])
            except OSError:  # the client hung up
                pass

    def close(self):
        self.done.set()
        self.sock.close()


class TestHeadersBounded(Base):
    """request_timeout bounds the whole answer, its status line and headers
    too. Before, it bounded each socket read there: a sidecar (or whatever
    answers at its URL) sending its headers a byte every request_timeout/3
    held config(), and so call(), for as long as it liked."""

    def test_slow_headers_cut_at_request_timeout(self):
        timeout = 0.6
        s = SlowHeadersIntake(timeout / 3)  # 200 bytes and more: over 40 s to send them
        self.addCleanup(s.close)
        c = client(s.url, request_timeout=timeout, logger=quiet)
        start = time.monotonic()
        cfg = c.call("a", lambda cfg: cfg)
        took = time.monotonic() - start
        self.assertLess(took, timeout + 2.0, "the call waited %.1f s on slow headers (request_timeout %.1f s)"
                        % (took, timeout))
        self.assertEqual(cfg.version, c.default_config.version, "an answer not read in time is an outage")
        self.assertTrue(c.offline)


class TestMalformedAnswers(Base):
    """An answer that is not valid UTF-8, or a JSON object with a key twice,
    is refused like any malformed answer, and the error names what was
    wrong. Before, a config whose route held an encoded surrogate (invalid
    UTF-8) was taken, the route a lone surrogate no HTTP client can send,
    and a key given twice was read as its last value, silently."""

    def answering(self, body):
        return self.intake(lambda m, p, h, b: (200, {"ETag": '"v2"'}, body))

    def test_config_not_utf8_refused(self):
        for bad in (b"a\xed\xa0\x80b", b"a\xffb", b"a\xc0\xafb"):  # a surrogate, a stray byte, an overlong "/"
            intake = self.answering(b'{"config": {"version": 2, "route": "' + bad + b'"}}')
            c = client(intake.url, logger=quiet)
            cfg = c.config("a")
            self.assertEqual((cfg.version, cfg.route), (1, ""), "a config not in UTF-8 is refused: %r" % bad)
            self.assertTrue(c.offline, bad)
            self.assertIn("not valid UTF-8", c.last_error, bad)

    def test_config_duplicate_key_refused(self):
        for body, key in ((b'{"config": {"version": 2, "version": 3}}', "version"),
                          (b'{"config": {"version": 2}, "config": {"version": 3}}', "config")):
            intake = self.answering(body)
            c = client(intake.url, logger=quiet)
            cfg = c.config("a")
            self.assertEqual(cfg.version, 1, "a config with a key twice is refused: %r" % body)
            self.assertTrue(c.offline, body)
            self.assertIn("key %r twice" % key, c.last_error, body)

    def test_batch_answer_duplicate_key_named(self):
        def answer(method, path, headers, body):
            if method == "POST":
                n = len(json.loads(body)["outcomes"])
                return 200, {}, b'{"booked": %d, "agents": [], "agents": [{"id": "a", "config_version": 1}]}' % n
            return intake.default(method, path, headers, body)
        intake = self.intake(answer)
        c = client(intake.url)
        c.config("a")
        intake.configs["a"] = 2
        c.report("a", True, 10, 1)
        with self.assertLogs("selfimprove_client", "WARNING") as logs:
            c.flush()
        self.assertEqual((c.booked, c.pending, c.offline), (1, 0, False), "a 200 booked the batch")
        self.assertTrue(any("key 'agents' twice" in r for r in logs.output), logs.output)
        self.assertEqual(c.config("a").version, 2, "the configs are read again, as after an answer not read")


class TestRetryAfterSeconds(unittest.TestCase):
    def test_values(self):
        f = sc.retry_after_seconds
        self.assertEqual([f(None), f(""), f("2"), f(" 1.5 "), f(True), f("inf", 30), f(1e9, 30)],
                         [0, 0, 2, 1.5, 0, 30, 30])


if __name__ == "__main__":
    logging.basicConfig(level=logging.CRITICAL)
    unittest.main()
