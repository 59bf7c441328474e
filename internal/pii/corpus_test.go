package pii

import (
	"bufio"
	"os"
	"slices"
	"strings"
	"testing"
)

type corpusLine struct {
	line int
	typ  Type
	want []string // none when the text holds no entity of typ
	text string
}

func readCorpus(t *testing.T) []corpusLine {
	t.Helper()
	f, err := os.Open("testdata/corpus.tsv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	unescape := strings.NewReplacer(`\\`, `\`, `\t`, "\t", `\n`, "\n")
	var out []corpusLine
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		l := sc.Text()
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		parts := strings.SplitN(l, "\t", 3)
		if len(parts) != 3 || !Type(parts[0]).Valid() {
			t.Fatalf("corpus line %d: want type<TAB>value or -<TAB>text, got %q", n, l)
		}
		c := corpusLine{line: n, typ: Type(parts[0]), text: unescape.Replace(parts[2])}
		if parts[1] != "-" {
			for _, w := range strings.Split(parts[1], " | ") {
				w = unescape.Replace(w)
				if !strings.Contains(c.text, w) {
					t.Fatalf("corpus line %d: the text does not hold %q", n, w)
				}
				c.want = append(c.want, w)
			}
		}
		out = append(out, c)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestCorpusPrecisionRecall scans the labelled corpus, each line for its own type, and holds precision and
// recall to a floor per type and overall.
func TestCorpusPrecisionRecall(t *testing.T) {
	lines := readCorpus(t)
	if len(lines) < 200 {
		t.Fatalf("the corpus has %d lines, want at least 200", len(lines))
	}
	type counts struct{ tp, fp, fn, lines int }
	per := map[Type]*counts{}
	var all counts
	for _, c := range lines {
		k := per[c.typ]
		if k == nil {
			k = &counts{}
			per[c.typ] = k
		}
		k.lines++
		missing := slices.Clone(c.want)
		for _, f := range Scan(c.text, []Type{c.typ}) {
			got := c.text[f.Start:f.End]
			if i := slices.Index(missing, got); i >= 0 {
				missing = slices.Delete(missing, i, i+1)
				k.tp++
			} else {
				k.fp++
				t.Logf("line %d: false positive %s %q in %q", c.line, c.typ, got, c.text)
			}
		}
		for _, w := range missing {
			k.fn++
			t.Logf("line %d: missed %s %q in %q", c.line, c.typ, w, c.text)
		}
	}
	ratio := func(a, b int) float64 {
		if b == 0 {
			return 1
		}
		return float64(a) / float64(b)
	}
	t.Logf("%-7s %5s %4s %4s %4s %9s %6s", "type", "lines", "tp", "fp", "fn", "precision", "recall")
	for _, typ := range Types() {
		k := per[typ]
		if k == nil {
			t.Errorf("the corpus has no line for %s", typ)
			continue
		}
		p, r := ratio(k.tp, k.tp+k.fp), ratio(k.tp, k.tp+k.fn)
		t.Logf("%-7s %5d %4d %4d %4d %9.3f %6.3f", typ, k.lines, k.tp, k.fp, k.fn, p, r)
		if p < 0.9 || r < 0.9 {
			t.Errorf("%s: precision %.3f, recall %.3f; want both at least 0.9", typ, p, r)
		}
		all.tp, all.fp, all.fn, all.lines = all.tp+k.tp, all.fp+k.fp, all.fn+k.fn, all.lines+k.lines
	}
	p, r := ratio(all.tp, all.tp+all.fp), ratio(all.tp, all.tp+all.fn)
	t.Logf("%-7s %5d %4d %4d %4d %9.3f %6.3f", "all", all.lines, all.tp, all.fp, all.fn, p, r)
	if p < 0.95 || r < 0.95 {
		t.Errorf("overall: precision %.3f, recall %.3f; want both at least 0.95", p, r)
	}
}
