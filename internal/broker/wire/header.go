package wire

import (
	"errors"
	"strings"

	"github.com/nats-io/nats.go"
)

// Header blocks, read and written exactly as nats.go reads and writes
// them (nats.DecodeHeadersMsg, nats.Msg's encoding), so a message through
// the ingress stores what it stored when the ingress used nats.go; the
// fuzz targets hold the two side by side.

// ErrBadHeader is a header block nats.go would refuse to decode.
var ErrBadHeader = errors.New("wire: malformed header block")

const (
	hdrLine   = "NATS/1.0"
	statusLen = 3 // a status code in the header line: 503
)

// DecodeHeader reads a header block ("NATS/1.0[ status]\r\n" then
// "Key: value\r\n" lines and a blank line) held in s. Keys and values are
// substrings of s: the caller converts the block to a string once. A
// status in the first line becomes the Status and Description headers.
func DecodeHeader(s string) (nats.Header, error) {
	l, s, ok := nextLine(s)
	if !ok || len(l) < len(hdrLine) || l[:len(hdrLine)] != hdrLine {
		return nil, ErrBadHeader
	}
	// One map sized for the block and one array behind every value.
	n := strings.Count(s, "\n")
	h := make(nats.Header, n)
	vals := make([]string, 0, n+2)
	for {
		kv, rest, ok := nextLine(s)
		if !ok {
			return nil, ErrBadHeader
		}
		s = rest
		if len(kv) == 0 {
			break
		}
		i := strings.IndexByte(kv, ':')
		if i < 0 {
			return nil, ErrBadHeader
		}
		key := kv[:i]
		if key == "" {
			continue
		}
		i++
		for i < len(kv) && (kv[i] == ' ' || kv[i] == '\t') {
			i++
		}
		if cur, ok := h[key]; ok {
			h[key] = append(cur, kv[i:]) // cur's capacity is its length: a copy
			continue
		}
		vals = append(vals, kv[i:])
		h[key] = vals[len(vals)-1 : len(vals) : len(vals)]
	}
	if len(l) > len(hdrLine) {
		status := strings.TrimSpace(l[len(hdrLine):])
		if len(status) < statusLen {
			return nil, ErrBadHeader
		}
		var descr string
		if len(status) > statusLen {
			descr = strings.TrimSpace(status[statusLen:])
			status = status[:statusLen]
		}
		h.Add("Status", status)
		if descr != "" {
			h.Add("Description", descr)
		}
	}
	return h, nil
}

func nextLine(s string) (line, rest string, ok bool) {
	i := strings.IndexByte(s, '\n')
	if i < 0 {
		return "", "", false
	}
	line = s[:i]
	if len(line) > 0 && line[len(line)-1] == '\r' {
		line = line[:len(line)-1]
	}
	return line, s[i+1:], true
}

// AppendHeader appends h as a header block to dst, as nats.go would send
// it: keys checked, values trimmed of ASCII space and their CR and LF
// turned into spaces. An empty h appends nothing (the message goes without
// headers).
func AppendHeader(dst []byte, h nats.Header) ([]byte, error) {
	if len(h) == 0 {
		return dst, nil
	}
	for k := range h {
		if !validKey(k) {
			return dst, nats.ErrBadHeaderMsg
		}
	}
	dst = append(dst, hdrLine+"\r\n"...)
	for k, vs := range h {
		for _, v := range vs {
			dst = append(dst, k...)
			dst = append(dst, ": "...)
			v = trimSpace(v)
			if !strings.ContainsAny(v, "\r\n") {
				dst = append(dst, v...)
			} else {
				for i := 0; i < len(v); i++ {
					c := v[i]
					if c == '\r' || c == '\n' {
						c = ' '
					}
					dst = append(dst, c)
				}
			}
			dst = append(dst, "\r\n"...)
		}
	}
	return append(dst, "\r\n"...), nil
}

// validKey is nats.go's rule for a header key: printable ASCII without
// the separators of HTTP tokens.
func validKey(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if c < 33 || c > 126 || strings.IndexByte(`"()/,:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

// trimSpace is textproto.TrimString: ASCII space, tab, CR and LF off both
// ends.
func trimSpace(s string) string {
	for len(s) > 0 && isSpace(s[0]) {
		s = s[1:]
	}
	for len(s) > 0 && isSpace(s[len(s)-1]) {
		s = s[:len(s)-1]
	}
	return s
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
