//go:build wasip1

package sdk

import (
	"unsafe"

	"github.com/semaq/semaq/internal/plugin/wire"
)

// in is where the host writes a call's input (semaq_alloc); out holds the last output until the next call, as
// the ABI asks. Both are reused, so a steady stream of calls does not grow the heap.
var in, out []byte

func addr(b []byte) uint32 {
	if cap(b) == 0 {
		return 0
	}
	return uint32(uintptr(unsafe.Pointer(unsafe.SliceData(b))))
}

// packed returns out's place as the ABI's i64: address in the high half, length in the low.
func packed() uint64 { return uint64(addr(out))<<32 | uint64(len(out)) }

//go:wasmexport semaq_abi_version
func abiVersion() uint32 { return wire.ABIVersion }

//go:wasmexport semaq_stages
func semaqStages() uint32 {
	var s uint32
	if handlers.ingress != nil {
		s |= wire.StageIngress
	}
	if handlers.filter != nil {
		s |= wire.StageFilter
	}
	if handlers.tokens != nil {
		s |= wire.StageTokens
	}
	return s
}

//go:wasmexport semaq_alloc
func alloc(size uint32) uint32 {
	if uint32(cap(in)) < size || cap(in) == 0 {
		in = make([]byte, max(size, 256))
	}
	in = in[:size]
	return addr(in)
}

// input is the buffer the host wrote, checked to be the one semaq_alloc handed out.
func input(ptr, size uint32) []byte {
	if ptr != addr(in) || int(size) > cap(in) {
		panic("semaq sdk: input is not where semaq_alloc put it") // the host broke the ABI: trap
	}
	return in[:size]
}

func message(ptr, size uint32) *Message {
	m, err := wire.DecodeMessageInput(input(ptr, size))
	if err != nil {
		panic("semaq sdk: " + err.Error()) // the host broke the ABI: trap
	}
	h := Header(m.Header)
	if h == nil {
		h = Header{}
	}
	return &Message{Subject: m.Subject, Header: h, Data: m.Data}
}

//go:wasmexport semaq_ingress
func ingress(ptr, size uint32) uint64 {
	if handlers.ingress == nil {
		panic("semaq sdk: no ingress handler registered")
	}
	res := handlers.ingress(message(ptr, size))
	if res.action == wire.IngressPass {
		return 0 // the ABI's short form of pass
	}
	o := wire.Ingress{Action: res.action, Reason: res.reason}
	switch res.action {
	case wire.IngressRewrite:
		if res.msg != nil {
			o.Header, o.Data = res.msg.Header, res.msg.Data
		}
	case wire.IngressEmit:
		o.Messages = make([]wire.Message, 0, len(res.msgs))
		for _, m := range res.msgs {
			if m != nil {
				o.Messages = append(o.Messages, wire.Message{Subject: m.Subject, Header: m.Header, Data: m.Data})
			}
		}
	}
	out = wire.AppendIngress(out[:0], &o)
	return packed()
}

//go:wasmexport semaq_filter
func filter(ptr, size uint32) uint32 {
	if handlers.filter == nil {
		panic("semaq sdk: no filter handler registered")
	}
	if handlers.filter(message(ptr, size)) {
		return 1
	}
	return 0
}

//go:wasmexport semaq_tokens
func tokens(ptr, size uint32) uint64 {
	if handlers.tokens == nil {
		panic("semaq sdk: no tokens handler registered")
	}
	stream, text, err := wire.DecodeTokensInput(input(ptr, size))
	if err != nil {
		panic("semaq sdk: " + err.Error())
	}
	res := handlers.tokens(&Chunk{Stream: stream, Text: text})
	if res.action == wire.TokensPass {
		return 0
	}
	o := wire.Tokens{Action: res.action}
	if res.action == wire.TokensRewrite {
		o.Text = res.text
	} else {
		o.Reason = res.text
	}
	out = wire.AppendTokens(out[:0], &o)
	return packed()
}
