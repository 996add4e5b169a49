#!/bin/bash
PORT=18432
/tmp/abcd/r18/new/server/abcd-server --models /tmp/h47/llama-1.3b-8l --http_port $PORT --grpc_port 0 --threads 2 > /tmp/abcd/r18/srv.log 2>&1 &
PID=$!
for i in $(seq 1 100); do curl -s localhost:$PORT/v1/models >/dev/null && break; sleep 0.5; done
# PERF_ARGS: the sampling (the 15:45 profile: the default; the 16:10 call-graph one:
# PERF_ARGS="-F 499 --call-graph dwarf,16384" PERF_OUT=/tmp/abcd/r18/srvd.perf)
perf record ${PERF_ARGS:--F 999 -g} -p $PID -o ${PERF_OUT:-/tmp/abcd/r18/srv.perf} 2>/dev/null &
PP=$!
sleep 1
python3 - <<'PY'
import json,random,time,urllib.request
random.seed(5); ids=[random.randrange(10,7990) for _ in range(1032)]
for rep in range(3):
    body=json.dumps({"model":"llama-1.3b-8l","prompt":ids,"max_tokens":1}).encode()
    t=time.time(); r=urllib.request.urlopen(urllib.request.Request("http://localhost:18432/v1/completions",body,{"Content-Type":"application/json"})).read()
    print("request %.0f ms"%((time.time()-t)*1000)); ids=ids[1:]+[ids[0]]
PY
kill -INT $PP; wait $PP; kill -INT $PID; wait $PID
