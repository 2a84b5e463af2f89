#!/bin/bash
# Session 14 call 11: call 10 left four wgmma ramp cases passing the mutant: three causal ones
# with Sq < Sk (masks are top-left aligned: every row saw only the first key tile) and one
# softcap variant. The ramp case is now square with softcap 30; call 10's commands on v55 and
# v55mut rebuilt from that harness (results in c11/).
C=c11 exec bash "$(dirname "$0")/call10.sh"
