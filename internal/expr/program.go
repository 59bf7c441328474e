package expr

import (
	"context"
	"math"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
)

// Program is a compiled expression. It is immutable and safe for concurrent
// use; evaluation allocates little and never panics on any message.
type Program struct {
	src      string
	kind     kind
	prg      cel.Program
	metered  bool          // evaluated under CostLimit
	timeout  time.Duration // of a metered evaluation
	maxBytes int64         // Config.MaxEvalBytes
	fields   []FieldRef    // payload fields named (fields.go)
}

// String returns the source text.
func (p *Program) String() string { return p.src }

// Match evaluates a filter (from Compile) on m. A runtime error (a missing
// field, a type mismatch, a payload that is not JSON, the cost limit) is
// returned as an *EvalError together with false: the caller counts the
// message as not matching, and may count the error.
func (p *Program) Match(m Message) (bool, error) {
	if p.kind != kindFilter {
		return false, ErrKind
	}
	out, err := p.eval(&m)
	if err != nil {
		return false, err
	}
	b, ok := out.(types.Bool)
	if !ok {
		return false, &EvalError{Msg: "filter result is " + out.Type().TypeName() + ", not bool"}
	}
	return bool(b), nil
}

// Eval evaluates the program on m and returns its value. Strings, lists and
// maps in the value may refer to m.Data; copy what must outlive it. Errors
// are *EvalError.
func (p *Program) Eval(m Message) (ref.Val, error) {
	return p.eval(&m)
}

// Key evaluates a key program (from CompileKey) on m and returns the key as
// a string: a string as it is, an int in decimal, a double that holds an
// integer (a JSON number such as payload.user_id) in decimal. Anything else
// is an *EvalError. The string never refers to m.Data.
func (p *Program) Key(m Message) (string, error) {
	if p.kind != kindKey {
		return "", ErrKind
	}
	out, err := p.eval(&m)
	if err != nil {
		return "", err
	}
	switch v := out.(type) {
	case types.String:
		s := string(v)
		if within(s, m.Data) {
			s = strings.Clone(s)
		}
		return s, nil
	case types.Int:
		return strconv.FormatInt(int64(v), 10), nil
	case types.Uint:
		return strconv.FormatUint(uint64(v), 10), nil
	case types.Double:
		if f := float64(v); f == math.Trunc(f) && math.Abs(f) <= 1<<53 {
			return strconv.FormatInt(int64(f), 10), nil
		}
		return "", &EvalError{Msg: "key is " + strconv.FormatFloat(float64(v), 'g', -1, 64) + ", not an integer"}
	}
	return "", &EvalError{Msg: "key is " + out.Type().TypeName() + ", not string or int"}
}

func (p *Program) eval(m *Message) (ref.Val, error) {
	a := newActivation(m, p.maxBytes)
	var (
		out ref.Val
		err error
	)
	if p.timeout > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), p.timeout)
		out, _, err = p.prg.ContextEval(ctx, a)
		cancel()
	} else {
		out, _, err = p.prg.Eval(a)
	}
	if err != nil {
		msg := err.Error()
		if a.payload != nil && !a.payloadJSON {
			msg += " (the payload is not JSON)"
		}
		a.release()
		return nil, &EvalError{Msg: msg, Memory: strings.HasPrefix(msg, memLimitMsg)}
	}
	a.release()
	return out, nil
}

// within reports whether s points into b.
func within(s string, b []byte) bool {
	if len(s) == 0 || len(b) == 0 {
		return false
	}
	p := uintptr(unsafe.Pointer(unsafe.StringData(s)))
	q := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return p >= q && p < q+uintptr(len(b))
}
