package hostile

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

// apiSubjects is every request subject of the SemaQ API, templates filled
// with a name of the fuzzer's own.
var apiSubjects = []string{
	semaq.APIInfo,
	fmt.Sprintf(semaq.APIStreamCreateT, "FZ"), fmt.Sprintf(semaq.APIStreamInfoT, "FZ"),
	fmt.Sprintf(semaq.APIStreamDeleteT, "FZ"), semaq.APIStreamList, semaq.APIStreamLookup,
	semaq.APIDLQList, semaq.APIDLQGet, semaq.APIDLQReplay, semaq.APIDLQPurge, semaq.APIDLQCapture,
	semaq.APIFilterStart, fmt.Sprintf(semaq.APIFilterPingT, "x"), fmt.Sprintf(semaq.APIFilterStopT, "x"),
	semaq.APIKeySharedJoin, fmt.Sprintf(semaq.APIKeySharedPingT, "x"), fmt.Sprintf(semaq.APIKeySharedLeaveT, "x"),
	semaq.APIKeySharedInfo,
	fmt.Sprintf(semaq.APIQueueCreateT, "FZQ"), fmt.Sprintf(semaq.APIQueueInfoT, "FZQ"),
	fmt.Sprintf(semaq.APIQueueDeleteT, "FZQ"), semaq.APIQueueList, fmt.Sprintf(semaq.APIQueueFetchT, "FZQ"),
	fmt.Sprintf(semaq.APIQueueCancelT, "FZQ"),
	semaq.APIRouteAdd, semaq.APIRouteList, semaq.APIRouteDelete, semaq.APIRouteTest,
	semaq.APISchemaRegister, semaq.APISchemaGet, semaq.APISchemaSubjects, semaq.APISchemaVersions,
	semaq.APISchemaCheck, semaq.APISchemaConfigGet, semaq.APISchemaConfigSet, semaq.APISchemaDelete,
	semaq.APISchemaBind, semaq.APISchemaUnbind, semaq.APISchemaBindings, semaq.APISchemaLookup,
	semaq.APIAgentAnnounce, semaq.APIAgentList, semaq.APIAgentLeave,
	semaq.APIAuditList,
}

// FuzzAPIRequest sends any body to any SemaQ API subject of a live broker,
// as a public client. Whatever it is, the broker answers with JSON (a
// result or an error naming the problem), never hangs, and keeps serving.
func FuzzAPIRequest(f *testing.F) {
	seeds := []string{
		``, `{}`, `null`, `[]`, `"x"`, `1e999999`, `{"name":"FZ","subjects":["fz.>"]}`,
		`{"name":"FZ","Name":"other"}`, `{"subject":"fz.>","filter":"payload.s.replace(\"a\", payload.s).size() > 0","deliver_subject":"_INBOX.fz"}`,
		`{"schema":"{\"type\":\"object\"}","subject":"fz"}`, `{"worker":"w","max":1000000000}`,
		`{"max_tokens":-1}`, `{"since":"2026-01-01T00:00:00Z","op":"stream.>","user":"*","limit":1000}`, `{"deliver_subject":"$JS.API.STREAM.DELETE.FZ"}`, "\xff\xfe", `{"a":` + string(make([]byte, 0)) + `}`,
	}
	for i := range apiSubjects {
		for _, s := range seeds {
			f.Add(uint8(i), []byte(s))
		}
	}
	srv := brokertest.Start(f)
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		f.Fatal(err)
	}
	defer nc.Close()
	f.Fuzz(func(t *testing.T, which uint8, body []byte) {
		subj := apiSubjects[int(which)%len(apiSubjects)]
		resp, err := nc.Request(subj, body, 15*time.Second)
		if errors.Is(err, nats.ErrNoResponders) {
			// A queue, filter or member that does not exist has nobody
			// listening: NATS says so at once.
			return
		}
		if err != nil {
			t.Fatalf("%s %q: %v", subj, body, err)
		}
		if !json.Valid(resp.Data) {
			t.Fatalf("%s %q: answer is not JSON: %q", subj, body, resp.Data)
		}
		if _, err := nc.Request(semaq.APIInfo, nil, 15*time.Second); err != nil {
			t.Fatalf("broker stopped serving after %s %q: %v", subj, body, err)
		}
	})
}
