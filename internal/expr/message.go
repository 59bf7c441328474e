package expr

import (
	"strconv"
	"sync"
	"time"
	"unsafe"

	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/interpreter"

	"github.com/semaq/semaq/semaq"
)

// Message is what an expression is evaluated over: one message as the broker
// holds it. Header has the shape of nats.Header. Evaluation reads Data in
// place (no copy); it must not change while Match, Eval or Key runs, and a
// value returned by Eval may refer to it.
type Message struct {
	Subject string
	Header  map[string][]string
	Data    []byte
}

// The envelope fields expressions read, in the order of canonicalNames.
type efield uint8

const (
	eModel efield = iota
	eModelVersion
	eAdapter
	eTenant
	eIntent
	eSession
	ePriority
	ePromptTokens
	eDeadline
	eSchemaID
	nEfields
)

var canonicalNames = [nEfields]string{
	eModel: semaq.HdrModel, eModelVersion: semaq.HdrModelVersion, eAdapter: semaq.HdrAdapter,
	eTenant: semaq.HdrTenant, eIntent: semaq.HdrIntent, eSession: semaq.HdrSession,
	ePriority: semaq.HdrPriority, ePromptTokens: semaq.HdrPromptTokens,
	eDeadline: semaq.HdrDeadline, eSchemaID: semaq.HdrSchemaID,
}

// spellings maps every accepted spelling, lower case, to its field: the
// canonical names in any case and the X- aliases of docs/envelope.md.
var spellings = map[string]efield{
	"ai-model": eModel, "ai-model-version": eModelVersion, "ai-adapter": eAdapter,
	"ai-tenant": eTenant, "ai-intent": eIntent, "ai-session": eSession,
	"ai-priority": ePriority, "ai-prompt-tokens": ePromptTokens,
	"ai-deadline": eDeadline, "ai-schema-id": eSchemaID,
	"x-model-version": eModelVersion, "x-lora-adapter-id": eAdapter, "x-ai-intent": eIntent,
}

const (
	minSpelling = len("ai-model")
	maxSpelling = len("x-lora-adapter-id")
)

// noDeadline is the value of `deadline` for a message without one: the
// largest CEL timestamp, so "no deadline" compares as later than any real
// deadline.
var noDeadline = types.Timestamp{Time: time.Unix(253402300799, 999999999).UTC()}

// activation resolves the variables of one evaluation, each on first use:
// an expression that reads only `model` never looks at the payload, and one
// that reads only the payload never looks at the headers. Activations are
// pooled; one serves a single evaluation on one goroutine.
type activation struct {
	subject string
	header  map[string][]string
	data    string

	payload     ref.Val
	payloadJSON bool

	scanned bool
	env     [nEfields]string
	has     [nEfields]bool

	now time.Time

	// b is the memory budget of the evaluation: &own, or the budget of
	// the payload views once the payload is read (views may outlive the
	// evaluation, so theirs is never reused).
	b   *budget
	own budget
}

var _ interpreter.Activation = (*activation)(nil)

var activations = sync.Pool{New: func() any { return new(activation) }}

func newActivation(m *Message, maxBytes int64) *activation {
	a := activations.Get().(*activation)
	a.subject = m.Subject
	a.header = m.Header
	a.data = unsafe.String(unsafe.SliceData(m.Data), len(m.Data))
	a.own = budget{limit: maxBytes + 2*int64(len(m.Data)), base: maxBytes}
	a.b = &a.own
	return a
}

func (a *activation) release() {
	*a = activation{}
	activations.Put(a)
}

// Parent implements interpreter.Activation.
func (a *activation) Parent() interpreter.Activation { return nil }

// ResolveName implements interpreter.Activation.
func (a *activation) ResolveName(name string) (any, bool) {
	switch name {
	case "payload":
		if a.payload == nil {
			a.payload, a.payloadJSON, a.b = payloadValue(a.data, a.b)
		}
		return a.payload, true
	case budgetVar:
		return a.b, true
	case "subject":
		return types.String(a.subject), true
	case "headers":
		return headerMap{a.header}, true
	case "model":
		return a.str(eModel), true
	case "model_version":
		return a.str(eModelVersion), true
	case "adapter":
		return a.str(eAdapter), true
	case "tenant":
		return a.str(eTenant), true
	case "intent":
		return a.str(eIntent), true
	case "session":
		return a.str(eSession), true
	case "priority":
		p := semaq.PriorityDefault
		if v, ok := a.field(ePriority); ok {
			if q, err := semaq.ParsePriority(v); err == nil {
				p = q
			}
		}
		return types.Int(p), true
	case "prompt_tokens":
		return a.count(ePromptTokens), true
	case "schema_id":
		return a.count(eSchemaID), true
	case "deadline":
		if v, ok := a.field(eDeadline); ok {
			if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
				return types.Timestamp{Time: t}, true
			}
		}
		return noDeadline, true
	case "now":
		if a.now.IsZero() {
			a.now = time.Now()
		}
		return types.Timestamp{Time: a.now}, true
	}
	return nil, false
}

func (a *activation) str(f efield) ref.Val {
	v, _ := a.field(f)
	return types.String(v)
}

// count reads a non-negative integer field; -1 when absent or invalid.
func (a *activation) count(f efield) ref.Val {
	if v, ok := a.field(f); ok {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
			return types.Int(n)
		}
	}
	return types.Int(-1)
}

// field returns the value of an envelope header. After the ingress every
// envelope header has its canonical name, so one map lookup finds it; only
// when that fails are the other spellings looked for, once per message.
func (a *activation) field(f efield) (string, bool) {
	if vs, ok := a.header[canonicalNames[f]]; ok && len(vs) > 0 {
		return vs[0], true
	}
	if !a.scanned {
		a.scan()
	}
	return a.env[f], a.has[f]
}

func (a *activation) scan() {
	a.scanned = true
	var buf [maxSpelling]byte
	for name, vs := range a.header {
		if len(vs) == 0 || len(name) < minSpelling || len(name) > maxSpelling {
			continue
		}
		b := buf[:len(name)]
		for i := 0; i < len(name); i++ {
			c := name[i]
			if c >= 'A' && c <= 'Z' {
				c += 'a' - 'A'
			}
			b[i] = c
		}
		f, ok := spellings[string(b)]
		if !ok || a.has[f] {
			continue
		}
		a.env[f], a.has[f] = vs[0], true
	}
}
