//go:build wasip1

// Command hostile is a plugin that misbehaves on request, for the host's tests: the payload of an ingress or
// filter call, or the text of a tokens call, says how. It speaks the ABI by hand, without plugin/sdk, so it can
// break it.
package main

import (
	"encoding/binary"
	"os"
	"strings"
	"unsafe"

	"github.com/semaq/semaq/internal/plugin/wire"
)

var in, out []byte

// hoard keeps what the "oom" command allocates reachable, so the collector cannot free it.
var hoard [][]byte

func addr(b []byte) uint32 { return uint32(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }

func packed() uint64 { return uint64(addr(out))<<32 | uint64(len(out)) }

//go:wasmexport semaq_abi_version
func abiVersion() uint32 { return wire.ABIVersion }

//go:wasmexport semaq_alloc
func alloc(size uint32) uint32 {
	if uint32(cap(in)) < size || cap(in) == 0 {
		in = make([]byte, max(size, 256))
	}
	in = in[:size]
	return addr(in)
}

// misbehave does what cmd asks if it is one of the failures every stage shares, and returns otherwise.
func misbehave(cmd string) {
	switch {
	case cmd == "trap":
		panic("hostile plugin: trap")
	case strings.HasPrefix(cmd, "secret-trap:"):
		os.Stderr.WriteString("the payload was " + cmd + "\n")
		panic(cmd)
	case cmd == "loop":
		n := 0
		for {
			n++
			if n < 0 {
				n = 0
			}
		}
	case cmd == "oom":
		for {
			hoard = append(hoard, make([]byte, 1<<20))
		}
	case cmd == "exit":
		os.Exit(0)
	}
}

//go:wasmexport semaq_ingress
func ingress(ptr, size uint32) uint64 {
	m, err := wire.DecodeMessageInput(in[:size])
	if err != nil {
		panic(err)
	}
	cmd := string(m.Data)
	misbehave(cmd)
	switch cmd {
	case "bad-pointer":
		return uint64(0xfffffff0)<<32 | 64
	case "bad-length":
		return uint64(addr(in))<<32 | uint64(wire.MaxOutputBytes+1)
	case "bad-version":
		out = append(out[:0], 9, wire.IngressPass)
	case "bad-action":
		out = append(out[:0], wire.Version, 42)
	case "too-many":
		o := wire.Ingress{Action: wire.IngressEmit}
		for range wire.MaxMessages + 1 {
			o.Messages = append(o.Messages, wire.Message{Subject: "x"})
		}
		out = wire.AppendIngress(out[:0], &o)
	case "huge-count":
		out = binary.LittleEndian.AppendUint32(append(out[:0], wire.Version, wire.IngressEmit), 0xffffffff)
	case "header-crlf":
		out = wire.AppendIngress(out[:0], &wire.Ingress{Action: wire.IngressRewrite,
			Header: map[string][]string{"X-Evil": {"a\r\nNATS/1.0 503"}}})
	case "rewrite":
		h := map[string][]string{"X-Hostile": {"rewritten"}}
		out = wire.AppendIngress(out[:0], &wire.Ingress{Action: wire.IngressRewrite, Header: h, Data: []byte("rewritten")})
	default:
		return 0
	}
	return packed()
}

//go:wasmexport semaq_filter
func filter(ptr, size uint32) uint32 {
	m, err := wire.DecodeMessageInput(in[:size])
	if err != nil {
		panic(err)
	}
	misbehave(string(m.Data))
	if string(m.Data) == "bad-bool" {
		return 7
	}
	return 1
}

//go:wasmexport semaq_tokens
func tokens(ptr, size uint32) uint64 {
	_, text, err := wire.DecodeTokensInput(in[:size])
	if err != nil {
		panic(err)
	}
	misbehave(text)
	if text == "bad-version" {
		out = append(out[:0], 9, wire.TokensPass)
		return packed()
	}
	return 0
}

func main() {}
