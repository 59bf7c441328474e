package pii

import (
	"encoding/json"
	"slices"
	"testing"
)

// FuzzScan: Scan never panics, and its findings are in bounds, sorted, apart, and each passes its type's check;
// and the prefilter misses nothing: running every detector on the text finds the same.
func FuzzScan(f *testing.F) {
	f.Add("mail a@example.com, call +1 650-253-0000, card 4111 1111 1111 1111")
	f.Add("id 11010519491231002X iban DE89 3704 0044 0532 0130 00 ssn 078-05-1120")
	f.Add("ip ::ffff:192.0.2.128 and 10.0.0.1 key AKIAIOSFODNN7EXAMPLE -----BEGIN PRIVATE KEY-----")
	f.Add("eyJhbGciOiJub25lIn0.eyJzdWIiOiJhIn0. 13800138000 SSN: 219099999")
	f.Add("1.2.3.4.5 12:30:45 std::vector +12.50 2024-01-15")
	f.Add("x\\neyJhbGciOiJub25lIn0.eyJzdWIiOiJhIn0. \\u0040")
	f.Fuzz(func(t *testing.T, text string) {
		prev := 0
		got := Scan(text, nil)
		if all := scanMasked(text, maskOf(nil)); !slices.Equal(got, all) {
			t.Fatalf("Scan found %v, every detector %v (prefilter %b)", got, all, prefilter(text))
		}
		for _, fd := range got {
			if fd.Start < prev || fd.End <= fd.Start || fd.End > len(text) {
				t.Fatalf("finding %+v out of order or bounds (previous end %d, len %d)", fd, prev, len(text))
			}
			if v := text[fd.Start:fd.End]; !Validate(fd.Type, v) {
				t.Fatalf("finding %s %q does not validate", fd.Type, v)
			}
			prev = fd.End
		}
	})
}

// FuzzRedact: valid JSON in gives valid JSON out, and no masked value is left in the output.
func FuzzRedact(f *testing.F) {
	f.Add([]byte(`{"messages":[{"role":"user","content":"mail a@example.com or +1 650-253-0000"}]}`))
	f.Add([]byte(`["jo\u0040example.com", {"k\"":"4111 1111 1111 1111\n"}, 1e5, true, null]`))
	f.Add([]byte(`{"a":{"b":["AKIAIOSFODNN7EXAMPLE", "\ud83d\ude00 078-05-1120"]}}`))
	f.Add([]byte(`plain text a@example.com`))
	r, err := NewRedactor(Config{})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		wasJSON := json.Valid(payload) && looksJSON(payload)
		out, found, changed, err := r.Redact(payload, nil)
		if err != nil {
			return // too deep, or too many findings
		}
		if changed != (len(found) > 0) {
			t.Fatalf("changed %v with %d findings", changed, len(found))
		}
		if wasJSON && !json.Valid(out) {
			t.Fatalf("valid JSON in, invalid out:\n%s\n%s", payload, out)
		}
		// Each value masked must be gone (and so a payload holding one must have changed): no entity found in
		// the output's texts is one of those found in the input's. (The same characters may stay where they
		// were never an entity, as "0@0.AA" in "0@0.AA0".)
		var texts, outTexts []string
		if wasJSON {
			texts, outTexts = jsonStrings(t, payload), jsonStrings(t, out)
		} else {
			texts, outTexts = []string{string(payload)}, []string{string(out)}
		}
		masked := map[string]bool{}
		for _, s := range texts {
			for _, fd := range Scan(s, nil) {
				masked[s[fd.Start:fd.End]] = true
			}
		}
		for _, s := range outTexts {
			for _, fd := range Scan(s, nil) {
				if v := s[fd.Start:fd.End]; masked[v] {
					t.Fatalf("masked %s %q is still in the output %q", fd.Type, v, out)
				}
			}
		}
	})
}

// jsonStrings lists the string values of a JSON document.
func jsonStrings(t *testing.T, doc []byte) []string {
	var v any
	if err := json.Unmarshal(doc, &v); err != nil {
		t.Fatal(err)
	}
	var out []string
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case string:
			out = append(out, v)
		case []any:
			for _, e := range v {
				walk(e)
			}
		case map[string]any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	walk(v)
	return out
}
