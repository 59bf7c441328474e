package wire

import (
	"bytes"
	"errors"
	"fmt"
)

// The server's half of the NATS client protocol, as far as a subscriber
// and publisher needs it: MSG, HMSG, PING, PONG, +OK, -ERR and INFO.

// MaxControlLine bounds one protocol line from the server (the part of a
// MSG before its payload). nats-server's own default for what it accepts
// is 4 KiB; subjects it delivers are bounded by what it accepted.
const MaxControlLine = 64 << 10

type opKind uint8

const (
	opNone opKind = iota
	opMsg         // MSG or HMSG
	opPing
	opPong
	opOK
	opErr
	opInfo
)

// frame is one parsed operation. Its slices point into the buffer it was
// parsed from.
type frame struct {
	op      opKind
	subject []byte
	reply   []byte
	sid     uint64
	hdr     []byte // HMSG: the header block, "NATS/1.0..." through its blank line
	data    []byte
	arg     []byte // -ERR's text, INFO's JSON
	sizes   msgSizes
}

// errProtocol is a line the server would never send.
var errProtocol = errors.New("wire: protocol error")

// parseFrame parses the first operation of buf. It returns the number of
// bytes the operation takes, 0 when buf does not yet hold all of it, or an
// error naming what is wrong.
func parseFrame(buf []byte, maxPayload int) (frame, int, error) {
	var f frame
	nl := bytes.IndexByte(buf, '\n')
	if nl < 0 {
		if len(buf) > MaxControlLine {
			return f, 0, fmt.Errorf("%w: control line longer than %d bytes", errProtocol, MaxControlLine)
		}
		return f, 0, nil
	}
	if nl > MaxControlLine {
		return f, 0, fmt.Errorf("%w: control line longer than %d bytes", errProtocol, MaxControlLine)
	}
	line := buf[:nl]
	if len(line) > 0 && line[len(line)-1] == '\r' {
		line = line[:len(line)-1]
	}
	op, rest := splitOp(line)
	switch {
	case equalFold(op, "MSG"), equalFold(op, "HMSG"):
		hmsg := len(op) == 4
		if err := parseMsgArgs(&f, rest, hmsg, maxPayload); err != nil {
			return f, 0, err
		}
		return finishMsg(f, buf, nl+1)
	case equalFold(op, "PING"):
		f.op = opPing
	case equalFold(op, "PONG"):
		f.op = opPong
	case equalFold(op, "+OK"):
		f.op = opOK
	case equalFold(op, "-ERR"):
		f.op, f.arg = opErr, bytes.Trim(rest, " '")
	case equalFold(op, "INFO"):
		f.op, f.arg = opInfo, rest
	default:
		return f, 0, fmt.Errorf("%w: unknown operation %.32q", errProtocol, op)
	}
	return f, nl + 1, nil
}

// msgSizes carries the sizes of a MSG between parseMsgArgs and finishMsg.
type msgSizes struct{ hdr, total int }

func splitOp(line []byte) (op, rest []byte) {
	i := bytes.IndexAny(line, " \t")
	if i < 0 {
		return line, nil
	}
	return line[:i], bytes.TrimLeft(line[i:], " \t")
}

// parseMsgArgs reads "<subject> <sid> [reply] [<hdr size>] <total size>"
// into f; finishMsg takes the payload those sizes describe.
func parseMsgArgs(f *frame, rest []byte, hmsg bool, maxPayload int) error {
	var args [5][]byte
	n := 0
	for len(rest) > 0 {
		if n == len(args) {
			return fmt.Errorf("%w: too many arguments to MSG", errProtocol)
		}
		i := bytes.IndexAny(rest, " \t")
		if i < 0 {
			args[n], rest = rest, nil
		} else {
			args[n], rest = rest[:i], bytes.TrimLeft(rest[i:], " \t")
		}
		n++
	}
	want := 3
	if hmsg {
		want = 4
	}
	switch n {
	case want:
	case want + 1:
		f.reply = args[2]
	default:
		return fmt.Errorf("%w: MSG with %d arguments", errProtocol, n)
	}
	f.subject = args[0]
	sid, ok := parseUint(args[1])
	if !ok {
		return fmt.Errorf("%w: bad subscription id %.20q", errProtocol, args[1])
	}
	f.sid = sid
	total, ok := parseUint(args[n-1])
	if !ok || total > uint64(maxPayload) {
		return fmt.Errorf("%w: bad message size %.20q (limit %d)", errProtocol, args[n-1], maxPayload)
	}
	hdr := uint64(0)
	if hmsg {
		hdr, ok = parseUint(args[n-2])
		if !ok || hdr > total {
			return fmt.Errorf("%w: bad header size %.20q", errProtocol, args[n-2])
		}
	}
	f.op = opMsg
	f.sizes = msgSizes{hdr: int(hdr), total: int(total)}
	return nil
}

// finishMsg takes the payload of a MSG whose control line ends at start.
func finishMsg(f frame, buf []byte, start int) (frame, int, error) {
	end := start + f.sizes.total
	if len(buf) < end+2 {
		return frame{}, 0, nil
	}
	if buf[end] != '\r' || buf[end+1] != '\n' {
		return frame{}, 0, fmt.Errorf("%w: message payload not followed by CRLF", errProtocol)
	}
	if f.sizes.hdr > 0 {
		f.hdr = buf[start : start+f.sizes.hdr]
	}
	f.data = buf[start+f.sizes.hdr : end]
	return f, end + 2, nil
}

// parseUint reads a decimal of at most 18 digits.
func parseUint(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
	}
	return n, true
}

// equalFold compares an operation name, ASCII case-insensitively.
func equalFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range b {
		c := b[i]
		if 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}
