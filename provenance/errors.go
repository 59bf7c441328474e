package provenance

import (
	"errors"
	"fmt"
)

// ErrFormat is matched (errors.Is) by every error a Reader returns for
// input that is not an export it reads: a *FormatError names the line.
var ErrFormat = errors.New("provenance: not a valid export")

// FormatError is a line of an export the Reader refuses.
type FormatError struct {
	Line int // 1-based; line 1 is the header
	Msg  string
}

func (e *FormatError) Error() string { return fmt.Sprintf("line %d: %s", e.Line, e.Msg) }

// Is makes a FormatError match ErrFormat.
func (e *FormatError) Is(target error) bool { return target == ErrFormat }

func formatErr(line int, format string, args ...any) error {
	return &FormatError{Line: line, Msg: fmt.Sprintf(format, args...)}
}
