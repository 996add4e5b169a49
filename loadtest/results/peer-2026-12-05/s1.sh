E="/usr/bin/python3 /tmp/h47b/explore.py"
$E llama.cpp 1,8,32 ""
$E abcd 1,8,32 "--cpu_compute bf16"
if /tmp/h47b/abcd-after/server/abcd-server --help 2>&1 | grep -q prefill_every; then
  ABCD_BUILD=/tmp/h47b/abcd-after $E abcd 8,32 "--cpu_compute bf16 --prefill_step_share 2 --prefill_every 2"
else
  $E abcd 8,32 "--cpu_compute bf16 --prefill_step_share 2"
fi
/usr/bin/python3 /tmp/h47b/prof.py 32 3 /tmp/h47b/prof-bf16 -- /tmp/h47b/abcd-build/server/abcd-server --models /tmp/h47/llama-1.3b-8l --threads 2 --cpu_compute bf16
