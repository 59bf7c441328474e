package streamfilter

import (
	"errors"
	"fmt"
)

var (
	// ErrInvalidRule is matched (errors.Is) by every *RuleError.
	ErrInvalidRule = errors.New("streamfilter: invalid rule")

	// ErrInvalidOptions is returned by Compile for Options out of range.
	ErrInvalidOptions = errors.New("streamfilter: invalid options")

	// ErrStopped is returned by Write after a Stop rule ended the stream.
	ErrStopped = errors.New("streamfilter: stream stopped by a rule")

	// ErrFlushed is returned by Write after Flush ended the stream.
	ErrFlushed = errors.New("streamfilter: stream already flushed")
)

// RuleError says which rule Compile or WordRules refused and why.
type RuleError struct {
	Index int    // position in the rules given to Compile; -1 from WordRules
	Name  string // the rule's name, possibly empty
	Err   error
}

func (e *RuleError) Error() string {
	if e.Index < 0 {
		return fmt.Sprintf("streamfilter: rule %q: %v", e.Name, e.Err)
	}
	return fmt.Sprintf("streamfilter: rule %d (%q): %v", e.Index, e.Name, e.Err)
}

func (e *RuleError) Unwrap() error { return e.Err }

// Is makes every RuleError match ErrInvalidRule.
func (e *RuleError) Is(target error) bool { return target == ErrInvalidRule }
