package expr

import (
	"errors"
	"fmt"
)

var (
	// ErrCompile is matched (errors.Is) by every *CompileError: the
	// expression does not parse, names something undeclared, has the wrong
	// result type, or is too long.
	ErrCompile = errors.New("expr: invalid expression")

	// ErrEval is matched by every *EvalError: evaluation of a compiled
	// program failed for one message (missing field, type mismatch, payload
	// not JSON, cost limit). Callers count it as a non-match.
	ErrEval = errors.New("expr: evaluation failed")

	// ErrMemoryLimit is matched by the *EvalError of an evaluation that
	// would have built more than its budget of strings, bytes and lists
	// (Config.MaxEvalBytes plus twice the message body). It also matches
	// ErrEval.
	ErrMemoryLimit = errors.New("expr: evaluation memory limit exceeded")

	// ErrKind is returned when a program is used for what it was not
	// compiled for: Match on a key program, Key on a filter.
	ErrKind = errors.New("expr: program used for the wrong purpose")
)

// CompileError reports why an expression was refused, with the position of
// the first problem. Error() is one line: "1:12: undeclared reference to
// 'modle' (did you mean 'model'?)".
type CompileError struct {
	// Line and Column locate the problem, both counted from 1 (Column in
	// Unicode code points, as CEL counts them). 0 when unknown.
	Line, Column int
	// Msg says what is wrong.
	Msg string
	// More is the number of further problems CEL found.
	More int
}

func (e *CompileError) Error() string {
	s := e.Msg
	if e.Line > 0 {
		s = fmt.Sprintf("%d:%d: %s", e.Line, e.Column, e.Msg)
	}
	if e.More > 0 {
		s += fmt.Sprintf(" (and %d more)", e.More)
	}
	return s
}

// Is reports whether target is ErrCompile.
func (e *CompileError) Is(target error) bool { return target == ErrCompile }

// EvalError reports why a program failed on one message.
type EvalError struct {
	Msg string
	// Memory is set when the evaluation was refused by its memory budget.
	Memory bool
}

func (e *EvalError) Error() string { return "evaluation failed: " + e.Msg }

// Is reports whether target is ErrEval, or ErrMemoryLimit for a refusal by
// the memory budget.
func (e *EvalError) Is(target error) bool {
	return target == ErrEval || e.Memory && target == ErrMemoryLimit
}
