package sessions

import (
	"encoding/json"
	"errors"

	"github.com/semaq/semaq/internal/mergepatch"
)

// mergePatch applies an RFC 7396 JSON merge patch to doc, a JSON object,
// as a client holding sessions in a plain KV bucket has to do itself: the
// jetstream-kv target reads the document, patches it here (as the broker
// does its sessions'), and writes it back with compare-and-set.
func mergePatch(doc, patch []byte) ([]byte, error) {
	var d map[string]json.RawMessage
	if err := json.Unmarshal(doc, &d); err != nil || d == nil {
		return nil, errors.New("document is not a JSON object")
	}
	return mergepatch.Apply(doc, patch)
}
