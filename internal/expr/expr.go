// Package expr compiles and evaluates CEL expressions over one message: the
// route rules of the ingress and the filters of server-side filtered
// subscriptions, and value expressions such as a sticky key.
//
// An expression sees the subject, the headers, the semantic envelope as
// typed variables (model, priority, deadline, ...) and the payload as JSON
// (payload.confidence, payload.messages[0].role). The payload is read
// lazily: only the members an expression reaches are scanned for and
// converted, so a filter reading two fields of a large body costs a scan up
// to those fields and no decode. docs/expressions.md is the user's contract.
//
// An Env is built once and is safe for concurrent use; it caches compiled
// programs by source. A Program is immutable and safe for concurrent use.
package expr

import (
	"fmt"
	"strings"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/cost"
	"cel.dev/cel-go/common/functions"
	"cel.dev/cel-go/ext"
	"cel.dev/cel-go/interpreter"
)

// Limits.
const (
	// MaxSourceLen is the longest expression accepted, in bytes.
	MaxSourceLen = 8 << 10
	// CacheSize is how many compiled programs an Env keeps (least recently
	// used are dropped first).
	CacheSize = 1024
	// CostLimit bounds the work of one evaluation of a metered program, in
	// CEL cost units (about one per operation and per element visited, plus
	// one per 10 bytes of a string searched); 1,000,000 units are tens of
	// milliseconds. A program is metered when its worst case on a message
	// with a MaxPayload body could exceed unmeteredCost: nested
	// comprehensions, string searches inside a comprehension. The others,
	// at most a pass over the payload, run without the meter, which would
	// double their cost.
	CostLimit = 1_000_000
	// MaxPayload is the payload size the cost estimate assumes (the default
	// NATS max_payload).
	MaxPayload = 1 << 20

	unmeteredCost = 16 * CostLimit
	// interruptEvery is how many comprehension iterations of a metered
	// program run between checks of its deadline (Config.EvalTimeout).
	interruptEvery = 100
)

// Variable describes one name an expression may use.
type Variable struct {
	Name string
	Type string // CEL type
	Doc  string
}

// Variables returns the names an expression may use, for help texts.
func Variables() []Variable { return append([]Variable(nil), variables...) }

var variables = []Variable{
	{"subject", "string", "the subject the message was published to"},
	{"headers", "map(string, string)", "first value of each header, names as stored"},
	{"payload", "dyn", "the body as JSON (null when it is not JSON)"},
	{"model", "string", "AI-Model, \"\" when absent"},
	{"model_version", "string", "AI-Model-Version, \"\" when absent"},
	{"adapter", "string", "AI-Adapter, \"\" when absent"},
	{"tenant", "string", "AI-Tenant, \"\" when absent"},
	{"intent", "string", "AI-Intent, \"\" when absent"},
	{"session", "string", "AI-Session, \"\" when absent"},
	{"priority", "int", "AI-Priority 0 (most urgent) to 9, 4 when absent"},
	{"prompt_tokens", "int", "AI-Prompt-Tokens, -1 when absent"},
	{"schema_id", "int", "AI-Schema-Id, -1 when absent"},
	{"deadline", "google.protobuf.Timestamp", "AI-Deadline, 9999-12-31T23:59:59.999999999Z when absent"},
	{"now", "google.protobuf.Timestamp", "the time of the evaluation"},
}

// Env compiles expressions. Build one with NewEnv and share it.
type Env struct {
	cel   *cel.Env
	cache *lru
	cfg   Config
	// impls holds the implementation of each function in sizers, which
	// compiled programs call through a boundedCall.
	impls map[string]*functions.Overload
}

// NewEnv builds the environment with the default Config.
func NewEnv() (*Env, error) { return NewEnvConfig(Config{}) }

// NewEnvConfig builds the environment: the variables above, CEL's standard
// library with optional values (payload.?user.name.orValue("")), the string
// extensions (lowerAscii, split, ...), cross-type numeric comparisons and
// UTC as the default time zone, with the limits of c.
func NewEnvConfig(c Config) (*Env, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	opts := []cel.EnvOption{
		cel.OptionalTypes(),
		ext.Strings(),
		cel.CrossTypeNumericComparisons(true),
		cel.DefaultUTCTimeZone(true),
		cel.ParserExpressionSizeLimit(MaxSourceLen),
	}
	for _, v := range variables {
		opts = append(opts, cel.Variable(v.Name, celType(v.Type)))
	}
	ce, err := cel.NewEnv(opts...)
	if err != nil {
		return nil, fmt.Errorf("expr: building the CEL environment: %w", err)
	}
	impls, err := implementations(ce)
	if err != nil {
		return nil, err
	}
	return &Env{cel: ce, cache: newLRU(CacheSize), cfg: c.withDefaults(), impls: impls}, nil
}

// implementations finds the function-level implementation (the one that
// dispatches on the argument types) of every function in sizers.
// TestEveryGrowthFunctionBounded fails when the environment gains a function
// that returns a string, bytes or a list and is neither in sizers nor known
// to return at most the size of its arguments.
func implementations(ce *cel.Env) (map[string]*functions.Overload, error) {
	fns := ce.Functions()
	impls := make(map[string]*functions.Overload, len(sizers))
	for name := range sizers {
		fd, ok := fns[name]
		if !ok {
			return nil, fmt.Errorf("expr: the CEL environment has no function %s", name)
		}
		bs, err := fd.Bindings()
		if err != nil {
			return nil, fmt.Errorf("expr: bindings of %s: %w", name, err)
		}
		for _, b := range bs {
			if b.Operator == name {
				impls[name] = b
			}
		}
		if impls[name] == nil {
			return nil, fmt.Errorf("expr: no implementation of %s", name)
		}
	}
	return impls, nil
}

func celType(t string) *cel.Type {
	switch t {
	case "string":
		return cel.StringType
	case "int":
		return cel.IntType
	case "map(string, string)":
		return cel.MapType(cel.StringType, cel.StringType)
	case "google.protobuf.Timestamp":
		return cel.TimestampType
	}
	return cel.DynType
}

type kind uint8

const (
	kindFilter kind = iota + 1
	kindKey
)

// Compile compiles a filter: an expression whose value is a bool (or dyn,
// such as payload.urgent, checked when it runs). The program is cached by
// its source. Errors are *CompileError.
func (e *Env) Compile(src string) (*Program, error) { return e.compile(src, kindFilter) }

// CompileKey compiles a key expression (a sticky or ordering key): its
// value must be a string or an int (or dyn, checked when it runs).
func (e *Env) CompileKey(src string) (*Program, error) { return e.compile(src, kindKey) }

func (e *Env) compile(src string, k kind) (*Program, error) {
	ck := cacheKey{src, k}
	if p := e.cache.get(ck); p != nil {
		return p, nil
	}
	if len(src) > MaxSourceLen {
		return nil, &CompileError{Line: 1, Column: 1,
			Msg: fmt.Sprintf("expression is %d bytes; the limit is %d", len(src), MaxSourceLen)}
	}
	checked, iss := e.cel.Compile(src)
	if iss != nil && iss.Err() != nil {
		return nil, compileError(iss)
	}
	out := checked.OutputType()
	switch k {
	case kindFilter:
		if !out.IsExactType(cel.BoolType) && !out.IsExactType(cel.DynType) {
			return nil, rootError(src, fmt.Sprintf("a filter must be a bool expression; this one is %s", typeName(out)))
		}
	case kindKey:
		if !out.IsExactType(cel.StringType) && !out.IsExactType(cel.IntType) && !out.IsExactType(cel.DynType) {
			return nil, rootError(src, fmt.Sprintf("a key must be a string or int expression; this one is %s", typeName(out)))
		}
	}
	popts := []cel.ProgramOption{
		cel.CustomDecoratorV2(boundCalls(e.impls)),
		cel.EvalOptions(cel.OptOptimize),
		cel.OptimizeRegex(interpreter.MatchesRegexOptimization),
	}
	est, err := e.cel.EstimateCost(checked, sizes{})
	metered := err != nil || est.Max > unmeteredCost
	if metered {
		popts = append(popts, cel.CostLimit(CostLimit), cel.InterruptCheckFrequency(interruptEvery))
	}
	prg, err := e.cel.Program(checked, popts...)
	if err != nil {
		return nil, rootError(src, strings.TrimPrefix(err.Error(), "expr: "))
	}
	p := &Program{src: src, kind: k, prg: prg, metered: metered, maxBytes: e.cfg.MaxEvalBytes, fields: payloadFields(checked.NativeRep())}
	if metered {
		p.timeout = e.cfg.EvalTimeout
	}
	e.cache.put(ck, p)
	return p, nil
}

func typeName(t *cel.Type) string {
	if t.IsExactType(cel.TimestampType) {
		return "timestamp"
	}
	if t.IsExactType(cel.DurationType) {
		return "duration"
	}
	return t.String()
}

// compileError turns CEL's issues into a CompileError for the first one.
func compileError(iss *cel.Issues) *CompileError {
	errs := iss.Errors()
	if len(errs) == 0 {
		return &CompileError{Msg: iss.Err().Error()}
	}
	first := errs[0]
	ce := &CompileError{Msg: explain(first.Message), More: len(errs) - 1}
	if loc := first.Location; loc != nil && loc.Line() > 0 {
		ce.Line, ce.Column = loc.Line(), max(loc.Column()+1, 1)
	}
	return ce
}

// explain shortens CEL's messages and makes those about names say what the
// names can be.
func explain(msg string) string {
	msg = strings.Replace(msg, " (in container '')", "", 1)
	msg = strings.Replace(msg, "Syntax error: ", "syntax error: ", 1)
	msg = strings.Replace(msg, "mismatched input '<EOF>'", "unexpected end of expression", 1)
	// ANTLR lists every token it would have taken; past a few that is noise.
	if i := strings.Index(msg, " expecting {"); i >= 0 && strings.Count(msg[i:], ",") > 4 {
		msg = msg[:i]
	}
	if strings.HasPrefix(msg, "undeclared reference to '") && !strings.Contains(msg, "did you mean") {
		names := make([]string, len(variables))
		for i, v := range variables {
			names[i] = v.Name
		}
		msg += " (the variables are " + strings.Join(names, ", ") + ")"
	}
	return msg
}

// rootError reports a problem with the whole expression, at its first
// character.
func rootError(src, msg string) *CompileError {
	ce := &CompileError{Line: 1, Column: 1, Msg: msg}
	for _, r := range src {
		switch r {
		case '\n':
			ce.Line++
			ce.Column = 1
		case ' ', '\t', '\r':
			ce.Column++
		default:
			return ce
		}
	}
	return ce
}

// sizes tells the cost estimator how large the variables can be, so that
// expressions over the envelope and headers get their true, small worst
// case, and those over the payload the worst case of a MaxPayload body.
type sizes struct{}

func (sizes) EstimateSize(n cost.AstNode) *cost.SizeEstimate {
	p := n.Path()
	if len(p) == 0 {
		return nil
	}
	switch p[0] {
	case "payload":
		// Any string, list or map in the payload: at most the whole body.
		return &cost.SizeEstimate{Min: 0, Max: MaxPayload}
	case "subject":
		return &cost.SizeEstimate{Min: 0, Max: 4 << 10}
	case "model", "model_version", "adapter", "tenant", "intent", "session":
		return &cost.SizeEstimate{Min: 0, Max: 256}
	case "headers":
		// A map of at most 16 KiB of header text: at most ~1,000 entries,
		// each value at most that long.
		if len(p) == 1 {
			return &cost.SizeEstimate{Min: 0, Max: 1 << 10}
		}
		return &cost.SizeEstimate{Min: 0, Max: 16 << 10}
	}
	return nil
}

func (sizes) EstimateCallCost(string, string, *cost.AstNode, []cost.AstNode) *cost.CallEstimate {
	return nil
}
