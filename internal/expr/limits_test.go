package expr

import (
	"errors"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// hostilePayload is a JSON object whose s is n bytes of "a".
func hostilePayload(n int) []byte {
	return []byte(`{"s":"` + strings.Repeat("a", n) + `","p":"(a{1000}){1000}","n":[0,0,0,0,0,0,0,0,0,0]}`)
}

// allocated returns the bytes f allocates, as TotalAlloc counts them.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestMemoryLimitHostile evaluates expressions that would build gigabytes
// from one 200 KB payload: each must fail with the memory limit error,
// having allocated a small multiple of the payload, not the result.
func TestMemoryLimitHostile(t *testing.T) {
	e := testEnv(t)
	m := Message{Subject: "ai.x", Data: hostilePayload(200 << 10)}
	const bound = 64 << 20
	for _, src := range []string{
		// The issue: 200 KB × 200 KB = 40 GB in one call.
		`payload.s.replace("a", payload.s).size() > 0`,
		`payload.s.replace("a", payload.s, 100000).size() > 0`,
		`payload.s.replace("a", "aaaa").replace("a", "aaaa").replace("a", "aaaa").size() > 0`,
		`[payload.s, payload.s, payload.s, payload.s, payload.s, payload.s, payload.s, payload.s].join(payload.s).size() > 0`,
		`payload.s.split("").join(payload.s).size() > 0`,
		`(payload.s + payload.s + payload.s + payload.s + payload.s + payload.s + payload.s + payload.s + payload.s + payload.s).size() > 0`,
		`[1, 2, 3, 4, 5, 6, 7, 8, 9, 10].map(x, payload.s + payload.s).size() > 0`,
		`payload.n.map(x, payload.n.map(y, payload.s + payload.s)).size() > 0`,
		`"%s%s%s%s%s%s%s%s%s%s".format([payload.s, payload.s, payload.s, payload.s, payload.s, payload.s, payload.s, payload.s, payload.s, payload.s]).size() > 0`,
		`strings.quote(strings.quote(strings.quote(strings.quote(payload.s)))).size() > 0`,
		`bytes(payload.s + payload.s + payload.s + payload.s).size() > 0`,
		`payload.s.upperAscii().lowerAscii().upperAscii().lowerAscii().upperAscii().lowerAscii().upperAscii().lowerAscii().size() > 0`,
	} {
		t.Run(src, func(t *testing.T) {
			p, err := e.Compile(src)
			if err != nil {
				t.Fatal(err)
			}
			var ok bool
			n := allocated(func() { ok, err = p.Match(m) })
			if ok || err == nil {
				t.Fatalf("Match = %v, %v; want the memory limit error", ok, err)
			}
			if !errors.Is(err, ErrMemoryLimit) || !errors.Is(err, ErrEval) {
				t.Fatalf("error %q does not match ErrMemoryLimit and ErrEval", err)
			}
			if !strings.Contains(err.Error(), "memory limit exceeded") {
				t.Fatalf("error %q does not name the limit", err)
			}
			if n > bound {
				t.Fatalf("allocated %d bytes, bound %d", n, bound)
			}
			t.Logf("%v; allocated %d bytes", err, n)
		})
	}
}

// TestMemoryLimitCount checks the running total: each call fits, the sum
// does not.
func TestMemoryLimitCount(t *testing.T) {
	e, err := NewEnvConfig(Config{MaxEvalBytes: 1000})
	if err != nil {
		t.Fatal(err)
	}
	m := Message{Data: []byte(`{"s":"` + strings.Repeat("x", 100) + `"}`)}
	// Budget: 1000 + 2 × the payload (~220) = ~1,220 bytes.
	p, err := e.Compile(`(payload.s + payload.s).size() == 200`)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := p.Match(m); !ok || err != nil {
		t.Fatalf("one concatenation: %v, %v", ok, err)
	}
	p, err = e.Compile(`[1, 2, 3, 4, 5, 6, 7, 8].all(i, (payload.s + payload.s).size() == 200)`)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := p.Match(m); ok || !errors.Is(err, ErrMemoryLimit) {
		t.Fatalf("eight concatenations of 200 bytes under a ~1,220-byte budget: %v, %v", ok, err)
	}
	// The budget is per evaluation: the first program still passes after.
	p, _ = e.Compile(`(payload.s + payload.s).size() == 200`)
	for range 3 {
		if ok, err := p.Match(m); !ok || err != nil {
			t.Fatalf("repeat: %v, %v", ok, err)
		}
	}
}

// TestMemoryLimitNormal runs ordinary expressions that build strings over a
// large payload: they stay within the budget.
func TestMemoryLimitNormal(t *testing.T) {
	e := testEnv(t)
	m := Message{Header: map[string][]string{"AI-Tenant": {"acme"}}, Data: hostilePayload(200 << 10)}
	for src, want := range map[string]string{
		`payload.s.upperAscii().size()`:                            "204800",
		`payload.s.replace("a", "b").startsWith("bbb")`:            "true",
		`(tenant + "/" + payload.s).size()`:                        "204805",
		`(payload.s + ",x,y").split(",").size()`:                   "3",
		`[payload.s, tenant].join(",").endsWith(",acme")`:          "true",
		`"%s-%d".format([tenant, 3])`:                              "acme-3",
		`payload.n.map(x, x + 1.0).size()`:                         "10",
		`(payload.n + [1]).size()`:                                 "11",
		`payload.s.substring(0, 3) + payload.s.charAt(1)`:          "aaaa",
		`string(bytes(payload.s)).size()`:                          "204800",
		`strings.quote(tenant)`:                                    `"acme"`,
		`payload.s.matches("^a+$")`:                                "true",
		`tenant.matches(payload.s.substring(0, 1) + "?cme")`:       "true",
		`payload.s.replace("a", "bb", 2).substring(0, 5)`:          "bbbba",
		`payload.s.reverse().size()`:                               "204800",
		`payload.n.map(x, tenant + string(x)).join("").size() > 0`: "true",
		`payload.s.lowerAscii().size() > 0`:                        "true",
	} {
		p, err := e.CompileKey(`string(` + src + `)`)
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		got, err := p.Key(m)
		if err != nil || got != want {
			t.Errorf("%s = %q, %v; want %q", src, got, err, want)
		}
	}
}

// TestRegexLimit refuses regular expressions whose program would be large:
// constant ones when compiled, ones read from the message when evaluated.
func TestRegexLimit(t *testing.T) {
	e := testEnv(t)
	big := strings.Repeat(`a{1000}`, 8)
	if _, err := e.Compile(`model.matches("` + big + `")`); !errors.Is(err, ErrCompile) {
		t.Fatalf("constant pattern %s: %v, want a compile error", big, err)
	}
	p, err := e.Compile(`model.matches(payload.p)`)
	if err != nil {
		t.Fatal(err)
	}
	for _, pat := range []string{big, strings.Repeat("a", 1<<20), `(((a{100}){100}){100})`} {
		data := []byte(`{"p":` + strconv.Quote(pat) + `}`)
		var ok bool
		n := allocated(func() { ok, err = p.Match(Message{Data: data}) })
		if ok || err == nil || !strings.Contains(err.Error(), "regular expression") {
			t.Errorf("pattern %.40s: %v, %v; want a regex limit error", pat, ok, err)
		}
		if n > 16<<20 {
			t.Errorf("pattern %.40s: allocated %d bytes", pat, n)
		}
	}
	data := []byte(`{"p":"^ll[a-z]+\\d$"}`)
	if ok, err := p.Match(Message{Header: map[string][]string{"AI-Model": {"llama3"}}, Data: data}); !ok || err != nil {
		t.Fatalf("small pattern: %v, %v", ok, err)
	}
}

// TestEveryGrowthFunctionBounded checks that every function of the
// environment that returns a string, bytes or a list is either planned as a
// boundedCall or returns at most the size of its arguments.
func TestEveryGrowthFunctionBounded(t *testing.T) {
	// Results no larger than an argument (a substring, a conversion of a
	// number, a list of at most the comprehension's elements).
	small := map[string]bool{
		"charAt": true, "substring": true, "trim": true, "type": true, "dyn": true,
		"getTimezone": true, "optional.of": true, "optional.ofNonZeroValue": true, "optional.none": true,
		"value": true, "or": true, "orValue": true, "_?._": true, "_[?_]": true, "_[_]": true,
		"_?_:_": true, "optMap": true, "optFlatMap": true, "unwrapOpt": true, "optional.unwrap": true,
	}
	e := testEnv(t)
	for name, fd := range e.cel.Functions() {
		if _, ok := sizers[name]; ok || small[name] {
			continue
		}
		for _, o := range fd.OverloadDecls() {
			switch o.ResultType().String() {
			case "string", "bytes":
				t.Errorf("%s (%s) returns %s and is not bounded", name, o.ID(), o.ResultType())
			}
			if strings.HasPrefix(o.ResultType().String(), "list") {
				t.Errorf("%s (%s) returns %s and is not bounded", name, o.ID(), o.ResultType())
			}
		}
	}
}

// TestEvalTimeout: a metered program stops at its deadline.
func TestEvalTimeout(t *testing.T) {
	e, err := NewEnvConfig(Config{EvalTimeout: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	p, err := e.Compile(`payload.xs.all(x, payload.xs.all(y, x + y >= 0.0))`)
	if err != nil || !p.metered {
		t.Fatalf("%v, metered %v", err, p != nil && p.metered)
	}
	data := []byte(`{"xs":[` + strings.Repeat("1,", 2000) + `1]}`)
	if ok, err := p.Match(Message{Data: data}); ok || !errors.Is(err, ErrEval) || !strings.Contains(err.Error(), "deadline") {
		t.Fatalf("Match = %v, %v; want a deadline error", ok, err)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := (Config{MaxEvalBytes: -1}).Validate(); err == nil {
		t.Error("negative MaxEvalBytes accepted")
	}
	if _, err := NewEnvConfig(Config{EvalTimeout: -1}); err == nil {
		t.Error("negative EvalTimeout accepted")
	}
	c := Config{}.withDefaults()
	if c.MaxEvalBytes != DefaultMaxEvalBytes || c.EvalTimeout != DefaultEvalTimeout {
		t.Errorf("defaults: %+v", c)
	}
}

// BenchmarkMemoryLimitAttack is the expression of the issue over a 200 KB
// payload: it fails quickly, without building the result.
func BenchmarkMemoryLimitAttack(b *testing.B) {
	e := testEnv(b)
	p, err := e.Compile(`payload.s.replace("a", payload.s).size() > 0`)
	if err != nil {
		b.Fatal(err)
	}
	m := Message{Data: hostilePayload(200 << 10)}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Match(m); !errors.Is(err, ErrMemoryLimit) {
			b.Fatal(err)
		}
	}
}

// TestRegexWorkBounded: a pattern under the program limit over a large
// payload is still work in proportion to their product, and a match cannot
// be interrupted by the evaluation's deadline. Such a match is refused
// before it starts, constant pattern or one read from the message, and a
// match within the bound still runs.
func TestRegexWorkBounded(t *testing.T) {
	e := testEnv(t)
	const pattern = `a.{1000}.{1000}c` // about 2,000 instructions
	huge := Message{Data: []byte(`{"s":"` + strings.Repeat("a", 900<<10) + `","p":"` + pattern + `"}`)}
	for _, src := range []string{`payload.s.matches("` + pattern + `")`, `payload.s.matches(payload.p)`, `matches(payload.s, "` + pattern + `")`} {
		p, err := e.Compile(src)
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		start := time.Now()
		ok, err := p.Match(huge)
		if ok || err == nil || !strings.Contains(err.Error(), "regular expression match too large") {
			t.Errorf("%s over 900 KiB: %v, %v; want the match refused", src, ok, err)
		}
		t.Logf("%s over 900 KiB refused in %v", src, time.Since(start))
		small := Message{Data: []byte(`{"s":"a` + strings.Repeat("b", 2000) + `c","p":"` + pattern + `"}`)}
		if ok, err := p.Match(small); !ok || err != nil {
			t.Errorf("%s over 2 KiB: %v, %v; want a match", src, ok, err)
		}
	}
}
