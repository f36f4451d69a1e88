# Sourced by the device run scripts after prologue.sh: the default variant's GPU tests (long
# sequences, training, initial states, validation, tools, reference, and the operator tests that
# call the default: bind, rejects, current stream), as runs 127, 129, 130 and 133 ran them inline,
# into $OUT/tests_default.log, with a one-line summary and the failures' names.
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/python/test_long_gpu.py tests/python/test_training.py \
  tests/python/test_training_states.py tests/python/test_validation.py tests/python/test_tools.py \
  tests/python/test_reference.py tests/python/test_initial_states_gpu.py tests/python/test_operator_gpu.py \
  -k "(bind or rejects or current_stream or not operator_gpu) and not slow" > $OUT/tests_default.log 2>&1
echo "tests default rc=$? $(( $(date +%s)-t0 ))s: $(tail -n 1 $OUT/tests_default.log)"
grep -E "^FAILED" $OUT/tests_default.log | head -5
