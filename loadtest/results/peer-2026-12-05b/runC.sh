#!/bin/bash
E="/usr/bin/python3 /tmp/h47c/explore.py"
uptime
$E abcd 8,32 ""
$E abcd 8,32 "--prefill_step_share 3"
$E abcd 8,32 "--iteration_budget_ms 40"
$E abcd 8,32 "--prefill_policy tokens"
uptime
