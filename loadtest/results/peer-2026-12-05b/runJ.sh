#!/bin/bash
E="/usr/bin/python3 /tmp/h47c/explore.py"
uptime
$E llama.cpp 8,32 "" 8
$E abcd 8,32 "" 8
$E abcd 8,32 "--prefill_step_share 3" 8
uptime
