#!/usr/bin/env bash
# `vitpe compare` as a sweep over 2 MPI ranks (ctest mpi_compare_sweep):
#   1. the table of 2 ranks (a thread each) is the table of one process on 2 threads (seeded runs
#      do not depend on which rank ran them, and training is the same bits on any thread count);
#   2. one rank killed mid-sweep (SIGKILL, as a node failure) and the same command run again:
#      it completes, the runs finished before the kill are not trained again (their result.json
#      untouched, the log says so), and the table is again the one-process table.
# usage: sweep_resume.sh VITPE WORK_DIR MPIRUN [MPIRUN ARGS...]
set -euo pipefail
vitpe=$1 work=$2
shift 2
mpirun=("$@")
rm -rf "$work"
mkdir -p "$work"
args=(compare --dataset procedural --size 16 --subset 2048 --test-subset 64 --epochs 4
  --batch 32 --set depth=1 --set dim=32 --set heads=2 --set mlp_dim=64
  --encodings sincos2d,relbias,rope-axial,alibi2d --seeds 1,2 --no-pictures --no-progress)
fail() { echo "FAIL: $*" >&2; exit 1; }
# results.csv without train_seconds (column 5), the one column that is a measurement.
table() { cut -d, -f1-4,6- "$work/$1/results.csv"; }

"$vitpe" --threads 2 "${args[@]}" --out "$work/alone" >"$work/alone.log" 2>&1 ||
  fail "one process: $(tail -5 "$work/alone.log")"
"${mpirun[@]}" "$vitpe" "${args[@]}" --out "$work/ranks" >"$work/ranks.log" 2>&1 ||
  fail "2 ranks: $(tail -5 "$work/ranks.log")"
grep -q "rank 1/2: \[" "$work/ranks.log" || fail "rank 1 ran no run: $(cat "$work/ranks.log")"
diff <(table alone) <(table ranks) || fail "2 ranks made another table than one process"
echo "2 ranks: the same table as one process ($(($(table alone | wc -l) - 1)) runs)"

# Kill rank 1 as soon as the first run has finished.
"${mpirun[@]}" "$vitpe" "${args[@]}" --out "$work/killed" >"$work/killed.log" 2>&1 &
launcher=$!
for _ in $(seq 1 3000); do
  compgen -G "$work/killed/runs/*/result.json" >/dev/null && break
  kill -0 "$launcher" 2>/dev/null || break
  sleep 0.02
done
victim=$(pgrep -P "$launcher" | tail -1 || true)
[[ -n $victim ]] || fail "the sweep ended before a rank could be killed: $(cat "$work/killed.log")"
kill -9 "$victim"
if wait "$launcher"; then fail "mpirun exited 0 after a rank was killed"; fi
mapfile -t finished < <(compgen -G "$work/killed/runs/*/result.json" || true)
((${#finished[@]} >= 1 && ${#finished[@]} < 8)) ||
  fail "expected some but not all of 8 runs finished at the kill, found ${#finished[@]}"
before=$(for f in "${finished[@]}"; do stat -c '%n %Y.%y' "$f"; md5sum "$f"; done)
echo "killed rank 1 (pid $victim) with ${#finished[@]} of 8 runs finished"

"${mpirun[@]}" "$vitpe" "${args[@]}" --out "$work/killed" >"$work/rerun.log" 2>&1 ||
  fail "the rerun after the kill: $(tail -5 "$work/rerun.log")"
after=$(for f in "${finished[@]}"; do stat -c '%n %Y.%y' "$f"; md5sum "$f"; done)
[[ $before == "$after" ]] || fail "a finished run's result.json was rewritten"
reused=$(grep -c "trained before" "$work/rerun.log" || true)
((reused == ${#finished[@]})) ||
  fail "expected ${#finished[@]} finished runs reused, the log says $reused: $(cat "$work/rerun.log")"
diff <(table alone) <(table killed) || fail "the resumed sweep made another table"
echo "rerun: ${#finished[@]} finished runs reused, the rest trained, the same table"
