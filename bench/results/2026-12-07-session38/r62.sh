#!/bin/bash
# Every GPU suite (not the Python suite: its code has not changed since session 37's r50 ran it)
# over a release build of the backward candidates (issue 32), which hold everything session 37's
# r58.sh was to check of HEAD (decision 051's tile order, the dQ writer's read wait of 026, the
# MLA share of 052) as well:
#   .device/fma4all (default) branch issue32-turns-fma (7fb5844): one copy of the consumers' code for both
#                   warpgroups (41f31ff) + every 4th exponential on the FMA pipes in the turns
#   .device/rtwgall           branch issue32-shared-consumer-code (41f31ff) alone
# Each folder: the library and the 18 suites, packed as bench/device_suites.sh says. Carry the
# one named (27 MB).
set -u
cd "$(dirname "$0")/../../.."
SUITES_TIMEOUT=420 PYTEST_TIMEOUT=0 bash bench/device_suites.sh "${1:-.device/fma4all}" r62 | tail -30
