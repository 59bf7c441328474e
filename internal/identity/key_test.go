package identity

import (
	"bytes"
	"strings"
	"testing"
)

func TestKeyRoundTrip(t *testing.T) {
	for _, name := range []string{"a", "ingest-svc", "gpu_7", "x_" + strings.Repeat("y", 60)} {
		k, err := newKey(name)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ParseKey(k.String())
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got.Name != name || got.ID != k.ID || !bytes.Equal(got.Secret, k.Secret) {
			t.Fatalf("%s: parsed %+v", name, got)
		}
		if !secretMatches(got.Secret, hashSecret(k.Secret)) || secretMatches(make([]byte, 32), hashSecret(k.Secret)) {
			t.Fatal("hash comparison")
		}
	}
}

func TestParseKeyRefuses(t *testing.T) {
	k, _ := newKey("bob")
	good := k.String()
	for name, s := range map[string]string{
		"empty":         "",
		"prefix only":   "sq_",
		"no prefix":     strings.TrimPrefix(good, "sq_"),
		"no name":       "sq_" + good[len("sq_bob_"):],
		"short secret":  good[:len(good)-1],
		"long secret":   good + "A",
		"bad id":        strings.Replace(good, k.ID, strings.ToUpper(k.ID), 1),
		"name with dot": strings.Replace(good, "sq_bob_", "sq_b.b_", 1),
		"huge":          "sq_" + strings.Repeat("a", 10000) + good[len("sq_bob"):],
		"padded secret": good[:len(good)-2] + "==",
		"space":         " " + good,
		"wrong sep":     strings.Replace(good, "_"+k.ID+"_", "-"+k.ID+"_", 1),
	} {
		if _, err := ParseKey(s); err != ErrBadKey {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// FuzzParseKey: whatever the string, ParseKey returns a key that prints
// back as the same string, or ErrBadKey; it never panics.
func FuzzParseKey(f *testing.F) {
	k, _ := newKey("ingest-svc")
	for _, s := range []string{k.String(), "", "sq_", "sq_a_" + strings.Repeat("a", 12) + "_" + strings.Repeat("A", 43), "sq___"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k, err := ParseKey(s)
		if err != nil {
			// The sentinel itself: an error never carries the string,
			// which may be a mistyped secret.
			if err != ErrBadKey {
				t.Fatalf("error %v is not ErrBadKey", err)
			}
			return
		}
		if k.String() != s {
			t.Fatalf("%q parsed to %+v, prints as %q", s, k, k.String())
		}
	})
}
