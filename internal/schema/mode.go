package schema

import (
	"fmt"
	"strings"
)

// Mode is a compatibility mode, with Confluent Schema Registry's meaning.
type Mode string

const (
	// Backward: the new schema can read data written with the latest one.
	Backward Mode = "BACKWARD"
	// BackwardTransitive: ...with every earlier one.
	BackwardTransitive Mode = "BACKWARD_TRANSITIVE"
	// Forward: the latest schema can read data written with the new one.
	Forward Mode = "FORWARD"
	// ForwardTransitive: every earlier schema can read the new one's data.
	ForwardTransitive Mode = "FORWARD_TRANSITIVE"
	// Full: backward and forward against the latest.
	Full Mode = "FULL"
	// FullTransitive: backward and forward against every earlier one.
	FullTransitive Mode = "FULL_TRANSITIVE"
	// None: no check.
	None Mode = "NONE"

	// DefaultMode is the mode of a registry nobody configured.
	DefaultMode = Backward
)

// Modes lists every mode.
var Modes = []Mode{Backward, BackwardTransitive, Forward, ForwardTransitive, Full, FullTransitive, None}

// ParseMode reads a mode name, any case.
func ParseMode(s string) (Mode, error) {
	m := Mode(strings.ToUpper(strings.TrimSpace(s)))
	for _, k := range Modes {
		if m == k {
			return m, nil
		}
	}
	names := make([]string, len(Modes))
	for i, k := range Modes {
		names[i] = string(k)
	}
	return "", fmt.Errorf("unknown compatibility mode %q (use %s)", s, strings.Join(names, ", "))
}

func (m Mode) transitive() bool { return strings.HasSuffix(string(m), "_TRANSITIVE") }
func (m Mode) backward() bool {
	return m == Backward || m == BackwardTransitive || m == Full || m == FullTransitive
}
func (m Mode) forward() bool {
	return m == Forward || m == ForwardTransitive || m == Full || m == FullTransitive
}

// Check reports why candidate may not follow previous (oldest first) under
// mode. Non-transitive modes check only the latest previous version. Each
// reason's Message says which direction failed and against which version
// (1-based position in previous).
func Check(f Format, mode Mode, candidate Schema, previous []Schema) []Incompatibility {
	if mode == None || len(previous) == 0 {
		return nil
	}
	first := 0
	if !mode.transitive() {
		first = len(previous) - 1
	}
	var out []Incompatibility
	for i := len(previous) - 1; i >= first; i-- {
		old := previous[i]
		if mode.backward() {
			for _, r := range f.Compatibility(candidate, old) {
				r.Message = fmt.Sprintf("new schema cannot read data written with version %d: %s", i+1, r.Message)
				out = append(out, r)
			}
		}
		if mode.forward() {
			for _, r := range f.Compatibility(old, candidate) {
				r.Message = fmt.Sprintf("version %d cannot read data written with the new schema: %s", i+1, r.Message)
				out = append(out, r)
			}
		}
	}
	return out
}
