package pii

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// countingTokenizer numbers placeholders per type and remembers them, as the broker's tokenizer would.
type countingTokenizer struct {
	mu     sync.Mutex
	calls  int
	n      map[Type]int
	values map[string]string // placeholder -> value
	fail   error
}

func (c *countingTokenizer) Token(t Type, value string) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	if c.fail != nil {
		return "", c.fail
	}
	if c.n == nil {
		c.n, c.values = map[Type]int{}, map[string]string{}
	}
	c.n[t]++
	ph := Placeholder(t, c.n[t])
	c.values[ph] = value
	return ph, nil
}

func (c *countingTokenizer) lookup(ph string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.values[ph]
	return v, ok
}

func mustRedactor(t *testing.T, c Config) *Redactor {
	t.Helper()
	r, err := NewRedactor(c)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

var hashKey = []byte("0123456789abcdef0123456789abcdef")

func TestRedactActions(t *testing.T) {
	const text = "mail bob@example.com or call +1 650-253-0000"
	for _, c := range []struct {
		name string
		cfg  Config
		want string // a regular expression the output must match
	}{
		{"mask", Config{}, `^mail \[EMAIL\] or call \[PHONE\]$`},
		{"hash", Config{Action: ActionHash, HashKey: hashKey},
			`^mail \[EMAIL:[0-9a-f]{12}\] or call \[PHONE:[0-9a-f]{12}\]$`},
		{"tokenize", Config{Action: ActionTokenize}, `^mail <EMAIL_1> or call <PHONE_1>$`},
		{"per type", Config{PerType: map[Type]Action{Phone: ActionTokenize}}, `^mail \[EMAIL\] or call <PHONE_1>$`},
		{"types", Config{Types: []Type{Phone}}, `^mail bob@example\.com or call \[PHONE\]$`},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := mustRedactor(t, c.cfg)
			tok := &countingTokenizer{}
			got, found, err := r.Text(text, tok)
			if err != nil {
				t.Fatal(err)
			}
			if !regexp.MustCompile(c.want).MatchString(got) {
				t.Errorf("Text = %q; want it to match %s", got, c.want)
			}
			out, found2, changed, err := r.Redact([]byte(text), &countingTokenizer{})
			if err != nil || !changed || len(found2) != len(found) || !regexp.MustCompile(c.want).Match(out) {
				t.Errorf("Redact = %q, %v, %v, %v", out, found2, changed, err)
			}
			for _, f := range found {
				if f.Path != "" || f.Action != r.action(f.Type) {
					t.Errorf("located %+v", f)
				}
			}
		})
	}
}

// TestRedactHashStable: the hash of a value is the same under one key and differs under another.
func TestRedactHashStable(t *testing.T) {
	a := mustRedactor(t, Config{Action: ActionHash, HashKey: hashKey})
	b := mustRedactor(t, Config{Action: ActionHash, HashKey: []byte("another key of 16+ bytes")})
	const text = "write to carol@example.com"
	x, _, _ := a.Text(text, nil)
	y, _, _ := a.Text("again: carol@example.com", nil)
	z, _, _ := b.Text(text, nil)
	hx, hy, hz := x[strings.Index(x, "["):], y[strings.Index(y, "["):], z[strings.Index(z, "["):]
	if hx != hy {
		t.Errorf("one key hashes the same value to %q and %q", hx, hy)
	}
	if hx == hz {
		t.Errorf("two keys hash the value to the same %q", hx)
	}
	if w, _, _ := a.Text("write to dave@example.com", nil); w[strings.Index(w, "["):] == hx {
		t.Errorf("two values hash to the same %q", hx)
	}
}

// TestRedactTokenizerOncePerValue: a value repeated in one payload costs one Token call and gets one placeholder;
// Restore puts the values back.
func TestRedactTokenizerOncePerValue(t *testing.T) {
	r := mustRedactor(t, Config{Action: ActionTokenize})
	tok := &countingTokenizer{}
	in := `{"a":"erin@example.com and erin@example.com","b":["erin@example.com","frank@example.com"]}`
	out, found, changed, err := r.Redact([]byte(in), tok)
	if err != nil || !changed {
		t.Fatal(err)
	}
	if tok.calls != 2 {
		t.Errorf("Token was called %d times for 2 distinct values", tok.calls)
	}
	if len(found) != 4 {
		t.Errorf("found %d entities, want 4", len(found))
	}
	want := `{"a":"<EMAIL_1> and <EMAIL_1>","b":["<EMAIL_1>","<EMAIL_2>"]}`
	if string(out) != want {
		t.Errorf("Redact = %s\nwant     %s", out, want)
	}
	if back := Restore(string(out), tok.lookup); back != in {
		t.Errorf("Restore = %s", back)
	}
	tok.fail = errors.New("store is down")
	if _, _, _, err := r.Redact([]byte(`{"x":"gina@example.com"}`), tok); !errors.Is(err, ErrTokenizer) {
		t.Errorf("a failing tokenizer gives %v; want ErrTokenizer", err)
	}
	if _, _, _, err := r.Redact([]byte(`{}`), nil); !errors.Is(err, ErrConfig) {
		t.Errorf("tokenize without a Tokenizer gives %v; want ErrConfig", err)
	}
}

// TestRedactBlock: a block action refuses the payload with an error that names the type and the path and never
// the value, before any value is tokenized.
func TestRedactBlock(t *testing.T) {
	r := mustRedactor(t, Config{Action: ActionTokenize, PerType: map[Type]Action{Secret: ActionBlock}})
	tok := &countingTokenizer{}
	const key = "AKIAIOSFODNN7EXAMPLE"
	in := []byte(`{"messages":[{"content":"mail hank@example.com"},{"content":"key ` + key + `"}]}`)
	out, found, changed, err := r.Redact(in, tok)
	var be *BlockedError
	if !errors.As(err, &be) || !errors.Is(err, ErrBlocked) {
		t.Fatalf("Redact = %v; want a *BlockedError", err)
	}
	if be.Type != Secret || be.Path != "/messages/1/content" {
		t.Errorf("blocked %s at %q; want secret at /messages/1/content", be.Type, be.Path)
	}
	if msg := err.Error(); strings.Contains(msg, key) || strings.Contains(msg, "AKIA") ||
		!strings.Contains(msg, "secret") || !strings.Contains(msg, "/messages/1/content") {
		t.Errorf("the error %q must name the type and path and not the value", msg)
	}
	if changed || &out[0] != &in[0] || tok.calls != 0 || len(found) != 2 {
		t.Errorf("a blocked payload gave changed=%v, %d findings, %d Token calls", changed, len(found), tok.calls)
	}
	_, _, err = mustRedactor(t, Config{Action: ActionBlock}).Text("ssn 078-05-1120", nil)
	if err == nil || strings.Contains(err.Error(), "078") || !strings.Contains(err.Error(), "ssn") {
		t.Errorf("blocked text gives %v", err)
	}
}

// TestRedactPaths: paths select the string values redacted; the rest of the payload stays byte for byte.
func TestRedactPaths(t *testing.T) {
	in := `{"prompt":"ivy@example.com","messages":[{"role":"user","content":"ivy@example.com"},` +
		`{"role":"ivy@example.com","content":{"text":"ivy@example.com"}}],"meta":{"ivy@example.com":"ivy@example.com"}}`
	for _, c := range []struct {
		paths []string
		want  []string // the JSON Pointers redacted
	}{
		{nil, []string{"/prompt", "/messages/0/content", "/messages/1/role", "/messages/1/content/text",
			"/meta/ivy@example.com"}},
		{[]string{"prompt"}, []string{"/prompt"}},
		{[]string{"messages.*.content"}, []string{"/messages/0/content", "/messages/1/content/text"}},
		{[]string{"messages.1"}, []string{"/messages/1/role", "/messages/1/content/text"}},
		{[]string{"messages.0.content", "meta"}, []string{"/messages/0/content", "/meta/ivy@example.com"}},
		{[]string{"*.*.role"}, []string{"/messages/1/role"}},
		{[]string{"nothing.here"}, nil},
	} {
		t.Run(strings.Join(c.paths, ","), func(t *testing.T) {
			r := mustRedactor(t, Config{Paths: c.paths})
			out, found, changed, err := r.Redact([]byte(in), nil)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, f := range found {
				got = append(got, f.Path)
			}
			if fmt.Sprint(got) != fmt.Sprint(c.want) || changed != (len(c.want) > 0) {
				t.Fatalf("redacted %v (changed %v); want %v", got, changed, c.want)
			}
			if !json.Valid(out) {
				t.Fatalf("invalid JSON out: %s", out)
			}
			// Putting the values back gives the input: nothing else changed.
			back := strings.ReplaceAll(string(out), Mask(Email), "ivy@example.com")
			if back != in {
				t.Errorf("the output differs beyond the redacted values:\n%s", out)
			}
			if strings.Count(string(out), Mask(Email)) != len(c.want) {
				t.Errorf("output %s", out)
			}
		})
	}
}

// TestRedactEscapes: strings with escapes are decoded before they are scanned (an '@' written \u0040 is found)
// and encoded again, and the output decodes to the input with the values replaced.
func TestRedactEscapes(t *testing.T) {
	r := mustRedactor(t, Config{})
	in := `{"a":"line one\nmail jo\u0040example.com\t\"quoted\" \\ done","b":"caf\u00e9 \ud83d\ude00 \/","c":"ok"}`
	out, found, changed, err := r.Redact([]byte(in), nil)
	if err != nil || !changed || len(found) != 1 || found[0].Path != "/a" {
		t.Fatalf("Redact = %s, %v, %v, %v", out, found, changed, err)
	}
	var got, orig map[string]string
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("invalid JSON out %s: %v", out, err)
	}
	json.Unmarshal([]byte(in), &orig)
	if want := strings.Replace(orig["a"], "jo@example.com", "[EMAIL]", 1); got["a"] != want {
		t.Errorf("a = %q, want %q", got["a"], want)
	}
	if !strings.Contains(string(out), `"b":"caf\u00e9 \ud83d\ude00 \/","c":"ok"`) {
		t.Errorf("a string without findings was rewritten: %s", out)
	}
	// Escapes can hide a key's prefix from a raw look too.
	out, found, _, _ = r.Redact([]byte(`["\u0041KIAIOSFODNN7EXAMPLE","x\neyJhbGciOiJub25lIn0.eyJzdWIiOiJhIn0."]`), nil)
	if len(found) != 2 || string(out) != `["[SECRET]","x\n[SECRET]"]` {
		t.Errorf("escaped keys: %s, %v", out, found)
	}
}

// TestRedactUnchanged: a payload without findings comes back as the same slice, without allocating.
func TestRedactUnchanged(t *testing.T) {
	r := mustRedactor(t, Config{Paths: []string{"messages.*.content"}})
	for _, in := range [][]byte{chatPrompt(benchClean), []byte("plain text, nothing to see"),
		[]byte(`{"messages":[{"content":"x@example.com is not here"}],"other":"y@example.com"}`)[:0:0]} {
		out, found, changed, err := r.Redact(in, nil)
		if err != nil || changed || len(found) != 0 || len(out) != len(in) || len(in) > 0 && &out[0] != &in[0] {
			t.Errorf("Redact(%.40q) = changed %v, %v, %v", in, changed, found, err)
		}
	}
	outside := []byte(`{"messages":[{"content":"hi"}],"other":"y@example.com"}`)
	if out, _, changed, _ := r.Redact(outside, nil); changed || &out[0] != &outside[0] {
		t.Errorf("a value outside the paths was redacted: %s", out)
	}
	p := chatPrompt(benchClean)
	if n := testing.AllocsPerRun(100, func() { r.Redact(p, nil) }); n != 0 {
		t.Errorf("Redact of a clean chat prompt allocates %v times", n)
	}
}

// TestRedactDepth: JSON nested past MaxDepth is refused with ErrTooDeep; at MaxDepth it is redacted.
func TestRedactDepth(t *testing.T) {
	r := mustRedactor(t, Config{})
	nest := func(n int) []byte {
		return []byte(strings.Repeat("[", n) + `"kim@example.com"` + strings.Repeat("]", n))
	}
	out, found, _, err := r.Redact(nest(MaxDepth), nil)
	if err != nil || len(found) != 1 || !json.Valid(out) {
		t.Errorf("depth %d: %v, %v", MaxDepth, found, err)
	}
	if _, _, _, err := r.Redact(nest(MaxDepth+1), nil); !errors.Is(err, ErrTooDeep) {
		t.Errorf("depth %d: %v; want ErrTooDeep", MaxDepth+1, err)
	}
	if _, _, _, err := r.Redact(nest(3000), nil); !errors.Is(err, ErrTooDeep) {
		t.Errorf("depth 3000: %v; want ErrTooDeep", err)
	}
}

// TestRedactNotJSON: a payload that starts like JSON but is not is redacted as text.
func TestRedactNotJSON(t *testing.T) {
	r := mustRedactor(t, Config{Paths: []string{"only.this"}})
	for _, in := range []string{`{"a": lee@example.com}`, `[1, 2,] lee@example.com`, `{"a":"lee@example.com"} trailing`,
		`{"a":"lee@example.com"`, "{\"a\":\"lee@example.com\x01\"}"} {
		out, found, changed, err := r.Redact([]byte(in), nil)
		if err != nil || !changed || len(found) != 1 || found[0].Path != "" || strings.Contains(string(out), "lee@") {
			t.Errorf("Redact(%q) = %q, %v, %v", in, out, found, err)
		}
	}
}

func TestRedactMaxFindings(t *testing.T) {
	r := mustRedactor(t, Config{MaxFindings: 3})
	in := `["a@example.com b@example.com","c@example.com d@example.com"]`
	if _, _, _, err := r.Redact([]byte(in), nil); !errors.Is(err, ErrTooManyFindings) {
		t.Errorf("4 findings with MaxFindings 3: %v", err)
	}
	four := "a@example.com b@example.com c@example.com d@example.com"
	if _, _, err := r.Text(four, nil); !errors.Is(err, ErrTooManyFindings) {
		t.Errorf("text: %v", err)
	}
	if _, found, _, err := r.Redact([]byte(in[:31]+"]"), nil); err != nil || len(found) != 2 {
		t.Errorf("2 findings: %v, %v", found, err)
	}
}

func TestNewRedactorErrors(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Types: []Type{"passport"}}, `"passport"`},
		{Config{Action: "shred"}, `"shred"`},
		{Config{PerType: map[Type]Action{Email: "shred"}}, `"shred" for email`},
		{Config{Types: []Type{Phone}, PerType: map[Type]Action{Email: ActionMask}}, "email, which the types do not select"},
		{Config{Action: ActionHash}, "key of at least 16 bytes, got 0"},
		{Config{PerType: map[Type]Action{IP: ActionHash}, HashKey: []byte("short")}, "got 5"},
		{Config{Paths: []string{"a..b"}}, `path "a..b": empty segment`},
		{Config{Paths: []string{""}}, `path "": empty path`},
		{Config{MaxFindings: -1}, "negative"},
	} {
		_, err := NewRedactor(c.cfg)
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewRedactor(%+v) = %v; want ErrConfig naming %q", c.cfg, err, c.want)
		}
	}
	// hash on a type that is not looked for needs no key.
	if _, err := NewRedactor(Config{Types: []Type{Email}, Action: ActionMask}); err != nil {
		t.Error(err)
	}
}

// TestRedactPointerEscapes: the path of a finding is an RFC 6901 pointer, with '~' and '/' in keys escaped.
func TestRedactPointerEscapes(t *testing.T) {
	r := mustRedactor(t, Config{})
	_, found, _, err := r.Redact([]byte(`{"a/b":{"c~d":["x","mo@example.com"]},"e\"f":"ned@example.com"}`), nil)
	if err != nil || len(found) != 2 || found[0].Path != "/a~1b/c~0d/1" || found[1].Path != `/e"f` {
		t.Errorf("found %v, %v", found, err)
	}
}

// TestRedactConcurrent: one Redactor serves many goroutines (run with -race).
func TestRedactConcurrent(t *testing.T) {
	r := mustRedactor(t, Config{Action: ActionTokenize, PerType: map[Type]Action{Card: ActionHash}, HashKey: hashKey})
	tok := &countingTokenizer{}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				in := fmt.Sprintf(`{"m":"user%d.%d@example.com card 4111 1111 1111 1111"}`, g, i)
				out, found, _, err := r.Redact([]byte(in), tok)
				if err != nil || len(found) != 2 || strings.Contains(string(out), "@") {
					t.Errorf("Redact = %s, %v, %v", out, found, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if tok.calls != 200 {
		t.Errorf("Token calls = %d, want 200", tok.calls)
	}
}

func TestFindPlaceholdersAndRestore(t *testing.T) {
	text := "<EMAIL_1> wrote to <CN_ID_12> and <EMAIL_0> <PHONE_> <email_1> <SECRET_1234567890> <IP_3><IP_4>"
	got := FindPlaceholders(text)
	var names []string
	for _, f := range got {
		names = append(names, string(f.Type)+"="+text[f.Start:f.End])
	}
	if want := "[email=<EMAIL_1> cn-id=<CN_ID_12> ip=<IP_3> ip=<IP_4>]"; fmt.Sprint(names) != want {
		t.Errorf("FindPlaceholders = %v; want %s", names, want)
	}
	known := map[string]string{"<EMAIL_1>": "a@example.com", "<IP_4>": "10.0.0.4"}
	lookup := func(ph string) (string, bool) { v, ok := known[ph]; return v, ok }
	want := strings.NewReplacer("<EMAIL_1>", "a@example.com", "<IP_4>", "10.0.0.4").Replace(text)
	if r := Restore(text, lookup); r != want {
		t.Errorf("Restore = %q", r)
	}
	longest := Placeholder(Secret, MaxPlaceholderNumber)
	if f := FindPlaceholders(longest); len(longest) != MaxPlaceholderLen || len(f) != 1 || f[0].End != len(longest) {
		t.Errorf("the longest placeholder %q (MaxPlaceholderLen %d) is found as %v", longest, MaxPlaceholderLen, f)
	}
	if r := Restore("nothing <HERE_1>", lookup); r != "nothing <HERE_1>" {
		t.Errorf("Restore = %q", r)
	}
}
