#!/usr/bin/env python3
"""Follow a chat's lettaq reply stream until one turn's answer, with redis-py.

    python3 follow_reply.py INTEGRATION CHAT_ID TASK_ID [--from ID]

REDIS_URL (default redis://127.0.0.1:6379/0) and LETTAQ_KEY_PREFIX (default "lettaq:") name
the stream as the workers write it: <prefix>replies:<integration>:<chat_id>. The answer goes
to stdout as it grows (answer_delta, narration left out); the exit code is 0 for the answer,
1 for an error event, 4 for approval_required, 3 when nothing final came within --timeout.
The wire format: docs/reply-events.md.
"""
import argparse
import json
import os
import sys
import time

import redis  # redis-py: pip install redis (Debian: apt-get install python3-redis)

FINAL = {"answer": 0, "error": 1, "approval_required": 4}


def follow(r, key, task_id, last_id="0", timeout=600.0):
    """Yields (type, data) of task_id's events in order, up to its final event."""
    seen = 0  # the highest seq shown: an event with seq <= it was seen (an attempt repeats)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        block = max(1, min(5000, int((deadline - time.monotonic()) * 1000)))
        for _key, entries in r.xread({key: last_id}, block=block, count=100) or []:
            for entry_id, f in entries:
                last_id = entry_id
                if f.get("task_id") != task_id:
                    continue  # another turn of the same chat, or a notify (its own task id)
                seq = int(f.get("seq") or 0)
                if seq <= seen:
                    continue
                seen = seq
                yield f["type"], json.loads(f.get("data") or "{}")
                if f["type"] in FINAL:
                    return
    raise TimeoutError(f"no final event for {task_id} within {timeout}s")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("integration")
    p.add_argument("chat_id")
    p.add_argument("task_id")
    p.add_argument("--from", dest="start", default="0", help="stream id to read after (0: the whole history)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for the final event")
    a = p.parse_args()
    prefix = os.environ.get("LETTAQ_KEY_PREFIX") or "lettaq:"
    r = redis.Redis.from_url(os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0", decode_responses=True)
    key = f"{prefix}replies:{a.integration}:{a.chat_id}"
    shown = ""
    try:
        for typ, data in follow(r, key, a.task_id, a.start, a.timeout):
            if typ == "answer_delta" and not data.get("narration"):
                sys.stdout.write(data.get("text", ""))
                sys.stdout.flush()
                shown += data.get("text", "")
            elif typ == "answer":
                text = data.get("text", "")
                # The answer is the whole text: print what the deltas did not show yet.
                sys.stdout.write(text[len(shown):] if text.startswith(shown) else "\n" + text)
                sys.stdout.write("\n")
                return FINAL[typ]
            elif typ in FINAL:
                print(f"{typ}: {data.get('text', '')} (stop_reason {data.get('stop_reason', '')})", file=sys.stderr)
                return FINAL[typ]
    except TimeoutError as e:
        print(e, file=sys.stderr)
        return 3
    return 3


if __name__ == "__main__":
    sys.exit(main())
