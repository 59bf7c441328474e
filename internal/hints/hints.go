// Package hints reads what a request says of where and how urgently it is
// served, beyond the envelope (docs/queues.md): its hardware class, the
// worker labels it requires and prefers, its latency SLA and workload; and
// derives the priority of a request that names none from its SLA. The
// ingress checks a request's hints with Parse, once; the header names are
// semaq's (semaq.HdrClass, ...).
package hints

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/semaq/semaq/semaq"
)

// MinLatencySLA and MaxLatencySLA bound AI-Latency-SLA.
const (
	MinLatencySLA = time.Millisecond
	MaxLatencySLA = time.Hour
)

// Hints are what a request says of where and how urgently it is
// served, beyond the envelope: its class, the labels it requires and
// prefers, its latency SLA and workload (docs/queues.md).
type Hints struct {
	Class           string
	Require, Prefer map[string]string
	LatencySLA      time.Duration
	Workload        string
	PriorityGiven   bool // the request names its AI-Priority
}

// hintNames are the dispatch hint headers, lower case.
var hintNames = [...]string{"ai-class", "ai-require", "ai-prefer", "ai-latency-sla", "ai-workload"}

var hintCanonical = [...]string{semaq.HdrClass, semaq.HdrRequire, semaq.HdrPrefer, semaq.HdrLatencySLA, semaq.HdrWorkload}

// Parse reads the dispatch hints of h and, with rewrite,
// renames them to their canonical spellings. Each may be given once; a
// bad value is an *EnvelopeError naming the header.
func Parse(h map[string][]string, rewrite bool) (Hints, error) {
	var (
		dh      Hints
		renames []string
	)
	for name, vals := range h {
		if len(name) < 3 || !strings.EqualFold(name[:3], "ai-") {
			continue
		}
		if len(name) == len(semaq.HdrPriority) && strings.EqualFold(name, semaq.HdrPriority) {
			dh.PriorityGiven = true
			continue
		}
		i := hintIndex(name)
		if i < 0 {
			continue
		}
		if len(vals) != 1 {
			return dh, &semaq.EnvelopeError{Header: name, Reason: fmt.Sprintf("given %d times; one value expected", len(vals))}
		}
		for _, other := range renames {
			if strings.EqualFold(other, name) {
				return dh, &semaq.EnvelopeError{Header: name, Reason: fmt.Sprintf("given twice (also as %s)", other)}
			}
		}
		v := vals[0]
		if len(v) > semaq.MaxEnvelopeValue {
			return dh, &semaq.EnvelopeError{Header: name, Reason: fmt.Sprintf("value is %d bytes; the limit is %d", len(v), semaq.MaxEnvelopeValue)}
		}
		var err error
		switch i {
		case 0:
			if err = semaq.CheckStreamName(v); err != nil {
				err = fmt.Errorf("%q is not a class name (letters, digits, '-' and '_')", v)
			}
			dh.Class = v
		case 1:
			dh.Require, err = semaq.ParseLabels(v)
		case 2:
			dh.Prefer, err = semaq.ParseLabels(v)
		case 3:
			dh.LatencySLA, err = ParseLatencySLA(v)
		case 4:
			dh.Workload, err = token(v)
		}
		if err != nil {
			return dh, &semaq.EnvelopeError{Header: name, Reason: err.Error()}
		}
		renames = append(renames, name)
	}
	if rewrite {
		for _, name := range renames {
			c := hintCanonical[hintIndex(name)]
			if name != c {
				h[c] = h[name]
				delete(h, name)
			}
		}
	}
	return dh, nil
}

// hintIndex is the index of name in hintNames, -1 for none: by length
// first, so that the envelope's other AI- headers cost one comparison.
func hintIndex(name string) int {
	for i, n := range hintNames {
		if len(name) == len(n) && strings.EqualFold(name, n) {
			return i
		}
	}
	return -1
}

// ParseLatencySLA reads AI-Latency-SLA: a Go duration ("200ms", "1.5s")
// or a whole number of milliseconds ("200"), from MinLatencySLA to
// MaxLatencySLA.
func ParseLatencySLA(s string) (time.Duration, error) {
	var d time.Duration
	if n, err := strconv.ParseUint(s, 10, 32); err == nil {
		d = time.Duration(n) * time.Millisecond
	} else if d, err = time.ParseDuration(s); err != nil {
		return 0, fmt.Errorf("%q is not a duration (e.g. 200ms, 2s) or a number of milliseconds", s)
	}
	if d < MinLatencySLA || d > MaxLatencySLA {
		return 0, fmt.Errorf("%s is outside %s to %s", s, MinLatencySLA, MaxLatencySLA)
	}
	return d, nil
}

// Workloads are the workload classes a latency SLA derives a priority
// for, each with its base (docs/queues.md, SLA-derived priority). The key
// DefaultWorkload is the base of a request that gives an SLA and no
// workload.
type Workloads map[string]int

// DefaultWorkload names the base of a request without AI-Workload.
const DefaultWorkload = "default"

// DefaultWorkloads are the seeds' bases.
func DefaultWorkloads() Workloads {
	return Workloads{"rag": 50, "agent": 70, "finetune": 30, "rl": 90, DefaultWorkload: 50}
}

// Check reports a base out of 1 to 1000 or a bad name.
func (w Workloads) Check() error {
	if len(w) > 64 {
		return fmt.Errorf("workloads: %d given; the limit is 64", len(w))
	}
	for name, base := range w {
		if _, err := token(name); err != nil || len(name) > 64 {
			return fmt.Errorf("workload name %q: use up to 64 visible ASCII characters", name)
		}
		if base < 1 || base > 1000 {
			return fmt.Errorf("workload %s: base %d is not from 1 to 1000", name, base)
		}
	}
	return nil
}

// Priority is the priority a request of workload with latency SLA sla
// gets when it names none: score = base × 1000 / max(sla in ms, 10),
// mapped onto the levels by PriorityOfScore. "" is DefaultWorkload. An
// unknown workload is an error naming the known ones.
func (w Workloads) Priority(workload string, sla time.Duration) (semaq.Priority, float64, error) {
	if workload == "" {
		workload = DefaultWorkload
	}
	base, ok := w[workload]
	if !ok {
		return 0, 0, fmt.Errorf("workload %q is not one of %s", workload, strings.Join(slices.Sorted(maps.Keys(w)), ", "))
	}
	ms := max(float64(sla)/float64(time.Millisecond), 10)
	score := float64(base) * 1000 / ms
	return PriorityOfScore(score), score, nil
}

// ScoreFloors are the least score of each priority level 0 to 8 (9 takes
// the rest): each level about twice the score of the next.
var ScoreFloors = [9]float64{2000, 1000, 500, 250, 100, 50, 25, 10, 5}

// PriorityOfScore maps an SLA score onto the priority levels (ScoreFloors).
func PriorityOfScore(score float64) semaq.Priority {
	for lvl, floor := range ScoreFloors {
		if score >= floor {
			return semaq.Priority(lvl)
		}
	}
	return semaq.PriorityLowest
}

// token accepts 1 to 256 bytes of visible ASCII without spaces, as the
// envelope's tokens.
func token(v string) (string, error) {
	if v == "" || len(v) > semaq.MaxEnvelopeValue {
		return "", errors.New("empty, or longer than 256 bytes")
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c <= ' ' || c >= 0x7f {
			return "", fmt.Errorf("%q has a character outside visible ASCII at byte %d", v, i)
		}
	}
	return v, nil
}
