// Package faults is SemaQ's fault harness, after Jepsen's method: a seeded
// schedule of faults (Plan), a TCP proxy in front of every node's cluster
// port that turns partitions and delays into rules (Proxy), file faults on
// a stopped node's store (Corrupt), and a checker over what the clients saw
// and what every replica holds (Check). The processes themselves are run
// by internal/proctest (TestFaults, behind SEMAQ_FAULT_TESTS=1); this
// package holds the parts that need no process and are unit tested in
// every CI run. docs/faults.md is the fault model and the results.
package faults
