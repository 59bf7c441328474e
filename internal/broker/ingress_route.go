package broker

import (
	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/internal/broker/routes"
	"github.com/semaq/semaq/semaq"
)

// The ingress's routing step: the rules (internal/broker/routes) pick a
// target subject; the ingress finds the served stream that captures it.

// routeRule applies the rules of rt to m, which has passed the envelope,
// schema and policy steps, and returns the subject to store it under, the
// served stream that captures that subject and the rule that decided (nil
// when none matched; the trace span names it). A routed message gets
// AI-Origin-Subject. A target no stream captures refuses the message.
func (in *ingress) routeRule(rt *routes.Table, st *ingressStream, m *nats.Msg) (string, *ingressStream, *routes.Rule, *semaq.APIError) {
	r, t := rt.Match(m)
	if r == nil {
		return m.Subject, st, nil, nil
	}
	ts := in.targetStream(t)
	if ts == nil {
		return "", nil, r, semaq.NewAPIError(semaq.ErrNoStream,
			"route %s sends messages on %s to %s, which no stream captures; nothing was stored (add a stream for %s or change the route)",
			r.Name(), m.Subject, t.Subject(), t.Subject())
	}
	r.Routed(t)
	m.Header[semaq.HdrOriginSubject] = []string{m.Subject}
	return t.Subject(), ts, r, nil
}

// targetStream finds the served stream capturing a target, remembered on
// the target per snapshot of the served streams.
func (in *ingress) targetStream(t *routes.Target) *ingressStream {
	served := in.served.Load()
	if v, ok := t.Lookup(served); ok {
		return v.(*ingressStream)
	}
	st := in.streamFor(t.Subject())
	t.Remember(served, st)
	return st
}

// streamFor returns the served stream one of whose patterns matches a
// literal subject; nil if none does.
func (in *ingress) streamFor(subject string) *ingressStream {
	served := in.served.Load()
	if served == nil {
		return nil
	}
	for _, st := range *served {
		for _, p := range st.subjects {
			if subjectMatches(p, subject) {
				return st
			}
		}
	}
	return nil
}

// streamSubjects returns the patterns served for stream name, nil when it
// is not served.
func (in *ingress) streamSubjects(name string) []string {
	served := in.served.Load()
	if served == nil {
		return nil
	}
	for _, st := range *served {
		if st.name == name {
			return st.subjects
		}
	}
	return nil
}

// publishServed snapshots the served streams for streamFor. in.mu is held.
func (in *ingress) publishServed() {
	list := make([]*ingressStream, 0, len(in.streams))
	for _, st := range in.streams {
		list = append(list, st)
	}
	in.served.Store(&list)
}
