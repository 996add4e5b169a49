#!/bin/bash
# one abcd-server ($1: a folder of binaries: base|new|spare|cut|warm) with extra flags $2; $REPS
# (default 5) requests of 1,032 prompt ids (max_tokens 1, each prompt rotated by one so no prefix
# hits), request ms. READY=1: wait for /readyz 200 (and print the seconds from start), then 1 s,
# instead of the first answer of /v1/models.
PORT=18433
T0=$(date +%s.%N)
/tmp/abcd/r19/$1/abcd-server --models /tmp/h47/llama-1.3b-8l --http_port $PORT --grpc_port 0 --threads 2 $2 > /tmp/abcd/r19/srvprobe.log 2>&1 &
PID=$!
if [ "$READY" = 1 ]; then
  for i in $(seq 1 400); do [ "$(curl -s -o /dev/null -w '%{http_code}' localhost:$PORT/readyz)" = 200 ] && break; sleep 0.1; done
  echo -n "ready $(echo "$(date +%s.%N) - $T0" | bc | cut -c1-5) s | "
  sleep 1
else
  for i in $(seq 1 100); do curl -s localhost:$PORT/v1/models >/dev/null && break; sleep 0.5; done
fi
/usr/bin/python3 - <<'PY'
import json,os,random,time,urllib.request
random.seed(5); ids=[random.randrange(10,7990) for _ in range(1032)]
out=[]
for rep in range(int(os.environ.get("REPS","5"))):
    body=json.dumps({"model":"llama-1.3b-8l","prompt":ids,"max_tokens":1}).encode()
    t=time.time(); r=urllib.request.urlopen(urllib.request.Request("http://localhost:18433/v1/completions",body,{"Content-Type":"application/json"})).read()
    out.append("%.0f"%((time.time()-t)*1000)); ids=ids[1:]+[ids[0]]
print(" ".join(out))
PY
kill -INT $PID; wait $PID
