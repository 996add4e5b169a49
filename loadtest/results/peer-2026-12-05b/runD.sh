#!/bin/bash
E="/usr/bin/python3 /tmp/h47c/explore.py"
uptime
$E abcd 8,32 "--prefill_step_share 6"
$E abcd 8,32 "--prefill_step_share 3"
$E abcd 8,32 "--prefill_policy tokens --prefill_token_budget 1024"
uptime
