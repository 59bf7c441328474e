package keyshared

import (
	"fmt"
	"testing"

	"github.com/semaq/semaq/internal/broker/keyhash"
)

func TestAckStreamSeq(t *testing.T) {
	t.Parallel()
	pre := "$JS.ACK.S.g."
	for _, tc := range []struct {
		subject string
		want    uint64
		ok      bool
	}{
		{pre + "1.42.7.1700000000.3", 42, true},
		{pre + "2.9", 9, true},
		{pre + "1.0.7.1.1", 0, false},
		{pre + "1.x.7.1.1", 0, false},
		{pre + "1", 0, false},
		{pre, 0, false},
		{"$JS.ACK", 0, false},
	} {
		got, ok := ackStreamSeq(tc.subject, len(pre))
		if got != tc.want || ok != tc.ok {
			t.Errorf("%q: %d %v, want %d %v", tc.subject, got, ok, tc.want, tc.ok)
		}
	}
}

// Rendezvous hashing: a member leaving moves only its own keys, and a
// member joining takes keys only from the others.
func TestOwnerMovesOnlyTheLeaversKeys(t *testing.T) {
	t.Parallel()
	g := &group{}
	for _, name := range []string{"a", "b", "c", "d"} {
		g.members = append(g.members, &member{name: name, hash: keyhash.Of(name)})
	}
	const keys = 2000
	before := make([]*member, keys)
	count := map[string]int{}
	for i := range before {
		before[i] = g.ownerLocked(keyhash.Of(fmt.Sprint("session-", i)))
		count[before[i].name]++
	}
	for name, n := range count {
		if n < keys/4/2 {
			t.Errorf("member %s owns %d of %d keys", name, n, keys)
		}
	}
	leaver := g.members[1]
	g.members = append(g.members[:1], g.members[2:]...)
	for i, was := range before {
		now := g.ownerLocked(keyhash.Of(fmt.Sprint("session-", i)))
		if was != leaver && now != was {
			t.Fatalf("key %d moved from %s to %s though %s left", i, was.name, now.name, leaver.name)
		}
		if now == leaver {
			t.Fatalf("key %d still owned by %s, who left", i, leaver.name)
		}
	}
	if (&group{}).ownerLocked(1) != nil {
		t.Error("an empty group has an owner")
	}
}
