package blockcheck

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// Replicas lists every account's streams but those nats-server was
// deleting; RaftGroups finds a stream's groups by their log's metadata;
// Quarantine moves the replica and the groups' logs and snapshots, keeping
// term, vote and peers, and moves nothing over what is already there.
func TestReplicasAndQuarantine(t *testing.T) {
	dir := t.TempDir()
	mk := func(path, body string) {
		t.Helper()
		p := filepath.Join(dir, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	mk("jetstream/$G/streams/FA/meta.inf", `{"name":"FA","num_replicas":3}`)
	mk("jetstream/$G/streams/FA/msgs/1.blk", "x")
	mk("jetstream/T1/streams/FA/meta.inf", `{"name":"FA"}`)
	mk("jetstream/$G/streams/.FB/meta.inf", `{"name":"FB"}`)
	group := func(name, md string) {
		mk("jetstream/$SYS/_js_/"+name+"/meta.inf", `{"name":"`+name+`","metadata":`+md+`}`)
		mk("jetstream/$SYS/_js_/"+name+"/tav.idx", "t")
		mk("jetstream/$SYS/_js_/"+name+"/peers.idx", "p")
		mk("jetstream/$SYS/_js_/"+name+"/msgs/1.blk", "l")
		mk("jetstream/$SYS/_js_/"+name+"/snapshots/snap.1.2", "s")
	}
	group("S-R3F-a", `{"type":"stream","account":"$G","stream":"FA"}`)
	group("C-R3F-b", `{"type":"consumer","account":"$G","stream":"FA","consumer":"C"}`)
	group("S-R3F-c", `{"type":"stream","account":"T1","stream":"FA"}`)
	group("_meta_", `{}`)

	reps, err := Replicas(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range reps {
		got = append(got, r.Account+"/"+r.Stream)
	}
	if !reflect.DeepEqual(got, []string{"$G/FA", "T1/FA"}) {
		t.Fatalf("replicas %v", got)
	}
	if n, err := reps[0].NumReplicas(); n != 3 || err != nil {
		t.Fatalf("$G/FA: %d replicas, %v", n, err)
	}
	if n, err := reps[1].NumReplicas(); n != 1 || err != nil {
		t.Fatalf("T1/FA: %d replicas, %v", n, err)
	}
	groups, err := RaftGroups(dir, reps[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(groups) != 2 || filepath.Base(groups[0].Dir) != "C-R3F-b" || groups[0].Consumer != "C" || groups[1].Type != "stream" {
		t.Fatalf("groups %+v", groups)
	}

	q := filepath.Join(dir, "quarantine", "now")
	moved, err := Quarantine(dir, q, reps[0])
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"jetstream/$SYS/_js_/C-R3F-b/msgs", "jetstream/$SYS/_js_/C-R3F-b/snapshots",
		"jetstream/$SYS/_js_/S-R3F-a/msgs", "jetstream/$SYS/_js_/S-R3F-a/snapshots", "jetstream/$G/streams/FA"}
	if !reflect.DeepEqual(moved, want) {
		t.Fatalf("moved %v, want %v", moved, want)
	}
	for _, p := range want {
		if _, err := os.Stat(filepath.Join(q, p)); err != nil {
			t.Fatalf("not in the quarantine: %v", err)
		}
		if _, err := os.Stat(filepath.Join(dir, p)); !os.IsNotExist(err) {
			t.Fatalf("still in place: %s (%v)", p, err)
		}
	}
	for _, keep := range []string{"S-R3F-a/tav.idx", "S-R3F-a/peers.idx", "C-R3F-b/tav.idx", "S-R3F-c/msgs/1.blk", "_meta_/msgs/1.blk"} {
		if _, err := os.Stat(filepath.Join(dir, "jetstream/$SYS/_js_", keep)); err != nil {
			t.Fatalf("%s was moved: %v", keep, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "jetstream/T1/streams/FA/meta.inf")); err != nil {
		t.Fatalf("another account's FA was moved: %v", err)
	}

	// A second move onto the same quarantine moves nothing over it.
	mk("jetstream/$G/streams/FA/meta.inf", `{"name":"FA","num_replicas":3}`)
	if moved, err := Quarantine(dir, q, reps[0]); err == nil || len(moved) != 0 {
		t.Fatalf("a move onto an existing quarantine: moved %v, err %v", moved, err)
	}
}
