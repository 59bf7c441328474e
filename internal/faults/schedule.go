package faults

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"time"
)

// Kind is a class of fault.
type Kind string

// The fault classes a Schedule draws.
const (
	// Kill ends a node with SIGKILL and starts it again after For.
	Kill Kind = "kill"
	// KillAll kills every node at once (a coordinated crash) and starts
	// them again after For.
	KillAll Kind = "kill-all"
	// Pause stops a node with SIGSTOP and continues it after For.
	Pause Kind = "pause"
	// Partition cuts the routes between Groups for For.
	Partition Kind = "partition"
	// Delay slows every route from and to Nodes by Latency for For.
	Delay Kind = "delay"
	// File kills a node of the corruptible minority, damages its store
	// (File says how) and starts it again.
	File Kind = "file"
)

// FileFault is what a File step does to the stopped node's store.
type FileFault string

// The file faults.
const (
	// FlipBit flips one bit of a message block (.blk) of the stream.
	FlipBit FileFault = "flip-bit"
	// Truncate cuts a message block at a random length, as a crash
	// before the page cache reached the disk does.
	Truncate FileFault = "truncate"
	// DeleteIndex removes the stream's state file (msgs/index.db) and its
	// consumers' state (obs/*/o.dat).
	DeleteIndex FileFault = "delete-index"
	// DeleteSnapshot removes the Raft snapshots of the node's stream and
	// consumer groups.
	DeleteSnapshot FileFault = "delete-snapshot"
)

// Step is one fault: applied, held For, healed, then a quiet Gap.
type Step struct {
	N        int // 1-based position in the schedule
	Kind     Kind
	Nodes    []int   // the nodes it hits (indices)
	Groups   [][]int // Partition: the sides
	Latency  time.Duration
	File     FileFault
	FileSeed uint64 // picks the file, the offset, the bit
	For, Gap time.Duration
	// Clock, when set, jumps one node's wall clock while the fault holds
	// and sets it right at the heal.
	Clock *ClockJump
}

// ClockJump is a jump of one node's wall clock as SemaQ reads it
// (internal/wallclock: the lease, slot and claim times it compares with
// other nodes'), forward or back.
type ClockJump struct {
	Node int
	By   time.Duration
}

// NodeName is the name the harness gives node i: n1, n2, ...
func NodeName(i int) string { return fmt.Sprintf("n%d", i+1) }

func nodeNames(idx []int) string {
	names := make([]string, len(idx))
	for i, k := range idx {
		names[i] = NodeName(k)
	}
	return strings.Join(names, ",")
}

// String describes the step with the nodes' names (NodeName).
func (s Step) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "#%d %s", s.N, s.Kind)
	switch s.Kind {
	case Partition:
		sides := make([]string, len(s.Groups))
		for i, g := range s.Groups {
			sides[i] = nodeNames(g)
		}
		fmt.Fprintf(&b, " %s", strings.Join(sides, " | "))
	case Delay:
		fmt.Fprintf(&b, " %s by %s", nodeNames(s.Nodes), s.Latency)
	case File:
		fmt.Fprintf(&b, " %s on %s", s.File, nodeNames(s.Nodes))
	case KillAll:
	default:
		fmt.Fprintf(&b, " %s", nodeNames(s.Nodes))
	}
	fmt.Fprintf(&b, " for %s", s.For)
	if s.Clock != nil {
		fmt.Fprintf(&b, ", clock of %s jumped %+ds", NodeName(s.Clock.Node), int(s.Clock.By/time.Second))
	}
	return b.String()
}

// Schedule draws steps from a seed: the same seed and node count give the
// same steps in the same order, so a failing run replays from its seed.
type Schedule struct {
	r        *rand.Rand
	clock    *rand.Rand // the clock jumps: a stream of their own, so a seed's other faults are what they were before jumps were drawn
	n        int
	minority []int
	count    int
}

// NewSchedule is the schedule of seed for n nodes (n >= 3).
func NewSchedule(seed uint64, n int) *Schedule {
	r := rand.New(rand.NewPCG(seed, seed^0x5e3a9))
	perm := r.Perm(n)
	minority := perm[:(n-1)/2]
	sort.Ints(minority)
	return &Schedule{r: r, clock: rand.New(rand.NewPCG(seed, seed^0xc10c)), n: n, minority: minority}
}

// Minority are the nodes whose files may be damaged: fewer than half, the
// same all run long, so a majority always holds intact copies (Jepsen's
// minority corruption).
func (s *Schedule) Minority() []int { return s.minority }

// weights of each kind, out of their sum.
var weights = []struct {
	kind Kind
	w    int
}{{Kill, 5}, {Pause, 4}, {Partition, 5}, {Delay, 2}, {File, 4}, {KillAll, 1}}

// Next is the next step.
func (s *Schedule) Next() Step {
	s.count++
	total := 0
	for _, w := range weights {
		total += w.w
	}
	pick, kind := s.r.IntN(total), Kill
	for _, w := range weights {
		if pick < w.w {
			kind = w.kind
			break
		}
		pick -= w.w
	}
	st := Step{N: s.count, Kind: kind, For: s.between(2, 20), Gap: s.between(2, 8)}
	// At most a minority is hit by a node fault: a majority keeps serving,
	// so the run measures safety under progress, not only after it.
	few := s.r.IntN((s.n-1)/2) + 1
	switch kind {
	case Kill, Pause:
		st.Nodes = s.r.Perm(s.n)[:few]
	case Delay:
		st.Nodes = s.r.Perm(s.n)[:few]
		st.Latency = time.Duration(50+s.r.IntN(950)) * time.Millisecond
	case Partition:
		perm := s.r.Perm(s.n)
		cut := s.r.IntN(s.n/2) + 1 // the smaller side
		a, b := append([]int(nil), perm[:cut]...), append([]int(nil), perm[cut:]...)
		sort.Ints(a)
		sort.Ints(b)
		st.Groups = [][]int{a, b}
	case File:
		st.Nodes = []int{s.minority[s.r.IntN(len(s.minority))]}
		st.File = []FileFault{FlipBit, Truncate, DeleteIndex, DeleteSnapshot}[s.r.IntN(4)]
		st.FileSeed = s.r.Uint64()
		st.For = s.between(1, 5)
	case KillAll:
		st.For = s.between(1, 5)
	}
	st.Clock = s.clockJump()
	return st
}

// clockJump is a step's clock jump, one step in three: any node, forward
// or back by 1 to 5 s (within a lease), 10 to 60 s or 1 to 10 minutes
// (past any lease of the run).
func (s *Schedule) clockJump() *ClockJump {
	if s.clock.IntN(3) != 0 {
		return nil
	}
	r := [][2]int{{1, 5}, {10, 60}, {60, 600}}[s.clock.IntN(3)]
	by := time.Duration(r[0]+s.clock.IntN(r[1]-r[0]+1)) * time.Second
	if s.clock.IntN(2) == 0 {
		by = -by
	}
	return &ClockJump{Node: s.clock.IntN(s.n), By: by}
}

// between is a whole number of seconds in [lo, hi].
func (s *Schedule) between(lo, hi int) time.Duration {
	return time.Duration(lo+s.r.IntN(hi-lo+1)) * time.Second
}
