package sessions

import (
	"bytes"
	"encoding/json"
)

// mergePatch applies a JSON merge patch (RFC 7396) to doc: an object
// patch merges key by key, recursively, a null removing its key; any
// other patch replaces doc. Both are valid JSON, as decoded strictly by
// the API; depth is bounded by that decoder.
func mergePatch(doc, patch json.RawMessage) (json.RawMessage, error) {
	p, err := decodeAny(patch)
	if err != nil {
		return nil, err
	}
	var d any
	if len(bytes.TrimSpace(doc)) > 0 {
		if d, err = decodeAny(doc); err != nil {
			return nil, err
		}
	}
	return json.Marshal(merge(d, p))
}

// decodeAny decodes JSON keeping numbers as written: a float64 would
// round integers past 2^53.
func decodeAny(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
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
