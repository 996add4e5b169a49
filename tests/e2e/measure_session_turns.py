#!/usr/bin/python3
"""Time per turn of a 16-turn conversation over HTTP: on a session (only the new 32-token prompt
is prefilled; the state is loaded from and saved to the session store every turn) against
re-sending the whole history each turn (what clients of stateless servers do).

    abcd-server --models models/checkpoints/abc-lm --http_port 8080 --prefix_cache_mb 0 &
    tests/e2e/measure_session_turns.py [--port 8080] [--turns 16]

Each turn generates one token (max_tokens 1), so the time is prefill + one step + the session
store round trip. The history re-sent is the prompts only (HTTP returns text, not token ids), one
token per turn shorter than the session's; token-for-token equality of the two is pinned by
tests/e2e/session_e2e_test.cc. A warm-up conversation runs first.
"""
import argparse
import json
import time
import urllib.request


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--turns", type=int, default=16)
    args = parser.parse_args()

    def post(body):
        request = urllib.request.Request(
            f"http://127.0.0.1:{args.port}/v1/completions", json.dumps(body).encode(),
            {"Content-Type": "application/json"})
        start = time.perf_counter()
        answer = json.load(urllib.request.urlopen(request))
        return (time.perf_counter() - start) * 1000, answer

    for run in range(2):  # the first run warms up
        session, history = "new", []
        for turn in range(args.turns):
            prompt = [4 + (turn * 131 + j * 37) % 990 for j in range(32)]
            session_ms, answer = post(
                {"prompt": prompt, "max_tokens": 1, "temperature": 0, "session_id": session})
            session = answer["session_id"]
            history += prompt
            full_ms, full = post({"prompt": history, "max_tokens": 1, "temperature": 0})
            if run == 1:
                print("turn %2d  session %5.1f ms (prefill %3d)  full history %5.1f ms (prefill %4d)"
                      % (turn + 1, session_ms, answer["usage"]["prompt_tokens"], full_ms,
                         full["usage"]["prompt_tokens"]))


if __name__ == "__main__":
    main()
