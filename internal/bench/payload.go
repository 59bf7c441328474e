package bench

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/semaq/semaq/internal/schema"
)

// confluentHeader is the size of Confluent's wire-format header: magic byte
// 0 and the schema id as 4 bytes, big-endian.
const confluentHeader = 5

// payload is what every message of a run carries.
type payload struct {
	// body is the message data; for a framed schema it still lacks
	// Confluent's header, which needs the id the registry gives (data).
	body []byte
	// padded: the sample's longest string was lengthened to reach the size.
	padded bool
	// With a schema: the schema compiled as the registry compiles it, and
	// whether the body goes out behind Confluent's header (Avro, Protobuf).
	compiled schema.Schema
	framed   bool
}

// data is the message data for schema id: body, behind Confluent's header
// when framed.
func (p *payload) data(id int) []byte {
	if !p.framed {
		return p.body
	}
	out := make([]byte, confluentHeader, confluentHeader+len(p.body))
	binary.BigEndian.PutUint32(out[1:], uint32(id))
	return append(out, p.body...)
}

// size is the payload as sent, in bytes.
func (p *payload) size() int {
	if p.framed {
		return confluentHeader + len(p.body)
	}
	return len(p.body)
}

// preparePayload builds the payload of a valid cfg: cfg.Size bytes of
// generated text; or cfg.Payload, encoded for cfg.Schema, padded to
// cfg.Size, and checked against the schema as the ingress will check it.
// Errors are ErrBadConfig: nothing has started yet.
func preparePayload(cfg *IngestConfig) (*payload, error) {
	if cfg.Payload == nil {
		return &payload{body: generatedBody(cfg.Size)}, nil
	}
	doc := bytes.TrimSpace(cfg.Payload)
	payloadName := nameOr(cfg.PayloadFile, "the payload")
	if !json.Valid(doc) {
		return nil, fmt.Errorf("%w: payload: %s is not a JSON document", ErrBadConfig, payloadName)
	}
	p := &payload{}
	encode := func(doc []byte) ([]byte, error) { return doc, nil }
	if sc := cfg.Schema; sc != nil {
		f, err := schema.Default.Get(sc.Type)
		if err != nil {
			return nil, fmt.Errorf("%w: schema: %v", ErrBadConfig, err)
		}
		if p.compiled, err = f.Parse(sc.Text, nil, nil); err != nil {
			return nil, fmt.Errorf("%w: schema: %s does not parse as %s: %v", ErrBadConfig, nameOr(sc.File, "the schema"), sc.Type, err)
		}
		switch sc.Type {
		case schema.TypeAvro:
			p.framed = true
			if encode, err = avroEncoder(sc.Text); err != nil {
				return nil, fmt.Errorf("%w: schema: %v", ErrBadConfig, err)
			}
		case schema.TypeProtobuf:
			p.framed = true
			if encode, err = protobufEncoder(sc.Text, p.compiled); err != nil {
				return nil, fmt.Errorf("%w: schema: %v", ErrBadConfig, err)
			}
		}
	}
	mismatch := func(what string, err error) error {
		s := cfg.Schema
		return fmt.Errorf("%w: payload: %s does not match %s: %v", ErrBadConfig, what, nameOr(s.File, "the schema"), err)
	}
	body, err := encode(doc)
	if err == nil && p.compiled != nil {
		err = p.compiled.Validate(body)
	}
	if err != nil { // only a schema can refuse: without one, encode is the identity
		return nil, mismatch(payloadName, err)
	}
	p.body = body
	if cfg.Size == 0 {
		return p, nil
	}
	want := cfg.Size
	if p.framed {
		want -= confluentHeader
	}
	if len(body) > want {
		return nil, fmt.Errorf("%w: size: %d bytes is less than %s takes as sent (%d bytes); give a larger size, or none to send it as is",
			ErrBadConfig, cfg.Size, payloadName, p.size())
	}
	if len(body) == want {
		return p, nil
	}
	if _, _, err := padJSON(doc, 0); err != nil {
		return nil, fmt.Errorf("%w: size: cannot pad %s to %d bytes: %v; give no size to send it as is", ErrBadConfig, payloadName, cfg.Size, err)
	}
	body, path, err := fit(doc, encode, want)
	if err == nil && p.compiled != nil {
		err = p.compiled.Validate(body)
	}
	if err != nil { // only a schema can refuse: without one, encode is the identity
		return nil, mismatch(fmt.Sprintf("%s padded to %d bytes (at %s)", payloadName, cfg.Size, path), err)
	}
	p.body, p.padded = body, true
	return p, nil
}

// fit lengthens the longest string value of doc until encode makes want
// bytes of it, or the most under want when a length prefix grows by more
// than a byte at the boundary. It returns the encoded body and the JSON
// pointer of the string.
func fit(doc []byte, encode func([]byte) ([]byte, error), want int) ([]byte, string, error) {
	base, err := encode(doc)
	if err != nil {
		return nil, "", err
	}
	best, path := base, ""
	for n, tries := want-len(base), 0; n > 0 && tries < 8; tries++ {
		padded, at, err := padJSON(doc, n)
		if err != nil {
			return nil, "", err
		}
		path = at
		b, err := encode(padded)
		if err != nil {
			return nil, path, err
		}
		if len(b) == want {
			return b, path, nil
		}
		if len(b) < want && len(b) > len(best) {
			best = b
		}
		n += want - len(b)
	}
	return best, path, nil
}

// filler is the text padding is made of: English, nothing JSON escapes.
const filler = " Include the figures for each region and compare them with the same quarter last year."

// padJSON inserts n bytes of filler at the end of the longest string value
// of doc (the first of the longest, in document order) and returns the
// result with the string's JSON pointer. Keys are never lengthened.
func padJSON(doc []byte, n int) ([]byte, string, error) {
	type frame struct {
		object bool
		key    string // object: the current member's name
		index  int    // array: the current element's index
		inKey  bool   // object: the next string is a name
	}
	var (
		stack   []frame
		bestEnd = -1
		bestLen = -1
		bestAt  string
	)
	pointer := func() string {
		var b strings.Builder
		for _, f := range stack {
			b.WriteByte('/')
			if f.object {
				b.WriteString(strings.NewReplacer("~", "~0", "/", "~1").Replace(f.key))
			} else {
				b.WriteString(strconv.Itoa(f.index))
			}
		}
		return b.String()
	}
	// done moves past a value in the enclosing container.
	done := func() {
		if len(stack) == 0 {
			return
		}
		if f := &stack[len(stack)-1]; f.object {
			f.inKey = true
		} else {
			f.index++
		}
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, "", err
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{', '[':
				stack = append(stack, frame{object: t == '{', inKey: t == '{'})
			default:
				stack = stack[:len(stack)-1]
				done()
			}
		case string:
			if len(stack) > 0 && stack[len(stack)-1].inKey {
				f := &stack[len(stack)-1]
				f.key, f.inKey = t, false
				continue
			}
			if len(t) > bestLen {
				// After a string token the offset is just past its closing quote.
				bestEnd, bestLen, bestAt = int(dec.InputOffset())-1, len(t), pointer()
			}
			done()
		default:
			done()
		}
	}
	if bestEnd < 0 {
		return nil, "", errors.New("the payload has no string value to lengthen")
	}
	out := make([]byte, 0, len(doc)+n)
	out = append(out, doc[:bestEnd]...)
	for rest := n; rest > 0; rest -= len(filler) {
		out = append(out, filler[:min(rest, len(filler))]...)
	}
	out = append(out, doc[bestEnd:]...)
	return out, bestAt, nil
}

// generatedBody is size bytes of JSON-like text, for runs without a
// payload of their own.
func generatedBody(size int) []byte {
	const text = `{"messages":[{"role":"user","content":"Summarise the attached quarterly report for the board."}]} `
	return []byte(strings.Repeat(text, size/len(text)+1)[:size])
}
