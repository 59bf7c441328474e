package cli

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestSubGroup(t *testing.T) {
	t.Parallel()
	_, url := startWithStream(t)
	for i := range 6 {
		mustSemaq(t, url, "", "pub", "ai.chat", fmt.Sprint(i), "--session", fmt.Sprintf("s%d", i%2))
	}
	r := runSemaq(t, url, "", "sub", "ai.chat", "--group", "workers", "--group-key", "session", "--member", "w1",
		"--json", "--count", "6", "--timeout", "20s")
	if r.code != 0 {
		t.Fatalf("sub --group: exit %d, stderr: %s", r.code, r.stderr)
	}
	msgs := parseMsgs(t, r.stdout)
	if got := seqs(msgs); !slices.Equal(got, []uint64{1, 2, 3, 4, 5, 6}) {
		t.Fatalf("sub --group got seqs %v, want 1..6", got)
	}
	// The group keeps its key and position: a second run joins without
	// --group-key and finds nothing left.
	mustSemaq(t, url, "", "pub", "ai.chat", "7", "--session", "s1")
	r = runSemaq(t, url, "", "sub", "ai.chat", "--group", "workers", "--json", "--count", "1", "--timeout", "20s")
	if r.code != 0 {
		t.Fatalf("sub --group rejoin: exit %d, stderr: %s", r.code, r.stderr)
	}
	if got := seqs(parseMsgs(t, r.stdout)); !slices.Equal(got, []uint64{7}) {
		t.Fatalf("rejoin got seqs %v, want [7]", got)
	}
	mustFailSemaq(t, url, `keyed by "session"`, "sub", "ai.chat", "--group", "workers", "--group-key", "tenant", "--count", "1")
}

func TestSubGroupFlagErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"key without group", []string{"sub", "ai.x", "--group-key", "session"}, "--group-key and --member need --group"},
		{"bad group", []string{"sub", "ai.x", "--group", "a.b", "--group-key", "session"}, "--group"},
		// --key was the group's key before --group-key.
		{"old group key", []string{"sub", "ai.x", "--group", "g", "--key", "session"}, "a key-shared group's key is --group-key"},
		{"group and durable", []string{"sub", "ai.x", "--group", "g", "--durable", "d"}, "leave out --durable"},
		{"group and filter", []string{"sub", "ai.x", "--group", "g", "--filter", "true"}, "leave out --durable and --filter"},
		{"empty key", []string{"sub", "ai.x", "--group", "g", "--group-key", " "}, "--group-key: the expression is empty"},
		{"bad member", []string{"sub", "ai.x", "--group", "g", "--member", "a b"}, "--member"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mustFailSemaq(t, unreachableURL, tc.want, tc.args...)
		})
	}
}

// --auth-key, the credential's name on sub before --group-key, still works
// on every command, with a warning.
func TestAuthKeyDeprecated(t *testing.T) {
	t.Parallel()
	r := runSemaq(t, unreachableURL, "", "stream", "ls", "--auth-key", "nope")
	if r.code == 0 || !strings.Contains(r.stderr, "--auth-key is deprecated and goes in the next release: use --key") || !strings.Contains(r.stderr, "not a SemaQ key") {
		t.Fatalf("stream ls --auth-key nope: exit %d, stderr %q", r.code, r.stderr)
	}
}
