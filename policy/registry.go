package policy

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// Spec describes a kind of step: the name a configuration enables it by and
// the line `semaq serve --help` shows for it.
type Spec struct {
	// Name is lower-case letters, digits, '-' and '_', at most 64 bytes,
	// starting with a letter.
	Name string
	// Summary says in one line what the step does.
	Summary string
}

// Factory makes a step from its settings in the node's configuration: the
// JSON of the entry's settings, null when it has none. It refuses settings
// it cannot use with an error saying which and why.
type Factory func(settings json.RawMessage) (Step, error)

// Registry holds the kinds of step a node can enable. Its methods are safe
// for concurrent use.
type Registry struct {
	mu    sync.RWMutex
	kinds map[string]kind
}

type kind struct {
	spec Spec
	make Factory
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{kinds: make(map[string]kind)} }

var defaultRegistry = NewRegistry()

// Default is the registry `semaq serve` enables steps from. None is built in
// yet; a program embedding the node registers its own here, or in a clone.
func Default() *Registry { return defaultRegistry }

// Register adds a kind of step to the default registry.
func Register(spec Spec, f Factory) error { return defaultRegistry.Register(spec, f) }

// Register adds a kind of step. A bad name, a nil factory or a name already
// registered is an error.
func (r *Registry) Register(spec Spec, f Factory) error {
	if err := CheckName(spec.Name); err != nil {
		return err
	}
	if f == nil {
		return fmt.Errorf("policy step %s: no factory", spec.Name)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.kinds[spec.Name]; ok {
		return fmt.Errorf("policy step %s is already registered", spec.Name)
	}
	r.kinds[spec.Name] = kind{spec: spec, make: f}
	return nil
}

// Clone returns a registry with r's kinds, which registers apart from r.
func (r *Registry) Clone() *Registry {
	r.mu.RLock()
	defer r.mu.RUnlock()
	c := NewRegistry()
	for k, v := range r.kinds {
		c.kinds[k] = v
	}
	return c
}

// Specs lists the registered kinds by name.
func (r *Registry) Specs() []Spec {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]Spec, 0, len(r.kinds))
	for _, k := range r.kinds {
		out = append(out, k.spec)
	}
	slices.SortFunc(out, func(a, b Spec) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// New makes the step kind name from settings (JSON; empty or null for
// none). The step's Name is name.
func (r *Registry) New(name string, settings json.RawMessage) (Step, error) {
	r.mu.RLock()
	k, ok := r.kinds[name]
	r.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("policy step %q is not registered; registered: %s", name, r.names())
	}
	if len(settings) == 0 {
		settings = json.RawMessage("null")
	}
	s, err := k.make(settings)
	if err != nil {
		return nil, fmt.Errorf("policy step %s: %w", name, err)
	}
	if s == nil {
		return nil, fmt.Errorf("policy step %s: its factory made no step", name)
	}
	return named{Step: s, name: name}, nil
}

func (r *Registry) names() string {
	specs := r.Specs()
	if len(specs) == 0 {
		return "none"
	}
	names := make([]string, len(specs))
	for i, s := range specs {
		names[i] = s.Name
	}
	return strings.Join(names, ", ")
}

// named makes a step answer to the name it was enabled under.
type named struct {
	Step
	name string
}

func (n named) Name() string { return n.name }

// maxNameLen bounds a step's name.
const maxNameLen = 64

// CheckName says what is wrong with a step name, nil when nothing is.
func CheckName(name string) error {
	if name == "" {
		return fmt.Errorf("policy step: no name")
	}
	if len(name) > maxNameLen {
		return fmt.Errorf("policy step name %.20q…: longer than %d bytes", name, maxNameLen)
	}
	for i, c := range name {
		switch {
		case c >= 'a' && c <= 'z':
		case i > 0 && (c >= '0' && c <= '9' || c == '-' || c == '_'):
		default:
			return fmt.Errorf("policy step name %q: lower-case letters, digits, '-' and '_' only, starting with a letter", name)
		}
	}
	return nil
}
