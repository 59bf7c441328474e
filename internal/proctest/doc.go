// Package proctest holds SemaQ's failure tests that run every node as a
// separate `semaq serve` process: a three-node cluster on loopback whose
// stream leader is killed with SIGKILL and restarted, the same with a work
// queue and its workers, and a rolling restart under load. They build the
// semaq binary (or take $SEMAQ_BIN) and run only with SEMAQ_PROCESS_TESTS=1:
//
//	SEMAQ_PROCESS_TESTS=1 go test -count=1 -v ./internal/proctest/
//
// docs/cluster.md ("Failure tests") says what each asserts and what was
// measured.
package proctest
