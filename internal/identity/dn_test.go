package identity

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"strings"
	"testing"
)

func TestParseDN(t *testing.T) {
	for in, want := range map[string]string{
		"CN=gpu-7,O=acme":                "CN=gpu-7,O=acme",
		"cn=gpu-7, o=acme":               "CN=gpu-7,O=acme",
		"CN = gpu-7 , O = acme":          "CN=gpu-7,O=acme",
		"2.5.4.3=gpu-7":                  "CN=gpu-7",
		"CN=a\\,b,O=x\\+y":               "CN=a\\,b,O=x\\+y",
		"CN=a\\2Cb":                      "CN=a\\,b",
		"CN=\\ lead,O=trail\\ ":          "CN=\\ lead,O=trail\\ ",
		"CN=\\#hash":                     "CN=\\#hash",
		"UID=b+CN=a,DC=example,DC=com":   "CN=a+UID=b,DC=example,DC=com",
		"emailaddress=a@b.c,CN=x":        "emailAddress=a@b.c,CN=x",
		"1.2.3.4=x=y":                    "1.2.3.4=x=y",
		"CN=caf\\C3\\A9":                 "CN=café",
		"CN=line\\0Abreak":               "CN=line\\0Abreak",
		"CN=Gpu-7":                       "CN=Gpu-7", // values keep their case
		"OU=a,OU=b,O=acme,L=x,ST=y,C=DE": "OU=a,OU=b,O=acme,L=x,ST=y,C=DE",
	} {
		got, err := CanonicalDN(in)
		if err != nil {
			t.Errorf("%q: %v", in, err)
			continue
		}
		if got != want {
			t.Errorf("%q: canonical %q, want %q", in, got, want)
		}
	}
	for in, want := range map[string]string{
		"":                           "empty",
		"  ":                         "empty",
		strings.Repeat("CN=x,", 300): "longer than 1024",
		strings.Repeat("CN=x,", 40):  "more than 32 attributes",
		"CN":                         "'=' expected",
		"=x":                         "attribute type missing",
		"CN=":                        "empty value",
		"CN=x,":                      "attribute type missing",
		"CN=x;O=y":                   "not ';'",
		"businessCategory=x":         "unknown attribute type",
		"1=x":                        "at least two arcs",
		"1.02=x":                     "leading zeros",
		"3.1=x":                      "not a valid object identifier",
		"1.2.99999999999=x":          "below 2^31",
		"CN=#0403616263":             "#hex form",
		"CN=a\"b":                    "must be escaped",
		"CN=a<b":                     "must be escaped",
		"CN=a\\":                     "at the end",
		"CN=a\\zz":                   "bad escape",
		"CN=\\FF":                    "not UTF-8",
		"CN=a\nb":                    "control character",
		"CN=a,O=b c,O":               "'=' expected",
		"C N=x":                      "'=' expected",
	} {
		_, err := ParseDN(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error saying %q", in, err, want)
		}
	}
}

// The canonical text of a certificate's subject is that of the subject
// as written, whatever string types the certificate uses.
func TestCertSubject(t *testing.T) {
	subject := func(seq pkix.RDNSequence) *x509.Certificate {
		raw, err := asn1.Marshal(seq)
		if err != nil {
			t.Fatal(err)
		}
		return &x509.Certificate{RawSubject: raw}
	}
	cn := asn1.ObjectIdentifier{2, 5, 4, 3}
	o := asn1.ObjectIdentifier{2, 5, 4, 10}
	printable, err := asn1.MarshalWithParams("acme", "printable")
	if err != nil {
		t.Fatal(err)
	}
	cert := subject(pkix.RDNSequence{
		{{Type: o, Value: asn1.RawValue{FullBytes: printable}}},
		{{Type: cn, Value: "gpu-7"}},
	})
	if got := CertSubject(cert); got != "CN=gpu-7,O=acme" {
		t.Fatalf("subject %q", got)
	}
	for name, c := range map[string]*x509.Certificate{
		"empty":     subject(pkix.RDNSequence{}),
		"not text":  subject(pkix.RDNSequence{{{Type: cn, Value: 7}}}),
		"empty CN":  subject(pkix.RDNSequence{{{Type: cn, Value: ""}}}),
		"garbage":   {RawSubject: []byte{0x30, 0x03, 0x01}},
		"trailing":  {RawSubject: append(append([]byte{}, cert.RawSubject...), 0)},
		"empty set": subject(pkix.RDNSequence{{}}),
	} {
		if got := CertSubject(c); got != "" {
			t.Errorf("%s: subject %q, want none", name, got)
		}
	}
}

// FuzzParseDN: the parser never panics, stays within its bounds, its
// canonical text parses to itself, and a certificate whose subject is the
// parsed DN has that canonical text.
func FuzzParseDN(f *testing.F) {
	for _, s := range []string{"CN=gpu-7,O=acme", "UID=b+CN=a,DC=x", "CN=\\ a\\,b\\2C\\ ", "1.2.3=x", "CN=#00", "cn = x , o = y",
		"CN=caf\\C3\\A9", "CN=a\\0A", "emailAddress=a@b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		dn, err := ParseDN(s)
		if err != nil {
			return
		}
		canon := dn.String()
		again, err := CanonicalDN(canon)
		if err != nil {
			t.Fatalf("%q: canonical %q does not parse: %v", s, canon, err)
		}
		if again != canon {
			t.Fatalf("%q: canonical %q parses to %q", s, canon, again)
		}
		seq, err := dn.RDNSequence()
		if err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		raw, err := asn1.Marshal(seq)
		if err != nil {
			return // a value ASN.1 cannot hold as UTF8String
		}
		if got := CertSubject(&x509.Certificate{RawSubject: raw}); got != canon {
			t.Fatalf("%q: certificate subject %q, want %q", s, got, canon)
		}
	})
}

// BenchmarkCertSubject is what the certificate path adds to a connection
// before the snapshot lookup: the subject's canonical text.
func BenchmarkCertSubject(b *testing.B) {
	seq, err := DN{{{Type: "CN", Value: "gpu-7"}}, {{Type: "OU", Value: "inference"}}, {{Type: "O", Value: "acme"}}, {{Type: "C", Value: "DE"}}}.RDNSequence()
	if err != nil {
		b.Fatal(err)
	}
	raw, err := asn1.Marshal(seq)
	if err != nil {
		b.Fatal(err)
	}
	cert := &x509.Certificate{RawSubject: raw}
	b.ReportAllocs()
	for b.Loop() {
		if CertSubject(cert) != "CN=gpu-7,OU=inference,O=acme,C=DE" {
			b.Fatal("subject")
		}
	}
}
