// Package mergepatch applies JSON merge patches (RFC 7396): an object
// patch merges into an object key by key, recursively, a null member
// deleting its key; any other patch replaces the target. Numbers keep
// their digits (a float64 would round integers past 2^53). The session
// store applies its clients' patches with it, and the sessions benchmark
// the same patches as a client of a plain KV bucket would.
package mergepatch

import (
	"bytes"
	"encoding/json"
	"errors"
)

// Apply returns doc with patch applied; an empty doc is null. Both must
// be one JSON value each.
func Apply(doc, patch []byte) ([]byte, error) {
	p, err := decode(patch)
	if err != nil {
		return nil, err
	}
	var d any
	if len(bytes.TrimSpace(doc)) > 0 {
		if d, err = decode(doc); err != nil {
			return nil, err
		}
	}
	return json.Marshal(merge(d, p))
}

func decode(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("data after the JSON value")
	}
	return v, nil
}

func merge(doc, patch any) any {
	p, ok := patch.(map[string]any)
	if !ok {
		return patch
	}
	d, ok := doc.(map[string]any)
	if !ok {
		d = map[string]any{}
	}
	for k, v := range p {
		if v == nil {
			delete(d, k)
			continue
		}
		d[k] = merge(d[k], v)
	}
	return d
}
