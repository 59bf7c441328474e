package provenancetest

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/provenance"
	"github.com/semaq/semaq/semaq"
)

// Broker stands in for SemaQ's broker on a bare JetStream server: it
// stores chains in a stream, with their head records, as the broker
// does, and answers the provenance API ($SQ.API.PROVENANCE.HEAD, KEYS)
// and the stream info the SDK's export reads. It tests the readers of
// chains without the broker's side of them.
type Broker struct {
	js     jetstream.JetStream
	stream semaq.StreamConfig

	mu    sync.Mutex
	heads map[string]semaq.ProvenanceHead // by tenant + "/" + session
	keys  []semaq.ProvenanceKey
}

// NewBroker makes stream cfg (its subjects and its chains' head records)
// on the server nc is connected to and answers the API there until the
// end of the test.
func NewBroker(t testing.TB, nc *nats.Conn, cfg semaq.StreamConfig) *Broker {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: cfg.Name,
		Subjects: append(append([]string(nil), cfg.Subjects...), semaq.ChainHeadSubject(cfg.Name, ">"))}); err != nil {
		t.Fatal(err)
	}
	b := &Broker{js: js, stream: cfg, heads: map[string]semaq.ProvenanceHead{}}
	serve := func(subj string, h func(m *nats.Msg) any) {
		sub, err := nc.Subscribe(subj, func(m *nats.Msg) {
			v := h(m)
			out, _ := json.Marshal(v)
			if e, ok := v.(*semaq.APIError); ok {
				out = semaq.MarshalError(e)
			}
			_ = m.Respond(out)
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	serve(semaq.APIProvenanceHead, func(m *nats.Msg) any {
		var req semaq.ProvenanceHeadRequest
		if err := json.Unmarshal(m.Data, &req); err != nil {
			return semaq.NewAPIError(semaq.ErrBadRequest, "%v", err)
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		h, ok := b.heads[req.Tenant+"/"+req.Session]
		if !ok || req.Stream != cfg.Name {
			return &semaq.APIError{Code: 404, ErrCode: semaq.ErrCodeChainNotFound, Description: "no provenance chain for session " + req.Session + " in stream " + req.Stream}
		}
		return h
	})
	serve(semaq.APIProvenanceKeys, func(*nats.Msg) any {
		b.mu.Lock()
		defer b.mu.Unlock()
		return semaq.ProvenanceKeys{Keys: b.keys}
	})
	serve(semaq.APIPrefix+"STREAM.INFO."+cfg.Name, func(*nats.Msg) any {
		return semaq.StreamInfo{Config: cfg}
	})
	return b
}

// AddKey lists a node's key.
func (b *Broker) AddKey(node string, key ed25519.PrivateKey) {
	pub := key.Public().(ed25519.PublicKey)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.keys = append(b.keys, semaq.ProvenanceKey{ID: provenance.KeyID(pub), Node: node, PublicKey: pub, Created: Start})
}

// Store stores the links of c from the (0-based) index from on, then the
// session's head record, and makes the API answer with that head.
func (b *Broker) Store(t testing.TB, c *Chain, from int) semaq.ProvenanceHead {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	key := b.heads[c.Tenant+"/"+c.Session]
	for i := from; i < len(c.Links); i++ {
		l := c.Links[i]
		ack := b.publish(ctx, t, l.Subject, l.Headers, l.Data)
		if key.Links == 0 {
			info, err := b.js.Stream(ctx, b.stream.Name)
			if err != nil {
				t.Fatal(err)
			}
			msg, err := info.GetMsg(ctx, ack.Sequence)
			if err != nil {
				t.Fatal(err)
			}
			key.First = msg.Time
		}
		key.Links++
		key.Hash = l.Headers[provenance.HdrHash][0]
		key.Last = time.Now()
	}
	sum := sha256.Sum256([]byte(c.Tenant + "/" + c.Session))
	hdr := map[string][]string{
		semaq.HdrSession: {c.Session}, provenance.HdrHash: {key.Hash},
		semaq.HdrChainLinks: {strconv.FormatUint(key.Links, 10)},
		semaq.HdrChainFirst: {key.First.Format(time.RFC3339Nano)}, semaq.HdrChainLast: {key.Last.Format(time.RFC3339Nano)},
	}
	if c.Tenant != "" {
		hdr[semaq.HdrTenant] = []string{c.Tenant}
	}
	ack := b.publish(ctx, t, semaq.ChainHeadSubject(b.stream.Name, hex.EncodeToString(sum[:])), hdr, nil)
	key.Stream, key.Tenant, key.Session, key.Seq = b.stream.Name, c.Tenant, c.Session, ack.Sequence
	b.mu.Lock()
	b.heads[c.Tenant+"/"+c.Session] = key
	b.mu.Unlock()
	return key
}

// Other stores a message that is no link of a chain (another session's,
// or one without a session).
func (b *Broker) Other(t testing.TB, subject string, hdr map[string][]string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b.publish(ctx, t, subject, hdr, []byte("other"))
}

func (b *Broker) publish(ctx context.Context, t testing.TB, subject string, hdr map[string][]string, data []byte) *jetstream.PubAck {
	t.Helper()
	ack, err := b.js.PublishMsg(ctx, &nats.Msg{Subject: subject, Header: nats.Header(hdr), Data: data})
	if err != nil {
		t.Fatalf("storing on %s: %v", subject, err)
	}
	return ack
}
