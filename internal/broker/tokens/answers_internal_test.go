package tokens

import (
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/semaq"
)

// An answer record is put together from the stored records: text in
// order, calls by index from their fragments, the end's reason or error,
// the records' hash; text and arguments stop at MaxAnswerText together.
func TestAnswerBuilder(t *testing.T) {
	big := strings.Repeat("x", semaq.MaxAnswerText-10)
	recs := []*semaq.TokenChunk{
		{Seq: 1, N: 1, Text: "a"},
		{Seq: 2, Offset: 1, N: 1, Func: &semaq.FunctionCallFragment{Index: 1, Name: "g", Arguments: `{"y":`}},
		{Seq: 3, Offset: 2, N: 1, Func: &semaq.FunctionCallFragment{Index: 0, ID: "c0", Name: "f", Arguments: `{}`}},
		{Seq: 4, Offset: 3, N: 2, Text: big},
		{Seq: 5, Offset: 5, N: 1, Func: &semaq.FunctionCallFragment{Index: 1, Arguments: `2}` + strings.Repeat(" ", 20)}},
		{Seq: 6, Offset: 6, Error: &semaq.TokenError{Code: "worker_lost", Message: "gone"}},
	}
	a := answerBuilder{rec: semaq.AnswerRecord{RequestID: "r"}, hash: semaq.NewAnswerHash()}
	want := semaq.NewAnswerHash()
	for i, r := range recs {
		data := semaq.AppendTokenChunk(nil, r)
		want.Add(data)
		end, err := a.add(data)
		if err != nil || end != (i == len(recs)-1) {
			t.Fatalf("record %d: terminal %v, %v", i+1, end, err)
		}
	}
	rec := a.done()
	if rec.Text != "a"+big || rec.Records != 6 || rec.Tokens != 6 || rec.Error == nil || rec.Error.Code != "worker_lost" {
		t.Fatalf("record: %d records, %d tokens, error %v, text of %d bytes", rec.Records, rec.Tokens, rec.Error, len(rec.Text))
	}
	if !rec.Truncated || len(rec.Calls) != 2 || rec.Calls[0].Name != "f" || rec.Calls[1].Name != "g" ||
		len(rec.Text)+len(rec.Calls[0].Arguments)+len(rec.Calls[1].Arguments) != semaq.MaxAnswerText {
		t.Fatalf("calls %+v, truncated %v", rec.Calls, rec.Truncated)
	}
	if rec.RecordsSHA256 != want.Sum() {
		t.Fatal("the records hash is not over the records as stored")
	}
	if _, err := a.add([]byte("not a record")); err == nil {
		t.Fatal("a record that does not parse was taken")
	}
}

// A writer's own answer marks never reach storage, in any case; only a
// claim bound with a chain marks its terminal record.
func TestAnswerMarks(t *testing.T) {
	for _, k := range []string{"SQ-Answer-Chain", "sq-answer-session", "Sq-Answer-Tenant", "SQ-ANSWER-X"} {
		if !isAnswerHeader(k) {
			t.Errorf("%s is not taken for a mark", k)
		}
	}
	if isAnswerHeader("SQ-Answer") || isAnswerHeader("AI-Session") {
		t.Error("a header that is no mark is taken for one")
	}
	end := &nats.Msg{Subject: storeSubject("acme", "r", true)}
	chunk := &nats.Msg{Subject: storeSubject("acme", "r", false)}
	markAnswer(&claim{}, []*nats.Msg{chunk, end})
	if end.Header != nil {
		t.Fatalf("an unchained claim marked its end: %v", end.Header)
	}
	markAnswer(&claim{chain: api.AnswerChain{Subject: "agent.answers", Session: "s", Tenant: "acme"}}, []*nats.Msg{chunk, end})
	if chunk.Header != nil || end.Header.Get(HdrAnswerChain) != "agent.answers" || end.Header.Get(HdrAnswerSession) != "s" || end.Header.Get(HdrAnswerTenant) != "acme" {
		t.Fatalf("marks: chunk %v, end %v", chunk.Header, end.Header)
	}
}
