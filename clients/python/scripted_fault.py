"""A scripted fault reported through the intake: the sidecar test's agent.

    python3 scripted_fault.py --url http://127.0.0.1:8080   # token in $SELFIMPROVE_INTAKE_TOKEN

Two agents call a fake upstream through Client.call, which honours the
config the sidecar serves (max_attempts, backoff) and reports each call:

- "py-good": after 20 healthy calls, the first three attempts of one call
  in two answer 503 (the client makes three for a transient failure, as
  the Go loop does). The loop's strategy gives it a fourth; the client
  reads the new config and makes it, and the change is confirmed.
- "py-harm": the same fault, but under any config but its first the
  upstream fails every attempt (a scripted harm): the change is rolled
  back, and the client reads its first config again.

It prints one JSON line per agent: the config versions it ran, in order,
and the attempts it made under each. Standard library only.
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from selfimprove_client import CallFailed, Client  # noqa: E402


def upstream(agent, i, attempt, cfg):
    """The fake model: raises CallFailed as a provider's 503 would."""
    if i >= 20 and agent == "py-harm" and cfg.version != 1:
        raise CallFailed("503 Service Unavailable: backend pool exhausted", status=503, code="overloaded")
    if i >= 20 and i % 2 == 0 and attempt <= 3:
        raise CallFailed("503 Service Unavailable: upstream overloaded", status=503, code="overloaded")
    return "answer %d" % i


def run(client, agent, max_calls):
    versions, attempts_under = [], {}
    changed_at = None
    for i in range(max_calls):
        state = {"attempt": 0}

        def fn(cfg):
            state["attempt"] += 1
            state["cfg"] = cfg
            return upstream(agent, i, state["attempt"], cfg)

        try:
            client.call(agent, fn)
        except CallFailed:
            pass
        client.flush()
        v = state["cfg"].version
        if not versions or versions[-1] != v:
            versions.append(v)
        attempts_under[v] = max(attempts_under.get(v, 0), state["attempt"])
        if changed_at is None and len(versions) > 1:
            changed_at = i
        # Stop once the change was judged: confirmed (40 calls on), or
        # rolled back (back on version 1), and one more call ran.
        if agent == "py-good" and changed_at is not None and i >= changed_at + 40:
            break
        if agent == "py-harm" and len(versions) > 2:
            break
    return {"agent": agent, "calls": i + 1, "versions": versions,
            "max_attempts": {str(k): n for k, n in attempts_under.items()}}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", required=True)
    p.add_argument("--max-calls", type=int, default=400)
    args = p.parse_args()
    # Backoff waits are not slept: the fake upstream answers at once.
    client = Client(args.url, token=os.environ.get("SELFIMPROVE_INTAKE_TOKEN") or os.environ.get("SELFIMPROVE_TOKEN", ""), batch_size=1, config_ttl=0,
                    sleep=lambda s: None)
    for agent in ("py-good", "py-harm"):
        print(json.dumps(run(client, agent, args.max_calls)), flush=True)


if __name__ == "__main__":
    main()
