package pii

import (
	"regexp"
	"slices"
	"sync"
)

// Finding is an entity found in a text: its type and its byte offsets, text[Start:End].
type Finding struct {
	Type       Type
	Start, End int
}

// Detector finds one shape of one entity type. A type may have several (secret has one per key family). Pattern
// is an RE2 expression that finds candidates; the value is the match, or its first capturing group when it has
// one (the SSN after its keyword). Validate is the checksum or semantic check of a value. MaxLen bounds a value's
// length, for a streaming scanner deciding how much of a stream's tail to hold back.
//
// Scan applies two checks a streaming scanner may skip at the cost of precision: a value must not continue a
// longer token (a digit, letter, or '-'/'.' joined to a digit before or after it), and a candidate that fails
// Validate is retried on its sub-spans between separators (a card after a quantity, a phone number followed by
// a year).
type Detector struct {
	Type     Type
	Pattern  string
	Validate func(string) bool
	MaxLen   int
}

// detector is a Detector with what Scan needs besides.
type detector struct {
	Detector
	bit    mask
	re     *regexp.Regexp
	seed   seeder                                 // where to run re
	refine bool                                   // retry sub-spans between separators
	ctx    func(text string, start, end int) bool // the neighbours allow the value
	costly func(sc *scan, value string) bool      // Validate on a budget, for a check that costs much
}

// scan is what one scan of a text may still spend. A hostile text can be made of candidates; these bounds keep
// its cost linear in its length with a small factor.
type scan struct {
	limit int // stop after more findings than this; 0 for no limit
	found int
	lib   int // expensive checks (libphonenumber) left; past them a cheaper check decides
}

// maxLibChecks is how many candidates of one text get libphonenumber's check (some 40 µs each); the rest get
// the structural check alone (a known country code and a plausible length), which errs towards redacting.
const maxLibChecks = 256

// maxRefineGroups bounds the groups of a candidate whose sub-spans are retried: no value has more, and the
// retries grow with its square.
const maxRefineGroups = 12

var (
	detectorsOnce sync.Once
	allDetectors  []detector
)

func detectors() []detector {
	detectorsOnce.Do(func() {
		for _, d := range detectorTable() {
			d.re = regexp.MustCompile(d.Pattern)
			d.bit = d.Type.bit()
			allDetectors = append(allDetectors, d)
		}
	})
	return allDetectors
}

// detectorTable lists every detector; the files detect_*.go define their parts.
func detectorTable() []detector {
	var ds []detector
	ds = append(ds, emailDetectors()...)
	ds = append(ds, phoneDetectors()...)
	ds = append(ds, cnidDetectors()...)
	ds = append(ds, cardDetectors()...)
	ds = append(ds, ibanDetectors()...)
	ds = append(ds, ssnDetectors()...)
	ds = append(ds, ipDetectors()...)
	ds = append(ds, secretDetectors()...)
	return ds
}

// Detectors returns the detectors of the given types (all types when none are given).
func Detectors(types []Type) []Detector {
	m := maskOf(types)
	var out []Detector
	for _, d := range detectors() {
		if m&d.Type.bit() != 0 {
			out = append(out, d.Detector)
		}
	}
	return out
}

// Validate reports whether value is an entity of type t by that type's checks alone, without context.
func Validate(t Type, value string) bool {
	for _, d := range detectors() {
		if d.Type == t {
			return d.Validate(value)
		}
	}
	return false
}

// Scan finds the entities of the given types (all types when none are given) in text. The findings are sorted by
// Start and do not overlap: where two would, the leftmost wins, then the longest. A text without any candidate
// costs one pass over its bytes and allocates nothing.
func Scan(text string, types []Type) []Finding {
	want := maskOf(types) & prefilter(text)
	if want == 0 {
		return nil
	}
	return scanMasked(text, want)
}

func scanMasked(text string, want mask) []Finding {
	return scanLimited(text, want, 0)
}

// scanLimited is scanMasked that stops once it has more than limit findings (when limit > 0), for a caller
// that refuses such a text anyway.
func scanLimited(text string, want mask, limit int) []Finding {
	var found []Finding
	sc := scan{limit: limit, lib: maxLibChecks}
	for i := range detectors() {
		d := &allDetectors[i]
		if want&d.bit == 0 {
			continue
		}
		found = d.find(&sc, text, found)
		if sc.full() {
			break
		}
	}
	if len(found) == 0 {
		return nil
	}
	return resolve(found)
}

// find appends the values d finds in text to found, running d's pattern over the windows its seeder gives,
// merged where they overlap.
func (d *detector) find(sc *scan, text string, found []Finding) []Finding {
	lo, hi := -1, -1
	d.seed(text, func(a, b int) {
		if a <= hi {
			hi = max(hi, b)
			return
		}
		if hi > lo && !sc.full() {
			found = d.findIn(sc, text, lo, hi, found)
		}
		lo, hi = a, b
	})
	if hi > lo && !sc.full() {
		found = d.findIn(sc, text, lo, hi, found)
	}
	return found
}

func (sc *scan) full() bool { return sc.limit > 0 && sc.found > sc.limit }

func (d *detector) findIn(sc *scan, text string, lo, hi int, found []Finding) []Finding {
	for _, m := range d.re.FindAllStringSubmatchIndex(text[lo:hi], -1) {
		start, end := lo+m[0], lo+m[1]
		if len(m) >= 4 && m[2] >= 0 {
			start, end = lo+m[2], lo+m[3]
		}
		n := len(found)
		if d.accept(sc, text, start, end) {
			found = append(found, Finding{Type: d.Type, Start: start, End: end})
		} else if d.refine {
			found = d.refineSpan(sc, text, start, end, found)
		}
		if sc.found += len(found) - n; sc.full() {
			break
		}
	}
	return found
}

func (d *detector) accept(sc *scan, text string, start, end int) bool {
	if d.ctx != nil && !d.ctx(text, start, end) {
		return false
	}
	if d.costly != nil {
		return d.costly(sc, text[start:end])
	}
	return d.Validate(text[start:end])
}

// refineSpan tries the sub-spans of text[start:end] that begin and end at a group of its characters (groups
// are split by separators), longest first from each start, and appends those that are accepted.
func (d *detector) refineSpan(sc *scan, text string, start, end int, found []Finding) []Finding {
	var bounds [2 * maxRefineGroups]int // group starts and ends, alternating
	n := 0
	for i := start; i < end; {
		for i < end && isSep(text[i]) {
			i++
		}
		if i >= end {
			break
		}
		if n == len(bounds) {
			return found // more groups than any value has
		}
		bounds[n] = i
		for i < end && !isSep(text[i]) {
			i++
		}
		bounds[n+1] = i
		n += 2
	}
	groups := n / 2
	for a := 0; a < groups; a++ {
		for b := groups; b > a; b-- {
			if a == 0 && b == groups {
				continue // the whole span already failed
			}
			s, e := bounds[2*a], bounds[2*b-1]
			if d.accept(sc, text, s, e) {
				found = append(found, Finding{Type: d.Type, Start: s, End: e})
				a = b - 1
				break
			}
		}
	}
	return found
}

func isSep(c byte) bool { return c == ' ' || c == '-' || c == '.' || c == '(' || c == ')' }

// resolve sorts findings and drops those overlapping an earlier (leftmost, then longest) one.
func resolve(found []Finding) []Finding {
	slices.SortFunc(found, func(a, b Finding) int {
		if a.Start != b.Start {
			return a.Start - b.Start
		}
		return b.End - a.End
	})
	out := found[:0]
	last := -1
	for _, f := range found {
		if f.Start < last {
			continue
		}
		out = append(out, f)
		last = f.End
	}
	return out
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }
func isUpper(c byte) bool { return 'A' <= c && c <= 'Z' }
func isLower(c byte) bool { return 'a' <= c && c <= 'z' }
func isAlnum(c byte) bool { return isDigit(c) || isUpper(c) || isLower(c) }
func isWord(c byte) bool  { return isAlnum(c) || c == '_' }

// numberCtx refuses a value that continues a longer token: a word character next to it, a '-' or '.' that
// joins it to a digit, or a '-' after it that joins it to a letter ("123-45-6789-beta"; a label before it, as in
// "SSN-078-05-1120", is allowed).
func numberCtx(text string, start, end int) bool {
	if start > 0 {
		c := text[start-1]
		if isWord(c) || (c == '-' || c == '.') && start > 1 && isDigit(text[start-2]) {
			return false
		}
	}
	if end < len(text) {
		c := text[end]
		if isWord(c) || (c == '-' || c == '.') && end+1 < len(text) && isDigit(text[end+1]) ||
			c == '-' && end+1 < len(text) && isAlnum(text[end+1]) {
			return false
		}
	}
	return true
}

// tokenCtx refuses a key-shaped value that continues a longer token of key characters.
func tokenCtx(text string, start, end int) bool {
	keyChar := func(c byte) bool { return isWord(c) || c == '-' }
	return (start == 0 || !keyChar(text[start-1])) && (end == len(text) || !keyChar(text[end]))
}
