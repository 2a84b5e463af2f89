#!/bin/bash
# Session 10 call 6: call 5 again on a fresh machine (results in c6/).
C=c6 exec bash "$(dirname "$0")/call5.sh"
