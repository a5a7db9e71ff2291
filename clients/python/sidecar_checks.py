"""Checks of selfimprove_client against a real sidecar, for cmd/selfimprove's tests.

    python3 sidecar_checks.py outage   --url URL   # phases driven over stdin
    python3 sidecar_checks.py texts    --url URL
    python3 sidecar_checks.py decision --url URL [--batch-size 50] [--legacy]
    python3 sidecar_checks.py lost     --url URL [--calls 50]   # through a proxy that loses an answer

The token is read from $SELFIMPROVE_INTAKE_TOKEN (or $SELFIMPROVE_TOKEN). Each mode prints JSON lines;
sidecar_client_test.go reads them and checks the sidecar's own figures.
Standard library only.
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from selfimprove_client import CallFailed, Client  # noqa: E402


def out(**kw):
    print(json.dumps(kw), flush=True)


def upstream(i):
    """A fake model: every fourth call fails (503), the others answer."""
    def fn(cfg):
        if i % 4 == 3:
            raise CallFailed("503 Service Unavailable: upstream overloaded", status=503, code="overloaded")
        return "answer %d" % i
    return fn


def calls(client, agent, start, n):
    """Makes n calls; returns the answers returned and the versions run."""
    answers, versions = 0, []
    for i in range(start, start + n):
        seen = {}

        def fn(cfg, f=upstream(i)):
            seen["v"] = cfg.version
            return f(cfg)
        try:
            if client.call(agent, fn) == "answer %d" % i:
                answers += 1
        except CallFailed:
            answers += 1  # the function's own failure came back: an answer too
        versions.append(seen.get("v"))
    return answers, versions


def outage(args):
    """Up: calls, flushed. Down (the test kills the sidecar): calls, queued.
    Back (the test restarts it): flush, and the queue is delivered."""
    c = Client(args.url, token=os.environ.get("SELFIMPROVE_INTAKE_TOKEN") or os.environ.get("SELFIMPROVE_TOKEN", ""), sleep=lambda s: None,
               max_queue=args.max_queue, config_ttl=0, flush_at_exit=False)
    n = args.calls
    answers, versions = calls(c, args.agent, 0, n)
    c.flush()
    out(phase="up", calls=n, answers=answers, last_version=versions[-1], **c.stats())
    sys.stdin.readline()
    answers, versions = calls(c, args.agent, n, n)
    out(phase="down", calls=n, answers=answers, versions=sorted(set(versions)), **c.stats())
    sys.stdin.readline()
    c.flush()
    out(phase="back", **c.stats())


def texts(args):
    """Finding 6: long non-ASCII errors, and a batch with one bad entry."""
    c = Client(args.url, token=os.environ.get("SELFIMPROVE_INTAKE_TOKEN") or os.environ.get("SELFIMPROVE_TOKEN", ""), sleep=lambda s: None,
               flush_interval=None, flush_at_exit=False)

    def fail(cfg):
        raise ValueError("\u00e9chec \u2014 " + "\u00e9\u20ac\U0001F600" * 1000)
    for _ in range(3):
        try:
            c.call("py-texts", fail)
        except ValueError:
            pass
    c.flush()
    out(step="texts", **c.stats())
    for v in (1, 1, 99, 1):  # version 99 the agent never had: refused, the others booked
        c.report("py-bad-entry", True, 12.5, v)
    c.flush()
    out(step="bad-entry", **c.stats())


def decision(args):
    """Finding 16: an agent whose calls all fail; prints the version each ran under."""
    kw = {} if args.legacy else {"flush_at_exit": False}
    c = Client(args.url, token=os.environ.get("SELFIMPROVE_INTAKE_TOKEN") or os.environ.get("SELFIMPROVE_TOKEN", ""), batch_size=args.batch_size,
               sleep=lambda s: None, **kw)

    def fn(cfg):
        versions[-1] = cfg.version
        raise CallFailed("503 Service Unavailable: backend pool exhausted", status=503, code="overloaded")
    versions = []
    for _ in range(args.calls):
        versions.append(None)
        try:
            c.call(args.agent, fn)
        except CallFailed:
            pass
    c.flush()
    out(versions=versions)


def lost(args):
    """Calls, flushed through a proxy that loses the first batch's answer
    after the sidecar booked it; flushed again until none is pending."""
    c = Client(args.url, token=os.environ.get("SELFIMPROVE_INTAKE_TOKEN") or os.environ.get("SELFIMPROVE_TOKEN", ""),
               sleep=lambda s: None, flush_interval=None, flush_at_exit=False, config_ttl=3600)
    answers, _ = calls(c, args.agent, 0, args.calls)
    c.flush()
    for _ in range(10):
        if not c.pending:
            break
        c._retry_at = 0.0  # the retry's wait, passed (sleep is not the clock)
        c.flush()
    out(calls=args.calls, answers=answers, **c.stats())


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("mode", choices=["outage", "texts", "decision", "lost"])
    p.add_argument("--url", required=True)
    p.add_argument("--agent", default="py-outage")
    p.add_argument("--calls", type=int, default=50)
    p.add_argument("--max-queue", type=int, default=10000)
    p.add_argument("--batch-size", type=int, default=50)
    p.add_argument("--legacy", action="store_true", help="only the arguments the old client took")
    args = p.parse_args()
    {"outage": outage, "texts": texts, "decision": decision, "lost": lost}[args.mode](args)


if __name__ == "__main__":
    main()
