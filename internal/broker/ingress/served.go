package ingress

import (
	"sync/atomic"

	"github.com/semaq/semaq/internal/broker/subjects"
)

// Served is the table of the streams an ingress serves, by subject
// pattern. The route rules read it (which stream captures a target), the
// node too (which pattern a delivered message counts under). It is made
// before the ingress, so the route rules can be opened first and handed to
// it; only the ingress writes it. Reads take no lock.
type Served struct {
	list atomic.Pointer[[]*stream]
}

// NewServed returns an empty table.
func NewServed() *Served {
	s := &Served{}
	s.list.Store(&[]*stream{})
	return s
}

// publish snapshots the streams the ingress serves now.
func (s *Served) publish(streams map[string]*stream) {
	list := make([]*stream, 0, len(streams))
	for _, st := range streams {
		list = append(list, st)
	}
	s.list.Store(&list)
}

// find returns the served stream one of whose patterns matches a literal
// subject, and the pattern; nil if none does.
func (s *Served) find(subject string) (*stream, string) {
	for _, st := range *s.list.Load() {
		for _, p := range st.subjects {
			if subjects.Match(p, subject) {
				return st, p
			}
		}
	}
	return nil, ""
}

// StreamFor names the served stream that captures a literal subject, ""
// when none does.
func (s *Served) StreamFor(subject string) string {
	if st, _ := s.find(subject); st != nil {
		return st.name
	}
	return ""
}

// PatternFor is the served pattern that captures a literal subject, ""
// when none does.
func (s *Served) PatternFor(subject string) string {
	_, p := s.find(subject)
	return p
}

// Subjects returns the patterns served for stream name, nil when it is
// not served.
func (s *Served) Subjects(name string) []string {
	for _, st := range *s.list.Load() {
		if st.name == name {
			return st.subjects
		}
	}
	return nil
}
