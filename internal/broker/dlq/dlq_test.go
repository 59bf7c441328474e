package dlq

import (
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/semaq/semaq/semaq"
)

// Advisories are outside input (anyone who may publish on $JS.EVENT could
// forge one): whatever parses must name a dead-letter subject of exactly
// two tokens under $SQ.dlq and a header-safe reason.
func FuzzParseDLQAdvisory(f *testing.F) {
	f.Add([]byte(`{"type":"` + server.JSConsumerDeliveryTerminatedAdvisoryType + `","stream":"AI","consumer":"w","stream_seq":3,"deliveries":1,"reason":"bad\r\ninput"}`))
	f.Add([]byte(`{"type":"` + server.JSConsumerDeliveryExceededAdvisoryType + `","stream":"AI","consumer":"w","stream_seq":3,"deliveries":5}`))
	f.Add([]byte(`{"type":"` + server.JSConsumerDeliveryExceededAdvisoryType + `","stream":"A.B","consumer":">","stream_seq":3}`))
	f.Add([]byte(`{`))
	f.Fuzz(func(t *testing.T, data []byte) {
		ev, err := parseAdvisory(data)
		if err != nil {
			return
		}
		subj := semaq.DLQSubject(ev.Stream, ev.Consumer)
		if toks := strings.Split(strings.TrimPrefix(subj, semaq.DLQPrefix), "."); len(toks) != 2 || strings.ContainsAny(subj, "*> \t\r\n") {
			t.Fatalf("advisory %q makes subject %q", data, subj)
		}
		if strings.ContainsAny(ev.Reason, "\r\n") || len(ev.Reason) > len(semaq.DLQReasonTerminated)+2+reasonMax {
			t.Fatalf("reason %q is not header-safe", ev.Reason)
		}
	})
}

func TestReplayMsgID(t *testing.T) {
	short := replayMsgID(&semaq.DeadLetter{Stream: "AI", StreamSeq: 9, Consumer: "w"})
	if short != "replay:AI:9:w" {
		t.Errorf("replay id %q", short)
	}
	long := replayMsgID(&semaq.DeadLetter{Stream: strings.Repeat("S", 128), StreamSeq: 9, Consumer: strings.Repeat("c", 128)})
	if len(long) > semaq.MaxEnvelopeValue || !strings.HasPrefix(long, "replay:") {
		t.Errorf("long replay id %q (%d bytes)", long, len(long))
	}
	if long == replayMsgID(&semaq.DeadLetter{Stream: strings.Repeat("S", 128), StreamSeq: 10, Consumer: strings.Repeat("c", 128)}) {
		t.Error("two dead letters share a replay id")
	}
}
