package doctest

import (
	"reflect"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	doc := strings.Join([]string{
		"Intro.",
		"```sh",
		"semaq serve &                 # or: semaq serve --sync always",
		"semaq pub a '{\"x\":\"#1\"}' \\",
		"      --model m",
		"# Published to stream AI seq 1",
		"",
		"# prose, not output",
		"semaq pub a x -H AI-Priority=urgent",
		"# semaq: invalid header AI-Priority",
		"semaq schema check s v2.json  # exit 1 when incompatible",
		"semaq cancel Q id             # fails: unknown",
		"cat > s.jsonl <<'EOF'",
		"{\"a\":1} # not a comment",
		"EOF",
		"a && b",
		"```",
		"<!-- doctest: skip (needs RabbitMQ) -->",
		"```sh",
		"semaq bench run rag",
		"```",
		"```",
		"not sh",
		"```",
	}, "\n")
	got, err := Parse(strings.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	want := []Block{
		{Line: 2, Cmds: []Cmd{
			{Line: 3, Text: "semaq serve &", Background: true},
			{Line: 4, Text: "semaq pub a '{\"x\":\"#1\"}' \\\n      --model m", Want: []string{"Published to stream AI seq 1"}},
			{Line: 9, Text: "semaq pub a x -H AI-Priority=urgent", Exit: AnyFailure, Want: []string{"semaq: invalid header AI-Priority"}},
			{Line: 11, Text: "semaq schema check s v2.json", Exit: 1},
			{Line: 12, Text: "semaq cancel Q id", Exit: AnyFailure},
			{Line: 13, Text: "cat > s.jsonl <<'EOF'\n{\"a\":1} # not a comment\nEOF"},
			{Line: 16, Text: "a && b"},
		}},
		{Line: 19, Skip: "needs RabbitMQ", Cmds: []Cmd{{Line: 20, Text: "semaq bench run rag"}}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Parse:\n got %+v\nwant %+v", got, want)
	}
}

func TestParseRefuses(t *testing.T) {
	for name, doc := range map[string]string{
		"skip without reason": "<!-- doctest: skip -->\n```sh\nx\n```\n",
		"empty reason":        "<!-- doctest: skip () -->\n```sh\nx\n```\n",
		"skip on other block": "<!-- doctest: skip (why) -->\n```go\nx\n```\n",
		"open block":          "```sh\nx\n",
		"open heredoc":        "```sh\ncat <<EOF\nx\n```\n",
	} {
		if _, err := Parse(strings.NewReader(doc)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
