import sys, json, time, subprocess, os
sys.path.insert(0, "/work/main/loadtest/peer")
import peer
class A: pass
a = A(); a.serve_prompt = int(sys.argv[2]); a.serve_out = int(sys.argv[3]); a.serve_requests = 1
a.hf = "/tmp/h47/llama-1.3b-8l"; a.abcd_build = os.environ["ABCD_BUILD"]; a.llama_bin = "/tmp/abcd-peer/llama.cpp/build/bin"
a.abcd_server_args = sys.argv[4] if len(sys.argv) > 4 else ""
streams = [int(x) for x in sys.argv[1].split(",")]
r = peer.serve(a, "abcd", None, int(__import__("os").environ.get("THREADS", "2")), streams, 0)
for s in streams: print(sys.argv[1:], s, r[s], flush=True)
