//go:build wasip1

// Command enrich is an ingress plugin that adds what a router wants to know to each message: its payload's length
// (X-Payload-Length) and, for a JSON object with a "model" field, that model as AI-Model, unless the publisher set
// one. A message with the header X-Audit: 1 is published twice, as itself and as a copy on audit.<subject>, the
// two together or neither.
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o enrich.wasm ./examples/plugins/enrich
package main

import (
	"encoding/json"
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

// jsonModel returns the string "model" field of a JSON object, or "" for anything else.
func jsonModel(data []byte) string {
	i := 0
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	if i == len(data) || data[i] != '{' {
		return ""
	}
	var v struct {
		Model string `json:"model"`
	}
	if json.Unmarshal(data, &v) != nil {
		return ""
	}
	return v.Model
}

func main() {}
