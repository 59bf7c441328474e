//go:build wasip1

// Command noop is the smallest plugin of every stage: it passes every message, keeps every message in a
// subscription's filter and lets every chunk of a token stream through. It measures what the plugin machinery
// itself costs.
package main

import "github.com/semaq/semaq/plugin/sdk"

func init() {
	sdk.Ingress(func(*sdk.Message) sdk.Result { return sdk.Pass() })
	sdk.Filter(func(*sdk.Message) bool { return true })
	sdk.Tokens(func(*sdk.Chunk) sdk.TokensResult { return sdk.TokensPass() })
}

func main() {}
