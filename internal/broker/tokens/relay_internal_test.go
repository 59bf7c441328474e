package tokens

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/semaq"
)

// FuzzTokenRelayRecord: whatever the relay's record check accepts is a
// well-formed record of the right kind, within the size limit, that
// readers parse the same way after it is stored.
func FuzzTokenRelayRecord(f *testing.F) {
	for _, s := range []string{
		`{"s":1,"o":0,"n":1,"t":"Hello"}`,
		`{"s":4,"o":3,"n":3,"t":"abcdef","l":[1,2,3]}`,
		`{"s":5,"o":6,"n":1,"f":{"i":0,"id":"call_1","n":"get_weather","a":"{\"city\":"}}`,
		`{"s":9,"o":10,"fin":{"r":"stop","u":{"p":12,"c":10,"t":22}}}`,
		`{"s":9,"o":10,"err":{"c":"worker_lost","m":"x"}}`,
		``, `{}`, `null`, `{"s":1,"o":0}`, `{"s":1,"o":0,"n":0,"t":"x"}`, `{"s":1,"n":2,"f":{"i":0,"n":"f"}}`,
		`{"s":1,"o":0,"n":1,"t":"x","fin":{"r":"stop"}}`, `{"s":18446744073709551615,"o":0,"n":1,"t":"x"}`,
	} {
		f.Add(false, []byte(s))
		f.Add(true, []byte(s))
	}
	f.Fuzz(func(t *testing.T, end bool, data []byte) {
		rec, err := checkTokenRecord(end, data)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		if len(data) == 0 || len(data) > semaq.MaxTokenRecordBytes {
			t.Fatalf("accepted a record of %d bytes", len(data))
		}
		if rec.Terminal() != end {
			t.Fatalf("accepted %+v on the %v subject", rec, map[bool]string{true: ".end", false: ".c"}[end])
		}
		if !end && (rec.N < 1 || rec.Text == "" && rec.Func == nil) {
			t.Fatalf("accepted a chunk without tokens: %+v", rec)
		}
		again, err := semaq.ParseTokenChunk(data)
		if err != nil || again.Seq != rec.Seq || again.Offset != rec.Offset || again.N != rec.N || again.Text != rec.Text {
			t.Fatalf("a reader parses the stored record differently: %+v %v", again, err)
		}
	})
}

// FuzzTokenRelayClaims drives the relay's admission with a sequence of
// records from two writers, the rightful one and an attacker who may guess
// seq and offset: the attacker never gets a record in, and what is
// admitted numbers from 1 without gaps.
func FuzzTokenRelayClaims(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5})
	f.Add([]byte{1, 0, 0, 1, 129, 130})
	f.Add([]byte{255, 254, 0, 128, 64})
	f.Fuzz(func(t *testing.T, ops []byte) {
		ts := &Store{limits: Limits{StreamBytes: 1 << 20, StreamRecords: 1 << 20, MaxStreams: 4},
			claims: map[string]*claim{}, timers: nil}
		const good, evil = "rightful-writer-key-01", "attacker-writer-key-01"
		var next, offset uint64 = 1, 0
		first := true
		for _, op := range ops {
			key := good
			if op&1 == 1 {
				key = evil
			}
			// The attacker can read the stream: it knows next and offset;
			// the low bits pick a record near them.
			seq := next + uint64(op>>1&3) - 1
			if seq == 0 {
				seq = 1
			}
			end := op&0x80 != 0
			rec := &semaq.TokenChunk{Seq: seq, Offset: offset, N: 1, Text: "x"}
			if end {
				rec = &semaq.TokenChunk{Seq: seq, Offset: offset, Final: &semaq.TokenFinal{FinishReason: "stop"}}
			}
			if op&0x40 != 0 {
				ts.BindJob("job", "acme", good, api.AnswerChain{}) // the dispatcher, at any time
			}
			e := ts.admit("job", "acme", key, end, rec, 20)
			if e == nil {
				if first && key == evil {
					// Trust on first write: the attacker claimed an unbound
					// id; from here it is the attacker's stream.
					return
				}
				if key == evil {
					t.Fatalf("attacker's record %d admitted after %q claimed the stream", seq, good)
				}
				if seq != next {
					t.Fatalf("admitted record %d, want %d", seq, next)
				}
				first = false
				next, offset = seq+1, offset+uint64(rec.N)
				if end {
					next, offset = 0, 0 // nothing may follow
				}
				continue
			}
			if e.ErrCode == 0 || !strings.Contains(e.Description, "job") {
				t.Fatalf("refusal %+v does not name the stream", e)
			}
			if c := ts.claims["job"]; c != nil && c.bound && first {
				first = false // bound by the dispatcher: nobody claims it by writing
			}
		}
	})
}

// Claims do not outlive their use: a job's binding that never got a
// record goes after emptyClaimTTL, any claim after MaxTokenAge idle, and
// bindings stop at twice the stream limit.
func TestTokenClaimSweep(t *testing.T) {
	now := time.Now()
	ts := &Store{limits: Limits{MaxStreams: 2}, claims: map[string]*claim{
		"bound-empty":  {bound: true, next: 1, touched: now.Add(-emptyClaimTTL - time.Second)},
		"bound-fresh":  {bound: true, next: 1, touched: now},
		"writing":      {next: 5, records: 4, touched: now.Add(-time.Hour)},
		"legacy":       {legacy: true, touched: now.Add(-time.Hour)},
		"forgotten":    {next: 5, records: 4, touched: now.Add(-semaq.MaxTokenAge - time.Second)},
		"ended-timing": {records: 2, ended: true, touched: now.Add(-semaq.MaxTokenAge - time.Second)},
	}, timers: map[string]*time.Timer{"ended-timing": nil}}
	ts.timers["ended-timing"] = time.NewTimer(time.Hour)
	defer ts.timers["ended-timing"].Stop()
	ts.sweep(now)
	var left []string
	for id := range ts.claims {
		left = append(left, id)
	}
	slices.Sort(left)
	if fmt.Sprint(left) != "[bound-fresh ended-timing legacy writing]" {
		t.Fatalf("claims left %v", left)
	}
	ts.BindJob("one-more", "acme", "lease-0123456789abcdef", api.AnswerChain{}) // 4 claims, twice the limit: not bound
	if ts.claims["one-more"] != nil {
		t.Fatal("bound a job past twice the stream limit")
	}
}
