package streamfilter

import (
	"reflect"
	"testing"
)

// FuzzStream holds streams to the reference: for any text, subset of
// fuzzRules and chunking, the released text, events and stop of a stream
// equal those of filtering the whole text at once.
func FuzzStream(f *testing.F) {
	f.Add("mail bob@example.com or call 555-123-4567", uint16(0xffff), []byte{3, 1, 4, 1, 5, 9, 2, 6})
	f.Add("a class in new york city, see c++ and ass", uint16(0xffff), []byte{1})
	f.Add("#head\ncard 4111111111111111 ending", uint16(0xffff), []byte{2, 7, 1, 8})
	f.Add("any café 日本 é <b> x xyz forbidden end", uint16(0xffff), []byte{0, 1, 2})
	f.Add("x\xe2\x82y\xff 12\n34", uint16(0x1fff), []byte{1, 1})
	f.Add("sing 9 1234567812345670 bob@x.io", uint16(0x0f0f), []byte{5})
	all := fuzzRules()
	f.Fuzz(func(t *testing.T, text string, mask uint16, cuts []byte) {
		if len(text) > 256 {
			return // the reference skips runes with a repeat count: keep it quick
		}
		var rules []Rule
		for i, r := range all {
			if mask&(1<<i) != 0 {
				rules = append(rules, r)
			}
		}
		set, err := Compile(rules, Options{MaxHold: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		var chunks []string
		for i, rest := 0, text; len(rest) > 0; i++ {
			n := 1
			if len(cuts) > 0 {
				n = int(cuts[i%len(cuts)]) % 9
			}
			if n == 0 {
				chunks = append(chunks, "") // an empty chunk, then one byte
				n = 1
			}
			n = min(n, len(rest))
			chunks = append(chunks, rest[:n])
			rest = rest[n:]
		}
		out, events, stop, err := filterChunks(set, chunks)
		if err != nil {
			t.Fatal(err)
		}
		wOut, wEvents, wStop := filterWhole(rules, text)
		if out != wOut || stop != wStop || !reflect.DeepEqual(events, wEvents) {
			t.Fatalf("text %q in chunks %q:\n got %q %v stop=%v\nwant %q %v stop=%v", text, chunks, out, events, stop, wOut, wEvents, wStop)
		}
		if f := set.Stats().Forced; f != 0 {
			t.Fatalf("%d forced releases with MaxHold past the text", f)
		}
	})
}
