//go:build wasip1

// Command enrich is an ingress plugin that adds what a router wants to know to each message: its payload's length
// (X-Payload-Length) and, for a JSON object with a string "model" field, that model as AI-Model, unless the publisher set
// one. A message with the header X-Audit: 1 is published twice, as itself and as a copy on audit.<subject>, the
// two together or neither.
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o enrich.wasm ./examples/plugins/enrich
package main

import (
	"bytes"
	"strconv"

	"github.com/semaq/semaq/plugin/sdk"
)

func init() { sdk.Ingress(enrich) }

func enrich(m *sdk.Message) sdk.Result {
	m.Header.Set("X-Payload-Length", strconv.Itoa(len(m.Data)))
	if m.Header.Get("AI-Model") == "" {
		if model := jsonModel(m.Data); model != "" {
			m.Header.Set("AI-Model", model)
		}
	}
	if m.Header.Get("X-Audit") != "1" {
		return sdk.Rewrite(m)
	}
	m.Header.Del("X-Audit")
	audit := sdk.NewMessage("audit."+m.Subject, m.Data)
	audit.Header.Set("X-Audit-Of", m.Subject)
	return sdk.Emit(m, audit)
}

// jsonModel returns the string value of the top-level "model" key of a JSON object, or "" if there is none or
// it holds an escape. It only scans: a plugin's every loop costs a check that the call has not run out of time
// (docs/plugins.md#limits), so decoding the whole document with encoding/json would cost many times more.
func jsonModel(d []byte) string {
	i := skipSpace(d, 0)
	if i == len(d) || d[i] != '{' {
		return ""
	}
	for depth := 0; i < len(d); {
		switch d[i] {
		case '{', '[':
			depth++
			i++
		case '}', ']':
			depth--
			i++
		case '"':
			end := stringEnd(d, i)
			if end < 0 {
				return ""
			}
			if depth == 1 && string(d[i:end]) == `"model"` {
				if j := skipSpace(d, end); j < len(d) && d[j] == ':' {
					j = skipSpace(d, j+1)
					if e := stringEnd(d, j); j < len(d) && d[j] == '"' && e > 0 && bytes.IndexByte(d[j:e], '\\') < 0 {
						return string(d[j+1 : e-1])
					}
					return ""
				}
			}
			i = end
		default:
			i++
		}
	}
	return ""
}

func skipSpace(d []byte, i int) int {
	for i < len(d) && (d[i] == ' ' || d[i] == '\t' || d[i] == '\n' || d[i] == '\r') {
		i++
	}
	return i
}

// stringEnd returns the index just past the JSON string starting at d[i], or -1 if it does not end.
func stringEnd(d []byte, i int) int {
	if i >= len(d) || d[i] != '"' {
		return -1
	}
	for i++; i < len(d); i++ {
		switch d[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return -1
}

func main() {}
