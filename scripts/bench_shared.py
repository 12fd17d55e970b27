#!/usr/bin/env python3
"""vitpe on a shared machine: one model's forward alone, beside busy processes and beside a
background build, each with all threads fixed, with 1 thread, and with adaptive threads.

Rounds alternate every (load, mode) pair so a noisy machine disturbs them alike; the table gives
the median over rounds of each run's median, the range of those medians, and the ratio to the
quiet all-thread time. Tooling only (python3 and a built `vitpe`); nothing in the build or the
tests needs it.

  scripts/bench_shared.py [--vitpe build/vitpe] [--model vit_small_patch16_224] [--batch 1]
                          [--rounds 3] [--reps 15] [--threads 2] [--loads quiet,busy,build]

Loads: quiet (nothing started), busy (`vitpe bench --background-load 1`: one spinning
process), build (two `nice -n 19` compiler processes, each compiling a file of the standard
library's heavier headers again and again, like `nice -n 19 make -j2`; needs g++).
Modes: spin300k (T threads with libgomp's default spin of 300,000 rounds: what an application
linking vitpe gets unless it sets GOMP_SPINCOUNT or OMP_WAIT_POLICY), fixed (--fixed-threads,
T threads, the short spin the vitpe command sets), one (--fixed-threads --threads 1), adaptive
(the default).
"""
import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODES = ("spin300k", "fixed", "one", "adaptive")


# What the build load compiles: the standard library's heavier headers and a few of their
# templates instantiated, about a second of g++ -O2 per compile, like a C++ project's files.
BUILD_SOURCE = r"""
#include <algorithm>
#include <future>
#include <iostream>
#include <map>
#include <random>
#include <regex>
#include <string>
#include <vector>
int main(int argc, char** argv) {
  std::regex re(argc > 1 ? argv[1] : "([a-z]+)-([0-9]+)");
  std::map<std::string, std::vector<double>> m;
  std::mt19937_64 g(42);
  std::normal_distribution<double> d;
  for (int i = 0; i < argc * 100; ++i) m[std::to_string(i % 7)].push_back(d(g));
  for (auto& [k, v] : m) std::sort(v.begin(), v.end());
  auto f = std::async([&] { return std::regex_match("abc-12", re); });
  std::cout << f.get() << m.size() << std::endl;
}
"""


def start_build_load(jobs, workdir):
    """`jobs` nice-19 processes, each compiling BUILD_SOURCE in a loop; returns them."""
    src = os.path.join(workdir, "build_load.cpp")
    with open(src, "w") as f:
        f.write(BUILD_SOURCE)
    cmd = f"while :; do g++ -std=c++20 -O2 -c {src} -o /dev/null || exit 1; done"
    procs = []
    for _ in range(jobs):
        procs.append(subprocess.Popen(["nice", "-n", "19", "bash", "-c", cmd],
                                      start_new_session=True))
    time.sleep(1.0)
    for p in procs:
        if p.poll() is not None:
            stop(procs)
            sys.exit("bench_shared: the build load could not compile (needs g++)")
    return procs


def stop(procs):
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()


def run_once(a, load, mode):
    cmd = [a.vitpe, "--threads", "1" if mode == "one" else str(a.threads), "bench",
           "--model", a.model, "--batch", str(a.batch), "--reps", str(a.reps), "--json"]
    if mode != "adaptive":
        cmd.append("--fixed-threads")
    env = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    if mode == "spin300k":
        env["GOMP_SPINCOUNT"] = "300000"
    if load == "busy":
        cmd += ["--background-load", "1"]
    procs = start_build_load(2, a.workdir) if load == "build" else []
    try:
        out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    except subprocess.CalledProcessError as e:
        sys.exit(f"bench_shared: {' '.join(cmd)} failed ({e.returncode}): {e.stderr.strip()}")
    finally:
        stop(procs)
    row = json.loads(out)["results"][0]
    return row["median_ms"], row.get("threads_used", {})


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--vitpe", default=os.path.join(ROOT, "build", "vitpe"))
    p.add_argument("--model", default="vit_small_patch16_224")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--loads", default="quiet,busy,build")
    a = p.parse_args()
    a.workdir = tempfile.mkdtemp(prefix="vitpe_bench_shared_")
    loads = [x for x in a.loads.split(",") if x]
    for x in loads:
        if x not in ("quiet", "busy", "build"):
            p.error(f"--loads: '{x}' is not quiet, busy or build")
    if a.rounds < 1 or a.reps < 1 or a.threads < 1 or a.batch < 1:
        p.error("--rounds, --reps, --threads and --batch must be at least 1")
    if not os.access(a.vitpe, os.X_OK):
        p.error(f"--vitpe: {a.vitpe} is not an executable (build it first: scripts/build)")

    got = {(l, m): [] for l in loads for m in MODES}
    used = {(l, m): {} for l in loads for m in MODES}
    for r in range(a.rounds):
        for l in loads:
            for m in MODES:
                ms, threads = run_once(a, l, m)
                got[(l, m)].append(ms)
                for t, n in threads.items():
                    used[(l, m)][t] = used[(l, m)].get(t, 0) + n
                print(f"round {r + 1}/{a.rounds}: {l:5s} {m:8s} {ms:8.1f} ms", file=sys.stderr,
                      flush=True)

    base = statistics.median(got[("quiet", "fixed")]) if "quiet" in loads else None
    print(f"\n{a.model}, batch {a.batch}, {a.threads} threads at most; median over {a.rounds} "
          f"rounds of each run's median of {a.reps} (range of the run medians)")
    print(f"{'load':6s} {'mode':9s} {'ms':>8s} {'range':>17s} {'x quiet':>8s} {'x 1 thread':>11s}"
          f"  threads used (timed calls)")
    for l in loads:
        one = statistics.median(got[(l, "one")])
        for m in MODES:
            v = got[(l, m)]
            med = statistics.median(v)
            ratio = f"{med / base:7.2f}x" if base else "       -"
            threads = ", ".join(f"{t}: {n}" for t, n in sorted(used[(l, m)].items(),
                                                               key=lambda kv: -int(kv[0])))
            print(f"{l:6s} {m:9s} {med:8.1f} {min(v):8.1f}-{max(v):8.1f} {ratio} "
                  f"{med / one:10.2f}x  {threads}")
    shutil.rmtree(a.workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
