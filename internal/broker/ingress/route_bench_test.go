package ingress

import (
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/internal/broker/routes/table"
	"github.com/semaq/semaq/internal/expr"
	"github.com/semaq/semaq/semaq"
)

// routeBench is an ingress serving AI (ai.>) and GPU (gpu.>) with a table
// of rules, without a server: the cost of routing alone.
func routeBench(b *testing.B, defs []semaq.Route) (*Ingress, *table.Table, *stream) {
	env, err := expr.NewEnv()
	if err != nil {
		b.Fatal(err)
	}
	t, err := table.Compile(env, defs...)
	if err != nil {
		b.Fatal(err)
	}
	ai := &stream{name: "AI", subjects: []string{"ai.>"}}
	in := &Ingress{served: NewServed(), streams: map[string]*stream{"AI": ai, "GPU": {name: "GPU", subjects: []string{"gpu.>"}}}}
	in.served.publish(in.streams)
	return in, t, ai
}

// BenchmarkRoute is the routing step of the ingress per message.
func BenchmarkRoute(b *testing.B) {
	for _, bc := range []struct {
		name string
		rule func(i int) semaq.Route
	}{
		{"other-subjects", func(i int) semaq.Route {
			return semaq.Route{Subject: fmt.Sprintf("svc%d.>", i), To: "gpu.a"}
		}},
		{"same-subject-false", func(i int) semaq.Route {
			return semaq.Route{Subject: "ai.inference.llm", When: fmt.Sprintf(`model.startsWith("gemma%d")`, i), To: "gpu.a"}
		}},
		{"tenth-matches", func(i int) semaq.Route {
			return semaq.Route{Subject: "ai.inference.llm", When: fmt.Sprintf(`model.startsWith("llama%d")`, i+3-9), To: "gpu.a"}
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var defs []semaq.Route
			for i := range 10 {
				d := bc.rule(i)
				d.Name = fmt.Sprintf("r%02d", i)
				defs = append(defs, d)
			}
			in, rt, ai := routeBench(b, defs)
			h := nats.Header{semaq.HdrModel: {"llama3-70b"}, semaq.HdrTenant: {"acme"}}
			m := &nats.Msg{Subject: "ai.inference.llm", Header: h, Data: make([]byte, 256)}
			b.ReportAllocs()
			for b.Loop() {
				p := publication{m: m, subject: m.Subject, stream: ai}
				if e := in.routeRule(rt, &p, noSpan); e != nil {
					b.Fatal(e)
				}
			}
		})
	}
}
