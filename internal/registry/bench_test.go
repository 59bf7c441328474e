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

// BenchmarkRegisterAt5000Versions registers new versions of a subject that
// already has 5,000: the cost must not grow with the version count (it
// was 12 ms a registration when every snapshot rebuilt every subject).
func BenchmarkRegisterAt5000Versions(b *testing.B) {
	n := startNode(b, "")
	r, err := Open(ctxT(b), n.js, Config{Formats: fakeFormats(), MaxVersions: 1 << 20})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = r.Close() })
	for i := range 5000 {
		register(b, r, "s", fmt.Sprintf(`{"i":%d}`, i))
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		register(b, r, "s", fmt.Sprintf(`{"j":%d}`, i))
		i++
	}
}
