package quota

import (
	"testing"
)

// BenchmarkAdmit: the ingress's cost per message, with no quota (the
// default) and with a tenant's rpm and tpm.
func BenchmarkAdmit(b *testing.B) {
	for _, c := range []struct {
		name string
		cfg  Config
	}{
		{"off", Config{}},
		{"tenant", Config{Default: Limits{RPM: 1 << 40, TPM: 1 << 50}}},
	} {
		b.Run(c.name, func(b *testing.B) {
			l, err := New(c.cfg, Deps{})
			if err != nil {
				b.Fatal(err)
			}
			r := Request{Tenant: "acme", Tokens: 300}
			b.ReportAllocs()
			for b.Loop() {
				if ref := l.Admit(r); ref != nil {
					b.Fatal(ref)
				}
			}
		})
	}
}
