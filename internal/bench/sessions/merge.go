package sessions

import (
	"bytes"
	"encoding/json"
	"errors"
)

// mergePatch applies an RFC 7396 JSON merge patch to doc, a JSON object,
// as a client holding sessions in a plain KV bucket has to do itself: the
// jetstream-kv target reads the document, patches it here, and writes it
// back with compare-and-set.
func mergePatch(doc, patch []byte) ([]byte, error) {
	d, err := decode(doc)
	if err != nil {
		return nil, err
	}
	p, err := decode(patch)
	if err != nil {
		return nil, err
	}
	if _, ok := d.(map[string]any); !ok {
		return nil, errors.New("document is not a JSON object")
	}
	return json.Marshal(merge(d, p))
}

// decode keeps numbers as written, as the broker's patch does: through a
// float64 an integer past 2^53 would change.
func decode(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("trailing data after the JSON value")
	}
	return v, nil
}

// merge is RFC 7396's MergePatch: an object patch merges into an object
// (null members delete), anything else replaces the target.
func merge(target, patch any) any {
	p, ok := patch.(map[string]any)
	if !ok {
		return patch
	}
	t, ok := target.(map[string]any)
	if !ok {
		t = map[string]any{}
	}
	for k, v := range p {
		if v == nil {
			delete(t, k)
			continue
		}
		t[k] = merge(t[k], v)
	}
	return t
}
