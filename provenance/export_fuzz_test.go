package provenance_test

import (
	"bytes"
	"testing"

	"github.com/semaq/semaq/internal/provenancetest"
	"github.com/semaq/semaq/provenance"
)

// FuzzReadExport feeds the reader and the verifier arbitrary exports:
// they must refuse or judge them without panicking, and a verdict is one
// line.
func FuzzReadExport(f *testing.F) {
	c := provenancetest.New("AGENT", "acme", "s-1").Signed("n1", provenancetest.Key(1))
	for k := range 4 {
		c.Add("agent.x", string(rune('a'+k)), map[string][]string{"AI-Model": {"m"}})
	}
	f.Add(c.Export(f, nil, c.Links))
	links := provenancetest.Copy(c.Links)
	links[1], links[2] = links[2], links[1]
	f.Add(c.Export(f, nil, links))
	f.Add(c.Export(f, nil, c.Links[:2]))
	f.Add([]byte(`{"semaq_provenance":1}` + "\n"))
	f.Add([]byte("\n\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		opts := provenance.VerifyOptions{Reader: provenance.ReaderOptions{MaxLineBytes: 1 << 16, MaxLinks: 64}}
		rep, err := provenance.Verify(bytes.NewReader(data), opts)
		if err != nil {
			if rep != nil {
				t.Fatal("a report with an error")
			}
			return
		}
		if s := rep.String(); bytes.ContainsAny([]byte(s), "\r\n") {
			t.Fatalf("verdict of more than one line: %q", s)
		}
	})
}
