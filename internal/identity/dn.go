package identity

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// A certificate subject maps a TLS client certificate to a user
// (docs/security.md, How the NATS door authenticates). It is written as an
// RFC 4514 distinguished name, most specific attribute first, as
// `openssl x509 -noout -subject -nameopt RFC2253` prints it:
// "CN=gpu-7,O=acme". ParseDN reads that form; CertSubject gives the same
// canonical text for a certificate, and a user is found by comparing the
// two texts exactly.
//
// The rules, strict on purpose so that two spellings cannot name two
// different certificates:
//
//   - attribute types are the names below (any case) or dotted OIDs; an
//     OID with a name becomes the name;
//   - values compare byte for byte, case included, after unescaping (`\,`
//     or `\2C`); a value in `#hex` form is not taken;
//   - spaces around ',', '+' and '=' are ignored; a value's own leading or
//     trailing space is written escaped (`\ `);
//   - the attributes of a multi-valued RDN ("CN=a+UID=b") are a set: their
//     order does not matter;
//   - no value may be empty, and a certificate with an empty subject, or a
//     value that is not a string or not UTF-8, maps to no one.
const (
	maxDNLen   = 1024 // characters of a cert subject as written
	maxDNAttrs = 32   // attributes in one subject
	maxOIDLen  = 64   // characters of one dotted OID
)

// dnNames are the attribute types known by name: RFC 4514's, and
// emailAddress, which OpenSSL prints in subjects.
var dnNames = []struct {
	name string
	oid  asn1.ObjectIdentifier
}{
	{"CN", asn1.ObjectIdentifier{2, 5, 4, 3}},
	{"SERIALNUMBER", asn1.ObjectIdentifier{2, 5, 4, 5}},
	{"C", asn1.ObjectIdentifier{2, 5, 4, 6}},
	{"L", asn1.ObjectIdentifier{2, 5, 4, 7}},
	{"ST", asn1.ObjectIdentifier{2, 5, 4, 8}},
	{"STREET", asn1.ObjectIdentifier{2, 5, 4, 9}},
	{"O", asn1.ObjectIdentifier{2, 5, 4, 10}},
	{"OU", asn1.ObjectIdentifier{2, 5, 4, 11}},
	{"POSTALCODE", asn1.ObjectIdentifier{2, 5, 4, 17}},
	{"DC", asn1.ObjectIdentifier{0, 9, 2342, 19200300, 100, 1, 25}},
	{"UID", asn1.ObjectIdentifier{0, 9, 2342, 19200300, 100, 1, 1}},
	{"emailAddress", asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 9, 1}},
}

// DN is a parsed distinguished name: RDNs most specific first, each a set
// of attributes kept sorted.
type DN [][]DNAttr

// DNAttr is one attribute of a DN: its type (a name of dnNames or a
// dotted OID) and its value, unescaped.
type DNAttr struct {
	Type  string
	Value string
}

// ParseDN reads a certificate subject as written by an admin. The error
// names what is wrong, quoting the input: a subject is public.
func ParseDN(s string) (DN, error) {
	if len(s) > maxDNLen {
		return nil, fmt.Errorf("longer than %d characters", maxDNLen)
	}
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("empty")
	}
	p := dnParser{s: s}
	var dn DN
	var rdn []DNAttr
	n := 0
	for {
		a, err := p.attr()
		if err != nil {
			return nil, fmt.Errorf("%q: %w", s, err)
		}
		if n++; n > maxDNAttrs {
			return nil, fmt.Errorf("%q: more than %d attributes", s, maxDNAttrs)
		}
		rdn = append(rdn, a)
		p.spaces()
		if p.done() {
			dn = append(dn, sortRDN(rdn))
			return dn, nil
		}
		switch c := p.s[p.i]; c {
		case '+':
			p.i++
		case ',':
			p.i++
			dn = append(dn, sortRDN(rdn))
			rdn = nil
		default:
			return nil, fmt.Errorf("%q: unexpected %q at offset %d", s, c, p.i)
		}
	}
}

// String is the canonical text of dn: the form stored and compared.
func (dn DN) String() string {
	var b strings.Builder
	for i, rdn := range dn {
		if i > 0 {
			b.WriteByte(',')
		}
		for j, a := range rdn {
			if j > 0 {
				b.WriteByte('+')
			}
			b.WriteString(a.Type)
			b.WriteByte('=')
			escapeDNValue(&b, a.Value)
		}
	}
	return b.String()
}

// CanonicalDN is the canonical text of a certificate subject as written.
func CanonicalDN(s string) (string, error) {
	dn, err := ParseDN(s)
	if err != nil {
		return "", err
	}
	return dn.String(), nil
}

// CertSubject is the canonical text of cert's subject, "" when the
// subject cannot name a user (empty, a value that is not a UTF-8 string,
// an empty value).
func CertSubject(cert *x509.Certificate) string {
	var seq pkix.RDNSequence
	if rest, err := asn1.Unmarshal(cert.RawSubject, &seq); err != nil || len(rest) > 0 || len(seq) == 0 {
		return ""
	}
	dn := make(DN, 0, len(seq))
	n := 0
	// DER holds the most general RDN first; the text, the most specific.
	for _, set := range slices.Backward(seq) {
		if len(set) == 0 {
			return ""
		}
		rdn := make([]DNAttr, 0, len(set))
		for _, atv := range set {
			v, ok := atv.Value.(string)
			if !ok || v == "" || !utf8.ValidString(v) {
				return ""
			}
			if n++; n > maxDNAttrs {
				return ""
			}
			rdn = append(rdn, DNAttr{Type: oidName(atv.Type), Value: v})
		}
		dn = append(dn, sortRDN(rdn))
	}
	s := dn.String()
	if len(s) > 4*maxDNLen {
		return "" // no subject as written could be this long
	}
	return s
}

// RDNSequence is dn as a certificate holds it (most general RDN first),
// values as UTF8String: for tests that issue the certificate a subject
// names.
func (dn DN) RDNSequence() (pkix.RDNSequence, error) {
	seq := make(pkix.RDNSequence, 0, len(dn))
	for _, rdn := range slices.Backward(dn) {
		set := make([]pkix.AttributeTypeAndValue, 0, len(rdn))
		for _, a := range rdn {
			oid, err := typeOID(a.Type)
			if err != nil {
				return nil, err
			}
			set = append(set, pkix.AttributeTypeAndValue{Type: oid, Value: a.Value})
		}
		seq = append(seq, set)
	}
	return seq, nil
}

func sortRDN(rdn []DNAttr) []DNAttr {
	slices.SortFunc(rdn, func(a, b DNAttr) int {
		if c := strings.Compare(a.Type, b.Type); c != 0 {
			return c
		}
		return strings.Compare(a.Value, b.Value)
	})
	return rdn
}

func oidName(oid asn1.ObjectIdentifier) string {
	for _, n := range dnNames {
		if n.oid.Equal(oid) {
			return n.name
		}
	}
	return oid.String()
}

func typeOID(t string) (asn1.ObjectIdentifier, error) {
	for _, n := range dnNames {
		if n.name == t {
			return n.oid, nil
		}
	}
	var oid asn1.ObjectIdentifier
	for _, arc := range strings.Split(t, ".") {
		v, err := strconv.Atoi(arc)
		if err != nil {
			return nil, fmt.Errorf("attribute type %q", t)
		}
		oid = append(oid, v)
	}
	return oid, nil
}

type dnParser struct {
	s string
	i int
}

func (p *dnParser) done() bool { return p.i >= len(p.s) }

func (p *dnParser) spaces() {
	for !p.done() && p.s[p.i] == ' ' {
		p.i++
	}
}

// attr reads "type=value".
func (p *dnParser) attr() (DNAttr, error) {
	p.spaces()
	start := p.i
	for !p.done() && p.s[p.i] != '=' && p.s[p.i] != ' ' && p.s[p.i] != ',' && p.s[p.i] != '+' {
		p.i++
	}
	typ, err := attrType(p.s[start:p.i])
	if err != nil {
		return DNAttr{}, err
	}
	p.spaces()
	if p.done() || p.s[p.i] != '=' {
		return DNAttr{}, fmt.Errorf("attribute %s: '=' expected", typ)
	}
	p.i++
	p.spaces()
	v, err := p.value()
	if err != nil {
		return DNAttr{}, fmt.Errorf("attribute %s: %w", typ, err)
	}
	if v == "" {
		return DNAttr{}, fmt.Errorf("attribute %s: empty value", typ)
	}
	return DNAttr{Type: typ, Value: v}, nil
}

// attrType is the canonical type of t: a known name, or a dotted OID.
func attrType(t string) (string, error) {
	if t == "" {
		return "", errors.New("attribute type missing")
	}
	for _, n := range dnNames {
		if strings.EqualFold(n.name, t) {
			return n.name, nil
		}
	}
	if t[0] < '0' || t[0] > '9' {
		return "", fmt.Errorf("unknown attribute type %q: write its dotted OID (e.g. 2.5.4.15)", t)
	}
	if len(t) > maxOIDLen {
		return "", fmt.Errorf("OID %q longer than %d characters", t, maxOIDLen)
	}
	arcs := strings.Split(t, ".")
	if len(arcs) < 2 {
		return "", fmt.Errorf("OID %q: at least two arcs", t)
	}
	oid := make(asn1.ObjectIdentifier, 0, len(arcs))
	for _, arc := range arcs {
		if arc == "" || len(arc) > 1 && arc[0] == '0' {
			return "", fmt.Errorf("OID %q: arcs are decimal numbers without leading zeros", t)
		}
		v, err := strconv.ParseUint(arc, 10, 31)
		if err != nil {
			return "", fmt.Errorf("OID %q: arcs are decimal numbers below 2^31", t)
		}
		oid = append(oid, int(v))
	}
	if oid[0] > 2 || oid[0] < 2 && oid[1] > 39 {
		return "", fmt.Errorf("OID %q: not a valid object identifier", t)
	}
	return oidName(oid), nil
}

// value reads an attribute value up to an unescaped ',' or '+', trailing
// unescaped spaces dropped.
func (p *dnParser) value() (string, error) {
	if !p.done() && p.s[p.i] == '#' {
		return "", errors.New("values in #hex form are not taken; write the value as text")
	}
	var b []byte
	keep := 0 // length of b up to its last escaped byte: escaped spaces stay
	for !p.done() {
		c := p.s[p.i]
		switch {
		case c == ',' || c == '+':
			return finishValue(b, keep)
		case c == '\\':
			if p.i+1 >= len(p.s) {
				return "", errors.New("'\\' at the end")
			}
			n := p.s[p.i+1]
			if strings.IndexByte(` "#+,;<=>\`, n) >= 0 {
				b = append(b, n)
				p.i += 2
			} else if h, ok := unhex(p.s[p.i+1:]); ok {
				b = append(b, h)
				p.i += 3
			} else {
				return "", fmt.Errorf("bad escape at offset %d: '\\' takes one of  \"#+,;<=>\\ or two hex digits", p.i)
			}
			keep = len(b)
		case c == ';':
			return "", fmt.Errorf("';' at offset %d: separate attributes with ',', not ';' (or escape it, \\;)", p.i)
		case c == '"' || c == '<' || c == '>':
			return "", fmt.Errorf("%q at offset %d must be escaped (\\%c)", c, p.i, c)
		case c < 0x20 || c == 0x7f:
			return "", fmt.Errorf("control character at offset %d: escape it as \\%02X", p.i, c)
		default:
			b = append(b, c)
			p.i++
			if c != ' ' {
				keep = len(b)
			}
		}
	}
	return finishValue(b, keep)
}

func finishValue(b []byte, keep int) (string, error) {
	v := b[:keep]
	if !utf8.Valid(v) {
		return "", errors.New("not UTF-8")
	}
	return string(v), nil
}

func unhex(s string) (byte, bool) {
	if len(s) < 2 {
		return 0, false
	}
	v, err := strconv.ParseUint(s[:2], 16, 8)
	return byte(v), err == nil
}

// escapeDNValue writes v in RFC 4514 form: the characters that must be
// escaped are, and control characters are written in hex.
func escapeDNValue(b *strings.Builder, v string) {
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case strings.IndexByte(`"+,;<>\`, c) >= 0,
			i == 0 && (c == '#' || c == ' '),
			i == len(v)-1 && c == ' ':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c == 0x7f:
			fmt.Fprintf(b, "\\%02X", c)
		default:
			b.WriteByte(c)
		}
	}
}
