# usage: prof.py STREAMS REQS_PER_STREAM OUTPREFIX -- server args...
import os, sys, subprocess, time, threading, json
sys.path.insert(0, "/work/main/loadtest/peer")
import peer
streams, reqs, prefix = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
cmd = sys.argv[5:]
port = peer.free_port()
proc = subprocess.Popen(cmd + ["--http_port", str(port), "--grpc_port", "0"], stdout=subprocess.DEVNULL, stderr=open(prefix + ".server.log", "w"))
peer.wait_http(f"http://127.0.0.1:{port}/healthz")
peer.sse_request(port, list(range(300, 428)), 8)
class A: pass
a = A(); a.serve_prompt = 128; a.serve_out = 64; a.serve_requests = reqs
def tasks():
    out = {}
    for t in os.listdir(f"/proc/{proc.pid}/task"):
        f = open(f"/proc/{proc.pid}/task/{t}/stat").read()
        rest = f[f.rindex(")") + 2:].split()
        out[t] = (int(rest[11]) + int(rest[12]))  # utime + stime ticks
    return out
res = {}
def load():
    res["r"] = peer.serve_load(port, streams, a, 7, [])
th = threading.Thread(target=load); th.start()
time.sleep(6)
t0 = tasks(); w0 = time.time()
perf = subprocess.Popen(["perf", "record", "-F", "499", "-g", "-p", str(proc.pid), "-o", prefix + ".perf.data", "--", "sleep", "20"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
perf.wait()
t1 = tasks(); w1 = time.time()
th.join()
print(json.dumps(res["r"]))
print("wall", round(w1 - w0, 1), "s; per-thread CPU s:", sorted(((round((t1[t] - t0.get(t, 0)) / 100, 2), t) for t in t1), reverse=True))
proc.terminate(); proc.wait()
