# usage: explore.py SYSTEM STREAMS "server args" [requests_per_stream]
import sys, json
sys.path.insert(0, "/work/main/loadtest/peer")
import peer
class A: pass
a = A(); a.serve_prompt = 128; a.serve_out = 64; a.serve_requests = int(sys.argv[4]) if len(sys.argv) > 4 else 3
a.hf = "/tmp/h47/llama-1.3b-8l"; a.abcd_build = __import__("os").environ.get("ABCD_BUILD", "/tmp/h47c/abcd-build"); a.llama_bin = "/tmp/abcd-peer/llama.cpp/build/bin"
a.abcd_server_args = sys.argv[3]
streams = [int(x) for x in sys.argv[2].split(",")]
r = peer.serve(a, sys.argv[1], "/tmp/abcd-peer/work/llama-1.3b-8l-bf16.gguf", 2, streams, 0)
for s in streams:
    print(sys.argv[1], repr(sys.argv[3]), s, "streams:", " ".join(f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}" for k, v in r[s].items()), flush=True)
