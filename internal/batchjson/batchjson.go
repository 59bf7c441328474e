// Package batchjson reads the messages of a batch written as JSON, the form
// the HTTP door (POST /api/v1/publish) and `semaq pub --batch` take
// (docs/batches.md). A message is one object:
//
//	{"subject":"ai.x","headers":{"AI-Model":"m","X-Tag":["a","b"]},"data":{"any":"JSON value"}}
//
// "data" is stored as its JSON text (compacted, so a message reads the same
// whichever way its batch was laid out); "data_base64" (standard base64)
// carries bytes instead; neither is an empty payload. A header's value is a
// string, or an array of strings for a header that repeats.
//
// Objects are read strictly (httpx.UnmarshalStrict): unknown keys, keys
// twice or in another case, and values past the API's depth and number
// bounds are refused, so every door reads a message the same way. Whether a
// subject or a header is one the broker accepts is not judged here: the
// doors and the ingress do that per message.
package batchjson

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/semaq/semaq/internal/httpx"
	"github.com/semaq/semaq/semaq"
)

// item is the JSON form of one message. The data fields are raw so that
// their presence, null included, can be told apart from their absence.
type item struct {
	Subject    string                     `json:"subject"`
	Headers    map[string]json.RawMessage `json:"headers"`
	Data       json.RawMessage            `json:"data"`
	DataBase64 json.RawMessage            `json:"data_base64"`
}

// Parse reads one message. Its Header is nil when it has none; Data never
// aliases b.
func Parse(b []byte) (semaq.BatchMsg, error) {
	t := bytes.TrimSpace(b)
	if len(t) == 0 || t[0] != '{' {
		return semaq.BatchMsg{}, errors.New(`want a JSON object {"subject":...,"headers":{...},"data":...}`)
	}
	var it item
	if err := httpx.UnmarshalStrict(t, &it); err != nil {
		return semaq.BatchMsg{}, errors.New(trimBody(err.Error()))
	}
	if it.Subject == "" {
		return semaq.BatchMsg{}, errors.New(`no "subject"`)
	}
	m := semaq.BatchMsg{Subject: it.Subject}
	if len(it.Headers) > 0 {
		m.Header = make(map[string][]string, len(it.Headers))
		for k, raw := range it.Headers {
			vs, err := headerValues(raw)
			if err != nil {
				return semaq.BatchMsg{}, fmt.Errorf("header %q: %w", k, err)
			}
			m.Header[k] = vs
		}
	}
	switch {
	case it.Data != nil && it.DataBase64 != nil:
		return semaq.BatchMsg{}, errors.New(`both "data" and "data_base64"; give one`)
	case it.Data != nil:
		var c bytes.Buffer
		if err := json.Compact(&c, it.Data); err != nil {
			return semaq.BatchMsg{}, fmt.Errorf(`"data": %w`, err)
		}
		m.Data = c.Bytes()
	case it.DataBase64 != nil:
		var s string
		if err := json.Unmarshal(it.DataBase64, &s); err != nil || it.DataBase64[0] != '"' {
			return semaq.BatchMsg{}, errors.New(`"data_base64" is not a JSON string`)
		}
		d, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return semaq.BatchMsg{}, fmt.Errorf(`"data_base64" is not standard base64: %w`, err)
		}
		m.Data = d
	}
	return m, nil
}

// headerValues reads a header's value: a string, or a non-empty array of
// strings.
func headerValues(raw json.RawMessage) ([]string, error) {
	switch {
	case len(raw) > 0 && raw[0] == '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, err
		}
		return []string{s}, nil
	case len(raw) > 0 && raw[0] == '[':
		var vs []string
		if err := json.Unmarshal(raw, &vs); err != nil {
			return nil, errors.New("want a string or an array of strings")
		}
		if len(vs) == 0 {
			return nil, errors.New("an empty array; leave the header out instead")
		}
		return vs, nil
	}
	return nil, errors.New("want a string or an array of strings")
}

// trimBody words a strict decoder's message about one message rather than
// a request body.
func trimBody(msg string) string {
	for _, p := range []string{"body is not valid JSON: ", "body is not valid: "} {
		if rest, ok := strings.CutPrefix(msg, p); ok {
			return "not valid JSON: " + rest
		}
	}
	if rest, ok := strings.CutPrefix(msg, "body "); ok {
		return "the message " + rest
	}
	return msg
}

// LineError is a message of a batch that does not parse: its line in
// NDJSON, or its place in a JSON array (Line 0).
type LineError struct {
	Line  int // 1-based; 0 in a JSON array
	Index int // the message's index in the batch, 0-based
	Err   error
}

func (e *LineError) Error() string {
	if e.Line == 0 {
		return fmt.Sprintf("message %d: %v", e.Index, e.Err)
	}
	return fmt.Sprintf("line %d (message %d): %v", e.Line, e.Index, e.Err)
}

func (e *LineError) Unwrap() error { return e.Err }

// ReadLines reads NDJSON from r, one message per line, and calls fn with
// each in order, with its line number (1-based) and index. Blank lines are
// skipped; a line longer than maxLine bytes is an error. It stops at the
// first error, fn's own included, which it returns as it is; errors of
// the input are *LineError.
func ReadLines(r io.Reader, maxLine int, fn func(line, index int, m semaq.BatchMsg) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, min(maxLine, 64<<10)), maxLine)
	line, index := 0, 0
	for sc.Scan() {
		line++
		b := sc.Bytes()
		if len(bytes.TrimSpace(b)) == 0 {
			continue
		}
		m, err := Parse(b)
		if err != nil {
			return &LineError{Line: line, Index: index, Err: err}
		}
		if err := fn(line, index, m); err != nil {
			return err
		}
		index++
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return &LineError{Line: line + 1, Index: index, Err: fmt.Errorf("longer than %d bytes", maxLine)}
		}
		return err
	}
	return nil
}

// ParseArray reads a JSON array of messages. It stops at the first that
// does not parse (a *LineError), and at max messages, past which it
// returns ErrTooMany.
func ParseArray(b []byte, max int) ([]semaq.BatchMsg, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	tok, err := dec.Token()
	if d, ok := tok.(json.Delim); err != nil || !ok || d != '[' {
		return nil, errors.New(`want a JSON array of messages [{"subject":...},...]`)
	}
	var msgs []semaq.BatchMsg
	for dec.More() {
		if len(msgs) == max {
			return nil, ErrTooMany
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, &LineError{Index: len(msgs), Err: fmt.Errorf("not valid JSON: %w", err)}
		}
		m, err := Parse(raw)
		if err != nil {
			return nil, &LineError{Index: len(msgs), Err: err}
		}
		msgs = append(msgs, m)
	}
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("the array is not closed: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("data after the array")
	}
	return msgs, nil
}

// ErrTooMany is a batch over the bound its reader was given.
var ErrTooMany = errors.New("too many messages")
