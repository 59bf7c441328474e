package registry

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// FuzzSchemaRequest feeds request bodies of the register, lookup and
// compatibility endpoints through decoding and parsing: every outcome is a
// parsed candidate or a coded 422/42201 error, never a panic.
func FuzzSchemaRequest(f *testing.F) {
	for _, seed := range []string{
		`{"schema":"{}","schemaType":"JSON"}`,
		`{"schema":"{\"type\":\"string\"}"}`,
		`{"schema":"{}","references":[{"name":"a","subject":"s","version":-1}]}`,
		`{"schema":"{}","references":[{"name":"","subject":"","version":0}]}`,
		`{"schema":"{","schemaType":"xml"}`,
		`{"schema":`, ``, `null`, `[]`, `{} {}`, `{"schema":1}`,
		`{"schema":"{}","schema":"{}"}`, `{"schema":"{}","Schema":"{}"}`, `{"SCHEMA":"{}"}`,
		`{"schema":"{}","references":[{"name":"a","Name":"b"}]}`, `{"schema":"{}","x":[[[[[[[[[[]]]]]]]]]]}`,
		`{"schema":"{}","version":1e999999}`,
	} {
		f.Add(seed)
	}
	cfg := Config{Formats: fakeFormats()}
	cfg.defaults()
	r := &Registry{cfg: cfg, formats: cfg.Formats}
	st := newModel().snapshot()
	f.Fuzz(func(t *testing.T, body string) {
		req, _ := http.NewRequest("POST", "/", strings.NewReader(body))
		var s SchemaRequest
		err := decode(req, &s)
		if err == nil {
			var c *candidate
			c, err = r.parse(st, s)
			if err == nil && (c.hash == "" || c.compiled == nil) {
				t.Fatalf("parsed %q without identity", body)
			}
		}
		if err != nil {
			e, ok := errors.AsType[*Error](err)
			if !ok || (e.Code != CodeUnprocessable && e.Code != CodeInvalidSchema) {
				t.Fatalf("body %q: error %v, want 422 or 42201", body, err)
			}
		}
	})
}

// FuzzParseVersion checks the version argument of every versions endpoint.
func FuzzParseVersion(f *testing.F) {
	for _, s := range []string{"latest", "LaTeSt", "-1", "0", "1", "2147483647", "2147483648", "-2", "+1", " 1", "1e3", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := parseVersion(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidVersion) {
				t.Fatalf("%q: %v", s, err)
			}
			return
		}
		if n != -1 && (n < 1 || n > 1<<31-1) {
			t.Fatalf("%q parsed to %d", s, n)
		}
		if n > 0 && strconv.Itoa(n) != strings.TrimLeft(strings.TrimPrefix(s, "+"), "0") {
			t.Fatalf("%q parsed to %d", s, n)
		}
	})
}

// FuzzBindingPattern checks pattern validation and matching against a
// plain token-by-token reference, and the name encoding of keys.
func FuzzBindingPattern(f *testing.F) {
	for _, s := range [][2]string{
		{"a.b", "a.b"}, {"a.*", "a.b"}, {"a.>", "a.b.c"}, {">", "x"}, {"*.*", "a"}, {"a..b", "a..b"}, {"a.>.b", "a.x.b"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, pattern, subject string) {
		if dec, err := decodeName(encodeName(pattern)); err != nil || dec != pattern {
			t.Fatalf("name encoding does not round-trip %q", pattern)
		}
		if pattern != "" && !keyValid(keyBinding(pattern)) {
			t.Fatalf("binding key of %q is not a valid KV key", pattern)
		}
		if checkPattern(pattern) != nil || checkPattern(subject) != nil || strings.ContainsAny(subject, "*>") {
			return
		}
		if got, want := matchPattern(pattern, subject), referenceMatch(pattern, subject); got != want {
			t.Fatalf("matchPattern(%q, %q) = %v, want %v", pattern, subject, got, want)
		}
	})
}

func referenceMatch(pattern, subject string) bool {
	pt, st := strings.Split(pattern, "."), strings.Split(subject, ".")
	for i, p := range pt {
		if p == ">" {
			return len(st) > i
		}
		if i >= len(st) || (p != "*" && p != st[i]) {
			return false
		}
	}
	return len(pt) == len(st)
}

// keyValid is the KV key rule of nats.go.
func keyValid(key string) bool {
	if key == "" || key[0] == '.' || key[len(key)-1] == '.' || strings.Contains(key, "..") {
		return false
	}
	for _, c := range []byte(key) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-/_=.", c) >= 0) {
			return false
		}
	}
	return true
}
