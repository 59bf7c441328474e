package streamfilter

import (
	"math"
	"unicode/utf8"
)

// Event reports one match a Stream acted on. Start and End are byte offsets
// in the stream's original text (before any masking).
type Event struct {
	Rule       string
	Action     Action
	Start, End int64
}

// Stream filters one token stream. It is not safe for concurrent use.
type Stream struct {
	set *Set
	m   *machine

	// buf holds the stream's text from offset off: the held text, from rel,
	// and the byte before it, which the rules' \b and (?m)^ look at.
	buf []byte
	off int64
	rel int64 // text before rel is released (or dropped by a Stop)
	pos int64 // text before pos is stepped; pos..end is an unfinished rune
	// prev is the last rune stepped, -1 at the start of the stream.
	prev rune

	// hits tracks, for each rule, the earliest and latest start of the
	// matches the machine found since the rule was last searched; math.MaxInt64
	// and -1 when none. Only a rule with hits is searched with its regexp.
	hitMin, hitMax []int64

	cand  []candidate // scratch: each searched rule's next match
	out   []byte      // scratch: the filtered text being released
	state streamState
}

type streamState uint8

const (
	open streamState = iota
	stopped
	flushed
)

type candidate struct {
	start, end int64
	found      bool
	searched   bool
}

// Stream starts filtering a new stream.
func (s *Set) Stream() *Stream {
	s.streams.Add(1)
	n := len(s.rules)
	st := &Stream{set: s, prev: -1, hitMin: make([]int64, n), hitMax: make([]int64, n), cand: make([]candidate, n)}
	for i := range st.hitMin {
		st.hitMin[i], st.hitMax[i] = math.MaxInt64, -1
	}
	st.m = newMachine(s.prog, st.hit)
	return st
}

func (st *Stream) hit(rule int, start int64) {
	st.hitMin[rule] = min(st.hitMin[rule], start)
	st.hitMax[rule] = max(st.hitMax[rule], start)
}

// Held returns the number of bytes written but not yet released.
func (st *Stream) Held() int { return int(st.off + int64(len(st.buf)) - st.rel) }

// Write adds chunk to the stream. It returns the filtered text that can be
// released now, the events decided, and stop=true when a Stop rule matched:
// out then ends where the match began, and later Writes return ErrStopped.
func (st *Stream) Write(chunk string) (out string, events []Event, stop bool, err error) {
	switch st.state {
	case stopped:
		return "", nil, true, ErrStopped
	case flushed:
		return "", nil, false, ErrFlushed
	}
	st.buf = append(st.buf, chunk...)
	end := st.off + int64(len(st.buf))
	for st.pos < end {
		b := st.buf[st.pos-st.off:]
		if !utf8.FullRune(b) {
			break // the rest of the rune comes with the next chunk
		}
		st.stepRune(b)
	}
	hold, alive := st.m.earliest()
	if !alive {
		hold = st.pos
	}
	if end-hold > st.set.maxHold {
		hold = st.forceTo(end - st.set.maxHold)
	}
	out, events, stop = st.decide(hold)
	return out, events, stop, nil
}

// Flush ends the stream and releases everything still held, filtered. A
// stream stopped by a rule returns nothing but stop=true.
func (st *Stream) Flush() (out string, events []Event, stop bool) {
	switch st.state {
	case stopped:
		return "", nil, true
	case flushed:
		return "", nil, false
	}
	end := st.off + int64(len(st.buf))
	for st.pos < end {
		st.stepRune(st.buf[st.pos-st.off:])
	}
	st.m.decideAt(st.pos, st.prev, -1)
	out, events, stop = st.decide(st.pos)
	if !stop {
		st.state = flushed
	}
	return out, events, stop
}

func (st *Stream) stepRune(b []byte) {
	r, w := rune(b[0]), 1
	if r >= utf8.RuneSelf {
		r, w = utf8.DecodeRune(b)
	}
	st.m.step(st.pos, st.prev, r)
	st.prev = r
	st.pos += int64(w)
}

// forceTo returns the first rune boundary at or after cut (but not past the
// stepped text), counting a forced release.
func (st *Stream) forceTo(cut int64) int64 {
	st.set.forced.Add(1)
	for cut < st.pos && !utf8.RuneStart(st.buf[cut-st.off]) {
		cut++
	}
	return min(cut, st.pos)
}

// decide finds the matches that start before hold, acts on them, and
// releases the text up to hold or the end of the last match, whichever is
// later. Every match starting before hold is complete: no thread that began
// there is alive, so more text cannot extend or add one.
func (st *Stream) decide(hold int64) (string, []Event, bool) {
	rules := st.set.rules
	for i := range rules {
		c := &st.cand[i]
		*c = candidate{}
		if st.hitMin[i] < hold {
			st.next(i, st.rel, hold)
		}
	}
	st.out = st.out[:0]
	var events []Event
	cur := st.rel
	for {
		best := -1
		for i := range rules {
			c := &st.cand[i]
			if !c.found || c.start >= hold {
				continue
			}
			if b := &st.cand[max(best, 0)]; best < 0 || c.start < b.start || c.start == b.start && c.end > b.end {
				best = i
			}
		}
		if best < 0 {
			break
		}
		r, c := &rules[best], st.cand[best]
		events = append(events, Event{Rule: r.Name, Action: r.Action, Start: c.start, End: c.end})
		st.set.matches.Add(1)
		st.out = append(st.out, st.text(cur, c.start)...)
		if r.Action == Stop {
			st.state = stopped
			st.rel, st.off, st.buf = c.start, c.start, st.buf[:0]
			return string(st.out), events, true
		}
		match := st.text(c.start, c.end)
		switch {
		case r.Action == Flag:
			st.out = append(st.out, match...)
		case r.ReplaceFunc != nil:
			st.out = append(st.out, r.ReplaceFunc(string(match))...)
		default:
			st.out = append(st.out, r.Replace...)
		}
		cur = c.end
		for i := range rules {
			if d := &st.cand[i]; d.found && d.start < cur {
				st.next(i, cur, hold)
			}
		}
	}
	rel := max(hold, cur)
	st.out = append(st.out, st.text(cur, rel)...)
	st.release(rel)
	var out string
	if len(st.out) > 0 {
		out = string(st.out)
	}
	return out, events, false
}

// next sets rule i's candidate to its first valid match at or after from.
// A match at or after hold is left unvalidated: it may not be final.
func (st *Stream) next(i int, from, hold int64) {
	r, c := &st.set.rules[i], &st.cand[i]
	c.searched = true
	for {
		c.start, c.end, c.found = st.find(r, from)
		if !c.found || c.start >= hold || r.Validate == nil || r.Validate(string(st.text(c.start, c.end))) {
			return
		}
		st.set.rejected.Add(1)
		_, w := utf8.DecodeRune(st.buf[c.start-st.off : st.pos-st.off])
		from = c.start + int64(w)
	}
}

// find runs r's regexp over the stepped text from offset from. The byte
// before from, when there is one, is given as context and skipped.
func (st *Stream) find(r *compiledRule, from int64) (start, end int64, ok bool) {
	re, base := r.afterCtx, from-1
	if from == 0 {
		re, base = r.atStart, 0
	}
	loc := re.FindSubmatchIndex(st.buf[base-st.off : st.pos-st.off])
	if loc == nil {
		return 0, 0, false
	}
	return base + int64(loc[2]), base + int64(loc[3]), true
}

func (st *Stream) text(from, to int64) []byte { return st.buf[from-st.off : to-st.off] }

// release marks the text before rel released, keeps one byte of it as
// context, and brings the rules' hits and the machine's threads forward.
func (st *Stream) release(rel int64) {
	st.rel = rel
	if keep := rel - 1; keep > st.off {
		n := copy(st.buf, st.buf[keep-st.off:])
		st.buf = st.buf[:n]
		st.off = keep
	}
	for i := range st.hitMin {
		c := &st.cand[i]
		switch {
		case c.searched && !c.found:
			st.hitMin[i], st.hitMax[i] = math.MaxInt64, -1
		case c.searched:
			// The regexp knows where the rule's next match begins.
			st.hitMin[i] = max(c.start, rel)
			st.hitMax[i] = max(st.hitMax[i], st.hitMin[i])
		case st.hitMax[i] >= 0:
			// A hit before rel may stand for a later match the machine
			// folded into it: search from rel.
			st.hitMin[i] = max(st.hitMin[i], rel)
			st.hitMax[i] = max(st.hitMax[i], st.hitMin[i])
		}
	}
	st.m.clamp(rel)
}
