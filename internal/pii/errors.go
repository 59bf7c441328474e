package pii

import (
	"errors"
	"fmt"
)

var (
	// ErrUnknownType is returned for a type name that is not one of Types.
	ErrUnknownType = errors.New("pii: unknown entity type")
	// ErrConfig is returned by NewRedactor for a configuration it cannot use.
	ErrConfig = errors.New("pii: invalid redaction config")
	// ErrBlocked is what a *BlockedError is: an entity whose action is block was found.
	ErrBlocked = errors.New("pii: blocked")
	// ErrTooDeep is returned for JSON nested deeper than MaxDepth.
	ErrTooDeep = errors.New("pii: JSON nested too deep")
	// ErrTooManyFindings is returned when a payload holds more entities than Config.MaxFindings.
	ErrTooManyFindings = errors.New("pii: too many entities")
	// ErrTokenizer wraps an error a Tokenizer returned.
	ErrTokenizer = errors.New("pii: tokenizer failed")
)

// BlockedError says an entity whose action is block was found. It names the type and where it was, never the
// value.
type BlockedError struct {
	Type Type
	Path string // JSON Pointer of the string that held it; "" for text
}

func (e *BlockedError) Error() string {
	if e.Path == "" {
		return fmt.Sprintf("pii: blocked: the text holds a %s", e.Type)
	}
	return fmt.Sprintf("pii: blocked: %q holds a %s", e.Path, e.Type)
}

// Is makes errors.Is(err, ErrBlocked) true.
func (e *BlockedError) Is(target error) bool { return target == ErrBlocked }
