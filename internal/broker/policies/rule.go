package policies

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/semaq/semaq/internal/pii"
	"github.com/semaq/semaq/internal/streamfilter"
	"github.com/semaq/semaq/semaq"
)

// contentMask is what a content rule's mask writes.
const contentMask = "***"

// maxHold bounds the token-stream text held back for a match that may
// still come (streamfilter.Options.MaxHold): the added delay's bound.
const maxHold = 256

// ruleEnv is what compiling a rule needs from the node.
type ruleEnv struct {
	hashKey []byte // keys the hash action
	vault   bool   // a vault key is configured: tokenize may run
}

func (s *Store) ruleEnv() ruleEnv {
	return ruleEnv{hashKey: s.hashKey(), vault: s.vault.aead != nil}
}

// hashKey keys the hash action: derived from the vault key when there is
// one (so every node of a cluster hashes alike), else a fixed key, which
// still hides the value but not from whoever can run this code.
func (s *Store) hashKey() []byte {
	m := hmac.New(sha256.New, s.deps.VaultKey)
	m.Write([]byte("semaq pii hash"))
	return m.Sum(nil)
}

// rule is a compiled rule with this node's counters.
type rule struct {
	def     semaq.PolicyRule
	rev     uint64
	created time.Time
	ingress bool // attached to subjects or SemaQ streams
	tokens  bool // attached to token streams

	redactor *pii.Redactor       // nil without Redact
	content  []streamfilter.Rule // Words and Patterns, named def.Name+"/content"
	pii      []streamfilter.Rule // Redact's detectors for token streams
	once     sync.Once           // compiles ingressSet
	set      *streamfilter.Set   // content at the ingress (one shot per value)
	setErr   error
	hashKey  []byte

	messages, blocked, stopped, flagged atomic.Uint64
	found                               sync.Map // type -> *atomic.Uint64
}

// compileRule makes a rule runnable, or says why it cannot run here.
func compileRule(d semaq.PolicyRule, env ruleEnv) (*rule, error) {
	r := &rule{def: d, hashKey: env.hashKey}
	for _, s := range d.Streams {
		if s == semaq.PolicyStreamTokens {
			r.tokens = true
		} else {
			r.ingress = true
		}
	}
	r.ingress = r.ingress || len(d.Subjects) > 0
	if len(d.Redact) > 0 {
		types := make([]pii.Type, len(d.Redact))
		for i, t := range d.Redact {
			types[i] = pii.Type(t)
		}
		cfg := pii.Config{Types: types, Action: pii.Action(orDefault(d.Action, semaq.PIIMask)), HashKey: env.hashKey, Paths: d.Paths}
		if len(d.Actions) > 0 {
			cfg.PerType = make(map[pii.Type]pii.Action, len(d.Actions))
			for t, a := range d.Actions {
				cfg.PerType[pii.Type(t)] = pii.Action(a)
			}
		}
		tokenizes := cfg.Action == pii.Action(semaq.PIITokenize)
		for _, a := range cfg.PerType {
			tokenizes = tokenizes || a == pii.Action(semaq.PIITokenize)
		}
		if tokenizes && !env.vault {
			return nil, fmt.Errorf("tokenize keeps values in the vault, and this node has no vault key: set pii_vault_key_file (the same on every node)")
		}
		var err error
		if r.redactor, err = pii.NewRedactor(cfg); err != nil {
			return nil, err
		}
		if r.tokens {
			for _, t := range types {
				a := orDefault(d.Actions[string(t)], orDefault(d.Action, semaq.PIIMask))
				for i, det := range pii.Detectors([]pii.Type{t}) {
					// Names are unique in a set: rule/type/n.
					fr := streamfilter.Rule{Name: d.Name + "/" + string(t) + "/" + strconv.Itoa(i), Pattern: det.Pattern, Validate: det.Validate, Action: streamfilter.Mask, Replace: pii.Mask(t)}
					if a == semaq.PIIHash {
						t := t
						fr.ReplaceFunc = func(v string) string { return hashed(env.hashKey, t, v) }
					}
					r.pii = append(r.pii, fr)
				}
			}
		}
	}
	action, replace := contentAction(d.OnMatch), ""
	if action == streamfilter.Mask {
		replace = contentMask
	}
	if len(d.Words) > 0 {
		wr, err := streamfilter.WordRules(d.Name+"/content/words", d.Words, action, replace)
		if err != nil {
			return nil, err
		}
		r.content = append(r.content, wr)
	}
	for i, p := range d.Patterns {
		r.content = append(r.content, streamfilter.Rule{Name: d.Name + "/content/" + strconv.Itoa(i), Pattern: p, Action: action, Replace: replace})
	}
	// Compile what the token streams will, so a rule that cannot run is
	// refused when it is added, not when a stream starts.
	if r.tokens {
		if _, err := streamfilter.Compile(slices.Concat(r.pii, r.content), streamfilter.Options{MaxHold: maxHold}); err != nil {
			return nil, err
		}
	}
	if r.ingress && len(r.content) > 0 {
		if _, err := r.contentSet(); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// contentSet is the rule's content filter at the ingress, made once.
func (r *rule) contentSet() (*streamfilter.Set, error) {
	r.once.Do(func() { r.set, r.setErr = streamfilter.Compile(r.content, streamfilter.Options{MaxHold: 1 << 20}) })
	return r.set, r.setErr
}

func contentAction(onMatch string) streamfilter.Action {
	switch onMatch {
	case semaq.ContentStop:
		return streamfilter.Stop
	case semaq.ContentFlag:
		return streamfilter.Flag
	}
	return streamfilter.Mask
}

// hashed is the hash action's text for value v of type t, as pii writes it.
func hashed(key []byte, t pii.Type, v string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(v))
	return "[" + strings.TrimSuffix(strings.TrimPrefix(pii.Mask(t), "["), "]") + ":" + hex.EncodeToString(m.Sum(nil))[:12] + "]"
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// count records n findings of typ.
func (r *rule) count(typ string, n int) {
	if n <= 0 {
		return
	}
	c, ok := r.found.Load(typ)
	if !ok {
		c, _ = r.found.LoadOrStore(typ, new(atomic.Uint64))
	}
	c.(*atomic.Uint64).Add(uint64(n))
}

// info is the rule as this node runs it.
func (r *rule) info() semaq.PolicyInfo {
	st := semaq.PolicyStats{Messages: r.messages.Load(), Blocked: r.blocked.Load(), Stopped: r.stopped.Load(), Flagged: r.flagged.Load()}
	r.found.Range(func(k, v any) bool {
		if st.Found == nil {
			st.Found = map[string]uint64{}
		}
		st.Found[k.(string)] = v.(*atomic.Uint64).Load()
		return true
	})
	return semaq.PolicyInfo{PolicyRule: r.def, Created: r.created, Revision: r.rev, Stats: st}
}
