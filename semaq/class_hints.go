package semaq

import (
	"fmt"
	"strings"
	"time"
)

// DispatchHints are what a request says of where and how urgently it is
// served, beyond the envelope: its class, the labels it requires and
// prefers, its latency SLA and workload (docs/queues.md).
type DispatchHints struct {
	Class           string
	Require, Prefer map[string]string
	LatencySLA      time.Duration
	Workload        string
	PriorityGiven   bool // the request names its AI-Priority
}

// hintNames are the dispatch hint headers, lower case.
var hintNames = [...]string{"ai-class", "ai-require", "ai-prefer", "ai-latency-sla", "ai-workload"}

var hintCanonical = [...]string{HdrClass, HdrRequire, HdrPrefer, HdrLatencySLA, HdrWorkload}

// ParseDispatchHints reads the dispatch hints of h and, with rewrite,
// renames them to their canonical spellings. Each may be given once; a
// bad value is an *EnvelopeError naming the header.
func ParseDispatchHints(h map[string][]string, rewrite bool) (DispatchHints, error) {
	var (
		dh      DispatchHints
		renames []string
	)
	for name, vals := range h {
		if len(name) < 3 || !strings.EqualFold(name[:3], "ai-") {
			continue
		}
		if len(name) == len(HdrPriority) && strings.EqualFold(name, HdrPriority) {
			dh.PriorityGiven = true
			continue
		}
		i := hintIndex(name)
		if i < 0 {
			continue
		}
		if len(vals) != 1 {
			return dh, &EnvelopeError{name, fmt.Sprintf("given %d times; one value expected", len(vals))}
		}
		for _, other := range renames {
			if strings.EqualFold(other, name) {
				return dh, &EnvelopeError{name, fmt.Sprintf("given twice (also as %s)", other)}
			}
		}
		v := vals[0]
		if len(v) > MaxEnvelopeValue {
			return dh, &EnvelopeError{name, fmt.Sprintf("value is %d bytes; the limit is %d", len(v), MaxEnvelopeValue)}
		}
		var err error
		switch i {
		case 0:
			if err = CheckStreamName(v); err != nil {
				err = fmt.Errorf("%q is not a class name (letters, digits, '-' and '_')", v)
			}
			dh.Class = v
		case 1:
			dh.Require, err = ParseLabels(v)
		case 2:
			dh.Prefer, err = ParseLabels(v)
		case 3:
			dh.LatencySLA, err = ParseLatencySLA(v)
		case 4:
			dh.Workload, err = token(v)
		}
		if err != nil {
			return dh, &EnvelopeError{name, err.Error()}
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
