//go:build wasip1

// Command redact is a tokens plugin: it masks the word "password" in what a model writes, and stops a stream that
// starts to spell out a private key. A word split across two chunks is not seen whole here; the broker's own
// redaction, which keeps state across chunks, handles that.
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o redact.wasm ./examples/plugins/redact
package main

import (
	"strings"

	"github.com/semaq/semaq/plugin/sdk"
)

func init() { sdk.Tokens(redact) }

func redact(c *sdk.Chunk) sdk.TokensResult {
	if strings.Contains(c.Text, "BEGIN PRIVATE KEY") {
		return sdk.TokensStop("private key in the output")
	}
	if strings.Contains(c.Text, "password") {
		return sdk.TokensRewrite(strings.ReplaceAll(c.Text, "password", "[redacted]"))
	}
	return sdk.TokensPass()
}

func main() {}
