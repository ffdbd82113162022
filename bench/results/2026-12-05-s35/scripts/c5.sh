#!/usr/bin/env bash
# After c4, a call of its own: the side by side with DeepEP V1 as unmodified DeepEP code would run switchyard
# (switchyard_heap_inputs sized, DeepEP's ordinary tensors staged into them inside each timed call:
# --switchyard-staged-inputs; docs/normal-in-place.md), 8 and 4 processes, 128 and 4096 tokens, then the views
# (--switchyard-heap-inputs) in the same call for comparison. Prediction (bench/NOTES.md, session 34): at 4096
# staged dispatch ~0.65x DeepEP's, combine ~1.0x (the copy of the expert outputs costs what the in-place combine
# saves); at 128 tokens within 5 % of the views.
# Pack as c4 (build/gpu-carry35/c1.tar.xz); carry .deepep-full (and DeepEP's tests: .deepep-full holds them).
# Over one call's 600 s if everything runs long: the second peer step is the one to drop.
cd "$(dirname "$0")/../../../.."
CALL=c5; CARRY="build/gpu-carry35/c1.tar.xz"; BUDGET=580
STEP_FILTER="rror|FAILED|target|host cost|^layout|^cached|^combine|pass|fail"
source scripts/device-call.sh
export PYTHONPATH=$B/pkg
for inputs in heap staged; do
  step peer-$inputs 280 env DEEPEP_SRC=.deepep-full OUT=$base/peer-$inputs PEER_RANKS="8 4" PEER_TIMEOUT=130 \
    PEER_ARGS="--switchyard-$inputs-inputs --sleep-us 2000" bash scripts/peer-deepep.sh
done
# DeepEP's own intranode test against the drop-in with SWITCHYARD_HEAP_INPUTS: its calls, unmodified, staged
# into the heap inputs and read in place (its x up to 4096 tokens of hidden 7168). Last: the one to drop.
step deepep-intranode-staged 200 env DEEPEP_SRC=.deepep-full OUT=$base/deepep-staged DEEPEP_TESTS=test_intranode \
  DEEPEP_RANKS=8 SWITCHYARD_HEAP_INPUTS=4096,7168 bash scripts/deepep-tests.sh
echo "total $((SECONDS - step_start)) s"
