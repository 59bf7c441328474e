package pii

import (
	"errors"
	"regexp"
	"strings"
	"testing"
)

func TestParseTypes(t *testing.T) {
	got, err := ParseTypes(" email,cn-id ,email,secret")
	if err != nil || len(got) != 3 || got[0] != Email || got[1] != CNID || got[2] != Secret {
		t.Fatalf("ParseTypes = %v, %v; want [email cn-id secret]", got, err)
	}
	for _, bad := range []string{"email,passport", "", " , "} {
		_, err := ParseTypes(bad)
		if !errors.Is(err, ErrUnknownType) {
			t.Errorf("ParseTypes(%q) = %v; want ErrUnknownType", bad, err)
		}
	}
	_, err = ParseTypes("email,passport")
	if !strings.Contains(err.Error(), `"passport"`) {
		t.Errorf("the error %q does not name the unknown type", err)
	}
	if len(Types()) != 8 {
		t.Errorf("Types() = %v; want the 8 types", Types())
	}
}

func TestMaskAndPlaceholder(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{Mask(Email), "[EMAIL]"},
		{Mask(CNID), "[CN_ID]"},
		{Placeholder(Email, 1), "<EMAIL_1>"},
		{Placeholder(CNID, 12), "<CN_ID_12>"},
		{Placeholder(Secret, 3), "<SECRET_3>"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

// TestValidate holds each type's checksum and semantic checks on values alone.
func TestValidate(t *testing.T) {
	for _, c := range []struct {
		typ   Type
		value string
		want  bool
	}{
		{Email, "a.b@example.com", true},
		{Email, ".ab@example.com", false},
		{Email, "ab@example", false},
		{Email, "ab@exa_mple.com", false},
		{Email, "ab@example.c0m", false},
		{Email, strings.Repeat("a", 65) + "@example.com", false},
		{Phone, "+1 650-253-0000", true},
		{Phone, "13800138000", true},
		{Phone, "0086 138 0013 8000", true},
		{Phone, "12800138000", false},       // 12 is no mobile prefix
		{Phone, "+1 123 456 7890", false},   // no NANP area code starts with 1
		{Phone, "+44 (20 7946 0958", false}, // unbalanced
		{Phone, "+1 650-253.0000", false},   // a dash and a dot
		{Phone, "650 253 0000", false},      // no country code
		{CNID, "11010519491231002X", true},
		{CNID, "11010519491231002x", true},
		{CNID, "110105194912310021", false}, // check character
		{CNID, "110105194902300025", false}, // 30 February
		{CNID, "710105194912310023", false}, // region 7
		{CNID, "1101051949123100", false},   // short
		{Card, "4111 1111 1111 1111", true},
		{Card, "378282246310005", true},
		{Card, "4111 1111 1111 1112", false},     // Luhn
		{Card, "4111-1111 1111-1111", false},     // mixed separators
		{Card, "41 11 11 11 11 11 11 11", false}, // groups of two
		{Card, "3782822463100051", false},        // Amex is 15 digits
		{Card, "9000000000000009", false},        // no issuer
		{IBAN, "DE89 3704 0044 0532 0130 00", true},
		{IBAN, "DE89370400440532013000", true},
		{IBAN, "DE88370400440532013000", false},     // check digits
		{IBAN, "DE8937040044053201300", false},      // length
		{IBAN, "DE89 37040 04405 32013 000", false}, // groups
		{IBAN, "US12345678901234567890", false},     // no IBAN country
		{SSN, "078-05-1120", true},
		{SSN, "078 05 1120", true},
		{SSN, "078051120", true},
		{SSN, "078-05 1120", false},
		{SSN, "000-05-1120", false},
		{SSN, "666-05-1120", false},
		{SSN, "912-05-1120", false},
		{SSN, "078-00-1120", false},
		{SSN, "078-05-0000", false},
		{IP, "192.168.0.1", true},
		{IP, "2001:db8::1", true},
		{IP, "::ffff:10.0.0.1", true},
		{IP, "256.1.1.1", false},
		{IP, "01.2.3.4", false},
		{IP, "fe80::1%eth0", false},
		{IP, "a::b", false},
		{IP, "12:30:45", false},
		{Secret, "AKIAIOSFODNN7EXAMPLE", true},
		{Secret, "AKIAIOSFODNN7EXAMPL", false},
		{Secret, "sk-proj-Ab3dE5gH7jK9mN1pQ3sT5vX7", true},
		{Secret, "sk-learn-compatible-estimators", false},
		{Secret, "-----BEGIN EC PRIVATE KEY-----", true},
		{Secret, "-----BEGIN PUBLIC KEY-----", false},
		{Secret, "eyJhbGciOiJub25lIn0.eyJzdWIiOiJhIn0.", true},
		{Secret, "eyJ0eXAiOiJKV1QifQ.eyJzdWIiOiJ4In0.c2ln", false}, // no "alg"
		{Secret, "pk_live_4eC39HqLyjWDarjtT1zdp7dc", false},
	} {
		if got := Validate(c.typ, c.value); got != c.want {
			t.Errorf("Validate(%s, %q) = %v, want %v", c.typ, c.value, got, c.want)
		}
	}
}

// TestScanOrderAndOverlap: findings come sorted and never overlap; where two detectors find overlapping values
// the leftmost, then the longest, wins.
func TestScanOrderAndOverlap(t *testing.T) {
	text := "ip ::ffff:192.0.2.128, mail x@example.com, phone +86 138 0013 8000, card 4111111111111111, " +
		"id 11010519491231002X, v6 2001:db8::1."
	got := Scan(text, nil)
	want := []struct {
		typ   Type
		value string
	}{
		{IP, "::ffff:192.0.2.128"},
		{Email, "x@example.com"},
		{Phone, "+86 138 0013 8000"},
		{Card, "4111111111111111"},
		{CNID, "11010519491231002X"},
		{IP, "2001:db8::1"},
	}
	if len(got) != len(want) {
		t.Fatalf("Scan found %v; want %d findings", got, len(want))
	}
	for i, f := range got {
		if f.Type != want[i].typ || text[f.Start:f.End] != want[i].value {
			t.Errorf("finding %d: %s %q; want %s %q", i, f.Type, text[f.Start:f.End], want[i].typ, want[i].value)
		}
	}
	if only := Scan(text, []Type{Card}); len(only) != 1 || only[0].Type != Card {
		t.Errorf("Scan for cards only = %v", only)
	}
}

// TestScanCleanTextAllocatesNothing: a text without candidates costs no allocation.
func TestScanCleanTextAllocatesNothing(t *testing.T) {
	text := strings.Repeat(benchClean+"\n", 8)
	if n := testing.AllocsPerRun(100, func() { Scan(text, nil) }); n != 0 {
		t.Errorf("Scan of a clean text allocates %v times", n)
	}
}

// TestDetectorsFindCorpus: the detectors a stream scanner gets find every labelled value of the corpus with
// their patterns and checks alone.
func TestDetectorsFindCorpus(t *testing.T) {
	ds := Detectors(nil)
	if s, e := len(Detectors([]Type{Secret})), len(Detectors([]Type{Email})); s < 5 || e != 1 {
		t.Fatalf("Detectors gives %d for secret and %d for email", s, e)
	}
	for _, c := range readCorpus(t) {
		for _, want := range c.want {
			found := false
			for _, d := range ds {
				if d.Type != c.typ {
					continue
				}
				re := regexp.MustCompile(d.Pattern)
				for _, m := range re.FindAllStringSubmatchIndex(c.text, -1) {
					s, e := m[0], m[1]
					if len(m) >= 4 && m[2] >= 0 {
						s, e = m[2], m[3]
					}
					if c.text[s:e] == want && d.Validate(want) && len(want) <= d.MaxLen {
						found = true
					}
				}
			}
			if !found && c.typ != Card && c.typ != Phone && c.typ != IBAN {
				// Those three may need Scan's retry on sub-spans; the rest must not.
				t.Errorf("line %d: no detector of %s finds %q", c.line, c.typ, want)
			}
			if !Validate(c.typ, want) {
				t.Errorf("line %d: Validate(%s, %q) is false", c.line, c.typ, want)
			}
		}
	}
}

// TestScanHostilePhonesBounded: a text made of phone-shaped candidates gets libphonenumber's costly check (some
// 40 µs) maxLibChecks times at most; past that the structural check decides, erring towards redacting (a number
// the metadata refuses, in an area code that does not exist, is then taken).
func TestScanHostilePhonesBounded(t *testing.T) {
	const bad = "+1 123 456 7890; " // no NANP area code starts with 1
	const n = 1000
	text := strings.Repeat(bad, n)
	got := Scan(text, []Type{Phone})
	if len(got) < n-maxLibChecks || len(got) == n {
		t.Fatalf("found %d of %d phones; want all but the first (at most %d) checked by the library",
			len(got), n, maxLibChecks)
	}
	if got[0].Start == 0 {
		t.Error("the first candidate, checked by the library, was taken")
	}
	if Validate(Phone, "+1 123 456 7890") {
		t.Error("Validate, which has no budget, takes the number")
	}
}

// TestScanRefineBounded: a candidate of more groups than any value has is not retried group by group.
func TestScanRefineBounded(t *testing.T) {
	// 19 digits in single-digit groups, then a card: the card is found, the long run is not retried.
	text := strings.Repeat("1 ", 30) + "x 4111 1111 1111 1111"
	got := Scan(text, []Type{Card})
	if len(got) != 1 || text[got[0].Start:got[0].End] != "4111 1111 1111 1111" {
		t.Errorf("Scan = %v", got)
	}
}
