package streamfilter

import (
	"errors"
	"fmt"
	"regexp"
	"regexp/syntax"
	"strings"
	"sync/atomic"
)

// Options bound a Set. The zero value takes the defaults.
type Options struct {
	// MaxHold is the most bytes a Stream holds back waiting to see whether a
	// match completes (default 256, at most 1 MiB). Past it the oldest text
	// is released anyway, even if it might have started a match.
	MaxHold int
	// MaxRules is the most rules Compile takes (default 128).
	MaxRules int
}

const (
	defaultMaxHold  = 256
	maxMaxHold      = 1 << 20
	defaultMaxRules = 128
	// maxInsts bounds the rules' compiled programs together, which bounds the
	// work of every byte a stream steps.
	maxInsts = 1 << 20
)

// Set is a compiled list of rules. It is immutable and safe for concurrent
// use; each token stream gets its own Stream.
type Set struct {
	rules   []compiledRule
	prog    *program
	maxHold int64

	streams, matches, rejected, forced atomic.Uint64
}

type compiledRule struct {
	Rule
	// Both find the rule's leftmost-first match as capture group 1. atStart
	// searches from the beginning of the stream; afterCtx is given the byte
	// before where the search starts, which it skips, so that \b and (?m)^
	// see the text that came before.
	atStart, afterCtx *regexp.Regexp
}

// Stats counts what a Set's streams did.
type Stats struct {
	Streams  uint64 // Streams made
	Matches  uint64 // events reported (masked, stopped, flagged)
	Rejected uint64 // matches a rule's Validate refused
	// Forced counts releases of text that a match might still have started
	// in, because holding it would have passed MaxHold.
	Forced uint64
}

// Stats returns the counters of every Stream of s so far.
func (s *Set) Stats() Stats {
	return Stats{
		Streams:  s.streams.Load(),
		Matches:  s.matches.Load(),
		Rejected: s.rejected.Load(),
		Forced:   s.forced.Load(),
	}
}

// Compile checks and compiles rules. A Set with no rules passes text through.
func Compile(rules []Rule, o Options) (*Set, error) {
	switch {
	case o.MaxHold < 0 || o.MaxHold > maxMaxHold:
		return nil, fmt.Errorf("%w: MaxHold %d is not between 1 and %d (0 for %d)", ErrInvalidOptions, o.MaxHold, maxMaxHold, defaultMaxHold)
	case o.MaxRules < 0:
		return nil, fmt.Errorf("%w: MaxRules %d is negative", ErrInvalidOptions, o.MaxRules)
	}
	if o.MaxHold == 0 {
		o.MaxHold = defaultMaxHold
	}
	if o.MaxRules == 0 {
		o.MaxRules = defaultMaxRules
	}
	if len(rules) > o.MaxRules {
		return nil, fmt.Errorf("%w: %d rules, more than %d", ErrInvalidOptions, len(rules), o.MaxRules)
	}
	s := &Set{maxHold: int64(o.MaxHold), rules: make([]compiledRule, len(rules))}
	names := make(map[string]int, len(rules))
	progs := make([]*syntax.Prog, len(rules))
	total := 0
	for i, r := range rules {
		fail := func(err error) (*Set, error) { return nil, &RuleError{Index: i, Name: r.Name, Err: err} }
		if err := r.checkShape(); err != nil {
			return fail(err)
		}
		if j, dup := names[r.Name]; dup {
			return fail(fmt.Errorf("name already used by rule %d", j))
		}
		names[r.Name] = i
		re, err := syntax.Parse(r.Pattern, syntax.Perl)
		if err != nil {
			return fail(fmt.Errorf("pattern: %w", err))
		}
		p, err := syntax.Compile(re.Simplify())
		if err != nil {
			return fail(fmt.Errorf("pattern: %w", err))
		}
		if matchesEmpty(p) {
			return fail(errors.New("pattern can match the empty string"))
		}
		if total += len(p.Inst); total > maxInsts {
			return fail(fmt.Errorf("the rules' programs pass %d instructions", maxInsts))
		}
		progs[i] = p
		// Wrap the pattern in a group; \Q runs to the end of a pattern and
		// would swallow the closing parenthesis, so such a pattern goes in as
		// its parsed form, which never uses \Q.
		body := r.Pattern
		if strings.Contains(body, `\Q`) {
			body = re.String()
		}
		c := compiledRule{Rule: r}
		if c.atStart, err = regexp.Compile(`\A(?s:.)*?(` + body + `)`); err == nil {
			c.afterCtx, err = regexp.Compile(`\A(?s:.)(?s:.)*?(` + body + `)`)
		}
		if err != nil {
			return fail(fmt.Errorf("pattern: %w", err))
		}
		s.rules[i] = c
	}
	s.prog = merge(progs)
	return s, nil
}

// matchesEmpty reports whether p can reach a match without consuming input,
// whatever its empty-width assertions decide.
func matchesEmpty(p *syntax.Prog) bool {
	seen := make([]bool, len(p.Inst))
	stack := []uint32{uint32(p.Start)}
	for len(stack) > 0 {
		pc := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if seen[pc] {
			continue
		}
		seen[pc] = true
		switch in := &p.Inst[pc]; in.Op {
		case syntax.InstMatch:
			return true
		case syntax.InstAlt, syntax.InstAltMatch:
			stack = append(stack, in.Out, in.Arg)
		case syntax.InstNop, syntax.InstCapture, syntax.InstEmptyWidth:
			stack = append(stack, in.Out)
		}
	}
	return false
}
