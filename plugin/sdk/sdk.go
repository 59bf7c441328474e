// Package sdk is what a SemaQ WASM plugin is written with: ordinary Go, built for WASI preview 1 as a reactor
// (docs/plugins.md). A plugin registers a handler per stage it implements from an init function; the SDK's own
// exports decode the broker's input, call the handler and encode its answer, so a plugin never sees the ABI:
//
//	//go:build wasip1
//
//	package main
//
//	import "github.com/semaq/semaq/plugin/sdk"
//
//	func init() {
//		sdk.Ingress(func(m *sdk.Message) sdk.Result {
//			m.Header.Set("X-Enriched", "1")
//			return sdk.Rewrite(m)
//		})
//	}
//
//	func main() {}
//
// built with
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o enrich.wasm ./enrich
//
// The types here build everywhere, so code that shares them compiles and vets on any platform; the exports
// exist only in a wasip1 build. A plugin instance handles one call at a time, so handlers need no locks, and
// state kept in package variables lives as long as the instance does: the broker may make and drop instances
// at any time, so it is a cache, never a record.
package sdk

import "github.com/semaq/semaq/internal/plugin/wire"

// Header holds a message's headers. Names are kept as written: NATS headers are case-sensitive.
type Header map[string][]string

// Get returns the first value of name, or "".
func (h Header) Get(name string) string {
	if vs := h[name]; len(vs) > 0 {
		return vs[0]
	}
	return ""
}

// Values returns every value of name.
func (h Header) Values(name string) []string { return h[name] }

// Set replaces the values of name with value.
func (h Header) Set(name, value string) { h[name] = []string{value} }

// Add appends value to the values of name.
func (h Header) Add(name, value string) { h[name] = append(h[name], value) }

// Del removes name.
func (h Header) Del(name string) { delete(h, name) }

// Message is a message as the ingress or filter stage sees it. Header is never nil, so a handler may Set on it.
type Message struct {
	Subject string
	Header  Header
	Data    []byte
}

// NewMessage returns a message for Emit, with an empty header.
func NewMessage(subject string, data []byte) *Message {
	return &Message{Subject: subject, Header: Header{}, Data: data}
}

// Result is an ingress handler's answer: Pass, Reject, Rewrite or Emit.
type Result struct {
	action byte
	reason string
	msg    *Message
	msgs   []*Message
}

// Pass lets the message go on unchanged.
func Pass() Result { return Result{action: wire.IngressPass} }

// Reject refuses the message; the publisher is told reason. The broker may add to it, never remove.
func Reject(reason string) Result { return Result{action: wire.IngressReject, reason: reason} }

// Rewrite replaces the message's headers and payload with m's (its subject is kept: to publish elsewhere, Emit).
func Rewrite(m *Message) Result { return Result{action: wire.IngressRewrite, msg: m} }

// Emit publishes msgs instead of the input, all of them or none; no message means the input is dropped. At most
// 64 messages and 1 MiB in all.
func Emit(msgs ...*Message) Result { return Result{action: wire.IngressEmit, msgs: msgs} }

// Chunk is a piece of a token stream as a worker wrote it.
type Chunk struct {
	Stream string // the stream's id; chunks of one stream come in order
	Text   string
}

// TokensResult is a tokens handler's answer: TokensPass, TokensRewrite, TokensStop or TokensFlag.
type TokensResult struct {
	action byte
	text   string
}

// TokensPass lets the chunk through.
func TokensPass() TokensResult { return TokensResult{action: wire.TokensPass} }

// TokensRewrite replaces the chunk's text.
func TokensRewrite(text string) TokensResult {
	return TokensResult{action: wire.TokensRewrite, text: text}
}

// TokensStop ends the stream (its finish_reason is "content_filter"); reason is recorded, not shown to the reader.
func TokensStop(reason string) TokensResult {
	return TokensResult{action: wire.TokensStop, text: reason}
}

// TokensFlag lets the chunk through and records reason against the stream.
func TokensFlag(reason string) TokensResult {
	return TokensResult{action: wire.TokensFlag, text: reason}
}

// handlers holds what init registered; the exports of a wasip1 build call them.
var handlers struct {
	ingress func(*Message) Result
	filter  func(*Message) bool
	tokens  func(*Chunk) TokensResult
}

// Ingress registers the ingress handler, which judges every message the broker takes on the subjects the plugin
// is bound to, before schema validation. Call it from init.
func Ingress(fn func(*Message) Result) { handlers.ingress = fn }

// Filter registers the filter handler: a subscription sees a message only if fn returns true. Call it from init.
func Filter(fn func(*Message) bool) { handlers.filter = fn }

// Tokens registers the tokens handler, which sees every chunk of the token streams it is bound to. Call it from
// init.
func Tokens(fn func(*Chunk) TokensResult) { handlers.tokens = fn }
