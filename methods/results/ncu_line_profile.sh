# Sourced by the device run scripts after prologue.sh, with NCU_SPECS set (kernel:case pairs, the
# kernel's name after m3_cp_, e.g. "backward:c01 forward64:c01"): ncu --set full with source of
# methods/main's solver, the second call, for each; the tables by source line (tools/ncu_lines.py),
# the details pages and the gzipped source pages into $OUT/profiles.tgz, the headlines on stdout.
# Runs 130 and 145 profiled this way; a lineinfo build (MAMBA3_JIT_LINEINFO=1) gives the lines.
mkdir -p /tmp/prof
for spec in $NCU_SPECS; do
  k=${spec%%:*}; c=${spec##*:}; tag=${k}_$c
  timeout 90 python3 methods/results/run92/ncu_fwd.py $c methods/main/solver.py > /dev/null 2>&1
  timeout 150 ncu --set full --import-source yes -k regex:"^m3_cp_$k\$" --launch-skip 1 --launch-count 1 \
    -o /tmp/prof/$tag python3 methods/results/run92/ncu_fwd.py $c methods/main/solver.py > /tmp/prof/$tag.log 2>&1
  echo "ncu $tag rc=$? $(( $(date +%s)-t0 ))s"
  ncu -i /tmp/prof/$tag.ncu-rep --page source --print-source cuda,sass --csv > /tmp/prof/$tag.csv 2>&1
  ncu -i /tmp/prof/$tag.ncu-rep --page details > /tmp/prof/${tag}_details.txt 2>&1
  python3 tools/ncu_lines.py /tmp/prof/$tag.csv --top 80 > /tmp/prof/${tag}_lines.txt 2>&1
  gzip -c /tmp/prof/$tag.csv > /tmp/prof/$tag.csv.gz
  head -2 /tmp/prof/${tag}_lines.txt
  grep -E "^    Duration|Executed Instructions  |Issue Slots Busy|Achieved Occupancy|Registers Per|Executed Ipc Active" /tmp/prof/${tag}_details.txt | head -6
done
(cd /tmp/prof && tar czf $OUT/profiles.tgz *_lines.txt *_details.txt *.csv.gz *.log)
