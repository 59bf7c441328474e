package pii

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/bits"
)

// Action is what a Redactor does with an entity it finds.
type Action string

const (
	// ActionMask writes Mask(type) in place of the value: "[EMAIL]".
	ActionMask Action = "mask"
	// ActionHash writes the first 12 hex digits of HMAC-SHA256(HashKey, value): "[EMAIL:3f2a...]"; the same
	// value under the same key always gives the same text.
	ActionHash Action = "hash"
	// ActionTokenize writes the placeholder the Tokenizer returns for the value ("<EMAIL_1>"), which the
	// Tokenizer's owner keeps so that Restore can put the value back.
	ActionTokenize Action = "tokenize"
	// ActionBlock refuses the payload: Redact returns a *BlockedError.
	ActionBlock Action = "block"
)

// Actions lists every action.
func Actions() []Action { return []Action{ActionMask, ActionHash, ActionTokenize, ActionBlock} }

func (a Action) valid() bool {
	switch a {
	case ActionMask, ActionHash, ActionTokenize, ActionBlock:
		return true
	}
	return false
}

// Tokenizer gives the placeholder of a value for the tokenize action. Its owner numbers the placeholders
// (Placeholder(t, n)) and keeps the mapping for Restore. A Redactor calls it once per distinct (type, value)
// pair in one payload; it may be called from several goroutines at once when the caller shares it.
type Tokenizer interface {
	Token(t Type, value string) (placeholder string, err error)
}

// DefaultMaxFindings is Config.MaxFindings when it is 0.
const DefaultMaxFindings = 1000

// MinHashKey is the shortest Config.HashKey the hash action takes.
const MinHashKey = 16

// Config says what a Redactor looks for and what it does with it.
type Config struct {
	// Types are the types looked for; none means all.
	Types []Type
	// Action is the action for every type; "" means mask.
	Action Action
	// PerType overrides Action for some types, each of which must be looked for.
	PerType map[Type]Action
	// HashKey is the HMAC key of the hash action, at least MinHashKey bytes.
	HashKey []byte
	// Paths select the JSON string values redacted, as dotted paths of keys and indexes with '*' for any (a
	// key holding '.' is matched by '*' only); none means every string value.
	Paths []string
	// MaxFindings is the most entities one payload may hold (more is ErrTooManyFindings); 0 means
	// DefaultMaxFindings.
	MaxFindings int
}

// Redactor redacts payloads by a Config. It is built once and safe for concurrent use.
type Redactor struct {
	want        mask
	actions     [8]Action // by index in allTypes
	hashKey     []byte
	paths       []path
	maxFindings int
	tokenize    bool // some action is tokenize
}

// Located is an entity a Redactor found: its type, the JSON Pointer (RFC 6901) of the string that held it (""
// for text), and what was done. It never holds the value.
type Located struct {
	Type   Type
	Path   string
	Action Action
}

// NewRedactor checks c and builds its Redactor.
func NewRedactor(c Config) (*Redactor, error) {
	r := &Redactor{maxFindings: c.MaxFindings}
	for _, t := range c.Types {
		if !t.Valid() {
			return nil, fmt.Errorf("%w: types: %w: %q", ErrConfig, ErrUnknownType, t)
		}
	}
	r.want = maskOf(c.Types)
	def := c.Action
	if def == "" {
		def = ActionMask
	}
	if !def.valid() {
		return nil, fmt.Errorf("%w: unknown action %q (known: mask, hash, tokenize, block)", ErrConfig, def)
	}
	for i := range allTypes {
		r.actions[i] = def
	}
	for t, a := range c.PerType {
		if !t.Valid() {
			return nil, fmt.Errorf("%w: per-type action: %w: %q", ErrConfig, ErrUnknownType, t)
		}
		if r.want&t.bit() == 0 {
			return nil, fmt.Errorf("%w: per-type action for %s, which the types do not select", ErrConfig, t)
		}
		if !a.valid() {
			return nil, fmt.Errorf("%w: unknown action %q for %s (known: mask, hash, tokenize, block)", ErrConfig, a, t)
		}
		r.actions[typeIndex(t)] = a
	}
	for i, t := range allTypes {
		if r.want&t.bit() == 0 {
			continue
		}
		switch r.actions[i] {
		case ActionHash:
			if len(c.HashKey) < MinHashKey {
				return nil, fmt.Errorf("%w: the hash action needs a key of at least %d bytes, got %d",
					ErrConfig, MinHashKey, len(c.HashKey))
			}
		case ActionTokenize:
			r.tokenize = true
		}
	}
	r.hashKey = bytes.Clone(c.HashKey)
	for _, p := range c.Paths {
		cp, err := compilePath(p)
		if err != nil {
			return nil, fmt.Errorf("%w: path %q: %v", ErrConfig, p, err)
		}
		r.paths = append(r.paths, cp)
	}
	switch {
	case r.maxFindings < 0:
		return nil, fmt.Errorf("%w: max findings %d is negative", ErrConfig, r.maxFindings)
	case r.maxFindings == 0:
		r.maxFindings = DefaultMaxFindings
	}
	return r, nil
}

func typeIndex(t Type) int { return bits.TrailingZeros16(uint16(t.bit())) }

func (r *Redactor) action(t Type) Action { return r.actions[typeIndex(t)] }

// hit is a string holding entities: where it is in the payload (for JSON) and what was found in it.
type hit struct {
	json     bool // str locates it in a JSON payload
	str      jsonString
	text     string
	path     string
	findings []Finding
}

// Redact redacts payload. A payload whose first non-space byte is '{' or '[' and that is valid JSON has the
// string values at the selected paths redacted (object keys never are), and stays valid JSON in which nothing
// else changes; any other payload is redacted as one text. tok may be nil unless an action is tokenize.
//
// With nothing found it returns payload itself, changed false and no error, without allocating. found lists
// each entity and where it was. When an entity's action is block it returns payload, the findings and a
// *BlockedError naming the first such entity's type and path, before calling the Tokenizer.
func (r *Redactor) Redact(payload []byte, tok Tokenizer) (out []byte, found []Located, changed bool, err error) {
	if r.tokenize && tok == nil {
		return payload, nil, false, fmt.Errorf("%w: the tokenize action needs a Tokenizer", ErrConfig)
	}
	if looksJSON(payload) {
		hits, err := r.jsonHits(payload)
		switch {
		case err == errSyntax:
			// Not JSON after all: redact it as text.
		case err != nil:
			return payload, nil, false, err
		case len(hits) == 0:
			return payload, nil, false, nil
		default:
			return r.rewriteJSON(payload, hits, tok)
		}
	}
	if prefilter(payload)&r.want == 0 {
		return payload, nil, false, nil
	}
	text := string(payload)
	res, found, err := r.text(text, "", tok)
	if err != nil || len(found) == 0 {
		return payload, found, false, err
	}
	return []byte(res), found, true, nil
}

// Text redacts s as text.
func (r *Redactor) Text(s string, tok Tokenizer) (string, []Located, error) {
	if r.tokenize && tok == nil {
		return s, nil, fmt.Errorf("%w: the tokenize action needs a Tokenizer", ErrConfig)
	}
	if prefilter(s)&r.want == 0 {
		return s, nil, nil
	}
	return r.text(s, "", tok)
}

func (r *Redactor) text(s, path string, tok Tokenizer) (string, []Located, error) {
	fs := scanLimited(s, r.want, r.maxFindings)
	if len(fs) == 0 {
		return s, nil, nil
	}
	if len(fs) > r.maxFindings {
		return s, nil, fmt.Errorf("%w: more than %d in one payload", ErrTooManyFindings, r.maxFindings)
	}
	hits := []hit{{text: s, path: path, findings: fs}}
	found, err := r.check(hits)
	if err != nil {
		return s, found, err
	}
	a := applier{r: r, tok: tok}
	out, err := a.apply(nil, hits[0])
	if err != nil {
		return s, found, err
	}
	return string(out), found, nil
}

func looksJSON(b []byte) bool {
	for _, c := range b {
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		case '{', '[':
			return true
		}
		return false
	}
	return false
}

// jsonHits walks payload twice: once to check it is JSON and whether any selected string has a candidate (no
// allocation), then, only if one has, to scan those strings. It returns errSyntax for a payload that is not JSON.
func (r *Redactor) jsonHits(payload []byte) ([]hit, error) {
	w := walker{data: payload, paths: r.paths, visit: visitor{r: r}}
	if err := w.walk(); err != nil || !w.visit.candidate {
		return nil, err
	}
	w = walker{data: payload, paths: r.paths, visit: visitor{r: r, collect: true}}
	if err := w.walk(); err != nil {
		return nil, err
	}
	return w.visit.hits, nil
}

// visitString scans a selected string for the second walk of jsonHits.
func (w *walker) visitString(s jsonString) error {
	v := &w.visit
	raw := w.data[s.start:s.end]
	if v.each != nil {
		return v.rewrite(s, raw)
	}
	var text string
	if s.esc {
		text = decodeString(nil, raw)
	} else {
		text = string(raw)
	}
	want := prefilter(text) & v.r.want
	if want == 0 {
		return nil
	}
	fs := scanLimited(text, want, v.r.maxFindings-v.total)
	if len(fs) == 0 {
		return nil
	}
	if v.total += len(fs); v.total > v.r.maxFindings {
		return fmt.Errorf("%w: more than %d in one payload", ErrTooManyFindings, v.r.maxFindings)
	}
	v.hits = append(v.hits, hit{json: true, str: s, text: text, path: w.pointer(), findings: fs})
	return nil
}

// check lists the findings of hits and returns a *BlockedError for the first whose action is block.
func (r *Redactor) check(hits []hit) ([]Located, error) {
	var found []Located
	var blocked *BlockedError
	for _, h := range hits {
		for _, f := range h.findings {
			a := r.action(f.Type)
			found = append(found, Located{Type: f.Type, Path: h.path, Action: a})
			if a == ActionBlock && blocked == nil {
				blocked = &BlockedError{Type: f.Type, Path: h.path}
			}
		}
	}
	if blocked != nil {
		return found, blocked
	}
	return found, nil
}

func (r *Redactor) rewriteJSON(payload []byte, hits []hit, tok Tokenizer) ([]byte, []Located, bool, error) {
	found, err := r.check(hits)
	if err != nil {
		return payload, found, false, err
	}
	a := applier{r: r, tok: tok}
	out := make([]byte, 0, len(payload)+len(payload)/8)
	prev := 0
	for _, h := range hits {
		out = append(out, payload[prev:h.str.start]...)
		if out, err = a.apply(out, h); err != nil {
			return payload, found, false, err
		}
		prev = h.str.end
	}
	out = append(out, payload[prev:]...)
	return out, found, true, nil
}

// applier replaces the findings of hits, remembering the placeholders of one payload.
type applier struct {
	r      *Redactor
	tok    Tokenizer
	tokens map[tokenKey]string
}

type tokenKey struct {
	t     Type
	value string
}

// apply appends h's text with its findings replaced to out, JSON-encoded when h is a JSON string.
func (a *applier) apply(out []byte, h hit) ([]byte, error) {
	prev := 0
	for _, f := range h.findings {
		rep, err := a.replacement(f.Type, h.text[f.Start:f.End])
		if err != nil {
			return out, err
		}
		out = a.appendText(out, h.text[prev:f.Start], h.json)
		out = a.appendText(out, rep, h.json)
		prev = f.End
	}
	return a.appendText(out, h.text[prev:], h.json), nil
}

func (a *applier) appendText(out []byte, s string, json bool) []byte {
	if json {
		return appendEncoded(out, s)
	}
	return append(out, s...)
}

func (a *applier) replacement(t Type, value string) (string, error) {
	switch a.r.action(t) {
	case ActionHash:
		m := hmac.New(sha256.New, a.r.hashKey)
		m.Write([]byte(value))
		return "[" + t.upper() + ":" + hex.EncodeToString(m.Sum(nil))[:12] + "]", nil
	case ActionTokenize:
		k := tokenKey{t, value}
		if ph, ok := a.tokens[k]; ok {
			return ph, nil
		}
		ph, err := a.tok.Token(t, value)
		if err != nil {
			return "", fmt.Errorf("%w: %s: %w", ErrTokenizer, t, err)
		}
		if a.tokens == nil {
			a.tokens = make(map[tokenKey]string)
		}
		a.tokens[k] = ph
		return ph, nil
	default:
		return Mask(t), nil
	}
}
