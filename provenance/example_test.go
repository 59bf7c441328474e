package provenance_test

import (
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"log"
	"strings"

	"github.com/semaq/semaq/provenance"
)

// export is an export of two links of session s-42, signed by node n1
// (docs/provenance.md has it too).
const export = `{"semaq_provenance":1,"stream":"AGENT","tenant":"acme","session":"s-42","provenance":"signed","head":{"hash":"ca597184272b459aadc22415f77a849d4d080d2acb8ab47480d6ced69c2569c4","links":2,"first":"2026-01-02T03:04:05Z","last":"2026-01-02T03:04:06Z","seq":1206},"keys":[{"id":"34750f98bd59fcfc","node":"n1","public_key":"iojj3XQJ8ZX9UtstPLpdcspnCb8dlBIb83SIAbQPb1w="}],"exported":"2026-01-02T04:04:05Z"}` + "\n" +
	`{"seq":1201,"subject":"agent.acme.plan","time":"2026-01-02T03:04:05Z","headers":{"AI-Chain-Seq":["1"],"AI-Hash":["669124df10d4a23006861dc8c35b8dee0f06505f967bb0945869d227ef494dc5"],"AI-Key-Id":["34750f98bd59fcfc"],"AI-Model":["llama3"],"AI-Received":["2026-01-02T03:04:05Z"],"AI-Session":["s-42"],"AI-Signature":["Jqw9YZsZ2Pw8dk7xpsaaUfNRLEUNT4UjsNYGAt5V+bMJvIQ77e6iCl7MYQr0hGBEEf/c5jFymHtmbaVxCc8LBQ=="],"AI-Tenant":["acme"]},"data":"eyJzdGVwIjoicGxhbiJ9"}` + "\n" +
	`{"seq":1205,"subject":"agent.acme.act","time":"2026-01-02T03:04:06Z","headers":{"AI-Chain-Seq":["2"],"AI-Hash":["ca597184272b459aadc22415f77a849d4d080d2acb8ab47480d6ced69c2569c4"],"AI-Key-Id":["34750f98bd59fcfc"],"AI-Model":["llama3"],"AI-Prev-Hash":["669124df10d4a23006861dc8c35b8dee0f06505f967bb0945869d227ef494dc5"],"AI-Received":["2026-01-02T03:04:06Z"],"AI-Session":["s-42"],"AI-Signature":["uQ4JMjzWUQBcM4JRAj5VgDYbcz8DLagDe7VrsRLJkSTGuuRtLbrLAJJaWN+9Q9k4PCpBXP0sEsHZPK7uIXJTCA=="],"AI-Tenant":["acme"]},"data":"eyJzdGVwIjoiYWN0In0="}` + "\n"

// Verify an export with the node's key pinned, then a copy whose first
// payload was edited.
func ExampleVerify() {
	pub, _ := base64.StdEncoding.DecodeString("iojj3XQJ8ZX9UtstPLpdcspnCb8dlBIb83SIAbQPb1w=")
	opts := provenance.VerifyOptions{TrustedKeys: []ed25519.PublicKey{pub}}

	rep, err := provenance.Verify(strings.NewReader(export), opts)
	if err != nil {
		log.Fatal(err) // not an export
	}
	fmt.Println(rep.OK(), rep.Signers)

	edited := strings.Replace(export, "eyJzdGVwIjoicGxhbiJ9", "eyJzdGVwIjoiUExBTiJ9", 1) // {"step":"PLAN"}
	rep, err = provenance.Verify(strings.NewReader(edited), opts)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(rep.Problem.Kind, rep.Problem.Link, rep.Problem.StreamSeq)
	fmt.Println(rep)
	// Output:
	// true [34750f98bd59fcfc]
	// modified 1 1201
	// link 1 (stream seq 1201): modified: its content does not hash to its AI-Hash
}
