package expr

import (
	"errors"
	"fmt"
	"regexp"
	"regexp/syntax"
	"strings"
	"time"
	"unicode/utf8"

	"cel.dev/cel-go/common/functions"
	"cel.dev/cel-go/common/overloads"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
	"cel.dev/cel-go/interpreter"
)

// Memory and time limits of one evaluation.
//
// CEL's runtime cost meter counts a call after it has run, so one call such
// as s.replace("a", s) on a 200 KB string builds its 40 GB result before
// anything can stop it. Every function that can build a value larger than
// its arguments is therefore planned as a boundedCall: it evaluates the
// arguments, works out the size of the result from them (replace: len(s) +
// count(old) × (len(new) - len(old))), charges that to the evaluation's
// budget and only then runs CEL's own implementation. Over budget, the call
// is an error and nothing is allocated.

const (
	// DefaultMaxEvalBytes is Config.MaxEvalBytes when it is 0.
	DefaultMaxEvalBytes = 1 << 20
	// DefaultEvalTimeout is Config.EvalTimeout when it is 0.
	DefaultEvalTimeout = 5 * time.Second
	// MaxRegexProgram bounds a regular expression, in instructions of its
	// compiled program (a{1000} is 1,000): constant patterns when the
	// expression is compiled, patterns computed from the message when they
	// are used. 5,000 instructions are about 200 KB.
	MaxRegexProgram = 5000
	// MaxRegexWork bounds one regular expression match: the input's bytes
	// times the instructions of the pattern's program. Go's regexp runs in
	// time proportional to that product (no backtracking blow-up, but a
	// 2,000-instruction pattern over a 900 KiB payload is 1.8e9 steps, tens
	// of seconds), and a match cannot be interrupted, so the product is
	// checked before matching: 2^27 is a fraction of a second here.
	MaxRegexWork = 1 << 27
	// maxRegexSource is the longest pattern computed at run time that is
	// parsed at all.
	maxRegexSource = 16 << 10
	// listElemBytes is what one element of a built list is charged.
	listElemBytes = 16
)

// Config configures an Env. The zero value is the default.
type Config struct {
	// MaxEvalBytes bounds the bytes one evaluation may build in strings,
	// bytes and lists (concatenation, replace, join, split, format, case
	// mapping, quoting, conversions, unescaped payload strings), counted
	// before each is built. The budget of an evaluation is MaxEvalBytes plus
	// twice the size of the message body, so that transforming a large
	// payload once still works. 0 means DefaultMaxEvalBytes.
	MaxEvalBytes int64
	// EvalTimeout bounds the wall time of one evaluation of a metered
	// program (see CostLimit); the others are bounded by their cost
	// estimate. 0 means DefaultEvalTimeout.
	EvalTimeout time.Duration
}

// Validate reports a configuration that cannot be used.
func (c Config) Validate() error {
	if c.MaxEvalBytes < 0 {
		return fmt.Errorf("expr: MaxEvalBytes is %d; it must be 0 (default) or positive", c.MaxEvalBytes)
	}
	if c.EvalTimeout < 0 {
		return fmt.Errorf("expr: EvalTimeout is %v; it must be 0 (default) or positive", c.EvalTimeout)
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.MaxEvalBytes == 0 {
		c.MaxEvalBytes = DefaultMaxEvalBytes
	}
	if c.EvalTimeout == 0 {
		c.EvalTimeout = DefaultEvalTimeout
	}
	return c
}

// memLimitMsg starts the message of a refused allocation; Program.eval
// recognises it to make the error match ErrMemoryLimit.
const memLimitMsg = "memory limit exceeded"

// budgetVar is the name under which an activation hands its budget to the
// bounded calls. It is not a CEL identifier, so no expression can name it.
const budgetVar = "@semaq.budget"

// budget is the running total of one evaluation. One evaluation runs on one
// goroutine, so it needs no lock.
type budget struct {
	used, limit int64
	base        int64 // Config.MaxEvalBytes, for the message
}

// charge adds n bytes about to be built by fn, or refuses them.
func (b *budget) charge(n int64, fn string) ref.Val {
	if b == nil || n <= 0 {
		return nil
	}
	if n > b.limit-b.used {
		if fn == "_+_" {
			fn = "+"
		}
		return types.NewErr("%s: %s would build %d bytes, %d already built; one evaluation may build %d "+
			"(MaxEvalBytes %d + 2 × the %d-byte payload)", memLimitMsg, fn, n, b.used, b.limit, b.base, (b.limit-b.base)/2)
	}
	b.used += n
	return nil
}

func budgetOf(f *interpreter.ExecutionFrame) *budget {
	v, ok := f.ResolveName(budgetVar)
	if !ok {
		return nil
	}
	b, _ := v.(*budget)
	return b
}

// sizer returns the bytes the call will build from its arguments, 0 when
// the arguments are not of the types it builds from (the implementation
// then reports the error), or an error value.
type sizer func(args []ref.Val) (int64, ref.Val)

// sizers lists every function of the environment that can build a value
// larger than its arguments, or of the size of a large argument.
var sizers = map[string]sizer{
	"_+_":           sizeAdd,
	"replace":       sizeReplace,
	"split":         sizeSplit,
	"join":          sizeJoin,
	"format":        sizeFormat,
	"strings.quote": sizeScaled(6, 2), // U+FFFD for a bad byte, a growing builder, a copy
	"lowerAscii":    sizeScaled(5, 0), // []rune, then the string
	"upperAscii":    sizeScaled(5, 0),
	"reverse":       sizeScaled(5, 0), // []rune, then the string
	"string":        sizeConvert,
	"bytes":         sizeConvert,
	"matches":       sizeMatches,
}

func strLen(v ref.Val) (int64, bool) {
	switch x := v.(type) {
	case types.String:
		return int64(len(x)), true
	case types.Bytes:
		return int64(len(x)), true
	}
	return 0, false
}

func listLen(v ref.Val) int64 {
	l, ok := v.(traits.Lister)
	if !ok {
		return 0
	}
	n, _ := l.Size().(types.Int)
	return int64(n)
}

func sizeAdd(args []ref.Val) (int64, ref.Val) {
	if len(args) != 2 {
		return 0, nil
	}
	if a, ok := strLen(args[0]); ok {
		b, _ := strLen(args[1])
		return a + b, nil
	}
	if _, ok := args[0].(traits.Lister); !ok {
		return 0, nil
	}
	switch l := args[0].(type) {
	case traits.MutableLister:
		// A comprehension's accumulator: appended to in place.
		return listElemBytes * listLen(args[1]), nil
	case *jsonList:
		// Decoded in full before concatenation.
		return materialBytes(l.raw) + listElemBytes*listLen(args[1]), nil
	}
	return listElemBytes * (listLen(args[0]) + listLen(args[1])), nil
}

// count is strings.Count bounded by n (negative: no bound).
func count(s, sub string, n int64) int64 {
	var c int64
	if sub == "" {
		c = int64(utf8.RuneCountInString(s)) + 1
	} else {
		c = int64(strings.Count(s, sub))
	}
	if n >= 0 && n < c {
		c = n
	}
	return c
}

func sizeReplace(args []ref.Val) (int64, ref.Val) {
	if len(args) < 3 {
		return 0, nil
	}
	s, ok1 := args[0].(types.String)
	old, ok2 := args[1].(types.String)
	repl, ok3 := args[2].(types.String)
	if !ok1 || !ok2 || !ok3 {
		return 0, nil
	}
	n := int64(-1)
	if len(args) == 4 {
		m, ok := args[3].(types.Int)
		if !ok {
			return 0, nil
		}
		n = int64(m)
	}
	c := count(string(s), string(old), n)
	if c == 0 {
		return 0, nil // the string itself, no copy
	}
	return int64(len(s)) + c*(int64(len(repl))-int64(len(old))), nil
}

func sizeSplit(args []ref.Val) (int64, ref.Val) {
	if len(args) < 2 {
		return 0, nil
	}
	s, ok1 := args[0].(types.String)
	sep, ok2 := args[1].(types.String)
	if !ok1 || !ok2 {
		return 0, nil
	}
	n := int64(-1)
	if len(args) == 3 {
		m, ok := args[2].(types.Int)
		if !ok {
			return 0, nil
		}
		n = int64(m)
	}
	c := count(string(s), string(sep), -1)
	if sep == "" {
		c-- // one part per rune
	} else {
		c++
	}
	if n >= 0 && n < c {
		c = n
	}
	return listElemBytes * c, nil // the parts share the string
}

func sizeJoin(args []ref.Val) (int64, ref.Val) {
	l, ok := args[0].(traits.Lister)
	if !ok {
		return 0, nil
	}
	var sep int64
	if len(args) == 2 {
		sep, _ = strLen(args[1])
	}
	var total, n int64
	it := l.Iterator()
	for it.HasNext() == types.True {
		v := it.Next()
		if types.IsError(v) {
			return 0, v
		}
		s, _ := v.(types.String)
		total += int64(len(s))
		n++
	}
	if n > 1 {
		total += (n - 1) * sep
	}
	return total, nil
}

// sizeFormat is an upper bound of the formatted string: the format plus,
// for each argument, the longest text a clause can make of it.
func sizeFormat(args []ref.Val) (int64, ref.Val) {
	if len(args) != 2 {
		return 0, nil
	}
	f, ok := strLen(args[0])
	if !ok {
		return 0, nil
	}
	return f + textBound(args[1], 0), nil
}

// textBound bounds the text of v in a format clause: %x of a string doubles
// it, a double with the largest precision (100) and exponent takes ~420
// characters, a list or map adds brackets and separators.
func textBound(v ref.Val, depth int) int64 {
	if depth > 32 {
		return 0
	}
	if n, ok := strLen(v); ok {
		return 2*n + 2
	}
	switch x := v.(type) {
	case *jsonList:
		return 4 * materialBytes(x.raw)
	case *jsonObject:
		return 4 * materialBytes(x.raw)
	case traits.Mapper:
		var n int64 = 2
		it := x.Iterator()
		for it.HasNext() == types.True {
			k := it.Next()
			n += textBound(k, depth+1) + textBound(x.Get(k), depth+1) + 4
		}
		return n
	case traits.Lister:
		var n int64 = 2
		it := x.Iterator()
		for it.HasNext() == types.True {
			n += textBound(it.Next(), depth+1) + 2
		}
		return n
	}
	return 512
}

func sizeScaled(k, c int64) sizer {
	return func(args []ref.Val) (int64, ref.Val) {
		if n, ok := strLen(args[0]); ok {
			return k*n + c, nil
		}
		return 0, nil
	}
}

// sizeConvert charges string(bytes) and bytes(string), which copy.
func sizeConvert(args []ref.Val) (int64, ref.Val) {
	if len(args) != 1 {
		return 0, nil
	}
	n, _ := strLen(args[0])
	return n, nil
}

// sizeMatches bounds a pattern computed at run time (constant ones are
// checked when the program is built): its length before it is parsed, and
// the size of its program before it is compiled. It charges the program.
func sizeMatches(args []ref.Val) (int64, ref.Val) {
	if len(args) != 2 {
		return 0, nil
	}
	p, ok := args[1].(types.String)
	if !ok {
		return 0, nil
	}
	insts, err := regexProgramSize(string(p))
	if err != nil {
		return 0, types.WrapErr(err)
	}
	if n, ok := strLen(args[0]); ok {
		if err := checkRegexWork(n, insts); err != nil {
			return 0, types.WrapErr(err)
		}
	}
	return 40*insts + 8*int64(len(p)), nil
}

// checkRegexWork refuses a match of an input of n bytes against a program of
// insts instructions past MaxRegexWork.
func checkRegexWork(n, insts int64) error {
	if n > 0 && insts > 0 && n > MaxRegexWork/insts {
		return fmt.Errorf("regular expression match too large: a %d-byte input against a %d-instruction pattern is over %d "+
			"(input bytes × pattern instructions); match a smaller field or a shorter pattern", n, insts, int64(MaxRegexWork))
	}
	return nil
}

// boundedMatch is a matches() call with a constant pattern, compiled once
// when the program is built; each match first checks MaxRegexWork against
// the input's length. It is no InterpretableCall, so CEL's own constant
// regex optimisation, which would drop the check, leaves it alone.
type boundedMatch struct {
	call  interpreter.InterpretableCall
	re    *regexp.Regexp
	insts int64
}

// ID implements interpreter.Interpretable.
func (m *boundedMatch) ID() int64 { return m.call.ID() }

// Eval implements interpreter.Interpretable; programs run Exec.
func (m *boundedMatch) Eval(a interpreter.Activation) ref.Val {
	if f, ok := a.(*interpreter.ExecutionFrame); ok {
		return m.Exec(f)
	}
	return types.NewErr("expr: matches evaluated outside an execution frame")
}

// Exec implements interpreter.InterpretableV2.
func (m *boundedMatch) Exec(f *interpreter.ExecutionFrame) ref.Val {
	args := m.call.Args()
	v := args[0].Exec(f)
	if types.IsUnknownOrError(v) {
		return v
	}
	in, ok := v.(types.String)
	if !ok {
		return types.LabelErrNode(m.ID(), types.MaybeNoSuchOverloadErr(v))
	}
	var res ref.Val
	if err := checkRegexWork(int64(len(in)), m.insts); err != nil {
		res = types.LabelErrNode(m.ID(), types.WrapErr(err))
	} else {
		res = types.Bool(m.re.MatchString(string(in)))
	}
	if costs := f.CostTracker(); costs != nil {
		costs.EvalVarArgs(f, m.ID(), m.call, []ref.Val{v, args[1].(interpreter.InterpretableConst).Value()}, res)
	}
	return res
}

// regexProgramSize estimates the instructions of the compiled program of
// pattern from its parse tree, without expanding repetitions (which is what
// compiling does, and what costs memory), and refuses a pattern over
// MaxRegexProgram.
func regexProgramSize(pattern string) (int64, error) {
	if len(pattern) > maxRegexSource {
		return 0, fmt.Errorf("regular expression is %d bytes; the limit is %d", len(pattern), maxRegexSource)
	}
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return 0, fmt.Errorf("invalid regular expression: %w", err)
	}
	n := regexInsts(re)
	if n > MaxRegexProgram {
		return 0, fmt.Errorf("regular expression is too large: its program has more than %d instructions", MaxRegexProgram)
	}
	return n, nil
}

// regexInsts follows regexp/syntax's compiler: one instruction per rune of
// a literal, a repetition {n,m} copies its operand m times (n+1 when
// unbounded). It saturates past MaxRegexProgram.
func regexInsts(re *syntax.Regexp) int64 {
	const sat = MaxRegexProgram + 1
	var n int64
	switch re.Op {
	case syntax.OpLiteral:
		n = int64(len(re.Rune))
	case syntax.OpConcat, syntax.OpAlternate:
		for _, s := range re.Sub {
			n += regexInsts(s) + 1
			if n > sat {
				return sat
			}
		}
	case syntax.OpCapture, syntax.OpStar, syntax.OpPlus, syntax.OpQuest:
		n = regexInsts(re.Sub[0]) + 2
	case syntax.OpRepeat:
		times := int64(re.Max)
		if times < 0 {
			times = int64(re.Min) + 1
		}
		n = (regexInsts(re.Sub[0]) + 1) * max(times, 1)
	default:
		n = 1
	}
	return min(n, sat)
}

// materialBytes bounds the memory of a JSON text decoded in full: an
// element of two bytes ("0,") becomes an interface and a boxed value.
func materialBytes(raw string) int64 { return 16 * int64(len(raw)) }

// boundedCall replaces a planned call to a function in sizers. It charges
// the size of the result before calling the implementation, and keeps the
// cost tracking of the call it replaces.
type boundedCall struct {
	interpreter.InterpretableCall
	size sizer
	impl *functions.Overload
}

// Exec implements interpreter.InterpretableV2.
func (c *boundedCall) Exec(f *interpreter.ExecutionFrame) ref.Val {
	args := c.Args()
	var buf [4]ref.Val
	vals := buf[:0]
	for _, a := range args {
		v := a.Exec(f)
		if types.IsUnknownOrError(v) {
			return v
		}
		vals = append(vals, v)
	}
	n, errv := c.size(vals)
	if errv == nil && n > 0 {
		errv = budgetOf(f).charge(n, c.Function())
	}
	var res ref.Val
	if errv != nil {
		res = types.LabelErrNode(c.ID(), errv)
	} else {
		res = c.call(vals)
	}
	if costs := f.CostTracker(); costs != nil {
		costs.EvalVarArgs(f, c.ID(), c, vals, res)
	}
	return res
}

func (c *boundedCall) call(vals []ref.Val) ref.Val {
	o := c.impl
	if o.OperandTrait != 0 && !vals[0].Type().HasTrait(o.OperandTrait) {
		return types.NewErrWithNodeID(c.ID(), "no such overload: %s", c.Function())
	}
	switch {
	case len(vals) == 1 && o.Unary != nil:
		return o.Unary(vals[0])
	case len(vals) == 2 && o.Binary != nil:
		return o.Binary(vals[0], vals[1])
	case o.Function != nil:
		return o.Function(vals...)
	}
	return types.NewErrWithNodeID(c.ID(), "no such overload: %s", c.Function())
}

// Eval implements interpreter.Interpretable.
func (c *boundedCall) Eval(a interpreter.Activation) ref.Val {
	return interpreter.EvalActivation(a, c.Exec)
}

// boundCalls is the decorator that plans every call of a function in
// sizers as a boundedCall, with the environment's implementation of the
// function (which dispatches on the argument types). A constant regular
// expression is checked here, when the program is built.
func boundCalls(impls map[string]*functions.Overload) interpreter.InterpretableDecoratorV2 {
	return func(i interpreter.InterpretableV2) (interpreter.InterpretableV2, error) {
		call, ok := i.(interpreter.InterpretableCall)
		if !ok {
			return i, nil
		}
		fn := call.Function()
		size, ok := sizers[fn]
		if !ok {
			return i, nil
		}
		args := call.Args()
		if fn == overloads.Matches && len(args) == 2 {
			if c, ok := args[1].(interpreter.InterpretableConst); ok {
				if p, ok := c.Value().(types.String); ok {
					insts, err := regexProgramSize(string(p))
					if err != nil {
						return nil, err
					}
					re, err := regexp.Compile(string(p))
					if err != nil {
						return nil, fmt.Errorf("invalid regular expression: %w", err)
					}
					return &boundedMatch{call: call, re: re, insts: insts}, nil // compiled once, when the program is built
				}
			}
		}
		impl := impls[fn]
		if impl == nil || len(args) > 4 {
			return nil, errors.New("expr: no implementation of " + fn)
		}
		return &boundedCall{InterpretableCall: call, size: size, impl: impl}, nil
	}
}
