package benchcli

import (
	"strings"
	"testing"
)

// Run as itself, the program names itself semaq-bench; run by `semaq bench`,
// it reads as that command always has.
func TestNames(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want string
	}{
		{Name, []string{"ingest", "now"}, `semaq-bench: unknown command "now" for "semaq-bench ingest"` + "\n"},
		{SubcommandName, []string{"ingest", "now"}, `semaq: unknown command "now" for "semaq bench ingest"` + "\n"},
		{Name, []string{"rag"}, `semaq-bench: unknown scenario "rag" for "semaq-bench" (scenarios: ingest)` + "\n"},
		{Name, []string{"run"}, "semaq-bench: give one scenario: agent, finetune, rag, rl-feedback, tokens, or a YAML file\n" +
			"Usage: semaq-bench run SCENARIO|FILE [flags]\n" +
			"Example: semaq bench run rag\n" +
			"Run 'semaq-bench run --help' for every flag.\n"},
		{SubcommandName, []string{"run"}, "semaq: give one scenario: agent, finetune, rag, rl-feedback, tokens, or a YAML file\n" +
			"Usage: semaq bench run SCENARIO|FILE [flags]\n" +
			"Example: semaq bench run rag\n" +
			"Run 'semaq bench run --help' for every flag.\n"},
	}
	for _, tt := range tests {
		r := runAs(tt.name, tt.args...)
		if r.code != 1 || r.stderr != tt.want {
			t.Errorf("%s %s: exit %d, stderr\n%s\nwant\n%s", tt.name, strings.Join(tt.args, " "), r.code, r.stderr, tt.want)
		}
	}
	for _, name := range []string{Name, SubcommandName} {
		r := runAs(name, "--help")
		if r.code != 0 {
			t.Fatalf("%s --help: exit %d, stderr %s", name, r.code, r.stderr)
		}
		for _, sub := range []string{"ingest", "dispatch", "tokens", "run"} {
			if !strings.Contains(r.stdout, "\n  "+sub+" ") {
				t.Errorf("%s --help does not list %s:\n%s", name, sub, r.stdout)
			}
		}
		if !strings.Contains(r.stdout, "Usage:\n  "+name+" [flags]") {
			t.Errorf("%s --help: usage does not name %q:\n%s", name, name, r.stdout)
		}
	}
}
