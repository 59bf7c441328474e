package registry

import (
	"fmt"
	"testing"
)

// The ingress calls these once per message.

func benchRegistry(b *testing.B) *Registry {
	b.Helper()
	r, _ := newRegistry(b)
	ctx := ctxT(b)
	for i := range 20 {
		subject := fmt.Sprintf("s%d", i)
		register(b, r, subject, fmt.Sprintf(`{"i":%d}`, i))
		for _, p := range []string{"ai.%d.llm", "ai.%d.*", "ai.*.%d", "ai.%d.>"} {
			if err := r.Bind(ctx, fmt.Sprintf(p, i), subject); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := r.Bind(ctx, ">", "s0"); err != nil {
		b.Fatal(err)
	}
	return r
}

func BenchmarkBindingFor(b *testing.B) {
	r := benchRegistry(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := r.BindingFor("ai.19.llm"); !ok {
			b.Fatal("no binding")
		}
	}
}

func BenchmarkLatestAndCached(b *testing.B) {
	r := benchRegistry(b)
	b.ReportAllocs()
	for b.Loop() {
		e, _, ok := r.Latest("s7")
		if !ok {
			b.Fatal("no latest")
		}
		if _, ok := r.Cached(e.ID); !ok || !r.SubjectHasID("s7", e.ID) {
			b.Fatal("not cached")
		}
	}
}
