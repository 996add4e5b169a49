# abcd-server alone, two builds alternating (ABBA): peer.py's serve row at 8 and 32 streams.
import json, sys, time
sys.path.insert(0, "/work/main/loadtest/peer")
import peer
out = []
for rnd, order in enumerate([("base", "new"), ("new", "base")]):
    for build in order:
        args = peer.parse_args(["--hf", "/tmp/h47/llama-1.3b-8l", "--abcd-build", f"/tmp/abcd/r19/ab/{build}",
                                "--serve-requests", "4"])
        t = time.time()
        res = peer.serve(args, "abcd", None, 2, [8, 32], 1000 + rnd)
        for s, r in res.items():
            line = f"{build} round {rnd + 1} streams {s}: out tok/s {r['tok_s']:.1f} TTFT p50 {r['ttft_p50']:.0f} p99 {r['ttft_p99']:.0f} ms ITL p50 {r['itl_p50']:.1f} p99 {r['itl_p99']:.1f} ms ({r['requests']} requests)"
            print(line, flush=True)
        print(f"  ({time.time() - t:.0f} s)", flush=True)
