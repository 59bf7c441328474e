package streamfilter

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

func mustCompile(t testing.TB, o Options, rules ...Rule) *Set {
	t.Helper()
	s, err := Compile(rules, o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustWords(t testing.TB, name string, words ...string) Rule {
	t.Helper()
	r, err := WordRules(name, words, Mask, "***")
	if err != nil {
		t.Fatal(err)
	}
	return r
}

var (
	email = Rule{Name: "email", Pattern: `[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}`, Action: Mask, Replace: "[email]"}
	phone = Rule{Name: "phone", Pattern: `\d{3}-\d{3}-\d{4}`, Action: Mask, Replace: "[phone]"}
)

// The outcome of one text in one chunk, for each kind of rule.
func TestWriteOneChunk(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		rules []Rule
		text  string
		want  string
		evs   []Event
	}{
		{"mask", []Rule{email}, "write to bob@example.com today", "write to [email] today",
			[]Event{{"email", Mask, 9, 24}}},
		{"flag keeps the text", []Rule{{Name: "f", Pattern: `secret`, Action: Flag}}, "a secret plan", "a secret plan",
			[]Event{{"f", Flag, 2, 8}}},
		{"computed replacement", []Rule{{Name: "n", Pattern: `\d+`, Action: Mask, ReplaceFunc: func(m string) string { return strings.Repeat("#", len(m)) }}},
			"pin 1234 ok", "pin #### ok", []Event{{"n", Mask, 4, 8}}},
		{"empty replacement deletes", []Rule{{Name: "d", Pattern: `um,? `, Action: Mask}}, "so um, yes", "so yes",
			[]Event{{"d", Mask, 3, 7}}},
		{"offsets are of the original text", []Rule{email, phone}, "a@b.io 555-123-4567 c@d.io", "[email] [phone] [email]",
			[]Event{{"email", Mask, 0, 6}, {"phone", Mask, 7, 19}, {"email", Mask, 20, 26}}},
		{"no match", []Rule{email}, "nothing here", "nothing here", nil},
		{"no rules", nil, "text", "text", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			set := mustCompile(t, Options{}, tc.rules...)
			out, evs, stop, err := filterChunks(set, []string{tc.text})
			if err != nil || stop || out != tc.want || !reflect.DeepEqual(evs, tc.evs) {
				t.Errorf("got %q %v stop=%v err=%v; want %q %v", out, evs, stop, err, tc.want, tc.evs)
			}
		})
	}
}

// An email, a phone number and a word-list phrase are each caught however
// the text is cut: into two or three chunks at every pair of points, and
// into chunks of every size.
func TestSplitEverywhere(t *testing.T) {
	t.Parallel()
	set := mustCompile(t, Options{}, email, phone, mustWords(t, "places", "new york city", "springfield"))
	text := "Mail bob.smith@example.org, call 555-867-5309 in New  York City."
	want := "Mail [email], call [phone] in ***."
	check := func(chunks []string) {
		t.Helper()
		out, evs, _, err := filterChunks(set, chunks)
		if err != nil || out != want || len(evs) != 3 {
			t.Fatalf("chunks %q: got %q %v %v; want %q", chunks, out, evs, err, want)
		}
	}
	for i := 0; i <= len(text); i++ {
		for j := i; j <= len(text); j++ {
			check([]string{text[:i], text[i:j], text[j:]})
		}
	}
	for n := 1; n <= 16; n++ {
		var chunks []string
		for rest := text; rest != ""; rest = rest[min(n, len(rest)):] {
			chunks = append(chunks, rest[:min(n, len(rest))])
		}
		check(chunks)
	}
}

// Text is released as soon as nothing could start a match in it, and what
// is held is only the tail that could.
func TestHoldsOnlyWhatCouldMatch(t *testing.T) {
	t.Parallel()
	set := mustCompile(t, Options{}, phone)
	st := set.Stream()
	for _, step := range []struct{ chunk, out string }{
		{"call 555", "call "}, // "555" may be a phone number's start
		{"-12", ""},
		{"x now", "555-12x now"}, // it was not
		{" 555-123-45", " "},
		{"67!", "[phone]!"},
	} {
		out, _, _, err := st.Write(step.chunk)
		if err != nil || out != step.out {
			t.Fatalf("Write(%q) = %q, %v; want %q", step.chunk, out, err, step.out)
		}
	}
	if st.Held() != 0 {
		t.Fatalf("Held() = %d after a decided text", st.Held())
	}
}

// Across rules the earliest match wins, then the longest, then the rule
// listed first; within a rule, leftmost-first as package regexp.
func TestChoiceAcrossRules(t *testing.T) {
	t.Parallel()
	short := Rule{Name: "short", Pattern: `new york`, Action: Mask, Replace: "S"}
	long := Rule{Name: "long", Pattern: `new york city`, Action: Mask, Replace: "L"}
	later := Rule{Name: "later", Pattern: `york city hall`, Action: Mask, Replace: "Y"}
	same := Rule{Name: "same", Pattern: `new york`, Action: Mask, Replace: "T"}
	first := Rule{Name: "first", Pattern: `a|ab`, Action: Mask, Replace: "F"}
	for _, tc := range []struct {
		rules      []Rule
		text, want string
	}{
		{[]Rule{short, long}, "in new york city hall", "in L hall"},
		{[]Rule{long, short}, "in new york city hall", "in L hall"},
		{[]Rule{later, short}, "in new york city hall", "in S city hall"},
		{[]Rule{short, same}, "new york", "S"},
		{[]Rule{same, short}, "new york", "T"},
		{[]Rule{first}, "ab", "Fb"},
	} {
		set := mustCompile(t, Options{}, tc.rules...)
		for n := 1; n <= len(tc.text); n++ {
			out, _, _, _ := filterChunks(set, chunk(tc.text, n))
			if out != tc.want {
				t.Errorf("%q in chunks of %d: got %q; want %q", tc.text, n, out, tc.want)
			}
		}
	}
}

func chunk(s string, n int) []string {
	var c []string
	for s != "" {
		k := min(n, len(s))
		c, s = append(c, s[:k]), s[k:]
	}
	return c
}

// A match its validator refuses is no match; the rule looks again after
// its first character, so a valid number inside is still found.
func TestValidatorRejects(t *testing.T) {
	t.Parallel()
	card := Rule{Name: "card", Pattern: `\d{16}`, Validate: luhn, Action: Mask, Replace: "[card]"}
	set := mustCompile(t, Options{}, card)
	for _, tc := range []struct{ text, want string }{
		{"pay 4111111111111111 now", "pay [card] now"},
		{"pay 4111111111111112 now", "pay 4111111111111112 now"},
		{"id 94111111111111111", "id 9[card]"},
	} {
		for n := 1; n <= 5; n++ {
			if out, _, _, _ := filterChunks(set, chunk(tc.text, n)); out != tc.want {
				t.Errorf("%q in chunks of %d: got %q; want %q", tc.text, n, out, tc.want)
			}
		}
	}
	if s := set.Stats(); s.Rejected == 0 || s.Matches == 0 {
		t.Errorf("stats %+v: want rejections and matches counted", s)
	}
}

// A Stop rule releases exactly the text before its match, filtered, and
// ends the stream.
func TestStopReleasesTextBefore(t *testing.T) {
	t.Parallel()
	set := mustCompile(t, Options{}, email, Rule{Name: "bomb", Pattern: `(?i)how to build a bomb`, Action: Stop})
	text := "Ask x@y.io. Here is How to build a bomb: step one"
	for n := 1; n <= len(text); n++ {
		st := set.Stream()
		var got strings.Builder
		var stopEv []Event
		stopped := false
		for _, c := range chunk(text, n) {
			out, evs, stop, err := st.Write(c)
			if err != nil {
				t.Fatalf("chunks of %d: %v", n, err)
			}
			got.WriteString(out)
			if stop {
				stopped, stopEv = true, evs
				break
			}
		}
		if !stopped || got.String() != "Ask [email]. Here is " {
			t.Fatalf("chunks of %d: released %q, stopped %v", n, got.String(), stopped)
		}
		if last := stopEv[len(stopEv)-1]; last != (Event{"bomb", Stop, 20, 39}) {
			t.Fatalf("chunks of %d: stop event %v", n, last)
		}
		if _, _, stop, err := st.Write("more"); !errors.Is(err, ErrStopped) || !stop {
			t.Fatalf("Write after stop: stop=%v err=%v; want ErrStopped", stop, err)
		}
		if out, _, stop := st.Flush(); out != "" || !stop {
			t.Fatalf("Flush after stop = %q, %v", out, stop)
		}
		if st.Held() != 0 {
			t.Fatalf("Held() = %d after stop", st.Held())
		}
	}
}

// A match that would need more than MaxHold bytes held is given up: the
// stream never holds more than the bound, and Stats counts the release.
func TestMaxHoldForcesRelease(t *testing.T) {
	t.Parallel()
	set := mustCompile(t, Options{MaxHold: 32}, Rule{Name: "tag", Pattern: `<[^>]*>`, Action: Mask, Replace: "<>"})
	st := set.Stream()
	var got strings.Builder
	text := "<" + strings.Repeat("é-long tag ", 20)
	for _, c := range chunk(text, 7) {
		out, _, _, err := st.Write(c)
		if err != nil {
			t.Fatal(err)
		}
		if st.Held() > 32 {
			t.Fatalf("Held() = %d, past MaxHold 32", st.Held())
		}
		if !utf8.ValidString(out) {
			t.Fatalf("released %q splits a rune", out)
		}
		got.WriteString(out)
	}
	out, _, _ := st.Flush()
	got.WriteString(out)
	if got.String() != text {
		t.Fatalf("released %q; want the text unchanged", got.String())
	}
	if set.Stats().Forced == 0 {
		t.Fatal("no forced release counted")
	}
	// A short tag is still masked under the same bound.
	if out, _, _, _ := filterChunks(set, chunk("a <b> c", 2)); out != "a <> c" {
		t.Fatalf("short tag: %q", out)
	}
}

// A word list matches whole words only: "class" does not hit "ass".
func TestWordBoundaries(t *testing.T) {
	t.Parallel()
	set := mustCompile(t, Options{}, mustWords(t, "rude", "ass", "c++", "Café au lait"))
	for _, tc := range []struct{ text, want string }{
		{"a class of assets", "a class of assets"},
		{"you ass!", "you ***!"},
		{"ASS", "***"},
		{"pass, ass_x, ass", "pass, ass_x, ***"},
		{"I like c++ a lot", "I like *** a lot"},
		{"abc++", "abc++"},
		{"un café AU\tlait chaud", "un *** chaud"},
	} {
		for n := 1; n <= 4; n++ {
			if out, _, _, _ := filterChunks(set, chunk(tc.text, n)); out != tc.want {
				t.Errorf("%q in chunks of %d: got %q; want %q", tc.text, n, out, tc.want)
			}
		}
	}
}

// Non-ASCII text cut inside its runes: matches are found, and nothing
// released splits a rune.
func TestUnicode(t *testing.T) {
	t.Parallel()
	set := mustCompile(t, Options{}, Rule{Name: "name", Pattern: `Zoë Ångström`, Action: Mask, Replace: "[name]"}, email)
	text := "日本語: Zoë Ångström <zoë@exämple.se> 🙂 ok"
	want := "日本語: [name] <zoë@exämple.se> 🙂 ok"
	for n := 1; n <= 8; n++ {
		st := set.Stream()
		var got strings.Builder
		for _, c := range chunk(text, n) {
			out, _, _, err := st.Write(c)
			if err != nil || !utf8.ValidString(out) {
				t.Fatalf("chunks of %d: released %q, %v", n, out, err)
			}
			got.WriteString(out)
		}
		out, _, _ := st.Flush()
		if got.WriteString(out); got.String() != want {
			t.Fatalf("chunks of %d: got %q; want %q", n, got.String(), want)
		}
	}
}

// \b at the end of the text written so far waits for the next byte; Flush
// decides it as the end of the text.
func TestFlushDecidesWordBoundary(t *testing.T) {
	t.Parallel()
	set := mustCompile(t, Options{}, mustWords(t, "w", "foo"))
	st := set.Stream()
	if out, _, _, _ := st.Write("a foo"); out != "a " || st.Held() != 3 {
		t.Fatalf("Write: %q, held %d; want \"a \" with \"foo\" held", out, st.Held())
	}
	out, evs, stop := st.Flush()
	if out != "***" || stop || len(evs) != 1 {
		t.Fatalf("Flush = %q %v %v", out, evs, stop)
	}
	if _, _, _, err := st.Write("x"); !errors.Is(err, ErrFlushed) {
		t.Fatalf("Write after Flush: %v", err)
	}
	st = set.Stream()
	st.Write("a foo")
	if out, _, _, _ := st.Write("d"); out != "food" {
		t.Fatalf("the next byte decided \\b: %q", out)
	}
}

// Bytes wait for the chunks that decide them, and no longer.
func TestDelay(t *testing.T) {
	t.Parallel()
	text := "Contact me at someone@example.com for details."
	if mx, mean := Delay(mustCompile(t, Options{}), chunk(text, 4)); mx != 0 || mean != 0 {
		t.Errorf("no rules: max %v mean %v; want 0", mx, mean)
	}
	mx, mean := Delay(mustCompile(t, Options{}, phone), chunk(text, 4))
	if mx != 0 || mean != 0 {
		t.Errorf("phone over a text without digits: max %v mean %v; want 0", mx, mean)
	}
	// The email's first bytes wait until it is complete, five chunks on.
	mx, mean = Delay(mustCompile(t, Options{}, email), chunk(text, 4))
	if mx < 4 || mean <= 0 || mean >= mx {
		t.Errorf("email: max %v mean %v; want the address's wait", mx, mean)
	}
}

// A chunk of a megabyte that is one long candidate (an email's local part
// that never gets its @) leaves no more than MaxHold held, and the text
// through unchanged.
func TestHugeChunkBounded(t *testing.T) {
	t.Parallel()
	set := mustCompile(t, Options{}, email, phone)
	st := set.Stream()
	big := strings.Repeat("a", 1<<20)
	out, _, _, err := st.Write(big)
	if err != nil || st.Held() > defaultMaxHold {
		t.Fatalf("held %d after a 1 MiB chunk, err %v; want at most %d", st.Held(), err, defaultMaxHold)
	}
	out2, _, _, _ := st.Write("@example.com")
	rest, _, _ := st.Flush()
	if got := out + out2 + rest; got != big[:len(big)-defaultMaxHold]+"[email]" {
		t.Fatalf("released %d bytes ending %q", len(got), got[max(0, len(got)-20):])
	}
	if set.Stats().Forced == 0 {
		t.Fatal("no forced release counted")
	}
}
