// How the programs built in this tree (the `vitpe` command) start: not part of the installed
// API, since starting a process again is the program's business, not the library's. An
// application sets GOMP_SPINCOUNT or OMP_WAIT_POLICY in its environment instead.
#pragma once

namespace vitpe {

// OpenMP's threads spin for a while before they sleep; libgomp's default, 300,000 rounds
// (milliseconds), makes a shared core cost 3-30x (README, Benchmarks), and libgomp reads the
// setting once, when it is loaded, before main. Called first in main(argc, argv), this starts
// the program again (execv of /proc/self/exe, the same arguments and pid) with
// GOMP_SPINCOUNT=1000, unless OMP_WAIT_POLICY or GOMP_SPINCOUNT is set already; in the second
// start it takes the variable out of the environment again (VITPE_OMP_WAIT marks it), so the
// processes the program runs get the environment the user gave. About 0.15 s of loading
// libraries again; where /proc is missing it does nothing. Returns normally in the second start
// (or when nothing was needed); call it before starting threads or opening files.
void restart_with_short_openmp_spin(char** argv);

}  // namespace vitpe
