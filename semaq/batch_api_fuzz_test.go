package semaq

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
)

// FuzzParseBatchFrame: a batch frame is a client's bytes, parsed by the
// ingress before anything else. Whatever ParseBatchFrame accepts holds
// 1 to MaxBatchMsgs messages and encodes again to a frame that parses
// the same; whatever it refuses it refuses with ErrBadFrame.
func FuzzParseBatchFrame(f *testing.F) {
	f.Add(AppendBatchFrame(nil, false, []BatchMsg{{Subject: "orders.a", Data: []byte(`{"n":1}`)}}))
	f.Add(AppendBatchFrame(nil, true, []BatchMsg{
		{Subject: "orders.a", Header: map[string][]string{HdrModel: {"m"}, "X-Multi": {"a", "b"}}, Data: []byte("x")},
		{Subject: "orders.b"},
	}))
	f.Add([]byte("SQB1"))
	f.Add([]byte("SQB1\x00"))
	f.Add([]byte("SQB1\x02\x01a\x00\x00"))
	f.Add([]byte("SQB1\x00\x01a\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"))
	f.Add([]byte("SQB1\x01\x08orders.a\x01\x01k\x01v\x05hello garbage"))
	f.Add([]byte("SQJ1\x01a\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		atomic, msgs, err := ParseBatchFrame(b)
		if err != nil {
			if !errors.Is(err, ErrBadFrame) {
				t.Fatalf("error %v is not ErrBadFrame", err)
			}
			return
		}
		if len(msgs) == 0 || len(msgs) > MaxBatchMsgs {
			t.Fatalf("accepted a batch of %d messages", len(msgs))
		}
		again, msgs2, err := ParseBatchFrame(AppendBatchFrame(nil, atomic, msgs))
		if err != nil || again != atomic || len(msgs2) != len(msgs) {
			t.Fatalf("re-encoded frame: %v, atomic %v→%v, %d messages of %d", err, atomic, again, len(msgs2), len(msgs))
		}
		for i := range msgs {
			a, b := msgs[i], msgs2[i]
			if a.Subject != b.Subject || !bytes.Equal(a.Data, b.Data) || !reflect.DeepEqual(a.Header, b.Header) {
				t.Fatalf("message %d changed in a round trip: %+v → %+v", i, a, b)
			}
		}
	})
}

// FuzzParseBatchAck: the SDK parses whatever answers its batch request.
// What ParseBatchAck accepts has a result per message or an error, its
// Err never panics, and it encodes again to an answer that parses the
// same.
func FuzzParseBatchAck(f *testing.F) {
	f.Add([]byte(`{"stored":1,"results":[{"stream":"S","seq":1}]}`), uint8(1))
	f.Add([]byte(`{"stored":1,"refused":1,"results":[{"stream":"S","seq":1},{"error":{"code":400,"err_code":10060,"description":"no"}}]}`), uint8(2))
	f.Add([]byte(`{"stored":0,"refused":2,"atomic":true,"error":{"code":400,"err_code":20151,"description":"refused"},"index":1,"results":[{"error":{"code":400}},{"error":{"code":400}}]}`), uint8(2))
	f.Add([]byte(`{"error":{"code":413,"err_code":20152,"description":"over"}}`), uint8(9))
	f.Add([]byte(`{"results":null,"error":null}`), uint8(1))
	f.Add([]byte(`{"results":[{}],"index":-7}`), uint8(1))
	f.Add([]byte(`[]`), uint8(1))
	f.Fuzz(func(t *testing.T, b []byte, n uint8) {
		msgs := 1 + int(n)%MaxBatchMsgs
		a, err := ParseBatchAck(b, msgs)
		if err != nil {
			if a != nil {
				t.Fatalf("an ack %+v beside the error %v", a, err)
			}
			return
		}
		if a.Error == nil && len(a.Results) != msgs || a.Results != nil && len(a.Results) != msgs {
			t.Fatalf("accepted %d results for %d messages, error %v", len(a.Results), msgs, a.Error)
		}
		if e := a.Err(); e != nil && e.Error() == "" {
			t.Fatal("an error without words")
		} else if e == nil && a.Error != nil {
			t.Fatal("Err() is nil for a refused batch")
		}
		out, err := json.Marshal(a)
		if err != nil {
			t.Fatal(err)
		}
		a2, err := ParseBatchAck(out, msgs)
		if err != nil {
			t.Fatalf("re-encoded answer %s: %v", out, err)
		}
		if !reflect.DeepEqual(a, a2) {
			t.Fatalf("changed in a round trip:\n%+v\n%+v", a, a2)
		}
	})
}
