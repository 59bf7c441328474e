package streamfilter

import (
	"regexp/syntax"
	"slices"
	"unicode/utf8"
)

// program is every rule's compiled pattern in one instruction array, so one
// pass over a byte steps all rules. A match instruction keeps its rule's
// index in Arg.
type program struct {
	inst []syntax.Inst
	// fresh is where a match attempt beginning at any rune stands before
	// its first assertion or rune: the same list every time, so it is
	// computed once. freshASCII[c] keeps of it only the assertions and the
	// rune instructions that take c.
	fresh      []uint32
	freshASCII [utf8.RuneSelf][]uint32
	// ascii[pc] has bit c set when rune instruction pc takes ASCII c,
	// sparing the case folding of MatchRune on most text.
	ascii [][2]uint64
}

func merge(progs []*syntax.Prog) *program {
	p := &program{}
	var starts []uint32
	for i, sp := range progs {
		base := uint32(len(p.inst))
		starts = append(starts, base+uint32(sp.Start))
		for _, in := range sp.Inst {
			switch in.Op {
			case syntax.InstMatch:
				in.Arg = uint32(i)
			case syntax.InstFail:
			case syntax.InstAlt, syntax.InstAltMatch:
				in.Out += base
				in.Arg += base
			default:
				in.Out += base
			}
			p.inst = append(p.inst, in)
		}
	}
	p.ascii = make([][2]uint64, len(p.inst))
	for pc := range p.inst {
		if isRune(p.inst[pc].Op) {
			for c := range rune(utf8.RuneSelf) {
				if p.decode(uint32(pc), c) {
					p.ascii[pc][c>>6] |= 1 << (c & 63)
				}
			}
		}
	}
	seen := make([]bool, len(p.inst))
	stack := slices.Clone(starts)
	slices.Reverse(stack)
	for len(stack) > 0 {
		pc := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if seen[pc] {
			continue
		}
		seen[pc] = true
		switch in := &p.inst[pc]; in.Op {
		case syntax.InstAlt, syntax.InstAltMatch:
			stack = append(stack, in.Arg, in.Out)
		case syntax.InstNop, syntax.InstCapture:
			stack = append(stack, in.Out)
		case syntax.InstEmptyWidth:
			p.fresh = append(p.fresh, pc)
		default:
			if isRune(in.Op) {
				p.fresh = append(p.fresh, pc)
			}
		}
	}
	for c := range rune(utf8.RuneSelf) {
		for _, pc := range p.fresh {
			if p.inst[pc].Op == syntax.InstEmptyWidth || p.takes(pc, c) {
				p.freshASCII[c] = append(p.freshASCII[c], pc)
			}
		}
	}
	return p
}

// takes reports whether rune instruction pc consumes r.
func (p *program) takes(pc uint32, r rune) bool {
	if r < utf8.RuneSelf {
		return p.ascii[pc][r>>6]&(1<<(r&63)) != 0
	}
	return p.decode(pc, r)
}

// decode is takes without the ASCII table.
func (p *program) decode(pc uint32, r rune) bool {
	switch in := &p.inst[pc]; in.Op {
	case syntax.InstRune:
		return in.MatchRune(r)
	case syntax.InstRune1:
		return r == in.Rune[0]
	case syntax.InstRuneAny:
		return true
	case syntax.InstRuneAnyNotNL:
		return r != '\n'
	}
	return false
}

// thread is an instruction a match attempt that began at start has reached.
type thread struct {
	pc    uint32
	start int64
}

// threadSet is a set of instructions, each with the start of the first
// thread that reached it. Threads are added in order of start, so the first
// to reach an instruction has the earliest start, and a later one there
// would do exactly what it does: it is dropped. Only the threads that wait
// for a rune (at a rune instruction or an assertion) are listed; the others
// are only marked, so that a loop without a rune ends.
type threadSet struct {
	list []thread
	mark []uint32 // mark[pc] == gen: pc was reached
	gen  uint32
}

func newThreadSet(n int) threadSet {
	return threadSet{mark: make([]uint32, n), gen: 1}
}

func (s *threadSet) clear() {
	s.list = s.list[:0]
	if s.gen++; s.gen == 0 { // wrapped: old marks could read as new
		clear(s.mark)
		s.gen = 1
	}
}

// machine runs the program over a stream a rune at a time. Between runes it
// keeps the threads that wait for the next rune: those at a rune
// instruction and those at an empty-width assertion (\b, $), which cannot be
// decided until the next rune, or the end of the stream, is known.
type machine struct {
	p       *program
	waiting threadSet // threads before the next rune
	ready   threadSet // scratch: threads after the assertions are decided
	stack   []thread
	// onMatch is told of every match the program finds: its rule and start.
	onMatch func(rule int, start int64)
}

func newMachine(p *program, onMatch func(int, int64)) *machine {
	return &machine{p: p, waiting: newThreadSet(len(p.inst)), ready: newThreadSet(len(p.inst)), onMatch: onMatch}
}

// follow adds t and what it reaches without consuming a rune to set. With
// decide it passes the assertions flags allows and drops the others; without
// it stops at every assertion.
func (m *machine) follow(set *threadSet, t thread, flags syntax.EmptyOp, decide bool) {
	m.stack = append(m.stack[:0], t)
	for len(m.stack) > 0 {
		t := m.stack[len(m.stack)-1]
		m.stack = m.stack[:len(m.stack)-1]
		if set.mark[t.pc] == set.gen {
			continue
		}
		set.mark[t.pc] = set.gen
		switch in := &m.p.inst[t.pc]; in.Op {
		case syntax.InstMatch:
			m.onMatch(int(in.Arg), t.start)
		case syntax.InstAlt, syntax.InstAltMatch:
			m.stack = append(m.stack, thread{in.Arg, t.start}, thread{in.Out, t.start})
		case syntax.InstNop, syntax.InstCapture:
			m.stack = append(m.stack, thread{in.Out, t.start})
		case syntax.InstEmptyWidth:
			if !decide {
				set.list = append(set.list, t)
			} else if syntax.EmptyOp(in.Arg)&^flags == 0 {
				m.stack = append(m.stack, thread{in.Out, t.start})
			}
		case syntax.InstFail:
		default:
			set.list = append(set.list, t)
		}
	}
}

// decideAt settles the waiting threads' assertions at pos, between the runes
// prev and next (-1 for either end of the stream), adds the threads of
// matches that start at pos (unless next is -1), and leaves in m.ready the
// threads that wait for next.
func (m *machine) decideAt(pos int64, prev, next rune) {
	flags := syntax.EmptyOpContext(prev, next)
	m.ready.clear()
	for _, t := range m.waiting.list {
		m.follow(&m.ready, t, flags, true)
	}
	m.waiting.clear()
	if next < 0 {
		return
	}
	fresh := m.p.fresh
	if next < utf8.RuneSelf {
		fresh = m.p.freshASCII[next]
	}
	for _, pc := range fresh {
		m.follow(&m.ready, thread{pc, pos}, flags, true)
	}
}

// step consumes r, which starts at pos and is followed by pos+width.
func (m *machine) step(pos int64, prev, r rune) {
	m.decideAt(pos, prev, r)
	for _, t := range m.ready.list {
		if m.p.takes(t.pc, r) {
			m.follow(&m.waiting, thread{m.p.inst[t.pc].Out, t.start}, 0, false)
		}
	}
}

// earliest returns the start of the oldest thread still alive.
func (m *machine) earliest() (int64, bool) {
	if len(m.waiting.list) == 0 {
		return 0, false
	}
	return m.waiting.list[0].start, true
}

// clamp moves every thread's start to at least from: the text before from
// is decided, and a thread's instruction may stand for a later start too.
func (m *machine) clamp(from int64) {
	for i := range m.waiting.list {
		m.waiting.list[i].start = max(m.waiting.list[i].start, from)
	}
}

func isRune(op syntax.InstOp) bool {
	return op == syntax.InstRune || op == syntax.InstRune1 || op == syntax.InstRuneAny || op == syntax.InstRuneAnyNotNL
}
