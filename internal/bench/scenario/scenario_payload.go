package scenario

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/semaq/semaq/semaq"
)

// payloadGen makes one publisher's messages. Everything it draws comes
// from the scenario's seed, so a run offers the same sizes and bytes each
// time.
type payloadGen struct {
	sc   *Scenario
	text []byte // seeded text; a payload is a window of it
}

// vocabulary of the generated text: the words of a prompt, more or less.
var vocabulary = strings.Fields(`the model context window token answer question retrieve document embedding
vector score rank agent tool call plan step result reward policy gradient sample batch train label feedback
user system assistant stream chunk latency throughput queue broker session trace span tenant priority`)

func newPayloadGen(sc *Scenario, publisher int) *payloadGen {
	rng := rand.New(rand.NewPCG(sc.Seed, 1<<32|uint64(publisher)))
	n := max(sc.Payload.Max, 64) + 4096
	if sc.Tokens != nil {
		n = max(n, sc.Tokens.Bytes+4096)
	}
	var b strings.Builder
	b.Grow(n + 16)
	for b.Len() < n {
		b.WriteString(vocabulary[rng.IntN(len(vocabulary))])
		b.WriteByte(' ')
	}
	return &payloadGen{sc: sc, text: []byte(b.String())}
}

// size draws a payload size.
func (g *payloadGen) size(rng *rand.Rand) int {
	if g.sc.Tokens != nil {
		return g.sc.Tokens.Bytes
	}
	lo, hi := g.sc.Payload.Min, g.sc.Payload.Max
	if hi <= lo {
		return lo
	}
	return lo + rng.IntN(hi-lo+1)
}

// message is message seq of session, due at due: the envelope an SDK
// client sends for an inference request, the bench headers, and a window
// of the seeded text.
func (g *payloadGen) message(rng *rand.Rand, session int, seq int64, due time.Time) *outMsg {
	n := g.size(rng)
	off := rng.IntN(len(g.text) - n + 1)
	m := &outMsg{data: g.text[off : off+n : off+n], hdr: make([]string, 0, 20)}
	sess := "s" + strconv.Itoa(session)
	m.set(semaq.HdrModel, "llama3-70b-instruct")
	m.set(semaq.HdrTenant, "acme-prod")
	m.set(semaq.HdrPriority, semaq.PriorityHigh.String())
	m.set(hdrSent, strconv.FormatInt(due.UnixNano(), 10))
	m.set(hdrSession, sess)
	m.set(hdrSeq, strconv.FormatInt(seq, 10))
	if g.sc.Trace {
		m.set(semaq.HdrTraceParent, rootSpan(g.sc.Seed, sess, seq))
	}
	return m
}

// traceID is the trace of message seq of session: derived, so the last
// stage can check the trace survived every hop without a side table.
func traceID(seed uint64, session string, seq int64) string {
	h := seed ^ 0x9e3779b97f4a7c15
	for i := 0; i < len(session); i++ {
		h = (h ^ uint64(session[i])) * 0x100000001b3
	}
	return fmt.Sprintf("%016x%016x", h, uint64(seq)|1<<63)
}

func rootSpan(seed uint64, session string, seq int64) string {
	return "00-" + traceID(seed, session, seq) + "-00f067aa0ba90001-01"
}

// childSpan is the traceparent a worker at stage sends on: same trace, a
// span of its own.
func childSpan(tp string, stage int) string {
	parts := strings.Split(tp, "-")
	if len(parts) != 4 || len(parts[2]) != 16 {
		return tp
	}
	parts[2] = fmt.Sprintf("%014x%02x", 0xf067aa0ba902, stage+2)
	return strings.Join(parts, "-")
}

// traceIntact reports whether tp carries the trace message seq of session
// started with, in a span other than the root.
func traceIntact(tp string, seed uint64, session string, seq int64) bool {
	parts := strings.Split(tp, "-")
	return len(parts) == 4 && parts[1] == traceID(seed, session, seq) && parts[2] != "00f067aa0ba90001"
}
