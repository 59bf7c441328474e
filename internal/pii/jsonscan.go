package pii

import (
	"errors"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// MaxDepth is how deep a JSON payload may nest objects and arrays; deeper input is refused with ErrTooDeep.
const MaxDepth = 64

// errSyntax ends a walk over a payload that is not JSON, which is then redacted as text.
var errSyntax = errors.New("pii: not JSON")

// frame is one open object or array on the walker's path.
type frame struct {
	array bool
	index int    // in an array: the index of the current element
	key   []byte // in an object: the current key, raw (as written, without quotes)
	esc   bool   // the key holds escapes
}

// jsonString is a string value the walker met at a selected path: its raw content, between the quotes.
type jsonString struct {
	start, end int
	esc        bool
}

// walker is a validating JSON scanner that knows the path of each string value, written by hand so that a
// payload without candidates costs one pass and no allocation.
type walker struct {
	data  []byte
	pos   int
	depth int
	stack [MaxDepth]frame
	paths []path
	visit visitor // what to do with each selected string
}

// visitor is what a walk does with the selected strings; a pointer to it stays on the stack where a callback
// would not.
type visitor struct {
	r         *Redactor
	collect   bool // scan the strings into hits; else only note whether any has a candidate
	candidate bool
	hits      []hit
	total     int
	// each, when set, replaces the detectors: RewriteStrings' function,
	// its results in edits.
	each  func(string) (string, error)
	edits []edit
}

// path is a compiled Config.Paths entry.
type path []segment

type segment struct {
	any   bool
	name  string
	index int // name read as an array index; -1 when it is not one
}

func compilePath(p string) (path, error) {
	if p == "" {
		return nil, errors.New("empty path")
	}
	var out path
	for _, s := range strings.Split(p, ".") {
		if s == "" {
			return nil, errors.New("empty segment")
		}
		seg := segment{any: s == "*", name: s, index: -1}
		if n, err := strconv.Atoi(s); err == nil && n >= 0 && s == strconv.Itoa(n) {
			seg.index = n
		}
		out = append(out, seg)
	}
	if len(out) > MaxDepth {
		return nil, errors.New("deeper than " + strconv.Itoa(MaxDepth))
	}
	return out, nil
}

// selected reports whether the string at the walker's current path is redacted: with no paths every string is;
// otherwise a path selects the value at it and every string inside that value.
func (w *walker) selected() bool {
	if len(w.paths) == 0 {
		return true
	}
next:
	for _, p := range w.paths {
		if len(p) > w.depth {
			continue
		}
		for i, seg := range p {
			if seg.any {
				continue
			}
			f := &w.stack[i]
			if f.array {
				if seg.index != f.index {
					continue next
				}
			} else if f.esc {
				if decodeString(nil, f.key) != seg.name {
					continue next
				}
			} else if string(f.key) != seg.name {
				continue next
			}
		}
		return true
	}
	return false
}

var pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")

// pointer is the RFC 6901 JSON Pointer of the walker's current path.
func (w *walker) pointer() string {
	var b strings.Builder
	for i := 0; i < w.depth; i++ {
		f := &w.stack[i]
		b.WriteByte('/')
		if f.array {
			b.WriteString(strconv.Itoa(f.index))
			continue
		}
		k := string(f.key)
		if f.esc {
			k = decodeString(nil, f.key)
		}
		if strings.ContainsAny(k, "~/") {
			k = pointerEscaper.Replace(k)
		}
		b.WriteString(k)
	}
	return b.String()
}

// walk checks that data is one JSON object or array (and white space), doing what w.visit says with each
// selected string.
func (w *walker) walk() error {
	w.skipSpace()
	if w.pos >= len(w.data) || (w.data[w.pos] != '{' && w.data[w.pos] != '[') {
		return errSyntax
	}
	if err := w.value(); err != nil {
		return err
	}
	w.skipSpace()
	if w.pos != len(w.data) {
		return errSyntax
	}
	return nil
}

func (w *walker) skipSpace() {
	for w.pos < len(w.data) {
		switch w.data[w.pos] {
		case ' ', '\t', '\n', '\r':
			w.pos++
		default:
			return
		}
	}
}

func (w *walker) value() error {
	w.skipSpace()
	if w.pos >= len(w.data) {
		return errSyntax
	}
	switch c := w.data[w.pos]; c {
	case '{', '[':
		return w.container(c == '[')
	case '"':
		if !w.visit.collect && !w.visit.candidate && w.selected() {
			return w.prefilterString()
		}
		s, err := w.str()
		if err != nil {
			return err
		}
		if w.visit.collect && w.selected() {
			return w.visitString(s)
		}
		return nil
	case 't':
		return w.literal("true")
	case 'f':
		return w.literal("false")
	case 'n':
		return w.literal("null")
	default:
		return w.number()
	}
}

func (w *walker) container(array bool) error {
	if w.depth == MaxDepth {
		return ErrTooDeep
	}
	f := &w.stack[w.depth]
	*f = frame{array: array}
	w.depth++
	w.pos++ // '{' or '['
	end := byte('}')
	if array {
		end = ']'
	}
	w.skipSpace()
	if w.pos < len(w.data) && w.data[w.pos] == end {
		w.pos++
		w.depth--
		return nil
	}
	for {
		if !array {
			w.skipSpace()
			if w.pos >= len(w.data) || w.data[w.pos] != '"' {
				return errSyntax
			}
			k, err := w.str()
			if err != nil {
				return err
			}
			f.key, f.esc = w.data[k.start:k.end], k.esc
			w.skipSpace()
			if w.pos >= len(w.data) || w.data[w.pos] != ':' {
				return errSyntax
			}
			w.pos++
		}
		if err := w.value(); err != nil {
			return err
		}
		w.skipSpace()
		if w.pos >= len(w.data) {
			return errSyntax
		}
		switch w.data[w.pos] {
		case ',':
			w.pos++
			f.index++
		case end:
			w.pos++
			w.depth--
			return nil
		default:
			return errSyntax
		}
	}
}

// prefilterString reads a string at w.pos, checking it as str does, and notes whether it holds a candidate.
func (w *walker) prefilterString() error {
	start := w.pos + 1
	m, end, flags := prefilterFrom(w.data, start, true)
	if flags&strBad != 0 {
		return errSyntax
	}
	w.pos = end + 1
	if flags&strUEsc != 0 {
		// A \u escape can spell anything; look at the decoded text.
		var scratch [256]byte
		m = prefilter(appendDecoded(scratch[:0], w.data[start:end]))
	}
	w.visit.candidate = m&w.visit.r.want != 0
	return nil
}

// strStop marks the bytes that end a run of plain string content.
var strStop = func() (t [256]bool) {
	for c := 0; c < 0x20; c++ {
		t[c] = true
	}
	t['"'], t['\\'] = true, true
	return t
}()

// str reads a string at w.pos, checking its escapes, and returns its raw content.
func (w *walker) str() (jsonString, error) {
	w.pos++ // '"'
	s := jsonString{start: w.pos}
	d := w.data
	for i := w.pos; i < len(d); i++ {
		for i < len(d) && !strStop[d[i]] {
			i++
		}
		if i == len(d) {
			break
		}
		switch c := d[i]; {
		case c == '"':
			s.end = i
			w.pos = i + 1
			return s, nil
		case c == '\\':
			s.esc = true
			if i+1 >= len(d) {
				return s, errSyntax
			}
			switch d[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i++
			case 'u':
				if i+5 >= len(d) {
					return s, errSyntax
				}
				for _, h := range d[i+2 : i+6] {
					if !isHex(h) {
						return s, errSyntax
					}
				}
				i += 5
			default:
				return s, errSyntax
			}
		case c < 0x20:
			return s, errSyntax
		}
	}
	return s, errSyntax
}

func (w *walker) literal(lit string) error {
	if len(w.data)-w.pos < len(lit) || string(w.data[w.pos:w.pos+len(lit)]) != lit {
		return errSyntax
	}
	w.pos += len(lit)
	return nil
}

// number reads a number as RFC 8259 writes it: -?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?
func (w *walker) number() error {
	d, i := w.data, w.pos
	digits := func() bool {
		s := i
		for i < len(d) && isDigit(d[i]) {
			i++
		}
		return i > s
	}
	if i < len(d) && d[i] == '-' {
		i++
	}
	if i < len(d) && d[i] == '0' {
		i++
	} else if !digits() {
		return errSyntax
	}
	if i < len(d) && d[i] == '.' {
		i++
		if !digits() {
			return errSyntax
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if !digits() {
			return errSyntax
		}
	}
	w.pos = i
	return nil
}

// decodeString decodes the raw content of a checked JSON string, appending to buf; a lone surrogate becomes
// U+FFFD, as encoding/json decodes it.
func decodeString(buf []byte, raw []byte) string {
	return string(appendDecoded(buf, raw))
}

func appendDecoded(buf []byte, raw []byte) []byte {
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c != '\\' {
			buf = append(buf, c)
			continue
		}
		i++
		switch raw[i] {
		case 'b':
			buf = append(buf, '\b')
		case 'f':
			buf = append(buf, '\f')
		case 'n':
			buf = append(buf, '\n')
		case 'r':
			buf = append(buf, '\r')
		case 't':
			buf = append(buf, '\t')
		case 'u':
			r := rune(hex4(raw[i+1:]))
			i += 4
			if utf16.IsSurrogate(r) {
				r2 := utf8.RuneError
				if i+6 < len(raw) && raw[i+1] == '\\' && raw[i+2] == 'u' {
					r2 = rune(hex4(raw[i+3:]))
				}
				if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
					r = d
					i += 6
				} else {
					r = utf8.RuneError
				}
			}
			buf = utf8.AppendRune(buf, r)
		default: // '"', '\\', '/'
			buf = append(buf, raw[i])
		}
	}
	return buf
}

func hex4(b []byte) int {
	v := 0
	for _, c := range b[:4] {
		switch {
		case isDigit(c):
			v = v<<4 | int(c-'0')
		case 'a' <= c && c <= 'f':
			v = v<<4 | int(c-'a'+10)
		default:
			v = v<<4 | int(c-'A'+10)
		}
	}
	return v
}

// appendEncoded appends s as the content of a JSON string (without quotes), escaping only what must be.
func appendEncoded(buf []byte, s string) []byte {
	const hexDigits = "0123456789abcdef"
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			buf = append(buf, '\\', c)
		case c == '\n':
			buf = append(buf, '\\', 'n')
		case c == '\r':
			buf = append(buf, '\\', 'r')
		case c == '\t':
			buf = append(buf, '\\', 't')
		case c < 0x20:
			buf = append(buf, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		default:
			buf = append(buf, c)
		}
	}
	return buf
}
