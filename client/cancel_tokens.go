package client

import (
	"strconv"
	"sync"
)

// maxKeptCancelTokens bounds the cancel tokens a client remembers of its
// own publishes: the oldest is forgotten first (a request that old can
// still be cancelled with CancelToken).
const maxKeptCancelTokens = 10_000

// cancelTokens are the cancel tokens of this client's recent publishes,
// by stream and message id and by stream and sequence, so Cancel by the
// client that published a request needs no token from its caller. Safe
// for concurrent use.
type cancelTokens struct {
	mu    sync.Mutex
	byKey map[cancelKey]string
	order []cancelKey // ring of the kept publishes' keys, oldest at next
	next  int
}

type cancelKey struct{ stream, id string }

// keep remembers token for the request stored as seq in stream, with
// message id msgID ("" for none).
func (ct *cancelTokens) keep(stream string, seq uint64, msgID, token string) {
	ct.mu.Lock()
	defer ct.mu.Unlock()
	if ct.byKey == nil {
		ct.byKey = make(map[cancelKey]string)
	}
	for _, id := range []string{strconv.FormatUint(seq, 10), msgID} {
		if id == "" {
			continue
		}
		k := cancelKey{stream, id}
		if _, ok := ct.byKey[k]; !ok {
			if len(ct.order) < maxKeptCancelTokens {
				ct.order = append(ct.order, k)
			} else {
				delete(ct.byKey, ct.order[ct.next])
				ct.order[ct.next] = k
				ct.next = (ct.next + 1) % maxKeptCancelTokens
			}
		}
		ct.byKey[k] = token
	}
}

// token is the cancel token of request id (message id or sequence) of
// stream, if this client published it lately.
func (ct *cancelTokens) token(stream, id string) string {
	ct.mu.Lock()
	defer ct.mu.Unlock()
	return ct.byKey[cancelKey{stream, id}]
}
