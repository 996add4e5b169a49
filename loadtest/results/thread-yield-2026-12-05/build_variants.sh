#!/bin/bash
set -e
# orig.cc = engine/core/thread_pool.cc at f4a418e; noyield.cc / pollyield.cc = orig.cc with noyield.diff / pollyield.diff applied
cd /tmp/abcd-head
for v in orig noyield pollyield; do
  cp /tmp/abcd/r18/yv/$v.cc engine/core/thread_pool.cc
  cmake --build build -j2 --target abcd-bench abcd-server abcd-loadtest > /tmp/abcd/r18/yv/build_$v.log 2>&1
  mkdir -p /tmp/abcd/r18/yv/$v/loadtest /tmp/abcd/r18/yv/$v/server
  cp build/loadtest/abcd-bench build/loadtest/abcd-loadtest /tmp/abcd/r18/yv/$v/loadtest/
  cp build/server/abcd-server /tmp/abcd/r18/yv/$v/server/
done
git checkout engine/core/thread_pool.cc
git status --short
