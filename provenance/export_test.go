package provenance_test

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/semaq/semaq/internal/provenancetest"
	"github.com/semaq/semaq/provenance"
)

func TestProvenanceExportRoundTrip(t *testing.T) {
	c := chain(true)
	c.Links[2].Data = nil // an empty payload
	export := c.Export(t, nil, c.Links)
	if lines := bytes.Count(export, []byte("\n")); lines != 9 {
		t.Fatalf("export has %d lines, want a header and 8 links", lines)
	}
	r, err := provenance.NewReader(bytes.NewReader(export), provenance.ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := c.Header()
	want.Version = provenance.FormatVersion
	if h := r.Header(); !reflect.DeepEqual(h, want) {
		t.Fatalf("header read back\n %+v\nwant\n %+v", h, want)
	}
	for i := 0; ; i++ {
		l, err := r.Next()
		if errors.Is(err, io.EOF) {
			if i != len(c.Links) {
				t.Fatalf("read %d links, want %d", i, len(c.Links))
			}
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		want := c.Links[i]
		if want.Data == nil {
			want.Data = []byte{}
		}
		if !reflect.DeepEqual(*l, want) || r.Line() != i+2 {
			t.Fatalf("link %d read back on line %d\n %+v\nwant\n %+v", i+1, r.Line(), *l, want)
		}
	}
	if !bytes.Contains(export, []byte(`"data":""`)) {
		t.Fatal(`an empty payload is not written as "data":""`)
	}
}

// header is a valid header line, with the chain's head.
func headerLine(t *testing.T) string {
	t.Helper()
	c := chain(true)
	export := c.Export(t, nil, nil)
	return strings.TrimSuffix(string(export), "\n")
}

func TestProvenanceReaderRefuses(t *testing.T) {
	hdr := headerLine(t)
	link := `{"seq":1,"subject":"a","time":"2026-01-02T03:04:05Z","headers":{},"data":""}`
	cases := []struct {
		name  string
		input string
		opts  provenance.ReaderOptions
		want  string // in the error, after "line N: "
	}{
		{"empty input", "", provenance.ReaderOptions{}, "line 1: empty input"},
		{"not JSON", "hello\n", provenance.ReaderOptions{}, "line 1: not a SemaQ provenance export"},
		{"another JSON document", `{"name":"x"}` + "\n", provenance.ReaderOptions{}, "line 1: not a SemaQ provenance export"},
		{"unknown version", strings.Replace(hdr, `"semaq_provenance":1`, `"semaq_provenance":2`, 1), provenance.ReaderOptions{},
			"line 1: export format version 2 is not one this reader knows (1)"},
		{"a later version with new fields", strings.Replace(hdr, `"semaq_provenance":1`, `"semaq_provenance":2,"merkle":{}`, 1), provenance.ReaderOptions{},
			"line 1: export format version 2 is not one this reader knows (1)"},
		{"version as text", strings.Replace(hdr, `"semaq_provenance":1`, `"semaq_provenance":"1"`, 1), provenance.ReaderOptions{},
			"line 1: not a SemaQ provenance export: line 1 is not its JSON header"},
		{"unknown header field", strings.Replace(hdr, `{"semaq_provenance":1`, `{"semaq_provenance":1,"extra":true`, 1), provenance.ReaderOptions{},
			`line 1: header: json: unknown field "extra"`},
		{"no head hash", strings.Replace(hdr, `"hash":"`, `"hash":"x`, 1), provenance.ReaderOptions{}, "line 1: header: head.hash: hash"},
		{"no session", strings.Replace(hdr, `"session":"s-1"`, `"session":""`, 1), provenance.ReaderOptions{}, "line 1: header: no session"},
		{"zero links", strings.Replace(hdr, `"links":8`, `"links":0`, 1), provenance.ReaderOptions{}, "line 1: header: head.links is 0"},
		{"key id of another key", strings.Replace(hdr, `"id":"34750f98bd59fcfc"`, `"id":"0000000000000000"`, 1), provenance.ReaderOptions{},
			`line 1: header: key 1: id "0000000000000000" is not the id of its public key (34750f98bd59fcfc)`},
		{"short key", strings.Replace(hdr, `"public_key":"`, `"public_key":"AAAA`, 1), provenance.ReaderOptions{},
			`line 1: header: key 1 ("34750f98bd59fcfc"): public_key is 35 bytes, not 32`},
		{"trailing data", hdr + ` {}` + "\n", provenance.ReaderOptions{}, "line 1: header: data after the JSON object"},
		{"head over the link limit", hdr + "\n", provenance.ReaderOptions{MaxLinks: 7}, "line 1: the head says 8 links, more than this reader takes (7"},
		{"blank line", hdr + "\n\n" + link + "\n", provenance.ReaderOptions{}, "line 2: blank line"},
		{"null", hdr + "\nnull\n", provenance.ReaderOptions{}, "line 2: link: not a JSON object"},
		{"unknown link field", hdr + "\n" + strings.Replace(link, `"seq":1`, `"seq":1,"sig":"x"`, 1) + "\n", provenance.ReaderOptions{},
			`line 2: link: json: unknown field "sig"`},
		{"no stream seq", hdr + "\n" + strings.Replace(link, `"seq":1`, `"seq":0`, 1) + "\n", provenance.ReaderOptions{},
			"line 2: link at stream seq 0: no stream seq"},
		{"data not base64", hdr + "\n" + strings.Replace(link, `"data":""`, `"data":"%%"`, 1) + "\n", provenance.ReaderOptions{},
			"line 2: link: illegal base64 data"},
		{"headers not lists", hdr + "\n" + strings.Replace(link, `"headers":{}`, `"headers":{"A":"b"}`, 1) + "\n", provenance.ReaderOptions{},
			"line 2: link: json: cannot unmarshal string"},
		{"line too long", hdr + "\n" + strings.Replace(link, `"data":""`, `"data":"`+strings.Repeat("A", 2000)+`"`, 1) + "\n",
			provenance.ReaderOptions{MaxLineBytes: 1000}, "line 2: line is longer than 1000 bytes"},
		{"too many links", hdr + "\n" + link + "\n" + link + "\n", provenance.ReaderOptions{MaxLinks: 1},
			"line 3: more than 1 links (ReaderOptions.MaxLinks)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.opts.MaxLinks == 1 || tc.opts.MaxLinks == 0 && strings.Contains(tc.name, "too many") {
				// A head of one link, so the limit is the links'.
				tc.input = strings.Replace(tc.input, `"links":8`, `"links":1`, 1)
			}
			err := readAll(tc.input, tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one containing %q", err, tc.want)
			}
			if !errors.Is(err, provenance.ErrFormat) {
				t.Fatalf("err %v does not match ErrFormat", err)
			}
		})
	}
}

func readAll(input string, opts provenance.ReaderOptions) error {
	r, err := provenance.NewReader(strings.NewReader(input), opts)
	if err != nil {
		return err
	}
	for {
		if _, err := r.Next(); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

func TestProvenanceReaderAcceptsLineEnds(t *testing.T) {
	c := chain(false)
	export := string(c.Export(t, nil, c.Links))
	for name, input := range map[string]string{
		"CRLF":                  strings.ReplaceAll(export, "\n", "\r\n"),
		"no newline at the end": strings.TrimSuffix(export, "\n"),
	} {
		rep, err := provenance.Verify(strings.NewReader(input), provenance.VerifyOptions{})
		if err != nil || !rep.OK() {
			t.Fatalf("%s: %v %v", name, rep, err)
		}
	}
}

func TestProvenanceReaderMemoryIsBoundedByTheLine(t *testing.T) {
	// A 64 MiB line without a newline is refused after MaxLineBytes, not
	// read whole.
	hdr := headerLine(t) + "\n"
	src := io.MultiReader(strings.NewReader(hdr), &endless{})
	r, err := provenance.NewReader(src, provenance.ReaderOptions{MaxLineBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.Next()
	if err == nil || !strings.Contains(err.Error(), "line 2: line is longer than 1048576 bytes") {
		t.Fatalf("err %v", err)
	}
}

// endless is an input that never ends a line.
type endless struct{ n int }

func (e *endless) Read(p []byte) (int, error) {
	if e.n > 64<<20 {
		return 0, errors.New("read 64 MiB of one line: the reader did not stop")
	}
	for i := range p {
		p[i] = 'A'
	}
	e.n += len(p)
	return len(p), nil
}

func TestProvenanceWriterRefusesBadHeader(t *testing.T) {
	h := provenancetest.New("AGENT", "", "s").Header()
	if _, err := provenance.NewWriter(io.Discard, h); err == nil || !strings.Contains(err.Error(), "head.links is 0") {
		t.Fatalf("a header of a chain without links: err %v", err)
	}
}
