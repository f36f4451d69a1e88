# Sourced by the device run scripts after prologue.sh, with NCU_VARIANTS set (solver versions):
# ncu --set full (no source) of the backward on c01, the second call, for each, as run 137 ran it
# inline; the details and raw pages into $OUT/profiles.tgz, the headline lines on stdout.
mkdir -p /tmp/prof
for v in $NCU_VARIANTS; do
  s=methods/versions/$v/solver.py
  timeout 60 python3 methods/results/run92/ncu_fwd.py c01 $s > /dev/null 2>&1
  timeout 90 ncu --set full -k regex:"^m3_cp_backward\$" --launch-skip 1 --launch-count 1 \
    -o /tmp/prof/$v python3 methods/results/run92/ncu_fwd.py c01 $s > /tmp/prof/$v.log 2>&1
  echo "ncu $v rc=$? $(( $(date +%s)-t0 ))s"
  ncu -i /tmp/prof/$v.ncu-rep --page details > /tmp/prof/${v}_details.txt 2>&1
  ncu -i /tmp/prof/$v.ncu-rep --page raw --csv > /tmp/prof/${v}_raw.csv 2>&1
  grep -E "^    Duration|Executed Instructions  |Issue Slots Busy|Executed Ipc Active|Local Memory Spilling Requests " \
    /tmp/prof/${v}_details.txt | head -6
done
(cd /tmp/prof && tar czf $OUT/profiles.tgz *_details.txt *_raw.csv *.log)
