#!/usr/bin/env bash
# Makes variant NEW the operator's default in place of OLD: the registry's default, the solver of
# methods/main (NEW's snapshot), and the GPU tests that name the default (long sequences, bind,
# validation). Used alike by a device run that switches after its bench and by the commit that
# lands the switch, so that both make the same edits.
#   bash methods/results/switch_default.sh OLD NEW
set -euo pipefail
old=$1 new=$2
[ -f methods/versions/$new/solver.py ] || { echo "switch_default: no snapshot methods/versions/$new" >&2; exit 1; }
grep -q "variant = \"$old\"" runtime/kernel_registry.h || { echo "switch_default: $old is not the default" >&2; exit 1; }
sed -i "s/variant = \"$old\"/variant = \"$new\"/" runtime/kernel_registry.h
sed -i "s/CONFIG = {\"variant\": \"$old\"}/CONFIG = {\"variant\": \"$new\"}/" tests/python/test_long_gpu.py
sed -i "s/\"variant\": \"$old\", \"chunk\"/\"variant\": \"$new\", \"chunk\"/; s/variant=$old,chunk/variant=$new,chunk/" \
  tests/python/test_validation.py
sed -i "s/(None, {\"variant\": \"$old\"/(None, {\"variant\": \"$new\"/" tests/python/test_operator_gpu.py
cp methods/versions/$new/solver.py methods/main/solver.py
echo "switch_default: $old -> $new"
